"""Benchmark: the portal's job list when the newest jobs are one huge batch's shards.

    python bench/list_batches.py [--jobs 50000] [--shards 100000] [--repeat 7]

In a fresh database (`mlsched_bench_list_batches` on BENCH_SERVER_URL's server, default local
PostgreSQL): one tenant with `--jobs` finished single jobs, then a batch of `--shards` shards
submitted after them (the newest rows: 1,000 running, the rest queued), then ANALYZE. The list
folds each batch into its first shard's row, so its first page has to reach back past every
shard to the single jobs: the worst case for the fold. Times, for a member of the tenant, the
portal's list (`/`), narrowed by a state no shard is in (`?state=failed`: every shard is asked)
and by one some are in (`?state=running`), the batch's shards one by one (`?batch=`), and the
API's list, unfolded and folded (`?fold=1`; code that does not know it lists the shards),
through Django's test client (the whole request, one warm-up first); prints the median of
`--repeat` requests in milliseconds, one line each.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_list_batches"
fresh_db.use(DATABASE)


def build(jobs: int, shards: int):
    from django.contrib.auth.models import User
    from django.db import connection

    from jobs.models import Job
    from quotas.models import Membership, PriorityClass, Tenant

    normal = PriorityClass.objects.create(name="normal", value=0)
    tenant = Tenant.objects.create(name="t", slug="t")
    user = User.objects.create(username="member")
    Membership.objects.create(tenant=tenant, user=user)
    common = dict(tenant=tenant, owner=user, image="i", command=["x"], cpu_milli=1,
                  memory_mb=1, gpus=1, priority_class=normal, max_runtime_s=60)  # fmt: skip
    fresh_db.finished_jobs(tenant, user, jobs, normal)
    first = Job.objects.create(**common, name="embed", family="batch_inference",
                               shards=shards, shard_index=0, state="running")  # fmt: skip
    for start in range(1, shards, 50_000):
        Job.objects.bulk_create(
            Job(**common, name="embed", family="batch_inference", shards=shards,
                shard_index=i, parent=first, state="running" if i < 1000 else "queued")
            for i in range(start, min(shards, start + 50_000))
        )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return user, first


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    user, first = build(args.jobs, args.shards)
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]
    for name, url in (("portal list", "/"),
                      ("portal list ?state=failed", "/?state=failed"),
                      ("portal list ?state=running", "/?state=running"),
                      ("portal list ?batch=", f"/?batch={first.pk}"),
                      ("API list", "/api/v1/jobs/"),
                      ("API list ?fold=1", "/api/v1/jobs/?fold=1")):  # fmt: skip
        print(f"{name}: {fresh_db.median_get_ms(user, url, args.repeat):.1f} ms")


if __name__ == "__main__":
    main()

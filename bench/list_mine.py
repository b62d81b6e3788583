"""Benchmark: the job lists narrowed to the reader's own jobs (`?mine=1`, Slurm's squeue --me)
in a big team, for a member who submitted nearly all of its jobs and for one who submitted a
few long ago.

    python bench/list_mine.py [--jobs 400000] [--few 10] [--repeat 7]

In a fresh database (`mlsched_bench_list_mine` on BENCH_SERVER_URL's server, default local
PostgreSQL): one tenant, its first `--few` jobs submitted by one member ("few"), the `--jobs`
after them by another ("many"), all finished, then ANALYZE. Times, for each member, the API's
list and the portal's, whole and `?mine=1`, through Django's test client (the whole request,
one warm-up first); prints the median of `--repeat` requests in milliseconds, one line each.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_list_mine"
fresh_db.use(DATABASE)


def build(jobs: int, few: int):
    from django.contrib.auth.models import User
    from django.db import connection

    from quotas.models import Membership, PriorityClass, Tenant

    normal = PriorityClass.objects.create(name="normal", value=0)
    tenant = Tenant.objects.create(name="t", slug="t")
    members = []
    for name, count in (("few", few), ("many", jobs)):
        user = User.objects.create(username=name)
        Membership.objects.create(tenant=tenant, user=user)
        fresh_db.finished_jobs(tenant, user, count, normal)
        members.append(user)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return members


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=400_000)
    parser.add_argument("--few", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    members = build(args.jobs, args.few)
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]
    for user in members:
        for name, url in (("API list", "/api/v1/jobs/"),
                          ("API list ?mine=1", "/api/v1/jobs/?mine=1"),
                          ("portal list", "/"),
                          ("portal list ?mine=1", "/?mine=1")):  # fmt: skip
            ms = fresh_db.median_get_ms(user, url, args.repeat)
            print(f"{user.username}: {name}: {ms:.1f} ms")


if __name__ == "__main__":
    main()

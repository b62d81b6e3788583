"""Benchmark: the users' job listings and log polls on a platform with many jobs and lines.

    python bench/list_jobs.py [--other-jobs 400000] [--other-lines 3000000] [--repeat 5]

In a fresh database (`mlsched_bench_list` on DATABASE_URL's server, default local PostgreSQL):
a small tenant with 20 jobs, the first of them with 50 log lines, and another tenant with
`--other-jobs` finished jobs, one of which printed `--other-lines` lines after them. Times, for
a member of the small tenant, `GET /api/v1/jobs/`, the portal's job list and a poll of its
job's logs with nothing new (`?after=` its last line), and for a member of the big one its API
list, through Django's test client (the whole request, one warm-up first); prints the median
of `--repeat` requests in milliseconds, one line each. A listing or a poll should cost what
the caller's own jobs cost, not what the platform holds.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_list"
fresh_db.use(DATABASE)


def build(other_jobs: int, other_lines: int):
    from django.contrib.auth.models import User
    from django.db import connection

    from jobs.models import Attempt, Job
    from quotas.models import Membership, PriorityClass, Tenant

    normal = PriorityClass.objects.create(name="normal", value=0)
    users = []
    for slug, count in (("small", 20), ("big", other_jobs)):
        tenant = Tenant.objects.create(name=slug, slug=slug)
        user = User.objects.create(username=f"member-of-{slug}")
        Membership.objects.create(tenant=tenant, user=user)
        fresh_db.finished_jobs(tenant, user, count, normal)
        users.append(user)
    with connection.cursor() as cursor:
        for tenant, lines in (("small", 50), ("big", other_lines)):
            job = Job.objects.filter(tenant__slug=tenant).order_by("id").first()
            attempt = Attempt.objects.create(job=job, number=1, outcome="succeeded")
            cursor.execute(
                "INSERT INTO jobs_logchunk (attempt_id, worker, seq, stream, text, created) "
                "SELECT %s, 0, g, 'stdout', 'a line of output', now() "
                "FROM generate_series(1, %s) g",
                [attempt.pk, lines],
            )
        cursor.execute("ANALYZE")
    return users


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other-jobs", type=int, default=400_000)
    parser.add_argument("--other-lines", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    small, big = build(args.other_jobs, args.other_lines)
    from django.conf import settings

    from jobs.models import LogChunk

    settings.ALLOWED_HOSTS = ["*"]
    mine = LogChunk.objects.filter(attempt__job__tenant__slug="small").order_by("id").last()
    poll = f"/api/v1/jobs/{mine.attempt.job_id}/logs/?after={mine.pk}"
    for name, user, url in (("small tenant, API list", small, "/api/v1/jobs/"),
                            ("small tenant, portal list", small, "/"),
                            ("small tenant, log poll with nothing new", small, poll),
                            ("big tenant, API list", big, "/api/v1/jobs/")):  # fmt: skip
        print(f"{name}: {fresh_db.median_get_ms(user, url, args.repeat):.1f} ms")


if __name__ == "__main__":
    main()

"""Benchmark: the users' job listings on a platform with many jobs.

    python bench/list_jobs.py [--other-jobs 400000] [--repeat 5]

In a fresh database (`mlsched_bench_list` on DATABASE_URL's server, default local PostgreSQL):
a small tenant with 20 jobs and another tenant with `--other-jobs` finished jobs. Times, for a
member of the small tenant, `GET /api/v1/jobs/` and the portal's job list, and for a member
of the big one its API list, through Django's test client (the whole request, one warm-up
first); prints the median of `--repeat` requests in milliseconds, one line each. A listing
should cost what the caller's own jobs cost, not what the platform holds.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SERVER = os.environ.get("BENCH_SERVER_URL", "postgresql://postgres:postgres@127.0.0.1:5432")
os.environ["DATABASE_URL"] = f"{SERVER}/mlsched_bench_list"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlsched_site.settings")
os.environ.setdefault("SECRET_KEY", "mlsched-bench")  # a throwaway database: any key will do
os.environ.pop("REDIS_URL", None)

import django  # noqa: E402
import psycopg  # noqa: E402


def fresh_database() -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS mlsched_bench_list WITH (FORCE)")
        conn.execute("CREATE DATABASE mlsched_bench_list")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def build(other_jobs: int):
    from django.contrib.auth.models import User
    from django.db import connection

    from jobs.models import Job
    from quotas.models import Membership, PriorityClass, Tenant

    normal = PriorityClass.objects.create(name="normal", value=0)
    users = []
    for slug, count in (("small", 20), ("big", other_jobs)):
        tenant = Tenant.objects.create(name=slug, slug=slug)
        user = User.objects.create(username=f"member-of-{slug}")
        Membership.objects.create(tenant=tenant, user=user)
        for start in range(0, count, 50_000):
            Job.objects.bulk_create(
                Job(tenant=tenant, owner=user, name="j", family="training", image="i",
                    command=["x"], cpu_milli=1, memory_mb=1, gpus=1, priority_class=normal,
                    max_runtime_s=60, state="succeeded")
                for _ in range(min(50_000, count - start))
            )  # fmt: skip
        users.append(user)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return users


def median_ms(user, url: str, repeat: int) -> float:
    from django.test import Client

    client = Client()
    client.force_login(user)
    assert client.get(url).status_code == 200  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other-jobs", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    fresh_database()
    small, big = build(args.other_jobs)
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]
    for name, user, url in (("small tenant, API list", small, "/api/v1/jobs/"),
                            ("small tenant, portal list", small, "/"),
                            ("big tenant, API list", big, "/api/v1/jobs/")):  # fmt: skip
        print(f"{name}: {median_ms(user, url, args.repeat):.1f} ms")


if __name__ == "__main__":
    main()

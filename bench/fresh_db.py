"""A throwaway PostgreSQL database for a benchmark, on BENCH_SERVER_URL's server (default: the
local PostgreSQL): `use(name)` before Django is imported, `create(name)` to drop, create and
migrate it; `finished_jobs` to fill it with a team's past jobs; `median_get_ms` to time a page or
an endpoint as a user asks for it."""

import os
import statistics
import time

SERVER = os.environ.get("BENCH_SERVER_URL", "postgresql://postgres:postgres@127.0.0.1:5432")


def use(name: str) -> None:
    os.environ["DATABASE_URL"] = f"{SERVER}/{name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlsched_site.settings")
    os.environ.setdefault("SECRET_KEY", "mlsched-bench")  # a throwaway database: any key will do
    os.environ.pop("REDIS_URL", None)


def create(name: str) -> None:
    import django
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


BATCH = 50_000  # rows a bulk insert writes at a time


def finished_jobs(tenant, owner, count: int, priority_class) -> None:
    """`count` finished single jobs of `tenant` submitted by `owner`, alike (1 GPU, a minute's
    limit), BATCH rows an insert."""
    from jobs.models import Job

    for start in range(0, count, BATCH):
        Job.objects.bulk_create(
            Job(tenant=tenant, owner=owner, name="j", family="training", image="i",
                command=["x"], cpu_milli=1, memory_mb=1, gpus=1, priority_class=priority_class,
                max_runtime_s=60, state="succeeded")
            for _ in range(min(BATCH, count - start))
        )  # fmt: skip


def median_get_ms(user, url: str, repeat: int) -> float:
    """The median of `repeat` GETs of `url` by `user` through Django's test client (the whole
    request), in milliseconds, after a warm-up one, which must answer 200."""
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

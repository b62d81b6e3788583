"""The API's rate counters live on REDIS_URL's server, in a database of their own.

Clearing them (the tests do before each test) must never flush the broker's queues or the
channel layer, and two deployments sharing a Redis server must be able to keep them apart.
"""

import os
import subprocess
import sys

import pytest
import redis
from django.conf import settings

from mlsched_site.settings import redis_database_url
from tests.processes import ROOT

LOCATION = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.CACHES['throttle']['LOCATION'])"
)


def in_a_fresh_process(code: str, **env) -> str:
    """Run `code` with settings loaded from `env` (on top of this one's), return its output."""
    clean = {k: v for k, v in os.environ.items() if k != "MLSCHED_THROTTLE_REDIS_DB"}
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "DJANGO_SETTINGS_MODULE": "mlsched_site.settings", "SECRET_KEY": "k", **env},
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


@pytest.mark.parametrize(
    "redis_url, db, want",
    [
        ("redis://127.0.0.1:6379/0", 1, "redis://127.0.0.1:6379/1"),
        ("redis://redis.internal:6380", 5, "redis://redis.internal:6380/5"),
        ("rediss://:secret@redis.internal:6380/2", 3, "rediss://:secret@redis.internal:6380/3"),
        ("redis://redis.internal/2?db=2&health_check_interval=5", 4,
         "redis://redis.internal/4?health_check_interval=5"),
        ("unix:///run/redis.sock?db=2", 6, "unix:///run/redis.sock?db=6"),
    ],
)  # fmt: skip
def test_it_names_the_database_on_redis_urls_server(redis_url, db, want):
    assert redis_database_url(redis_url, db) == want


def test_it_follows_redis_url_and_defaults_to_database_1():
    got = in_a_fresh_process(LOCATION, REDIS_URL="redis://redis.internal:6380/6")

    assert got == "redis://redis.internal:6380/1"


def test_it_takes_its_database_from_mlsched_throttle_redis_db():
    got = in_a_fresh_process(
        LOCATION, REDIS_URL="redis://redis.internal:6380/6", MLSCHED_THROTTLE_REDIS_DB="9"
    )

    assert got == "redis://redis.internal:6380/9"


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (make test sets it)")
def test_a_rate_counter_lands_in_the_configured_database_not_redis_urls():
    db = settings.MLSCHED_THROTTLE_REDIS_DB  # this run's own (the tests clear it)
    counters = redis.Redis.from_url(redis_database_url(settings.REDIS_URL, db))
    broker = redis.Redis.from_url(settings.REDIS_URL)
    if broker.connection_pool.connection_kwargs.get("db", 0) == db:
        pytest.skip("this run keeps its rate counters in REDIS_URL's own database")
    counters.delete("mlsched-rate:1:probe")

    in_a_fresh_process(
        "import django; django.setup(); from django.core.cache import caches; "
        "caches['throttle'].set('probe', 1, 60)",
        REDIS_URL=settings.REDIS_URL, MLSCHED_THROTTLE_REDIS_DB=str(db),
    )  # fmt: skip

    assert counters.exists("mlsched-rate:1:probe")
    assert not broker.exists("mlsched-rate:1:probe")
    counters.delete("mlsched-rate:1:probe")

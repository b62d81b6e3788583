"""PostgreSQL goes away for a few seconds, as in a restart or a failover, while the whole system
runs: the control plane (a live server), a scheduler process and an agent process with a job
running. Every part must come back on its own, with nothing half-written.

The machine's PostgreSQL server is shared, so it is not restarted: the test database alone
refuses new sessions (ALLOW_CONNECTIONS false) and loses every open one (pg_terminate_backend)
for the outage, which is what its clients see of a restart. This process's own session, which
the test reads with, is spared.
"""

import time
from contextlib import contextmanager

import psycopg
import pytest
import requests
from django.db import connection
from psycopg import sql

from clusters.models import Cluster
from jobs.models import Job
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import JobFactory
from tests.faults.test_agent_processes import Platform, logs, script, wait_for_state
from tests.faults.whole import assert_whole
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
OUTAGE_S = 4


@pytest.fixture
def platform(live_server, tmp_path, settings):
    settings.MLSCHED_RETRY_BACKOFF_S = 0.5
    running = Platform(live_server.url, tmp_path)
    yield running
    running.stop()


def admin_session() -> psycopg.Connection:
    """A session on the server's maintenance database: a database cannot close its own doors."""
    db = connection.settings_dict
    return psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"],
                           password=db["PASSWORD"], dbname="postgres", autocommit=True)  # fmt: skip


@contextmanager
def database_outage(seconds: float):
    """This test database is down for `seconds`; yields the list of sessions it ended."""
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        mine = cursor.fetchone()[0]
    ended = []
    with admin_session() as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
            sql.Identifier(name)))  # fmt: skip
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                ended.append(admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> %s", [name, mine]).fetchone()[0])  # fmt: skip
                time.sleep(0.1)
            yield ended
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(
                sql.Identifier(name)))  # fmt: skip


def database_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


SPANS_THE_OUTAGE = """
    import time
    print("started", flush=True)
    time.sleep(6)
    print("done", flush=True)
"""


def test_a_database_outage_heals_without_a_restart_and_leaves_nothing_half_written(
    platform, tmp_path
):
    running = JobFactory(gpus=2, max_retries=2, command=script(tmp_path, SPANS_THE_OUTAGE))
    assert wait_for_state(running, State.RUNNING, timeout=20)

    with database_outage(OUTAGE_S) as ended:
        pass
    back = database_now()
    after = JobFactory(gpus=1, command=script(tmp_path, "print('after the outage')"))

    assert sum(ended) > 0  # the scheduler's session, at least, was cut
    assert wait_for_state(after, State.SUCCEEDED, State.FAILED, timeout=30) == State.SUCCEEDED
    assert wait_for_state(running, State.SUCCEEDED, State.FAILED, timeout=30) == State.SUCCEEDED
    assert (platform.scheduler.poll(), platform.agent.poll()) == (None, None)  # never restarted
    assert running.attempts.count() == 1  # not declared lost, not run twice
    assert logs(running) == ["started", "done"]
    east = Cluster.objects.get(name="local")
    assert east.health == Cluster.Health.HEALTHY and east.last_heartbeat > back
    assert wait_until(lambda: not Job.objects.exclude(state=State.SUCCEEDED).exists(), 5)
    assert_whole()


def test_during_an_outage_the_api_and_the_portal_answer_503_with_retry_after(live_server, alice):
    _, key = create_token(alice, "outage")
    browser = requests.Session()
    login = f"{live_server.url}/accounts/login/"
    browser.get(login, timeout=30)  # its CSRF cookie, without the database

    with database_outage(0.2):
        api = requests.get(f"{live_server.url}/api/v1/jobs/",
                           headers={"Authorization": f"Token {key}"}, timeout=30)  # fmt: skip
        page = browser.post(login, {"username": "alice", "password": "x",
                                    "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                            headers={"Referer": login}, timeout=30)  # fmt: skip

    assert (api.status_code, api.headers["Retry-After"]) == (503, "5")
    assert api.json() == {"detail": "The database did not answer: try again in a few seconds."}
    assert (page.status_code, page.headers["Retry-After"]) == (503, "5")
    assert "Try again in a few seconds" in page.text
    assert requests.get(f"{live_server.url}/api/v1/jobs/", timeout=30,
                        headers={"Authorization": f"Token {key}"}).status_code == 200  # fmt: skip

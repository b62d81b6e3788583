"""Running the placement cycle: single flight per shard, a kick to start early, the embedded
thread.

With Redis, Celery beat ticks `jobs.tasks.schedule` every second and submit/finish/cancel kick
it through the broker. Without Redis (the embedded mode) a thread in the server process does
the same, woken by the same kick.
"""

import functools
import logging
import threading
import zlib
from collections.abc import Callable
from contextlib import contextmanager

import redis
from django.conf import settings
from django.db import connection

from jobs import cycle, events, janitor
from jobs.clock import database_now

log = logging.getLogger(__name__)

# The embedded mode's single flight (no advisory locks): one lock per name, as the advisory
# locks are per name; a daily prune must neither hold up the cycle nor be skipped for it.
_local_flights: dict[str, threading.Lock] = {}
_wake = threading.Event()

# A frozen scheduler (stopped, swapping, its host cut off) keeps its database session, so its
# lock and the node rows its commit holds, until its host comes back or TCP gives up on it
# (hours); meanwhile every other scheduler skips its turn. A cycle talks to the database all
# along (its longest pause, deciding, takes seconds for tens of thousands of jobs), so a holder
# idle for MLSCHED_CYCLE_STALL_S is frozen: PostgreSQL ends its session and another scheduler
# takes over. idle_session_timeout came with PostgreSQL 14.
IDLE_TIMEOUTS_SINCE = 140000


@contextmanager
def single_flight(shard: str = "default"):
    """Yield True if this process holds the shard's cycle lock, False if another one does.

    A PostgreSQL advisory lock: it dies with the session, so a killed scheduler never leaves it
    held, and a frozen one's session is ended after MLSCHED_CYCLE_STALL_S idle. It only saves
    wasted work; correctness rests on the commit's row locks.
    """
    if not settings.MLSCHED_SINGLE_FLIGHT:
        yield True
        return
    if connection.vendor != "postgresql":
        lock = _local_flights.setdefault(shard, threading.Lock())  # atomic: one lock a name
        acquired = lock.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()
        return
    key = zlib.crc32(f"mlsched-cycle:{shard}".encode())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        acquired = cursor.fetchone()[0]
        stall = acquired and connection.pg_version >= IDLE_TIMEOUTS_SINCE
        if stall:
            ms = str(settings.MLSCHED_CYCLE_STALL_S * 1000)
            cursor.execute(
                "SELECT set_config('idle_session_timeout', %s, false), "
                "set_config('idle_in_transaction_session_timeout', %s, false)",
                [ms, ms],
            )
        try:
            yield acquired
        finally:
            if acquired:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            if stall:
                cursor.execute("RESET idle_session_timeout")
                cursor.execute("RESET idle_in_transaction_session_timeout")


def tick() -> cycle.CycleResult | None:
    """One scheduler turn: the placement cycle, then the janitor's sweep."""
    with single_flight() as acquired:
        if not acquired:
            return None
        with events.coalesced():  # the cycle's commit batches and the sweep: one message a tenant
            # The database's clock, as the janitor's (which reads it again): the times the
            # commit writes (placed, asked to stop) are judged against heartbeats, which the
            # web hosts write with it.
            try:
                result = cycle.run_cycle(now=database_now().timestamp())
            finally:
                # The sweep does not depend on the cycle: a cycle that fails every turn (a job
                # whose data the core trips on) must not also leave silent clusters healthy
                # and gangs whose rank never came up holding their GPUs.
                janitor.sweep()
    if result.placed or result.preempted:
        log.info(
            "cycle: %d considered, %d placed, %d skipped, %d preempted in %.3fs",
            result.considered, len(result.placed), len(result.skipped), len(result.preempted),
            sum(result.seconds.values()),
        )  # fmt: skip
    return result


def kick() -> None:
    """Ask for a cycle now rather than at the next tick; kicks within 200 ms coalesce.

    Best effort: with Redis down the kick is lost and beat's next tick runs the cycle instead;
    it never fails the commit whose hook sends it."""
    if not settings.REDIS_URL:
        _wake.set()
        return
    with events.best_effort("the scheduler kick"):
        if redis_client(settings.REDIS_URL).set("mlsched:kick", 1, nx=True, px=200):
            from jobs.tasks import schedule

            schedule.delay()


@functools.cache
def redis_client(url: str) -> redis.Redis:
    """One connection pool per process and URL, not one connection per kick. Short timeouts:
    an unreachable Redis costs the request that kicks about a second, not a TCP timeout."""
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def prune_forever(stop: threading.Event, every: float = 24 * 3600.0) -> None:
    """The embedded mode's retention (beat sends jobs.tasks.prune elsewhere): at start, then
    every `every` seconds."""
    from jobs import tasks  # the tasks import this module

    repeat(stop, "prune", tasks.prune, every)


def alerts_forever(stop: threading.Event, every: float = 60.0) -> None:
    """The embedded mode's webhook alerts, GPU-hour budget thresholds and time-limit warnings
    (beat sends jobs.tasks.alert_budgets and jobs.tasks.warn_time_limits elsewhere): at start,
    then every `every` seconds, each on its own (one failing keeps the other from nothing)."""
    from jobs import tasks

    def work() -> None:
        for task in (tasks.alert_budgets, tasks.warn_time_limits):
            try:
                task()
            except Exception:
                log.exception("%s failed; it runs again in %s s", task.name, every)

    repeat(stop, "alerts", work, every)


def repeat(stop: threading.Event, name: str, work: Callable[[], object], every: float) -> None:
    """Run `work` in this thread at once, then every `every` seconds until `stop` is set."""
    while not stop.is_set():
        try:
            work()
        except Exception:
            log.exception("%s failed; it runs again in %s s", name, every)
        finally:
            connection.close()
        stop.wait(every)


def run_forever(stop: threading.Event, interval: float = 1.0) -> None:
    """The embedded scheduler: a tick every `interval` seconds or as soon as kicked."""
    while not stop.is_set():
        _wake.wait(interval)
        _wake.clear()
        try:
            tick()
        except Exception:
            log.exception("scheduler tick failed; the next one retries")
        finally:
            connection.close()

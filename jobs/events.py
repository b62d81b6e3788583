"""Live events: job transitions, pushed after commit to the tenant's group, and log lines,
pushed to the job's log group as the agents store them.

One message per tenant per publication, carrying every change of that tenant: a cycle that
places thousands of jobs, or a batch cancel of thousands of shards, sends a handful of messages,
not thousands. That is not only cheaper: channels_redis holds at most 100 messages per channel
(its `capacity`) and drops the rest, so a burst of one message per job would leave an open page
with nothing. A verb that commits many transitions, in one transaction or in many, publishes
inside `coalesced()` to keep it to one message per tenant. A consumer of one job's page
subscribes to the job's tenant group and keeps the changes of its job.

`best_effort` wraps every call to Redis in the request path (live pushes, rate counters, the
scheduler's kick): Redis holds no state of record, so its outage must degrade, never fail.
"""

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from redis.exceptions import RedisError

from jobs.states import ACTIVE, TERMINAL, State

log = logging.getLogger(__name__)

WARN_EVERY_S = 60.0
_warned_at: dict[str, float] = {}  # per `what`: when its failure was last logged


@contextmanager
def best_effort(what: str):
    """Run a call to Redis whose failure must not fail the caller: the block ends there, the
    code after it is the fallback. While Redis is down every request fails the same way, so
    the warning is logged once a minute per `what`, not once per request."""
    try:
        yield
    except (RedisError, OSError):
        now = time.monotonic()
        last = _warned_at.get(what)
        if last is None or now - last >= WARN_EVERY_S:
            _warned_at[what] = now
            log.warning("%s failed; going on without it (is Redis down?)", what, exc_info=True)


class JobChange(TypedDict):
    job: int
    from_state: str
    to_state: str
    reason: str
    time: str


class JobChanges(TypedDict):
    type: str  # "job.changes": the consumer method `job_changes` handles it
    tenant: int
    changes: list[JobChange]


class LogLine(TypedDict):
    attempt: int  # the attempt's number
    worker: int
    seq: int
    stream: str
    text: str


class JobLogs(TypedDict):
    type: str  # "job.logs": the consumer method `job_logs` handles it
    job: int
    lines: list[LogLine]


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


def logs_group(job_id: int) -> str:
    return f"job-{job_id}-logs"


def publish_logs(by_job: dict[int, list[LogLine]]) -> None:
    """Push new log lines to the viewers of each job's page (lines may repeat: agents resend)."""
    messages = {
        logs_group(job_id): JobLogs(type="job.logs", job=job_id, lines=lines)
        for job_id, lines in by_job.items()
    }
    send_all(messages)


def publish_on_commit(events: Iterable[tuple[dict, int]]) -> None:
    """Publish JobEvents once the transaction that wrote them commits.

    `events` holds (fields, tenant id) pairs; fields are a JobEvent's attributes by attname
    (`job_id`, `from_state`, `to_state`, `reason`, `time`), as a dict or `vars(event)`.
    Each call registers its own on-commit hook, so a savepoint rolled back takes its events
    with it; inside `coalesced()` the hooks merge into the block's messages. The same hook
    hands the jobs the events end, those they start and those they queue again after a start
    or a placement to `jobs.notify` (a from = to note ends nothing).
    """
    by_tenant: dict[int, list[JobChange]] = defaultdict(list)
    ended: list[tuple[int, int]] = []  # (job, tenant) of the jobs these events end
    started: list[tuple[int, int, datetime]] = []  # (job, tenant, when) of those they start
    requeued: list[tuple[int, int, datetime]] = []  # (job, tenant, when) of those requeued
    for event, tenant_id in events:
        by_tenant[tenant_id].append(
            JobChange(job=event["job_id"], from_state=event["from_state"],
                      to_state=event["to_state"], reason=event["reason"],
                      time=event["time"].isoformat())
        )  # fmt: skip
        if event["to_state"] in TERMINAL and event["from_state"] != event["to_state"]:
            ended.append((event["job_id"], tenant_id))
        elif event["to_state"] == State.RUNNING and event["from_state"] != State.RUNNING:
            started.append((event["job_id"], tenant_id, event["time"]))
        elif event["to_state"] == State.QUEUED and event["from_state"] in ACTIVE:
            requeued.append((event["job_id"], tenant_id, event["time"]))
    if by_tenant:
        transaction.on_commit(lambda: committed(by_tenant, ended, started, requeued))


def committed(
    by_tenant: dict[int, list[JobChange]],
    ended: list[tuple[int, int]],
    started: list[tuple[int, int, datetime]],
    requeued: list[tuple[int, int, datetime]],
) -> None:
    """A transaction's changes have committed: to the live pages, and the jobs it ended (or
    started or queued again, for those that ask) to their tenants' webhooks (jobs.notify),
    once each, as every end, start and requeue passes here once."""
    deliver(by_tenant)
    if ended or started or requeued:
        from jobs import notify  # it imports the models: kept out of this module's own imports

        if ended:
            notify.jobs_ended(ended)
        if started:
            notify.jobs_started(started)
        if requeued:
            notify.jobs_requeued(requeued)


# The changes committed inside the open `coalesced()` block (the outermost), awaiting its end.
_held: ContextVar[dict[int, list[JobChange]] | None] = ContextVar("held_changes", default=None)


@contextmanager
def coalesced():
    """Hold the changes committed inside the block; send them when it ends, one message per
    tenant. Blocks nest: the outermost one sends.

    Wrap the transactions, not only the work inside them: a change is held when its
    transaction commits, so one committing after the block has ended is sent on its own.
    """
    if _held.get() is not None:
        yield
        return
    held: dict[int, list[JobChange]] = defaultdict(list)
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
        publish(held)


def deliver(by_tenant: dict[int, list[JobChange]]) -> None:
    """Send committed changes now, or hold them for the enclosing `coalesced()` block."""
    held = _held.get()
    if held is None:
        publish(by_tenant)
        return
    for tenant_id, changes in by_tenant.items():
        held[tenant_id].extend(changes)


def publish(by_tenant: dict[int, list[JobChange]]) -> None:
    send_all(
        {
            tenant_group(tenant_id): JobChanges(type="job.changes", tenant=tenant_id,
                                                changes=changes)
            for tenant_id, changes in by_tenant.items()
        }
    )  # fmt: skip


def send_all(messages: dict[str, dict]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    send = async_to_sync(layer.group_send)
    # Best effort: Redis down must not fail a commit; the job page polls the API meanwhile.
    with best_effort("live updates"):
        for group, message in messages.items():
            send(group, message)

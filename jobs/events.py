"""Live events: job transitions, pushed after commit to the tenant's group, and log lines,
pushed to the job's log group as the agents store them.

One message per tenant per commit, carrying every change of that tenant: a cycle that places
thousands of jobs sends a handful of messages, not thousands. A consumer of one job's page
subscribes to the job's tenant group and keeps the changes of its job.
"""

import logging
from collections import defaultdict
from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


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


def publish_on_commit(events) -> None:
    """Publish JobEvents once the transaction that wrote them commits.

    `events` holds (fields, tenant id) pairs; fields are a JobEvent's attributes by attname
    (`job_id`, `from_state`, `to_state`, `reason`, `time`), as a dict or `vars(event)`.
    """
    by_tenant: dict[int, list[JobChange]] = defaultdict(list)
    for event, tenant_id in events:
        by_tenant[tenant_id].append(
            JobChange(job=event["job_id"], from_state=event["from_state"],
                      to_state=event["to_state"], reason=event["reason"],
                      time=event["time"].isoformat())
        )  # fmt: skip
    if by_tenant:
        transaction.on_commit(lambda: publish(by_tenant))


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
    for group, message in messages.items():
        try:
            send(group, message)
        except Exception:  # live updates are best effort: Redis down must not fail a commit
            log.warning("could not publish to %s", group, exc_info=True)

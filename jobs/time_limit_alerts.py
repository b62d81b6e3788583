"""Time-limit warnings (Slurm's --mail-type=TIME_LIMIT_90): a job that asks for it
(`notify_time_limit`) has its tenant's webhook told, and its submitter emailed if it asks
(`notify_email`), when a run of it has used 90 % of its runtime limit, while there is time left
to save a checkpoint or its results; each run once, a retry's run again (its limit starts again
with it). A batch of several shards does not ask: each shard would be told apart.

`check` runs once a minute (beat sends `jobs.tasks.warn_time_limits`; the embedded mode runs it
in a thread of the server), so a warning comes at most a minute late. It reads the running
attempts of jobs that ask, with someone to tell (a webhook, an email), not told yet (one query;
most deployments have none), and claims each that has reached 90 % with a conditional update of its
`time_limit_told_at`: of two checkers racing, one updates the row, and only that one queues the
notification, after its commit; a broker that refuses the task gives the claim back. A limit
lowered while the job runs is read as it stands.
"""

import logging
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from jobs import notify
from jobs.models import Attempt

log = logging.getLogger(__name__)

PERCENT = 90  # of its runtime limit a run has used when it is told


class JobTimeLimit(notify.JobNotice):
    attempt: int  # the run's number
    percent: int  # of its runtime limit used: 90
    started_at: str  # the run's start, ISO 8601
    stops_at: str  # when its runtime limit stops it, ISO 8601
    max_runtime_s: int  # its runtime limit
    cluster: str | None  # where it runs
    url: str | None  # the job's page, under MLSCHED_PUBLIC_URL; None without it


def check(now: datetime | None = None) -> int:
    """Claim the runs that have used PERCENT of their runtime limit and were not told, and
    queue their notifications after each claim's commit; how many it claimed."""
    now = now or timezone.now()
    live = (
        Attempt.objects.filter(
            outcome="", started_at__isnull=False, time_limit_told_at__isnull=True,
            job__notify_time_limit=True,
        )
        .filter(notify.told_of("job__"))
        .values_list("pk", "started_at", "job__max_runtime_s")
    )  # fmt: skip
    due = [pk for pk, started, limit in live if reached(started, limit, now)]
    return sum(claim(pk, now) for pk in due)


def reached(started: datetime, max_runtime_s: int, now: datetime) -> bool:
    """Whether a run started then has used PERCENT of that runtime limit by `now`."""
    return now >= started + timedelta(seconds=max_runtime_s * PERCENT / 100)


def claim(attempt_id: int, now: datetime) -> int:
    """Mark the run told, if it still runs and nobody has, and queue its notification once
    that commits: 1 if this checker did, else 0."""
    with transaction.atomic():
        won = Attempt.objects.filter(
            pk=attempt_id, outcome="", time_limit_told_at__isnull=True
        ).update(time_limit_told_at=now)
        if won:
            transaction.on_commit(partial(send, attempt_id))
    return won


def send(attempt_id: int) -> None:
    """Queue the warning of run `attempt_id`. One that cannot be queued (the broker is down)
    gives its claim back: the next check tells it."""
    try:
        notify.queue(notify.tasks_module().notify_time_limit, attempt_id)
    except Exception:
        log.exception("time-limit warning of attempt %d was not queued; the next check tells it",
                      attempt_id)  # fmt: skip
        Attempt.objects.filter(pk=attempt_id).update(time_limit_told_at=None)


def notification(attempt_id: int) -> notify.Notification | None:
    """The notification of run `attempt_id` nearing its runtime limit; None when there is
    nothing to send: the run or its job deleted since, or nobody to tell now."""
    attempt = (
        Attempt.objects.select_related("job__tenant", "job__owner", "cluster")
        .filter(pk=attempt_id, started_at__isnull=False)
        .first()
    )
    if attempt is None or not notify.told(attempt.job):
        return None
    job = attempt.job
    stops = attempt.started_at + timedelta(seconds=job.max_runtime_s)
    document = JobTimeLimit(
        event="job.time_limit", job=job.pk, name=job.name, tenant=job.tenant.slug,
        owner=job.owner.get_username(), labels=job.labels, attempt=attempt.number,
        percent=PERCENT, started_at=attempt.started_at.isoformat(), stops_at=stops.isoformat(),
        max_runtime_s=job.max_runtime_s,
        cluster=attempt.cluster.name if attempt.cluster else None,
        url=notify.portal_url(reverse("job", args=[job.pk])),
    )  # fmt: skip
    delivery = f"job.time_limit:{attempt.pk}"
    return notify.Notification(job.tenant, delivery, document, notify.mail_to(job))

"""Celery tasks: thin wrappers around the scheduler, retention and the webhook notifications
(job ends, starts, requeues and time-limit warnings, GPU-hour budget thresholds). Tasks take
ids, never model instances."""

import logging

from celery import shared_task

from jobs import budget_alerts, notify, retention, scheduler, time_limit_alerts
from mlsched_site import errors

log = logging.getLogger(__name__)


# A turn nobody ran within 5 s is stale (no worker was up): the next one does the same work.
@shared_task(ignore_result=True, expires=5)
def schedule() -> None:
    """One scheduler turn; beat sends it every second, kicks send it sooner."""
    scheduler.tick()


@shared_task(ignore_result=True)
def prune() -> None:
    """Retention (jobs.retention); beat sends it once a day. Idempotent: a second run finds
    nothing, and two at once do not both run (an advisory lock of their own)."""
    with scheduler.single_flight("prune") as acquired:
        if not acquired:
            return
        counts = retention.prune()
    if any(counts.values()):
        log.info("prune: deleted %s", ", ".join(f"{n} {kind}" for kind, n in counts.items()))


# Every notification to a tenant's webhook (jobs.notify) is a task of this policy. A receiver
# unreachable, too slow (5 s to connect, 5 s between bytes) or failing (5xx), or the database
# lost as the task reads what to send (a restart, a failover), is tried again up to 5 times,
# after a random wait up to 10, 20, 40, 80 and 160 s (random, so a receiver back from an outage
# is not hit by every job's retry at once); then the failure is logged and the notification
# dropped. A redirect or a 4xx is final at once.
notification_task = shared_task(
    ignore_result=True,
    autoretry_for=(notify.Unreachable, *errors.UNAVAILABLE),
    retry_backoff=10,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=5,
)


@notification_task
def notify_job_end(job_id: int) -> None:
    """POST the notification of a job's end (a batch: its first shard's id) to its tenant's
    webhook (jobs.notify)."""
    notify.deliver(notify.job_end(job_id))


@notification_task
def notify_job_start(job_id: int) -> None:
    """POST the notification of a job's first start (a batch: of its shard that started
    first) to its tenant's webhook (jobs.notify)."""
    notify.deliver(notify.job_start(job_id))


@notification_task
def notify_job_requeue(job_id: int, since: float, retries_used: int | None = None) -> None:
    """POST the notification of a job's requeue at `since` (a batch: of its shards queued
    again from then on, gathered), with its retries used as the requeue left them (None: as
    they are when sent), to its tenant's webhook (jobs.notify)."""
    notify.deliver(notify.job_requeue(job_id, since, retries_used))


@notification_task
def mail_notification(delivery: str, to: list[str], subject: str, body: str) -> None:
    """Email a notification (a job's, to its submitter; a budget's, to its team's owners:
    jobs.notify.mail), as a webhook's post is tried: again while the mail server cannot take
    it."""
    notify.mail(delivery, to, subject, body)


@notification_task
def notify_budget(alert_id: int) -> None:
    """POST the notification of a threshold reached (a BudgetAlert's id) of a GPU-hour budget
    or of a spend alert to its tenant's webhook (jobs.budget_alerts)."""
    notify.deliver(budget_alerts.notification(alert_id))


# A check nobody ran within its minute is stale (no worker was up): the next one does its work.
@shared_task(ignore_result=True, expires=60)
def alert_budgets() -> None:
    """Tell budgeted tenants' webhooks of the thresholds their month's use, or its cost, has
    reached (jobs.budget_alerts); beat sends it every minute."""
    budget_alerts.check()


@notification_task
def notify_time_limit(attempt_id: int) -> None:
    """POST the notification of a job's run that has used 90 % of its runtime limit (the
    attempt's id) to its tenant's webhook (jobs.time_limit_alerts)."""
    notify.deliver(time_limit_alerts.notification(attempt_id))


# As the budget alerts: a check nobody ran within its minute is stale.
@shared_task(ignore_result=True, expires=60)
def warn_time_limits() -> None:
    """Tell the webhooks of jobs that ask of their runs that have used 90 % of their runtime
    limits (jobs.time_limit_alerts); beat sends it every minute."""
    time_limit_alerts.check()

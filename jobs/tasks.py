"""Celery tasks: thin wrappers around the scheduler. Tasks take ids, never model instances."""

import logging

from celery import shared_task

from jobs import retention, scheduler

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

"""Celery tasks: thin wrappers around the scheduler. Tasks take ids, never model instances."""

from celery import shared_task

from jobs import scheduler


@shared_task(ignore_result=True)
def schedule() -> None:
    """One scheduler turn; beat sends it every second, kicks send it sooner."""
    scheduler.tick()

"""Every task Celery beat sends runs through a platform holding every kind of row (the
platform tests/test_api_query_counts.py grows: jobs of every kind and state, windows and
bookings begun and to come, cordoned, quarantined and down nodes, budgets, spend alerts, rates
and their changes, retries, dependencies, shared GPUs): a row of a kind a task trips on would
fail it at every run, and with the placement cycle, every placement."""

import pytest
from django.conf import settings as django_settings

from jobs import scheduler, tasks
from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_api_query_counts import grown  # noqa: F401 (a fixture)
from tests.test_openapi import root, world  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_beat_task_runs_through_every_kind_of_row(grown, settings):  # noqa: F811
    settings.MLSCHED_JOB_RETENTION_DAYS = settings.MLSCHED_LOG_RETENTION_DAYS = 1
    grown.grow(1)
    grown.grow(2)
    sent = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    failed = {}

    for name in sorted(sent):
        task = getattr(tasks, name.removeprefix("jobs.tasks."))
        for _ in range(2):  # a second run finds what the first left
            try:
                task()
            except Exception as error:  # noqa: BLE001 (each task's failure is named, not raised)
                failed[name] = repr(error)

    assert not failed, failed
    assert sent == {"jobs.tasks.schedule", "jobs.tasks.prune", "jobs.tasks.alert_budgets",
                    "jobs.tasks.warn_time_limits"}  # fmt: skip
    assert scheduler.tick() is not None  # the turn ran its cycle: its single flight was free

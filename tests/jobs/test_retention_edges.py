"""Retention at the roll-up's edges: what it deletes was rolled up first, once, whatever the
days a batch's shards ended on and however often the prune runs."""

from datetime import timedelta

import pytest

from jobs import reports, retention, rollup
from jobs.models import Job, UsageDay
from jobs.states import State
from tests.jobs.test_usage_edges import DAY, NOW
from tests.jobs.test_usage_report import H, run

pytestmark = pytest.mark.django_db


def shard_of(first, index: int, start) -> Job:
    """A shard of ``first``'s batch that ran an hour from ``start`` and succeeded."""
    attempt = run(first.tenant, start, start + H, created=first.created, parent=first,
                  shard_index=index)  # fmt: skip
    Job.objects.filter(pk=attempt.job_id).update(
        state=State.SUCCEEDED, started_at=start, finished_at=start + H
    )
    return attempt.job


def test_a_batch_whose_shards_ended_on_different_days_keeps_its_usage_once_deleted(alpha):
    start = NOW - 100 * DAY
    first = run(alpha, start, start + H, created=start).job
    Job.objects.filter(pk=first.pk).update(state=State.SUCCEEDED, started_at=start,
                                           finished_at=start + H)  # fmt: skip
    first.refresh_from_db()
    shards = [shard_of(first, n, start + n * DAY) for n in (1, 2, 3)]
    window = (rollup.midnight(start.date()), rollup.midnight(start.date() + 5 * DAY))
    before = reports.usage([alpha], *window, NOW)

    counts = retention.prune(NOW, keep_days=0, job_days=90)

    assert counts["jobs"] == 4 and not Job.objects.filter(pk__in=[s.pk for s in shards]).exists()
    after = reports.usage([alpha], *window, NOW)
    assert after.tenants[0].total().gpu_hours == pytest.approx(4.0)
    assert after.tenants[0].finished == before.tenants[0].finished
    assert not after.incomplete


def test_a_second_prune_the_same_day_rolls_nothing_up_again(alpha):
    start = NOW - 5 * DAY
    run(alpha, start, start + H, created=start)
    retention.prune(NOW, keep_days=0, job_days=90)
    rows = UsageDay.objects.count()

    retention.prune(NOW + timedelta(hours=6), keep_days=0, job_days=90)

    assert UsageDay.objects.count() == rows
    week = (rollup.midnight((NOW - 7 * DAY).date()), NOW)
    assert reports.usage([alpha], *week, NOW).tenants[0].total().gpu_hours == pytest.approx(1.0)

"""Usage reports at their edges: the 95th percentile wait read from the roll-up's buckets, the
days the roll-up has not written, and runs across the roll-up's boundary."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs import reports, rollup, usage_queries
from tests.factories import JobFactory
from tests.jobs.test_usage_report import H, run

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 6, 30, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def whole_day(at: datetime) -> tuple[datetime, datetime]:
    return rollup.midnight(at.date()), rollup.midnight(at.date() + DAY)


@pytest.mark.parametrize(
    "waits",
    [
        pytest.param([60] * 19 + [3 * 3600], id="one long wait among twenty"),
        pytest.param([5] * 38 + [50_000, 90_000], id="two long waits among forty"),
        pytest.param([1.5, 3, 7, 20, 300, 4000], id="six, spread"),
        pytest.param([42], id="one"),
    ],
)
def test_the_p95_read_from_buckets_is_within_a_bucket_of_percentile_cont(waits):
    read = rollup.bucket_percentile(rollup.count_buckets(waits), 0.95)

    assert read == pytest.approx(usage_queries.percentile_cont(waits, 0.95), rel=0.19)


def test_a_rolled_up_days_p95_wait_is_the_one_its_jobs_give_within_a_bucket(alpha):
    started = NOW - 5 * DAY
    for wait in [60] * 19 + [3 * 3600]:
        JobFactory(tenant=alpha, created=started - timedelta(seconds=wait), started_at=started)
    from_jobs = reports.usage([alpha], *whole_day(started), NOW)

    rollup.roll_up(NOW)
    rolled = reports.usage([alpha], *whole_day(started), NOW)

    assert rolled.rolled_up == (started.date(), started.date() + DAY)
    # percentile_cont: position 0.95 x 19 = 18.05, between 60 s and 3 hours.
    assert from_jobs.tenants[0].p95_wait_s == pytest.approx(597.0)
    assert rolled.tenants[0].p95_wait_s == pytest.approx(597.0, rel=0.19)


def test_days_before_the_roll_up_began_are_read_from_the_jobs(alpha, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 90
    # The oldest job left when the roll-up first ran (those before it may have been deleted
    # by retention already): the roll-up begins on its day.
    run(alpha, NOW - 10 * DAY, NOW - 10 * DAY + H, created=NOW - 10 * DAY)
    rollup.roll_up(NOW)
    long_ago = (
        rollup.midnight((NOW - 125 * DAY).date()),
        rollup.midnight((NOW - 115 * DAY).date()),
    )

    before = reports.usage([alpha], *long_ago, NOW)
    across = reports.usage([alpha], rollup.midnight((NOW - 12 * DAY).date()), NOW, NOW)

    assert before.rolled_up is None and before.incomplete
    assert across.rolled_up == ((NOW - 10 * DAY).date(), (NOW - DAY).date())
    assert across.tenants[0].total().gpu_hours == pytest.approx(1.0)


def test_a_running_attempt_across_the_roll_ups_boundary_counts_each_hour_once(alpha):
    started = NOW - 4 * DAY
    run(alpha, started, None, created=started, gpus=2)
    from_jobs = reports.usage([alpha], rollup.midnight((NOW - 5 * DAY).date()), NOW, NOW)

    rollup.roll_up(NOW)
    rolled = reports.usage([alpha], rollup.midnight((NOW - 5 * DAY).date()), NOW, NOW)

    assert rolled.rolled_up == (started.date(), (NOW - DAY).date())
    want = 4 * 24 * 2  # four days on two GPUs
    assert from_jobs.tenants[0].total().gpu_hours == pytest.approx(want)
    assert rolled.tenants[0].total().gpu_hours == pytest.approx(want)

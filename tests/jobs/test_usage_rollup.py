"""The daily usage roll-up (jobs.rollup): usage outlives the jobs retention deletes, a report
over rolled-up days gives the figures the jobs gave, and a day is rolled up once, when settled."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions, reports, retention, rollup
from jobs.models import Attempt, GpuTypeUsageDay, Job, UsageDay
from jobs.states import State
from quotas.models import Tenant
from tests.factories import JobFactory
from tests.jobs.test_usage_report import H, run

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 6, 30, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def figures(report: reports.Report) -> list:
    """Every figure of the report but the 95th percentile wait, rounded (float sums)."""
    out = []
    for t in report.tenants:
        types = [(u.gpu_type, *(round(f, 6) for f in u.figures())) for u in t.by_type]
        mean = None if t.mean_wait_s is None else round(t.mean_wait_s, 6)
        out.append((t.slug, types, t.finished, t.started, mean))
    return out


def history(tenants, first: datetime, days: int, seed: int = 7) -> None:
    """Jobs of ``tenants`` over ``days`` days from ``first``: attempts on two GPU types and on
    CPUs, some across midnight, some preempted with waste, jobs finished in every state and
    queue waits from seconds to days."""
    rng = random.Random(seed)
    ended = {Attempt.Outcome.SUCCEEDED: State.SUCCEEDED, Attempt.Outcome.PREEMPTED: State.CANCELED,
             Attempt.Outcome.USER_ERROR: State.FAILED}  # fmt: skip
    for n in range(12 * days):
        tenant = tenants[n % len(tenants)]
        start = first + timedelta(minutes=rng.randrange(days * 24 * 60))
        end = start + timedelta(minutes=rng.randrange(5, 36 * 60))
        outcome = rng.choice(list(ended))
        gpu = rng.choice([{"gpu_type": "A100"}, {"gpu_type": "T4", "gpus": 2},
                          {"gpus": 0}])  # fmt: skip
        attempt = run(tenant, start, end, outcome=outcome, wasted=rng.randrange(0, 9000), **gpu)
        if rng.random() < 0.7:  # its use measured: a share of its cores busy, a peak, GPU time
            run_s = (end - start).total_seconds()
            Attempt.objects.filter(pk=attempt.pk).update(
                cpu_seconds=4 * run_s * rng.random(), memory_peak_mb=rng.randrange(1, 20_000),
                gpu_busy_seconds=run_s * rng.random() if rng.random() < 0.5 else None,
            )  # fmt: skip
        wait = timedelta(seconds=rng.choice([0.2, 5, 90, 3600, 50_000, 200_000]) * rng.random())
        Job.objects.filter(pk=attempt.job_id).update(
            created=start - wait, started_at=start, finished_at=end, state=ended[outcome]
        )


def test_a_report_over_rolled_up_days_gives_the_figures_the_jobs_give(alpha, gamma):
    since, until = NOW - 30 * DAY, NOW  # not at midnight: the first and last days are partial
    history([alpha, gamma], since - 2 * DAY, 33)
    from_jobs = reports.usage([alpha, gamma], since, until, NOW)

    assert rollup.roll_up(NOW) > 30
    rolled = reports.usage([alpha, gamma], since, until, NOW)

    first, end = rolled.rolled_up
    assert (first, end) == ((since + DAY).date(), (NOW - 2 * DAY).date() + DAY)
    assert figures(rolled) == figures(from_jobs)
    for exact, read in zip(from_jobs.tenants, rolled.tenants, strict=True):
        assert exact.p95_wait_s > 1000
        assert read.p95_wait_s == pytest.approx(exact.p95_wait_s, rel=0.19)


def test_usage_outlives_the_jobs_retention_deletes(alpha):
    old = rollup.midnight((NOW - 120 * DAY).date())
    history([alpha], old, 5)
    window = (old - DAY, old + 10 * DAY)  # whole days (as a report from dates asks)
    before = reports.usage([alpha], *window, NOW)
    assert before.incomplete  # 90 days kept: a window from 120 days ago reaches past it

    counts = retention.prune(NOW, keep_days=0, job_days=90)

    assert counts["jobs"] == 60 and not Job.objects.exists()
    after = reports.usage([alpha], *window, NOW)
    assert figures(after) == figures(before)
    assert after.tenants[0].by_type[0].gpu_hours > 0
    assert not after.incomplete  # the days are rolled up: nothing of them is missing


def test_a_day_is_rolled_up_once_it_has_settled_and_only_once(alpha):
    run(alpha, NOW - 3 * DAY, NOW - 3 * DAY + H, created=NOW - 3 * DAY)  # three days ago
    run(alpha, NOW - DAY - 2 * H, NOW - DAY - H, created=NOW - DAY - 2 * H)  # not settled
    day = (NOW - 3 * DAY).date()

    rolled = rollup.roll_up(NOW)

    # From the oldest job's day to the day before yesterday.
    assert rolled == 2 and rollup.rolled_through() == (NOW - 2 * DAY).date()
    (three_days_ago,) = UsageDay.objects.filter(day=day)
    assert three_days_ago.tenant_id == alpha.pk
    assert rollup.roll_up(NOW) == 0
    run(alpha, NOW - 3 * DAY, NOW - 3 * DAY + H)  # a late report of a rolled day: not counted
    assert rollup.roll_up(NOW + DAY) == 1  # yesterday, settled a day later
    report = reports.usage([alpha], rollup.midnight(day), rollup.midnight(day + DAY), NOW + DAY)
    assert report.tenants[0].by_type[0].gpu_hours == pytest.approx(1.0)


def test_retention_keeps_a_finished_job_of_a_day_not_rolled_up(alpha):
    # At 12:00 with a one-day retention the cutoff is yesterday noon; the days rolled up end at
    # yesterday's midnight, so a job that finished yesterday morning stays until its day is.
    ended = {"tenant": alpha, "state": State.SUCCEEDED, "created": NOW - 50 * H}
    rolled_day = JobFactory(**ended, finished_at=NOW - 40 * H)
    yesterday_morning = JobFactory(**ended, finished_at=NOW - 30 * H)

    retention.prune(NOW, keep_days=0, job_days=1)

    assert list(Job.objects.values_list("pk", flat=True)) == [yesterday_morning.pk]
    assert not Job.objects.filter(pk=rolled_day.pk).exists()


def test_a_year_rolled_up_costs_the_queries_of_a_day(alpha, gamma):
    history([alpha, gamma], NOW - 365 * DAY, 2)
    rollup.roll_up(NOW)

    def queries(since) -> int:
        with CaptureQueriesContext(connection) as seen:
            reports.usage([alpha, gamma], since, NOW, NOW)
        return len(seen)

    # How far the roll-up has gone, its days and their GPU types, the jobs of the two partial
    # days at the ends (attempts, finished jobs, started jobs for each), and the rate card its
    # costs are priced at (one read, jobs.costs).
    assert queries(NOW - 365 * DAY) == queries(NOW - 40 * DAY) == 1 + 2 + 2 * 3 + 1


def rows_of(day) -> tuple[list, list]:
    """The day's rolled-up rows, as values (float sums rounded)."""
    usage = [
        (tenant, started, round(waits, 6), buckets)
        for tenant, started, waits, buckets in UsageDay.objects.filter(day=day)
        .order_by("tenant_id")
        .values_list("tenant_id", "jobs_started", "wait_seconds", "wait_buckets")
    ]
    types = [
        (tenant, gpu_type, *(round(s, 6) for s in seconds))
        for tenant, gpu_type, *seconds in GpuTypeUsageDay.objects.filter(day=day)
        .order_by("tenant_id", "gpu_type")
        .values_list(
            "tenant_id", "gpu_type", "gpu_seconds", "wasted_gpu_seconds", "preempted_gpu_seconds"
        )  # fmt: skip
    ]
    return usage, types


def test_quiet_stretches_are_written_at_once_with_the_rows_each_day_would_get(alpha, gamma):
    history([alpha, gamma], NOW - 60 * DAY, 2)
    history([alpha], NOW - 30 * DAY, 1, seed=8)
    run(gamma, NOW - 20 * DAY, NOW - 12 * DAY)  # across eight days nothing else touches
    placed = run(alpha, NOW - 9 * DAY + 3 * H, NOW - 9 * DAY + 4 * H)
    Attempt.objects.filter(pk=placed.pk).update(started_at=None)  # placed, never started
    JobFactory(tenant=gamma, created=NOW - 5 * DAY)  # queued, never placed

    with CaptureQueriesContext(connection) as seen:
        rolled = rollup.roll_up(NOW)

    days = [NOW.date() - n * DAY for n in range(61, 1, -1)]
    assert rolled == len(days) and rollup.rolled_days() == (days[0], days[-1])
    assert len(seen) < 4 * len(days)  # about seven a busy day, fewer than three a quiet one
    written = {day: rows_of(day) for day in days}
    assert written == {day: rolled_again(day) for day in days}


def rolled_again(day) -> tuple[list, list]:
    """The day's rows as the roll-up writes them from the jobs now."""
    UsageDay.objects.filter(day=day).delete()
    GpuTypeUsageDay.objects.filter(day=day).delete()
    rollup.roll_day(list(Tenant.objects.values_list("pk", flat=True)), day, NOW)
    return rows_of(day)


def lost_three_days_ago(tenant, *, start_seen: bool) -> Attempt:
    """A job whose only attempt ran two hours and was declared lost three days ago, then
    queued for a retry; with ``start_seen`` False its start was never reported."""
    lost_at = NOW - 3 * DAY
    attempt = run(tenant, lost_at - 2 * H, lost_at, outcome=Attempt.Outcome.LOST,
                  wasted=2 * 3600, created=lost_at - 3 * H)  # fmt: skip
    started = lost_at - 2 * H if start_seen else None
    Attempt.objects.filter(pk=attempt.pk).update(started_at=started)
    Job.objects.filter(pk=attempt.job_id).update(
        state=State.QUEUED, retries_used=1, started_at=started
    )
    return attempt


@pytest.mark.parametrize("start_seen", [True, False])
def test_a_late_success_amends_the_rolled_up_day_it_reaches_back_to(alpha, start_seen):
    attempt = lost_three_days_ago(alpha, start_seen=start_seen)
    rollup.roll_up(NOW)
    day = (NOW - 3 * DAY).date()
    before = rows_of(day)

    actions.late_success(attempt.pk, NOW)

    amended = rows_of(day)
    assert amended != before  # the waste went (the start was seen) or the start came in
    assert amended == rolled_again(day)
    assert Job.objects.get(pk=attempt.job_id).state == State.SUCCEEDED


def test_a_late_success_of_a_day_not_rolled_up_leaves_the_roll_up_alone(alpha):
    attempt = lost_three_days_ago(alpha, start_seen=True)

    actions.late_success(attempt.pk, NOW)

    assert not UsageDay.objects.exists()
    rollup.roll_up(NOW)  # the day is written from the jobs, which hold the success
    wasted = GpuTypeUsageDay.objects.get(day=(NOW - 3 * DAY).date()).wasted_gpu_seconds
    assert wasted == pytest.approx(0.0)

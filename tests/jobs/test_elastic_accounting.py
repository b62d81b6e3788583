"""An elastic gang's attempt is counted at the size it started with (`Attempt.workers`), not at
its job's: the usage report, the daily roll-up, the month's GPU-hour budget, right-sizing, the
job's efficiency, waste and /metrics. The job asks for 4 workers of 4 GPUs and 4 cores each and
may start with 2 (`min_workers`); its attempt started with 2: 8 GPUs and 8 cores, not 16."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from clusters.models import Allocation
from jobs import actions, budgets, efficiency, rollup
from jobs.models import Attempt, Family, GpuTypeUsageDay
from jobs.states import State
from tests.factories import AttemptFactory, JobFactory, NodeFactory
from tests.jobs.test_usage_report import LATER, SINCE, H, gpu_rows, report_of

pytestmark = pytest.mark.django_db
OK = Attempt.Outcome.SUCCEEDED


def started_with_two(
    start=None, end=None, *, tenant=None, cluster=None, outcome=OK, **attempt
) -> Attempt:
    """An attempt of a new 4-worker training job that may start with 2, placed with 2 on one
    8-GPU node (of `cluster`), holding their rows as the commit writes them. It ran from
    ``start`` to ``end``; start None: placed, not started; end None: it still runs."""
    job = JobFactory(
        **({"tenant": tenant} if tenant else {}), family=Family.TRAINING, workers=4,
        min_workers=2, gpus=4, cpu_milli=4000, memory_mb=16_000,
        state=State.SCHEDULED if start is None else State.RUNNING if end is None else OK,
    )  # fmt: skip
    live = end is None
    attempt = AttemptFactory(
        job=job, workers=2, scheduled_at=start or timezone.now(), started_at=start,
        worker_ran_at=start, ended_at=end, outcome="" if live else outcome, gpu_type="A100",
        **({"cluster": cluster} if cluster else {}), **attempt,
    )  # fmt: skip
    node = NodeFactory(cluster=attempt.cluster, name=f"{attempt.cluster.name}-0", gpu_count=8)
    for worker in range(2):
        for slot, gpu in enumerate(gpu_rows(job, worker)):
            Allocation.objects.create(
                attempt=attempt, worker=worker, slot=slot, node=node, **gpu,
                cpu_milli=job.cpu_milli if slot == 0 else 0,
                memory_mb=job.memory_mb if slot == 0 else 0, active=live,
                released=None if live else end,
            )  # fmt: skip
    return attempt


def measured(attempt: Attempt, **use) -> Attempt:
    Attempt.objects.filter(pk=attempt.pk).update(**use)
    attempt.refresh_from_db()
    return attempt


def test_the_usage_report_counts_the_gpu_and_core_hours_of_the_workers_it_started_with(alpha):
    started_with_two(SINCE + H, SINCE + 2 * H, tenant=alpha)

    usage = report_of(alpha).total()

    # 2 workers x 4 GPUs (x 4 cores) x 1 h; its job's 4 workers would say 16.
    assert (usage.gpu_hours, usage.cpu_core_hours) == (8.0, 8.0)


def test_right_sizing_sets_its_use_against_the_workers_it_started_with(alpha):
    ran = started_with_two(SINCE + H, SINCE + 2 * H, tenant=alpha)
    measured(ran, cpu_seconds=4 * 3600, memory_peak_mb=4000, gpu_busy_seconds=4 * 3600)

    usage = report_of(alpha).total()

    assert (usage.cpu_core_hours_measured, usage.gpu_hours_measured) == (8.0, 8.0)
    assert usage.gpu_efficiency == pytest.approx(0.5)
    # 12,000 MiB beyond the peak, of 2 workers, for an hour.
    assert usage.memory_gib_hours_unused == pytest.approx(12_000 * 2 / 1024)


def test_the_daily_roll_up_keeps_the_gpu_hours_of_the_workers_it_started_with(alpha):
    started_with_two(SINCE + H, SINCE + 2 * H, tenant=alpha)

    rollup.roll_day([alpha.pk], SINCE.date(), LATER)

    day = GpuTypeUsageDay.objects.get(tenant=alpha, day=SINCE.date(), gpu_type="A100")
    assert (day.gpu_seconds, day.cpu_core_seconds) == (8 * 3600, 8 * 3600)


def test_the_months_gpu_budget_is_spent_by_the_workers_it_started_with(alpha):
    now = datetime(2025, 3, 15, 12, tzinfo=UTC)
    started_with_two(now - 2 * H, now - H, tenant=alpha)

    assert budgets.spent_gpu_seconds([alpha.pk], now) == {alpha.pk: 8 * 3600}


def test_a_preempted_attempt_wastes_the_gpus_of_the_workers_it_started_with(alpha):
    ran = started_with_two(SINCE, SINCE + H, tenant=alpha, outcome=Attempt.Outcome.PREEMPTED)

    assert actions.wasted_gpu_seconds(ran, ran.ended_at) == 8 * 3600


def test_its_efficiency_asks_for_the_gpus_and_cores_of_the_workers_it_started_with(alpha):
    ran = started_with_two(SINCE, SINCE + H, tenant=alpha)
    measured(ran, cpu_seconds=4 * 3600, memory_peak_mb=4000, gpu_busy_seconds=4 * 3600)

    used = efficiency.of_attempt(ran, ran.job, LATER)

    assert (used.gpus_asked, used.cores_asked) == (8.0, 8.0)
    assert used.gpu_text() == "4.0 of 8 GPUs busy (50 %)"
    assert used.cpu_text() == "4.0 of 8 cores (50 %)"


def test_metrics_count_the_idle_gpus_a_running_attempt_holds_not_its_jobs_ask(scrape):
    now = timezone.now()
    started_with_two(now - H, gpu_idle_since=now - timedelta(minutes=20))

    assert "mlsched_gpus_held_idle 8" in scrape()


def test_metrics_set_the_gpu_time_busy_against_the_workers_it_started_with(scrape):
    now = timezone.now()
    ran = started_with_two(now - 2 * H, now - H)
    measured(ran, cpu_seconds=8 * 3600, memory_peak_mb=16_000, gpu_busy_seconds=4 * 3600)

    lines = scrape()

    assert "mlsched_gpu_efficiency 0.5" in lines
    assert "mlsched_cpu_efficiency 1" in lines

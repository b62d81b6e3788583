"""Right-sizing in the usage report: of the attempts that ended in the window with their use
measured, over their whole runs, the core-hours asked for and kept busy, the CPU efficiency and
the memory asked for beyond the peak; through the API, the CSV and the CLI's table."""

import csv
import io

import pytest

from jobs import platform_views, reports
from jobs.models import Attempt
from tests.jobs.test_usage_report import LATER, SINCE, UNTIL, WINDOW, H, client_for, report_of, run

pytestmark = pytest.mark.django_db


def measured(attempt, cpu_seconds, memory_peak_mb, **more):
    Attempt.objects.filter(pk=attempt.pk).update(
        cpu_seconds=cpu_seconds, memory_peak_mb=memory_peak_mb, **more
    )
    return attempt


def test_the_measured_attempts_ended_in_the_window_say_how_well_they_used_their_request(alpha):
    # 2 workers x 4 cores x 2 h asked: 16 core-hours, 4 kept busy; 16,000 MiB per worker asked,
    # 4,000 reached: 12,000 MiB x 2 workers x 2 h beyond the peak.
    both = run(alpha, SINCE + H, SINCE + 3 * H, workers=2, cpu_milli=4000, memory_mb=16_000)
    measured(both, cpu_seconds=4 * 3600, memory_peak_mb=4000)
    # Past its request (no cgroup held it): its memory counts nothing unused.
    over = run(alpha, SINCE + H, SINCE + 2 * H, cpu_milli=1000, memory_mb=1024)
    measured(over, cpu_seconds=3600, memory_peak_mb=2048)

    usage = report_of(alpha).total()

    assert usage.cpu_core_hours_measured == pytest.approx(17.0)
    assert usage.cpu_core_hours_busy == pytest.approx(5.0)
    assert usage.cpu_efficiency == pytest.approx(5 / 17)
    assert usage.memory_gib_hours_unused == pytest.approx(12_000 * 2 * 2 / 1024)


def test_a_run_counts_from_its_first_worker_whole_even_before_the_window(alpha):
    # Its first worker ran an hour before the window, and before the gang started.
    attempt = run(alpha, SINCE + H, SINCE + 2 * H, cpu_milli=2000)
    measured(attempt, cpu_seconds=3600, memory_peak_mb=1, worker_ran_at=SINCE - H)

    usage = report_of(alpha).total()

    assert usage.cpu_core_hours_measured == pytest.approx(2 * 3)  # 3 h of 2 cores
    assert usage.cpu_efficiency == pytest.approx(1 / 6)


def test_attempts_not_measured_running_or_ended_elsewhere_count_nothing(alpha):
    run(alpha, SINCE + H, SINCE + 2 * H)  # not measured
    measured(run(alpha, SINCE + H, None), cpu_seconds=100, memory_peak_mb=10)  # running
    measured(run(alpha, SINCE - 3 * H, SINCE - H), cpu_seconds=100, memory_peak_mb=10)  # before
    measured(run(alpha, UNTIL + H, UNTIL + 2 * H), cpu_seconds=100, memory_peak_mb=10)  # after

    usage = report_of(alpha, now=LATER).total()

    assert (usage.cpu_core_hours_measured, usage.cpu_core_hours_busy) == (0, 0)
    assert usage.memory_gib_hours_unused == 0
    assert usage.cpu_efficiency is None
    assert usage.cpu_core_hours > 0  # the same attempts' use is counted as ever


def test_the_api_and_the_csv_carry_right_sizing_per_gpu_type(client, alpha, alice):
    a100 = run(alpha, SINCE + H, SINCE + 2 * H, cpu_milli=4000, memory_mb=2048)
    measured(a100, cpu_seconds=2 * 3600, memory_peak_mb=1024)

    answer = client_for(alice).get("/api/v1/usage/", WINDOW).json()
    client.force_login(alice)
    rows = list(csv.reader(io.StringIO(client.get("/usage.csv", WINDOW).content.decode())))

    (team,) = answer["tenants"]
    assert team["cpu_efficiency"] == 0.5
    assert team["by_gpu_type"][0]["gpu_type"] == "A100"
    assert team["by_gpu_type"][0]["memory_gib_hours_unused"] == 1.0
    columns = rows[0]
    total = dict(zip(columns, rows[1], strict=True))
    assert (total["cpu_core_hours_measured"], total["cpu_core_hours_busy"]) == ("4.00", "2.00")
    assert (total["cpu_efficiency"], total["memory_gib_hours_unused"]) == ("0.50", "1.00")
    assert columns == platform_views.csv_header(reports.COLUMNS)


def test_the_attempts_that_succeeded_say_how_much_of_their_runtime_limits_they_ran(alpha):
    run(alpha, SINCE + H, SINCE + 3 * H, max_runtime_s=8 * 3600)  # 2 h of 8
    run(alpha, SINCE + H, SINCE + 2 * H, max_runtime_s=2 * 3600)  # 1 h of 2
    # Not counted: ended otherwise, or still running.
    run(alpha, SINCE + H, SINCE + 2 * H, outcome=Attempt.Outcome.USER_ERROR, max_runtime_s=3600)
    run(alpha, SINCE + H, None, max_runtime_s=3600)

    usage = report_of(alpha).total()

    assert (usage.succeeded_run_hours, usage.succeeded_limit_hours) == (3.0, 10.0)
    assert usage.runtime_efficiency == pytest.approx(0.3)


def test_the_attempts_whose_gpu_time_was_measured_say_how_busy_their_gpus_were(alpha):
    # 2 workers x 2 GPUs for 2 h asked: 8 GPU-hours, 6 busy.
    busy = run(alpha, SINCE + H, SINCE + 3 * H, workers=2, gpus=2)
    measured(busy, cpu_seconds=1.0, memory_peak_mb=1, gpu_busy_seconds=6 * 3600)
    run(alpha, SINCE + H, SINCE + 2 * H, gpus=8)  # not measured: not counted

    usage = report_of(alpha).total()

    assert (usage.gpu_hours_measured, usage.gpu_hours_busy) == (8.0, 6.0)
    assert usage.gpu_efficiency == pytest.approx(0.75)

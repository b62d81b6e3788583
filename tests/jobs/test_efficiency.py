"""An attempt's use against its job's request (jobs.efficiency): pure, no database."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from jobs import efficiency

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)


def attempt(cpu=None, peak=None, ran=None, started=None, ended=None, gpu=None, idle=None,
            workers=1):  # fmt: skip
    return SimpleNamespace(
        cpu_seconds=cpu, memory_peak_mb=peak, worker_ran_at=ran, started_at=started,
        ended_at=ended, gpu_busy_seconds=gpu, gpu_idle_since=idle, workers=workers,
    )  # fmt: skip


def job(cpu_milli=1000, workers=1, memory_mb=4096, max_runtime_s=86_400, gpus=0, gpu_milli=0,
        idle_limit_min=None):  # fmt: skip
    return SimpleNamespace(
        cpu_milli=cpu_milli, workers=workers, memory_mb=memory_mb, max_runtime_s=max_runtime_s,
        gpus=gpus, gpu_milli=gpu_milli, tenant=SimpleNamespace(gpu_idle_limit_min=idle_limit_min),
    )  # fmt: skip


def test_the_cpu_share_is_of_every_workers_cores_over_the_run():
    ran = attempt(cpu=300.0, ran=NOON, ended=NOON + timedelta(seconds=100), workers=2)

    used = efficiency.of_attempt(ran, job(cpu_milli=2000, workers=2), NOON)

    assert used.cores_used == pytest.approx(3.0)
    assert used.cpu_efficiency == pytest.approx(0.75)
    assert used.cpu_text() == "3.0 of 4 cores (75 %)"


def test_one_core_asked_is_said_as_one_core():
    ran = attempt(cpu=50.0, ran=NOON, ended=NOON + timedelta(seconds=100))

    assert efficiency.of_attempt(ran, job(cpu_milli=1000), NOON).cpu_text() == (
        "0.5 of 1 core (50 %)"
    )


def test_a_running_attempts_run_counts_to_now_from_its_first_worker():
    running = attempt(cpu=30.0, ran=NOON, started=NOON + timedelta(seconds=50))

    used = efficiency.of_attempt(running, job(), NOON + timedelta(seconds=60))

    assert used.document()["cpu_efficiency"] == 0.5


def test_the_memory_share_is_of_one_workers_request_in_the_requests_unit():
    assert efficiency.of_attempt(attempt(peak=1024), job(memory_mb=4096), NOON).memory_text() == (
        "1.0 of 4.0 GiB (25 %)"
    )
    assert efficiency.of_attempt(attempt(peak=96), job(memory_mb=512), NOON).memory_text() == (
        "96 of 512 MiB (19 %)"
    )


def test_a_job_without_cgroups_may_use_more_cpu_than_it_asked_and_is_told_so():
    ran = attempt(cpu=200.0, ran=NOON, ended=NOON + timedelta(seconds=100))

    assert efficiency.of_attempt(ran, job(), NOON).document()["cpu_efficiency"] == 2.0


def test_nothing_is_said_of_what_was_not_measured():
    placed = efficiency.of_attempt(attempt(), job(), NOON)
    measured_but_not_started = efficiency.of_attempt(attempt(cpu=1.0, peak=8), job(), NOON)

    assert placed.document() == {
        "cpu_seconds": None, "memory_peak_mb": None, "gpu_busy_seconds": None,
        "cpu_efficiency": None, "memory_efficiency": None, "runtime_efficiency": None,
        "gpu_efficiency": None, "gpu_idle_since": None, "cpu_used": "", "memory_used": "",
        "runtime_used": "", "gpu_used": "",
    }  # fmt: skip
    assert measured_but_not_started.cpu_text() == ""
    assert measured_but_not_started.memory_efficiency == pytest.approx(8 / 4096)


def test_the_time_share_is_of_the_runtime_limit():
    ran = attempt(ran=NOON, ended=NOON + timedelta(hours=1, minutes=30))

    used = efficiency.of_attempt(ran, job(max_runtime_s=86_400), NOON)

    assert used.document()["runtime_efficiency"] == pytest.approx(1.5 / 24, abs=0.001)
    assert used.runtime_text() == "1.5 h of 24 h (6 %)"


@pytest.mark.parametrize(
    "seconds, said",
    [(40, "40 s"), (89, "89 s"), (720, "12 min"), (5399, "90 min"), (5400, "1.5 h"),
     (47 * 3600, "47 h"), (3 * 86_400, "3 d")],
)  # fmt: skip
def test_a_span_is_said_in_the_unit_people_read_it_in(seconds, said):
    assert efficiency.span(seconds) == said


def test_the_gpu_share_is_of_every_workers_gpus_over_the_run():
    ran = attempt(gpu=3 * 3600.0, ran=NOON, ended=NOON + timedelta(hours=1), workers=2)

    used = efficiency.of_attempt(ran, job(workers=2, gpus=2), NOON)

    assert used.gpu_efficiency == pytest.approx(0.75)
    assert used.gpu_text() == "3.0 of 4 GPUs busy (75 %)"
    assert efficiency.of_attempt(attempt(gpu=5.0, ran=NOON), job(), NOON).gpu_text() == ""


def test_a_running_attempts_gpus_idle_for_ten_minutes_or_more_are_said_to_be():
    def said(idle_min, ended=None):
        ran = attempt(gpu=1800.0, ran=NOON, ended=ended, idle=NOON + timedelta(minutes=30))
        now = NOON + timedelta(minutes=30 + idle_min)
        return efficiency.of_attempt(ran, job(gpus=1), now).gpu_text()

    assert said(45) == "0.4 of 1 GPU busy (40 %); idle for the last 45 min"
    assert said(5) == "0.9 of 1 GPU busy (86 %)"  # loading data, saving a checkpoint
    ended = NOON + timedelta(hours=1)
    assert "idle" not in said(45, ended=ended)  # over: nothing held


def test_under_a_teams_idle_limit_idle_gpus_are_said_from_half_of_it_with_the_limit():
    def said(idle_min, limit_min):
        ran = attempt(gpu=1800.0, ran=NOON, idle=NOON + timedelta(minutes=30))
        now = NOON + timedelta(minutes=30 + idle_min)
        return efficiency.of_attempt(ran, job(gpus=1, idle_limit_min=limit_min), now).gpu_text()

    assert said(6, 10).endswith("; idle for the last 6 min (stopped at 10 min)")
    assert said(4, 10) == "0.9 of 1 GPU busy (88 %)"
    assert said(12, 120).endswith("; idle for the last 12 min (stopped at 2 h)")
    assert said(9, 120) == "0.8 of 1 GPU busy (77 %)"  # ten minutes, as without a limit

"""What attempts use, as their agents report it: kept per attempt (the workers' CPU seconds
together, the largest memory peak), written only when it moved, never moving back; and end to
end, a real worker's use measured by the local backend reaches the job's document and page."""

import sys
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from clusters.agent.runner import Agent
from clusters.backends import base, usage
from jobs import cycle
from jobs.models import Attempt
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.clusters.test_checkpoints import InProcessControlPlane, stepped_until
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


def used(workers, *usages):
    """The report's workers, each with its (cpu_seconds, memory_peak_mb)."""
    return [
        {**w, "cpu_seconds": cpu, "memory_peak_mb": peak}
        for w, (cpu, peak) in zip(workers, usages, strict=True)
    ]


def test_an_attempt_keeps_its_workers_cpu_time_together_and_their_largest_memory_peak(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)

    post(agent, "east", "heartbeat", {"workers": used(running, (10.5, 100), (20.0, 300))})

    attempt.refresh_from_db()
    assert attempt.cpu_seconds == pytest.approx(30.5)
    assert attempt.memory_peak_mb == 300


def test_an_attempt_keeps_its_workers_gpu_time_together(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)
    busy = [{**w, "gpu_busy_seconds": s} for w, s in zip(running, (100.0, 250.5), strict=True)]

    post(agent, "east", "heartbeat", {"workers": busy})

    attempt.refresh_from_db()
    assert attempt.gpu_busy_seconds == pytest.approx(350.5)
    assert attempt.cpu_seconds is None  # not reported: not measured


def test_an_attempts_gpus_are_idle_since_the_last_of_its_workers_went_idle(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)
    now = time.time()

    def beat(*idle_since):
        workers = [{**w, "gpu_busy_seconds": 10.0, "gpu_idle_since": s}
                   for w, s in zip(running, idle_since, strict=True)]  # fmt: skip
        post(agent, "east", "heartbeat", {"workers": workers})
        attempt.refresh_from_db()
        return attempt.gpu_idle_since

    assert beat(now - 600, None) is None  # one worker's GPUs are busy
    assert beat(now - 600, now - 300).timestamp() == pytest.approx(now - 300)
    assert beat(None, now - 300) is None


def test_gpus_not_read_in_a_beat_are_not_idle(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)
    idle = [{**w, "gpu_busy_seconds": 10.0, "gpu_idle_since": time.time() - 900} for w in running]
    post(agent, "east", "heartbeat", {"workers": idle})
    assert Attempt.objects.get(pk=attempt.pk).gpu_idle_since is not None

    # One rank's GPUs are not read now (its node's exporter is gone): it may be busy.
    post(agent, "east", "heartbeat", {"workers": [idle[0], running[1]]})
    assert Attempt.objects.get(pk=attempt.pk).gpu_idle_since is None

    post(agent, "east", "heartbeat", {"workers": idle})
    post(agent, "east", "heartbeat", {"workers": running})  # none read
    attempt.refresh_from_db()
    assert (attempt.gpu_idle_since, attempt.gpu_busy_seconds) == (None, 20.0)


@pytest.mark.parametrize(
    "behind_s, sent_at, moved",
    [
        (1200, "agent's", True),  # 20 minutes behind: its idle times move onto the database's
        (3, "agent's", False),  # a few seconds off: taken as right, written as reported
        (1200, "yesterday", False),  # malformed: left out, the beat still taken
        (1200, None, False),  # an older agent says no time
    ],
)
def test_idle_times_on_an_agents_clock_are_moved_onto_the_databases(
    agent, gang, behind_s, sent_at, moved
):
    attempt = gang.attempts.get()
    its_now = time.time() - behind_s
    idle = [{**w, "gpu_busy_seconds": 10.0, "gpu_idle_since": its_now - 300}
            for w in report(attempt, base.RUNNING, base.RUNNING)]  # fmt: skip
    body = {"workers": idle}
    if sent_at is not None:
        body["sent_at"] = its_now if sent_at == "agent's" else sent_at

    assert post(agent, "east", "heartbeat", body).status_code == 200

    attempt.refresh_from_db()
    expected = time.time() - 300 if moved else its_now - 300
    assert attempt.gpu_idle_since.timestamp() == pytest.approx(expected, abs=6)


END_OF_TIME = 253_402_300_799  # 9999-12-31 23:59:59, the last second a date can hold


@pytest.mark.parametrize(
    ("sent_at", "idle_since"),
    [(1, END_OF_TIME), (END_OF_TIME, 1_700_000_000)],
    ids=["clock-1970", "clock-9999"],
)
def test_an_idle_time_the_agents_clock_moves_past_any_date_is_left_out_and_the_beat_stands(
    agent, gang, sent_at, idle_since
):
    # Each in range; moved by how far the agent's clock is off, the idle time is no date.
    attempt = gang.attempts.get()
    idle = [{**w, "gpu_busy_seconds": 10.0, "gpu_idle_since": idle_since}
            for w in report(attempt, base.RUNNING, base.RUNNING)]  # fmt: skip

    response = post(agent, "east", "heartbeat", {"workers": idle, "sent_at": sent_at})

    assert response.status_code == 200
    attempt.refresh_from_db()
    assert (attempt.gpu_idle_since, attempt.gpu_busy_seconds) == (None, 20.0)


def test_what_was_counted_stays_counted_when_a_later_report_says_less(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)
    post(agent, "east", "heartbeat", {"workers": used(running, (10.0, 100), (20.0, 300))})

    # One worker's sample is missing from this beat: the sum would fall, the peak too.
    post(agent, "east", "heartbeat", {"workers": used(running, (12.0, 120), (None, None))})

    attempt.refresh_from_db()
    assert attempt.cpu_seconds == pytest.approx(30.0)
    assert attempt.memory_peak_mb == 300


def gpu_beat(agent, running, seconds, epoch=None):
    """A beat of the gang's two workers, each with its GPU-seconds, in an agent's run of
    counts (`epoch`; None: the report names none, as an older agent's)."""
    busy = [{**w, "gpu_busy_seconds": s} for w, s in zip(running, seconds, strict=True)]
    run = {"usage_epoch": epoch} if epoch else {}
    assert post(agent, "east", "heartbeat", {"workers": busy} | run).status_code == 200


def test_a_restarted_agent_counting_gpu_time_from_0_counts_on_top_of_what_was_counted(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)

    gpu_beat(agent, running, (60.0, 40.0), epoch="first-run")
    gpu_beat(agent, running, (3.0, 2.0), epoch="restarted")  # counting again from 0
    attempt.refresh_from_db()
    assert attempt.gpu_busy_seconds == pytest.approx(105.0)
    gpu_beat(agent, running, (30.0, 20.0), epoch="restarted")
    attempt.refresh_from_db()
    assert attempt.gpu_busy_seconds == pytest.approx(150.0)


def test_a_new_run_of_counts_that_counts_on_is_not_counted_twice(agent, gang):
    # A local agent whose counts outlive it, reporting a new run for the first time.
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)

    gpu_beat(agent, running, (60.0, 40.0))
    gpu_beat(agent, running, (70.0, 45.0), epoch="kept-counts")
    attempt.refresh_from_db()
    assert attempt.gpu_busy_seconds == pytest.approx(115.0)


def test_without_a_run_of_counts_a_lower_count_leaves_what_was_counted(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)

    gpu_beat(agent, running, (60.0, 40.0))
    gpu_beat(agent, running, (3.0, 2.0))
    attempt.refresh_from_db()
    assert attempt.gpu_busy_seconds == pytest.approx(100.0)


@pytest.mark.parametrize("epoch", ["", "x" * 65, "no spaces", 7, ["a"]])
def test_a_malformed_run_of_counts_is_left_out_and_the_report_stands(agent, gang, epoch):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)
    gpu_beat(agent, running, (60.0, 40.0), epoch="first-run")
    busy = [{**w, "gpu_busy_seconds": 1.0} for w in running]

    answer = post(agent, "east", "heartbeat", {"workers": busy, "usage_epoch": epoch})

    assert answer.status_code == 200
    attempt.refresh_from_db()
    assert (attempt.gpu_busy_seconds, attempt.gpu_epoch) == (pytest.approx(100.0), "first-run")


def test_usage_of_many_attempts_is_one_write_and_an_unchanged_report_none(agent, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    JobFactory.create_batch(6, gpus=1)
    cycle.run_cycle()
    attempts = Attempt.objects.filter(cluster=east)
    running = [w for a in attempts for w in report(a, base.RUNNING)]
    post(agent, "east", "heartbeat", {"workers": running})  # the jobs start: writes of their own
    sampled = [{**w, "cpu_seconds": 5.0, "memory_peak_mb": 64} for w in running]

    with CaptureQueriesContext(connection) as first:
        post(agent, "east", "heartbeat", {"workers": sampled})
    with CaptureQueriesContext(connection) as again:
        post(agent, "east", "heartbeat", {"workers": sampled})

    def writes(queries):
        return [q["sql"] for q in queries if q["sql"].startswith('UPDATE "jobs_attempt"')]

    assert len(writes(first)) == 1
    assert writes(again) == []
    assert set(attempts.values_list("cpu_seconds", "memory_peak_mb")) == {(5.0, 64)}


@pytest.mark.parametrize(
    "cpu, peak", [(-1, 10), (1e30, 10), ("lots", 10), (1.0, -5), (1.0, 2**40), (1.0, "big")]
)
def test_a_usage_figure_that_cannot_be_is_left_out_and_the_report_stands(agent, gang, cpu, peak):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)

    response = post(agent, "east", "heartbeat", {"workers": used(running, (cpu, peak), (2.0, 8))})

    assert response.status_code == 200
    gang.refresh_from_db()
    attempt.refresh_from_db()
    assert gang.state == State.RUNNING  # the worker's report counted
    good_cpu = cpu if isinstance(cpu, float) and 0 <= cpu < 1e20 else 0.0
    good_peak = peak if isinstance(peak, int) and 0 <= peak < 2**31 else 0
    assert attempt.cpu_seconds == pytest.approx(good_cpu + 2.0)
    assert attempt.memory_peak_mb == max(good_peak, 8)


# Spins for a CPU second while holding 200 MiB, then ends.
BUSY = """
import time
held = bytearray(200 << 20)
held[::4096] = b"x" * len(held[::4096])
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
"""


def test_a_jobs_document_and_page_say_what_its_attempt_used_of_what_it_asked(
    east, backend, alpha, alice, monkeypatch
):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(
        owner=alice, tenant=alpha, cpu_milli=2000, memory_mb=1024,
        command=[sys.executable, "-c", BUSY],
    )  # fmt: skip
    cycle.run_cycle()
    agent = Agent(InProcessControlPlane(east), backend)
    stepped_until(agent, lambda: Attempt.objects.get(job=job).ended_at, timeout=30)
    attempt = Attempt.objects.get(job=job)
    assert attempt.outcome == Attempt.Outcome.SUCCEEDED
    assert 1.0 <= attempt.cpu_seconds < 3.0
    assert 200 <= attempt.memory_peak_mb < 400
    # A known run, so the shares can be checked: 2 cores for 10 s.
    Attempt.objects.filter(pk=attempt.pk).update(
        worker_ran_at=attempt.ended_at - timedelta(seconds=10)
    )
    api = APIClient()
    api.force_authenticate(alice)

    document = api.get(f"/api/v1/jobs/{job.pk}/").json()["attempts"][0]

    assert document["cpu_seconds"] == pytest.approx(attempt.cpu_seconds)
    assert document["memory_peak_mb"] == attempt.memory_peak_mb
    assert document["cpu_efficiency"] == pytest.approx(attempt.cpu_seconds / 20, abs=0.001)
    assert document["memory_efficiency"] == pytest.approx(attempt.memory_peak_mb / 1024, abs=0.001)
    api.force_login(alice)
    page = api.get(f"/jobs/{job.pk}/").content.decode()
    share = attempt.memory_peak_mb / 1024
    assert document["memory_used"] == f"{share:.1f} of 1.0 GiB ({share * 100:.0f} %)"
    assert document["cpu_used"].startswith(f"{attempt.cpu_seconds / 10:.1f} of 2 cores (")
    assert document["cpu_used"] in page and document["memory_used"] in page

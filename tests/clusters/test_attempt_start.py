"""When an attempt started: when its last rank's command started, as its agent reports it, on
the database's clock; not when a beat first shows the gang running. An attempt that ends
between two beats has run all the same: its run counts as used, not as waiting to start."""

import sys
import time
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from clusters.backends.base import EXITED, RUNNING
from jobs.models import Attempt, JobEvent
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.clusters.test_local_backend import ended, spec

pytestmark = pytest.mark.django_db
A_MINUTE = timedelta(minutes=1)


def beat(agent, workers, starts, **payload):
    """A heartbeat of these workers, each with its start (seconds since the epoch, or None)."""
    workers = [w | {"started_at": at} for w, at in zip(workers, starts, strict=True)]
    response = post(agent, "east", "heartbeat", {"workers": workers, **payload})
    assert response.status_code == 200, response.content
    return response


@pytest.fixture
def placed(gang):
    """The gang's attempt, placed a minute ago."""
    gang.attempts.update(scheduled_at=F("scheduled_at") - A_MINUTE)
    JobEvent.objects.filter(job=gang).update(time=F("time") - A_MINUTE)
    return gang.attempts.get()


def test_a_gang_starts_when_its_last_rank_started_not_when_a_beat_saw_it(agent, placed):
    first = timezone.now().timestamp() - 30

    beat(agent, report(placed, RUNNING, RUNNING), [first, first + 2])

    placed.refresh_from_db()
    assert placed.started_at.timestamp() == pytest.approx(first + 2, abs=0.01)
    running = JobEvent.objects.get(job=placed.job, to_state=State.RUNNING)
    assert running.time == placed.started_at


def test_an_attempt_that_ended_between_two_beats_started_and_its_run_is_used(agent, placed):
    began = timezone.now().timestamp() - 20

    beat(agent, report(placed, EXITED, EXITED, codes=[0, 0]), [began - 1, began])

    placed.refresh_from_db()
    assert placed.outcome == Attempt.Outcome.SUCCEEDED
    assert placed.started_at.timestamp() == pytest.approx(began, abs=0.01)
    # Waiting to start: the 40 s from its placement, on its 16 GPUs; not the whole minute.
    waited = (placed.started_at - placed.scheduled_at).total_seconds()
    assert placed.wasted_gpu_seconds == pytest.approx(16 * waited, abs=0.5)
    assert waited == pytest.approx(40, abs=1)
    states = list(JobEvent.objects.filter(job=placed.job).values_list("to_state", flat=True))
    assert states[-2:] == [State.RUNNING, State.SUCCEEDED]


def test_a_quick_failure_has_run_too(agent, placed):
    began = timezone.now().timestamp() - 5

    beat(agent, report(placed, EXITED, EXITED, codes=[3, 0]), [began, began])

    placed.refresh_from_db()
    assert placed.outcome == Attempt.Outcome.USER_ERROR
    assert placed.started_at.timestamp() == pytest.approx(began, abs=0.01)


def test_without_every_ranks_start_an_ended_attempt_keeps_none(agent, placed):
    beat(agent, report(placed, EXITED, EXITED, codes=[0, 0]), [timezone.now().timestamp(), None])

    placed.refresh_from_db()
    assert placed.outcome == Attempt.Outcome.SUCCEEDED
    assert placed.started_at is None


def test_without_starts_a_gang_starts_when_a_beat_shows_it_running(agent, placed):
    before = timezone.now()

    beat(agent, report(placed, RUNNING, RUNNING), [None, None])

    placed.refresh_from_db()
    assert placed.started_at >= before


def test_a_start_on_an_agent_clock_behind_is_moved_onto_the_databases(agent, placed):
    # The agent's clock is 120 s behind: its report was sent at "two minutes ago".
    now = timezone.now().timestamp()
    behind = now - 120

    beat(agent, report(placed, RUNNING, RUNNING), [behind - 10, behind - 10], sent_at=behind)

    placed.refresh_from_db()
    assert placed.started_at.timestamp() == pytest.approx(now - 10, abs=1.5)


@pytest.mark.parametrize("offset_s", [-3600, 3600])
def test_a_start_is_kept_within_the_placement_and_the_beat(agent, placed, offset_s):
    before = timezone.now()
    at = timezone.now().timestamp() + offset_s

    beat(agent, report(placed, RUNNING, RUNNING), [at, at])

    placed.refresh_from_db()
    if offset_s < 0:
        assert placed.started_at == placed.scheduled_at
    else:
        assert before <= placed.started_at <= timezone.now()


@pytest.mark.parametrize("bad", [-1, 1e300, "soon", [1]])
def test_a_start_that_is_no_time_is_left_out_and_the_report_stands(agent, placed, bad):
    before = timezone.now()

    beat(agent, report(placed, RUNNING, RUNNING), [bad, bad])

    placed.refresh_from_db()
    assert placed.started_at >= before


END_OF_TIME = 253_402_300_799  # 9999-12-31 23:59:59, the last second a date can hold


@pytest.mark.parametrize(
    ("sent_at", "started"), [(1, END_OF_TIME), (END_OF_TIME, 1)], ids=["clock-1970", "clock-9999"]
)
def test_a_start_the_agents_clock_moves_past_any_date_is_left_out_and_the_report_stands(
    agent, placed, sent_at, started
):
    # Each in range; moved by how far the agent's clock is off, the start is no date.
    before = timezone.now()

    beat(agent, report(placed, RUNNING, RUNNING), [started, started], sent_at=sent_at)

    placed.refresh_from_db()
    assert placed.started_at >= before


# What the backends report of a worker's start.


def test_the_local_backend_reports_when_a_workers_command_started(backend):
    before = time.time()
    backend.start(spec([sys.executable, "-c", "print('hi')"]))

    status = ended(backend)[0]
    assert status.phase == EXITED
    assert before <= status.started_at <= time.time()


def test_a_local_command_that_could_not_start_reports_no_start(backend):
    backend.start(spec(["/no/such/train.py"]))

    status = ended(backend)[0]
    assert status.exit_code == 127 and status.started_at is None

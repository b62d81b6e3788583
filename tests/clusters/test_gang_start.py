"""When a gang has started: once every rank has run (it runs, or it has exited 0), even if a
quick rank finished before a slow one came up. A rank's failure ends the attempt instead."""

from datetime import timedelta

import pytest

from clusters.backends.base import EXITED, PENDING, RUNNING
from jobs import janitor
from jobs.models import Attempt
from jobs.states import State
from tests.clusters.test_agent_api import post, report

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def beat(agent, attempt, *phases, codes=None) -> None:
    post(agent, "east", "heartbeat", {"workers": report(attempt, *phases, codes=codes)})


def test_a_gang_whose_quick_rank_finished_before_the_slow_one_came_up_has_started(
    agent, gang, settings
):
    attempt = gang.attempts.get()
    beat(agent, attempt, RUNNING, PENDING)  # rank 1's node pulls the image slowly
    beat(agent, attempt, EXITED, RUNNING, codes=[0, None])  # rank 0 has done its part

    later = attempt.scheduled_at + timedelta(seconds=settings.MLSCHED_START_TIMEOUT_S + 1)
    janitor.stop_unstarted(later)

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert (gang.state, attempt.started_at is not None) == (State.RUNNING, True)
    assert attempt.stop_requested_at is None  # the start timeout leaves it alone


def test_a_gang_with_a_finished_rank_and_a_pending_one_has_not_started(agent, gang):
    attempt = gang.attempts.get()

    beat(agent, attempt, EXITED, PENDING, codes=[0, None])

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert (gang.state, attempt.started_at) == (State.SCHEDULED, None)


def test_a_rank_that_failed_before_the_others_came_up_fails_the_gang_without_starting_it(
    agent, gang
):
    attempt = gang.attempts.get()

    beat(agent, attempt, EXITED, RUNNING, codes=[1, None])

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert (gang.state, attempt.started_at) == (State.SCHEDULED, None)
    assert attempt.stop_reason == Outcome.USER_ERROR

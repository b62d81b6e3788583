"""The scheduler's turn when part of it fails or the decision meets the platform's limits."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import actions, cycle, scheduler
from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


def a_cycle_that_fails(monkeypatch):
    """A cycle that raises every turn, as one job whose data the core trips on would make it."""

    def place(snapshot):
        raise ValueError("the core could not decide")

    monkeypatch.setattr(cycle, "place", place)


def test_a_failing_cycle_still_lets_the_janitor_stop_a_gang_that_never_came_up(
    monkeypatch, settings
):
    NodeFactory(gpu_count=8)
    gang = JobFactory(family=Family.TRAINING, workers=2, gpus=4)
    cycle.run_cycle()
    attempt = gang.attempts.get()
    long_ago = timezone.now() - timedelta(seconds=settings.MLSCHED_START_TIMEOUT_S + 60)
    Attempt.objects.filter(pk=attempt.pk).update(scheduled_at=long_ago)
    a_cycle_that_fails(monkeypatch)

    with pytest.raises(ValueError):
        scheduler.tick()

    attempt.refresh_from_db()
    assert attempt.stop_reason == Attempt.Outcome.LOST
    assert attempt.stop_requested_at is not None


def test_a_job_waiting_out_its_retry_backoff_says_so_until_when():
    NodeFactory(gpu_count=8)
    job = JobFactory(family=Family.TRAINING, gpus=4, max_retries=2)
    cycle.run_cycle()
    attempt = job.attempts.get()
    actions.end_attempt(attempt.pk, Attempt.Outcome.INFRA_ERROR, reason="node lost")

    cycle.run_cycle()

    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.pending_reason == "retry_backoff"
    assert job.pending_message != ""
    assert job.estimated_start == job.not_before

"""An elastic gang that started smaller grows through real cycles: once it has run long enough
and room is free that no queued job waits for, its attempt is asked to stop with the grace
period for a checkpoint (stop cause ``grow``), and its job, requeued with a claim on the room,
starts again with more workers, without using a retry."""

import time

import pytest

from jobs import actions, cycle
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory

DAY = 86_400


def started_gang(nodes=3, workers=4, **kw):
    """A gang of ``workers`` 8-GPU workers (2 at least) placed on ``nodes`` free nodes and
    running; its cluster."""
    cluster = ClusterFactory()
    NodeFactory.create_batch(nodes, cluster=cluster)
    kw.setdefault("max_runtime_s", DAY)
    gang = JobFactory(family=Family.TRAINING, workers=workers, min_workers=2, gpus=8, **kw)
    assert cycle.run_cycle().placed == [gang.pk]
    attempt = Attempt.objects.get(job=gang)
    actions.mark_running(attempt.pk)
    return gang, attempt, cluster


@pytest.mark.django_db
def test_a_gang_started_smaller_restarts_whole_once_the_room_is_free():
    gang, attempt, cluster = started_gang(nodes=3, workers=4)
    NodeFactory(cluster=cluster)  # room for its fourth worker

    result = cycle.run_cycle(time.time() + 700)

    assert result.grown == [gang.pk]
    attempt.refresh_from_db()
    assert attempt.stop_cause == Attempt.StopCause.GROW
    assert attempt.stop_reason == Attempt.Outcome.PREEMPTED
    assert attempt.reason.startswith("stopped to restart with 4 workers")
    assert Job.objects.get(pk=gang.pk).preempting_until is not None

    # Its agent stops it once it has checkpointed; the job comes back and starts whole.
    actions.end_attempt(attempt.pk, Attempt.Outcome.PREEMPTED)
    job = Job.objects.get(pk=gang.pk)
    assert (job.state, job.retries_used) == (State.QUEUED, 0)
    assert cycle.run_cycle().placed == [gang.pk]
    assert Attempt.objects.get(job=gang, number=2).workers == 4


@pytest.mark.django_db
def test_a_gang_that_has_not_run_long_enough_keeps_its_size(settings):
    settings.MLSCHED_ELASTIC_GROW_AFTER_S = 600
    gang, attempt, cluster = started_gang()
    NodeFactory(cluster=cluster)

    assert cycle.run_cycle(time.time() + 60).grown == []
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None


@pytest.mark.django_db
def test_gangs_keep_their_size_when_growth_is_off(settings):
    settings.MLSCHED_ELASTIC_GROW_AFTER_S = None
    gang, attempt, cluster = started_gang()
    NodeFactory(cluster=cluster)

    assert cycle.run_cycle(time.time() + DAY).grown == []


@pytest.mark.django_db
def test_a_queued_job_waiting_for_room_goes_first_and_the_gang_keeps_its_size():
    gang, attempt, cluster = started_gang()
    NodeFactory(cluster=cluster)
    waiting = JobFactory(family=Family.TRAINING, workers=3, gpus=8, tenant=gang.tenant)

    result = cycle.run_cycle(time.time() + 700)

    assert result.grown == []
    assert Job.objects.get(pk=waiting.pk).pending_reason == "head_of_line"
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None


@pytest.mark.django_db
def test_an_attempt_that_ended_or_was_asked_to_stop_since_the_decision_is_left_alone():
    gang, attempt, cluster = started_gang()
    actions.request_stop([gang.pk], Attempt.Outcome.CANCELED, "canceled by its owner")

    assert actions.grow({gang.pk: (attempt.pk, 4)}) == []
    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.stop_cause) == (Attempt.Outcome.CANCELED, "")
    assert Job.objects.get(pk=gang.pk).preempting_until is None


@pytest.mark.django_db
def test_the_restart_takes_more_workers_only():
    gang, attempt, cluster = started_gang()

    assert actions.grow({gang.pk: (attempt.pk, 3)}) == []
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None


@pytest.mark.django_db
def test_while_it_stops_to_grow_a_job_submitted_meanwhile_does_not_take_its_room():
    gang, attempt, cluster = started_gang(nodes=3, workers=4)
    NodeFactory(cluster=cluster)  # room for its fourth worker
    later = time.time() + 700
    assert cycle.run_cycle(later).grown == [gang.pk]
    attempt.refresh_from_db()
    assert attempt.restart_workers == 4

    # Submitted while the gang checkpoints: it would run past the gang's restart.
    newcomer = JobFactory(family=Family.TRAINING, workers=1, gpus=8, max_runtime_s=DAY)
    assert cycle.run_cycle(later + 5).placed == []
    assert Job.objects.get(pk=newcomer.pk).pending_reason == "waiting_for_reservation"

    # The gang has gone: it restarts whole, first by its claim.
    actions.end_attempt(attempt.pk, Attempt.Outcome.PREEMPTED)
    assert cycle.run_cycle(later + 10).placed == [gang.pk]
    assert Attempt.objects.get(job=gang, number=2).workers == 4


@pytest.mark.django_db
def test_a_short_job_submitted_meanwhile_runs_in_its_room_before_it_restarts():
    gang, attempt, cluster = started_gang(nodes=3, workers=4)
    NodeFactory(cluster=cluster)
    later = time.time() + 700
    assert cycle.run_cycle(later).grown == [gang.pk]

    short = JobFactory(family=Family.TRAINING, workers=1, gpus=8, max_runtime_s=5)
    assert cycle.run_cycle(later + 5).placed == [short.pk]

"""How an attempt's end moves its job: the failure rules, retries, and the release of GPUs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters import agents
from clusters.backends.base import PENDING, RUNNING, STOPPED, WorkerStatus
from clusters.models import Allocation
from jobs import actions, cycle, janitor
from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


@pytest.fixture
def placed():
    """A 4-GPU training job placed by the cycle and reported running."""
    NodeFactory(gpu_count=8)
    job = JobFactory(family=Family.TRAINING, gpus=4, max_retries=2)
    cycle.run_cycle()
    job.refresh_from_db()
    actions.transition(job, State.RUNNING, "started")
    return job


def end(job, outcome, **kw):
    attempt = job.attempts.get(outcome="")
    actions.end_attempt(attempt.pk, outcome, **kw)
    job.refresh_from_db()
    attempt.refresh_from_db()
    return attempt


@pytest.mark.parametrize(
    "outcome", [Outcome.SUCCEEDED, Outcome.USER_ERROR, Outcome.INFRA_ERROR, Outcome.PREEMPTED,
                Outcome.LOST, Outcome.TIMEOUT, Outcome.CANCELED],
)  # fmt: skip
def test_every_end_path_releases_the_allocations(placed, outcome):
    attempt = end(placed, outcome)

    assert Allocation.objects.filter(attempt=attempt, active=True).count() == 0
    assert Allocation.objects.filter(attempt=attempt, active=False).count() == 4


def test_a_user_error_fails_the_job_with_its_exit_code_and_no_retry(placed):
    attempt = end(placed, Outcome.USER_ERROR, exit_code=3, reason="exit code 3")

    assert placed.state == State.FAILED
    assert attempt.exit_code == 3
    assert placed.retries_used == 0
    assert placed.events.last().reason == "exit code 3"


def test_a_job_that_asks_for_it_retries_user_errors_until_its_retries_are_used(placed):
    type(placed).objects.filter(pk=placed.pk).update(retry_user_errors=True)

    end(placed, Outcome.USER_ERROR, exit_code=3, reason="exit code 3")
    assert (placed.state, placed.retries_used) == (State.QUEUED, 1)
    type(placed).objects.filter(pk=placed.pk).update(not_before=None, retries_used=2)
    cycle.run_cycle()
    placed.refresh_from_db()

    end(placed, Outcome.USER_ERROR, exit_code=3, reason="exit code 3")

    assert (placed.state, placed.events.last().reason) == (
        State.FAILED, "exit code 3 (retries exhausted)"
    )  # fmt: skip


def test_a_timeout_is_not_retried_even_when_user_errors_are(placed):
    type(placed).objects.filter(pk=placed.pk).update(retry_user_errors=True)

    end(placed, Outcome.TIMEOUT, reason="past its runtime limit")

    assert (placed.state, placed.retries_used) == (State.FAILED, 0)


def test_an_infra_error_requeues_with_backoff_and_uses_a_retry(placed, settings):
    before = timezone.now()
    end(placed, Outcome.INFRA_ERROR, reason="node lost")

    assert placed.state == State.QUEUED
    assert placed.retries_used == 1
    assert placed.not_before >= before + timedelta(seconds=settings.MLSCHED_RETRY_BACKOFF_S)


def test_the_backoff_doubles_with_each_retry(placed):
    end(placed, Outcome.INFRA_ERROR)
    first_delay = placed.not_before - placed.events.last().time
    type(placed).objects.filter(pk=placed.pk).update(not_before=None)
    cycle.run_cycle()
    placed.refresh_from_db()

    end(placed, Outcome.LOST)

    assert placed.not_before - placed.events.last().time == 2 * first_delay


def test_infra_errors_fail_the_job_once_retries_are_used_up(placed):
    type(placed).objects.filter(pk=placed.pk).update(retries_used=2)
    placed.refresh_from_db()

    end(placed, Outcome.INFRA_ERROR, reason="image pull failed")

    assert placed.state == State.FAILED
    assert "retries exhausted" in placed.events.last().reason


def test_preemption_requeues_without_using_a_retry(placed):
    end(placed, Outcome.PREEMPTED)

    assert placed.state == State.QUEUED
    assert placed.retries_used == 0
    assert placed.not_before is None


def test_a_requeued_job_gets_a_second_attempt(placed):
    end(placed, Outcome.PREEMPTED)

    cycle.run_cycle()

    assert list(placed.attempts.values_list("number", "outcome")) == [
        (1, Outcome.PREEMPTED), (2, ""),
    ]  # fmt: skip


def test_ending_an_attempt_twice_changes_nothing(placed):
    first = end(placed, Outcome.SUCCEEDED)
    events = placed.events.count()

    again = actions.end_attempt(first.pk, Outcome.INFRA_ERROR)

    placed.refresh_from_db()
    assert again.outcome == Outcome.SUCCEEDED
    assert placed.state == State.SUCCEEDED
    assert placed.events.count() == events


def test_a_job_that_finishes_before_reporting_running_still_succeeds():
    NodeFactory()
    job = JobFactory(family=Family.EVALUATION, gpus=1)
    cycle.run_cycle()

    end(job, Outcome.SUCCEEDED)

    assert list(job.events.values_list("to_state", flat=True)) == [
        State.SCHEDULED, State.RUNNING, State.SUCCEEDED,
    ]  # fmt: skip


def test_a_lost_attempt_counts_its_whole_run_as_wasted(placed):
    attempt = placed.attempts.get()
    start = attempt.scheduled_at
    Attempt.objects.filter(pk=attempt.pk).update(started_at=start + timedelta(seconds=10))

    attempt = end(placed, Outcome.LOST, now=start + timedelta(seconds=110))

    assert attempt.wasted_gpu_seconds == pytest.approx(110 * 4)


def test_a_preempted_attempt_wastes_only_the_work_since_its_checkpoint(placed):
    attempt = placed.attempts.get()
    start = attempt.scheduled_at
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=start, last_checkpoint_at=start + timedelta(seconds=100)
    )

    attempt = end(placed, Outcome.PREEMPTED, now=start + timedelta(seconds=130))

    assert attempt.wasted_gpu_seconds == pytest.approx(30 * 4)


def test_a_preempted_attempt_is_not_charged_for_a_checkpoint_from_before_its_start(placed):
    # A former attempt's checkpoint, a day old: this one has saved nothing since it started.
    attempt = placed.attempts.get()
    start = attempt.scheduled_at
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=start + timedelta(seconds=10), last_checkpoint_at=start - timedelta(days=1)
    )

    attempt = end(placed, Outcome.PREEMPTED, now=start + timedelta(seconds=130))

    assert attempt.wasted_gpu_seconds == pytest.approx(130 * 4)


def test_the_janitor_releases_allocations_of_ended_attempts(placed):
    attempt = placed.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(outcome=Outcome.SUCCEEDED)

    swept = janitor.sweep()

    assert swept["released"] == 4
    assert not Allocation.objects.filter(attempt=attempt, active=True).exists()


def test_the_janitor_never_ends_a_stop_its_agent_has_not_seen_through(placed, settings):
    # A worker still running past its grace (a stop that did not take) keeps its GPUs: the
    # agent asks it to stop again, and the attempt ends once the agent reports it gone.
    long_ago = timezone.now() - timedelta(seconds=settings.MLSCHED_STOP_GRACE_S * 10)
    actions.request_stop([placed.pk], Outcome.PREEMPTED, "preempted by job 7", now=long_ago)

    janitor.sweep()

    placed.refresh_from_db()
    attempt = placed.attempts.get()
    assert placed.state == State.RUNNING
    assert attempt.outcome == ""
    assert Allocation.objects.active().filter(attempt=attempt).count() == 4


def test_a_long_stop_reason_is_cut_to_fit(placed):
    actions.request_stop([placed.pk], Outcome.USER_ERROR, "worker 1 exited: " + "x" * 400)

    assert len(placed.attempts.get().reason) == 300


@pytest.fixture
def gang():
    """A 2-worker training gang placed by the cycle, not yet started."""
    first = NodeFactory(gpu_count=8)
    NodeFactory(gpu_count=8, cluster=first.cluster)
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=8, max_retries=2)
    cycle.run_cycle()
    job.refresh_from_db()
    return job


def test_a_gang_with_a_rank_that_never_comes_up_is_stopped_as_lost_and_retried(gang, settings):
    attempt = gang.attempts.get()
    cluster = attempt.cluster
    # Rank 1's pod cannot be scheduled or its image pulled: it stays pending.
    rank_1_pending = [WorkerStatus(attempt.pk, 0, RUNNING), WorkerStatus(attempt.pk, 1, PENDING)]
    agents.heartbeat(cluster, rank_1_pending)
    later = timezone.now() + timedelta(seconds=settings.MLSCHED_START_TIMEOUT_S + 1)

    assert janitor.stop_unstarted(later) == 1
    answer = agents.heartbeat(cluster, rank_1_pending)
    assert [s["attempt_id"] for s in answer["stop"]] == [attempt.pk]
    agents.heartbeat(cluster, [WorkerStatus(attempt.pk, 0, STOPPED)])
    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert attempt.outcome == Outcome.LOST
    assert gang.state == State.QUEUED
    assert gang.retries_used == 1


def test_a_gang_still_starting_within_the_timeout_is_left_alone(gang, settings):
    attempt = gang.attempts.get()
    starting = [WorkerStatus(attempt.pk, 0, RUNNING), WorkerStatus(attempt.pk, 1, PENDING)]
    agents.heartbeat(attempt.cluster, starting)
    soon = timezone.now() + timedelta(seconds=settings.MLSCHED_START_TIMEOUT_S - 5)

    assert janitor.stop_unstarted(soon) == 0
    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.stop_requested_at) == ("", None)


def test_a_started_gang_is_never_stopped_for_its_start_time(gang, settings):
    attempt = gang.attempts.get()
    both = [WorkerStatus(attempt.pk, 0, RUNNING), WorkerStatus(attempt.pk, 1, RUNNING)]
    agents.heartbeat(attempt.cluster, both)
    much_later = timezone.now() + timedelta(seconds=settings.MLSCHED_START_TIMEOUT_S * 10)

    assert janitor.stop_unstarted(much_later) == 0
    gang.refresh_from_db()
    assert gang.state == State.RUNNING

"""Reports of attempts the janitor declared lost, arriving once their agent is back: a success
ends a job still waiting for its retry, and is recorded where the job has moved on; anything
else changes nothing."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.backends.base import EXITED, FAILED, RUNNING, STOPPED
from clusters.models import Allocation, Cluster
from jobs import actions, cycle, janitor
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.faults.whole import assert_whole

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome
AN_HOUR_ON = 3600  # a cycle run this long after now: every retry backoff has passed


@pytest.fixture
def west(db):
    """A second cluster whose agent reports: with it, a silent east is east's fault."""
    return ClusterFactory(name="west", last_heartbeat=timezone.now())


@pytest.fixture
def lost(east, agent, west, settings):
    """A 2-worker gang placed on east and reported running; then east's agent went silent past
    the grace, the janitor declared the attempt lost, and the job is queued for its retry."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=4, max_retries=3)
    cycle.run_cycle()
    first = job.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(first, RUNNING, RUNNING)})
    silent = timezone.now() - timedelta(seconds=settings.MLSCHED_AGENT_LOST_GRACE_S + 60)
    Cluster.objects.filter(pk=east.pk).update(last_heartbeat=silent)
    assert janitor.sweep()["lost"] == 1
    job.refresh_from_db()
    assert (job.state, job.retries_used) == (State.QUEUED, 1)
    return job


def exited_0(attempt):
    return {"workers": report(attempt, EXITED, EXITED, codes=[0, 0])}


def test_a_success_reported_after_the_loss_ends_the_queued_job_succeeded(agent, lost):
    first = lost.attempts.get()

    answer = post(agent, "east", "heartbeat", exited_0(first)).json()

    lost.refresh_from_db()
    first.refresh_from_db()
    assert lost.state == State.SUCCEEDED
    assert (first.outcome, first.exit_code) == (Outcome.SUCCEEDED, 0)
    assert (lost.retries_used, lost.not_before) == (0, None)  # the retry is dropped
    ended = lost.events.latest("id")
    assert (ended.from_state, ended.to_state, ended.attempt_id) == (
        State.QUEUED, State.SUCCEEDED, first.pk
    )  # fmt: skip
    assert "reported after it was declared lost" in ended.reason
    assert answer == {"run": [], "stop": []}  # the agent forgets it
    assert not Allocation.objects.active().exists()
    assert_whole()


def test_a_job_that_took_a_late_success_is_never_placed_again(agent, lost):
    post(agent, "east", "heartbeat", exited_0(lost.attempts.get()))

    result = cycle.run_cycle(time.time() + AN_HOUR_ON)  # east reports again: it could go there

    assert result.placed == []
    assert lost.attempts.count() == 1
    assert not Allocation.objects.active().exists()


def test_a_late_success_counts_the_lost_run_as_work_not_waste(agent, lost):
    first = lost.attempts.get()
    assert first.wasted_gpu_seconds > 0  # lost: its whole run was counted as waste

    post(agent, "east", "heartbeat", exited_0(first))

    first.refresh_from_db()
    placed_to_start = (first.started_at - first.scheduled_at).total_seconds() * 8
    assert first.wasted_gpu_seconds == pytest.approx(placed_to_start)


def test_a_late_success_reported_again_is_taken_once(agent, lost):
    first = lost.attempts.get()

    for _ in range(3):  # an agent whose forget failed reports it every beat
        post(agent, "east", "heartbeat", exited_0(first))

    lost.refresh_from_db()
    assert lost.state == State.SUCCEEDED
    moves = list(lost.events.order_by("id").values_list("from_state", "to_state"))
    assert moves[-2:] == [(State.RUNNING, State.QUEUED), (State.QUEUED, State.SUCCEEDED)]
    assert_whole()


def test_a_late_success_after_the_retry_was_placed_is_recorded_and_the_retry_goes_on(
    agent, lost, west
):
    NodeFactory(cluster=west, name="west-0", gpu_count=8)
    cycle.run_cycle(time.time() + AN_HOUR_ON)
    first, retry = lost.attempts.order_by("number")

    for _ in range(2):  # recorded once
        post(agent, "east", "heartbeat", exited_0(first))

    lost.refresh_from_db()
    first.refresh_from_db()
    retry.refresh_from_db()
    assert lost.state == State.SCHEDULED
    assert (retry.outcome, retry.stop_requested_at) == ("", None)
    assert Allocation.objects.active().filter(attempt=retry).exists()
    assert (first.outcome, first.exit_code) == (Outcome.LOST, 0)
    noted = lost.events.latest("id")
    assert (noted.from_state, noted.to_state, noted.attempt_id) == (
        State.SCHEDULED, State.SCHEDULED, first.pk
    )  # fmt: skip
    assert noted.reason == (
        "attempt 1 exited 0 after it was declared lost; not taken: attempt 2 was placed first"
    )
    assert lost.events.filter(from_state=State.SCHEDULED, to_state=State.SCHEDULED).count() == 1
    assert_whole()


def test_two_beats_that_read_the_same_late_success_record_it_once(lost, west):
    NodeFactory(cluster=west, name="west-0", gpu_count=8)
    cycle.run_cycle(time.time() + AN_HOUR_ON)
    first = lost.attempts.get(number=1)

    actions.late_success(first.pk)  # both read it as lost before either wrote
    actions.late_success(first.pk)

    assert lost.events.filter(from_state=State.SCHEDULED, to_state=State.SCHEDULED).count() == 1


def test_a_late_success_for_a_job_canceled_meanwhile_is_recorded_and_changes_nothing(agent, lost):
    actions.cancel(lost)

    post(agent, "east", "heartbeat", exited_0(lost.attempts.get()))

    lost.refresh_from_db()
    assert lost.state == State.CANCELED
    noted = lost.events.latest("id")
    assert (noted.from_state, noted.to_state) == (State.CANCELED, State.CANCELED)
    assert noted.reason.endswith("not taken: the job was canceled")
    assert_whole()


@pytest.mark.parametrize(
    "phases, codes",
    [
        ((EXITED, EXITED), (0, 1)),  # a late failure: the job is being retried already
        ((EXITED, FAILED), (0, None)),
        ((STOPPED, STOPPED), (0, 0)),  # stopped once its agent was back: not done
        ((EXITED,), (0,)),  # rank 1 is not in the report
    ],
)
def test_any_other_late_report_changes_nothing(agent, lost, phases, codes):
    first = lost.attempts.get()
    before = list(lost.events.values_list("id", flat=True))

    post(agent, "east", "heartbeat", {"workers": report(first, *phases, codes=list(codes))})

    lost.refresh_from_db()
    first.refresh_from_db()
    assert (lost.state, lost.retries_used) == (State.QUEUED, 1)
    assert (first.outcome, first.exit_code) == (Outcome.LOST, None)
    assert list(lost.events.values_list("id", flat=True)) == before
    assert len(cycle.run_cycle(time.time() + AN_HOUR_ON).placed) == 1  # the retry runs


def test_another_clusters_agent_cannot_report_a_lost_attempt_done(lost, west):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Agent {west.rotate_token()}")

    post(client, "west", "heartbeat", exited_0(lost.attempts.get()))

    assert Job.objects.get(pk=lost.pk).state == State.QUEUED

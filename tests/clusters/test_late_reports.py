"""Reports of attempts the janitor declared lost, arriving once their agent is back: a success
ends a job that has not ended (a retry placed since is stopped), and is recorded where the job
has ended; anything else changes nothing."""

import time
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from clusters.backends.base import EXITED, FAILED, RUNNING, STOPPED
from clusters.models import Allocation, Cluster
from jobs import actions, cycle, janitor
from jobs.models import Attempt, Dependency, Family, Job
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


@pytest.fixture
def west_agent(west, agent_of):
    """An API client holding west's agent token."""
    return agent_of(west)


@pytest.fixture
def retried(lost, west):
    """`lost`, its retry (attempt 2) since placed on west: the job is scheduled."""
    NodeFactory(cluster=west, name="west-0", gpu_count=8)
    assert cycle.run_cycle(time.time() + AN_HOUR_ON).placed == [lost.pk]
    return lost


def exited_0(attempt):
    return {"workers": report(attempt, EXITED, EXITED, codes=[0, 0])}


def beat(client, cluster: str, attempt, *phases, codes=None):
    """The cluster's agent reports the attempt's ranks in these phases."""
    return post(client, cluster, "heartbeat", {"workers": report(attempt, *phases, codes=codes)})


def attempts(job):
    """The job's attempts, first to last, as stored now."""
    return list(Attempt.objects.filter(job=job).order_by("number"))


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


def test_a_late_success_never_seen_running_starts_when_its_workers_say(agent, east, west, settings):
    # Placed, and its agent silent before any beat showed it running: its start was unknown.
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=4, max_retries=3)
    cycle.run_cycle()
    first = job.attempts.get()
    silent = timezone.now() - timedelta(seconds=settings.MLSCHED_AGENT_LOST_GRACE_S + 60)
    Cluster.objects.filter(pk=east.pk).update(last_heartbeat=silent)
    Attempt.objects.filter(pk=first.pk).update(scheduled_at=F("scheduled_at") - timedelta(hours=1))
    assert janitor.sweep()["lost"] == 1
    began = timezone.now() - timedelta(minutes=50)

    workers = [w | {"started_at": began.timestamp()} for w in exited_0(first)["workers"]]
    post(agent, "east", "heartbeat", {"workers": workers})

    first.refresh_from_db()
    assert first.outcome == Outcome.SUCCEEDED
    assert first.started_at.timestamp() == pytest.approx(began.timestamp(), abs=0.01)
    waited = (first.started_at - first.scheduled_at).total_seconds()
    assert first.wasted_gpu_seconds == pytest.approx(waited * 8)  # to its start, not its end
    job.refresh_from_db()
    assert job.started_at == first.started_at


def test_a_late_success_reported_again_is_taken_once(agent, lost):
    first = lost.attempts.get()

    for _ in range(3):  # an agent whose forget failed reports it every beat
        post(agent, "east", "heartbeat", exited_0(first))

    lost.refresh_from_db()
    assert lost.state == State.SUCCEEDED
    moves = list(lost.events.order_by("id").values_list("from_state", "to_state"))
    assert moves[-2:] == [(State.RUNNING, State.QUEUED), (State.QUEUED, State.SUCCEEDED)]
    assert_whole()


@pytest.mark.parametrize("retry_started", [False, True])
def test_a_late_success_after_the_retry_was_placed_ends_the_job_succeeded_and_stops_the_retry(
    agent, west_agent, retried, retry_started
):
    if retry_started:
        beat(west_agent, "west", attempts(retried)[1], RUNNING, RUNNING)
    placed = State.RUNNING if retry_started else State.SCHEDULED
    assert Job.objects.get(pk=retried.pk).state == placed

    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))

    retried.refresh_from_db()
    first, retry = attempts(retried)
    assert (retried.state, retried.retries_used, retried.not_before) == (State.SUCCEEDED, 0, None)
    assert (first.outcome, first.exit_code) == (Outcome.SUCCEEDED, 0)
    ended = retried.events.latest("id")
    assert (ended.from_state, ended.to_state, ended.attempt_id) == (
        placed, State.SUCCEEDED, first.pk
    )  # fmt: skip
    assert ended.reason == (
        "attempt 1 succeeded: exit code 0 reported after it was declared lost; its retry is stopped"
    )
    assert (retry.outcome, retry.stop_reason) == ("", Outcome.CANCELED)
    assert retry.reason == "superseded by attempt 1, which succeeded after it was declared lost"
    answer = beat(west_agent, "west", retry, RUNNING, RUNNING).json()
    assert [stop["attempt_id"] for stop in answer["stop"]] == [retry.pk]


def test_a_retry_stopped_for_a_late_success_keeps_its_gpus_until_its_agent_sees_it_stop(
    agent, west_agent, retried
):
    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))
    retry = attempts(retried)[1]
    assert Allocation.objects.active().filter(attempt=retry).exists()  # still in use

    beat(west_agent, "west", retry, STOPPED, STOPPED)

    retry.refresh_from_db()
    assert (retry.outcome, retry.reason) == (
        Outcome.CANCELED, "superseded by attempt 1, which succeeded after it was declared lost"
    )  # fmt: skip
    assert not Allocation.objects.active().exists()
    assert_whole()


@pytest.mark.parametrize(
    "phases, codes, outcome",
    [
        ((STOPPED, STOPPED), None, Outcome.CANCELED),  # the stop seen through
        ((EXITED, EXITED), [0, 0], Outcome.SUCCEEDED),  # done before the stop reached it
        ((EXITED, EXITED), [1, 0], Outcome.USER_ERROR),
        ((FAILED, RUNNING), None, Outcome.INFRA_ERROR),  # rank 1 is stopped, then gone
    ],
)
def test_however_the_stopped_retry_ends_the_job_stays_succeeded_and_is_not_retried(
    agent, west_agent, retried, phases, codes, outcome
):
    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))
    before = list(retried.events.values_list("id", flat=True))
    retry = attempts(retried)[1]

    beat(west_agent, "west", retry, *phases, codes=codes)
    beat(west_agent, "west", retry, *[STOPPED if p == RUNNING else p for p in phases], codes=codes)

    retried.refresh_from_db()
    retry.refresh_from_db()
    assert (retried.state, retried.retries_used) == (State.SUCCEEDED, 0)
    assert retry.outcome == outcome
    assert list(retried.events.values_list("id", flat=True)) == before
    assert cycle.run_cycle(time.time() + AN_HOUR_ON).placed == []
    assert_whole()


@pytest.mark.parametrize(
    "phases, codes, outcome",
    [
        ((STOPPED, STOPPED), None, Outcome.CANCELED),
        ((EXITED, EXITED), [0, 0], Outcome.SUCCEEDED),  # done twice: once is waste
    ],
)
def test_a_retry_stopped_for_a_late_success_counts_its_whole_run_as_waste_however_it_ends(
    agent, west_agent, retried, phases, codes, outcome
):
    retry = attempts(retried)[1]
    beat(west_agent, "west", retry, RUNNING, RUNNING)
    now = timezone.now()
    Attempt.objects.filter(pk=retry.pk).update(  # it waited a minute and ran nine
        scheduled_at=now - timedelta(minutes=10), started_at=now - timedelta(minutes=9)
    )
    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))

    beat(west_agent, "west", retry, *phases, codes=codes)

    retry.refresh_from_db()
    held = (retry.ended_at - retry.scheduled_at).total_seconds() * 8
    assert (retry.outcome, retry.wasted_gpu_seconds) == (outcome, pytest.approx(held))


def test_a_late_success_ends_a_job_whose_retry_is_being_preempted_and_it_is_not_requeued(
    agent, west_agent, retried
):
    retry = attempts(retried)[1]
    preempted = "preempted for a higher-priority job"
    actions.stop_attempts(Attempt.objects.filter(pk=retry.pk), Outcome.PREEMPTED, preempted)

    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))
    beat(west_agent, "west", retry, STOPPED, STOPPED)

    retried.refresh_from_db()
    retry.refresh_from_db()
    assert retried.state == State.SUCCEEDED
    assert (retry.outcome, retry.reason) == (Outcome.PREEMPTED, preempted)
    assert cycle.run_cycle(time.time() + AN_HOUR_ON).placed == []
    assert_whole()


def test_a_late_success_after_the_retry_was_lost_too_ends_the_queued_job_and_gives_back_one_retry(
    agent, retried
):
    retry = attempts(retried)[1]
    actions.end_attempt(retry.pk, Outcome.LOST, reason="its cluster agent stopped reporting")
    assert Job.objects.get(pk=retried.pk).retries_used == 2

    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))

    retried.refresh_from_db()
    # Attempt 1's loss is undone; attempt 2's stands, as far as anyone knows.
    assert (retried.state, retried.retries_used, retried.not_before) == (State.SUCCEEDED, 1, None)
    assert [a.outcome for a in attempts(retried)] == [Outcome.SUCCEEDED, Outcome.LOST]
    ended = retried.events.latest("id")
    assert (ended.from_state, ended.to_state) == (State.QUEUED, State.SUCCEEDED)
    assert ended.reason.endswith("its retry is dropped")
    assert cycle.run_cycle(time.time() + AN_HOUR_ON).placed == []
    assert_whole()


def test_a_late_success_that_stops_the_retry_releases_an_afterok_dependent(agent, west, retried):
    NodeFactory(cluster=west, name="west-1", gpu_count=8)
    report_job = JobFactory(tenant=retried.tenant)
    Dependency.objects.create(job=report_job, on=retried, kind=Dependency.Kind.AFTEROK)
    assert cycle.run_cycle(time.time() + AN_HOUR_ON).placed == []  # it waits

    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))

    assert cycle.run_cycle(time.time() + AN_HOUR_ON).placed == [report_job.pk]


def test_a_late_success_after_the_retry_succeeded_is_only_recorded(agent, west_agent, retried):
    retry = attempts(retried)[1]
    beat(west_agent, "west", retry, EXITED, EXITED, codes=[0, 0])
    assert Job.objects.get(pk=retried.pk).state == State.SUCCEEDED

    post(agent, "east", "heartbeat", exited_0(attempts(retried)[0]))

    retried.refresh_from_db()
    first, retry = attempts(retried)
    assert (retried.state, retried.retries_used) == (State.SUCCEEDED, 1)
    assert (first.outcome, first.exit_code, retry.outcome) == (Outcome.LOST, 0, Outcome.SUCCEEDED)
    noted = retried.events.latest("id")
    assert (noted.from_state, noted.to_state, noted.attempt_id) == (
        State.SUCCEEDED, State.SUCCEEDED, first.pk
    )  # fmt: skip
    assert noted.reason == (
        "attempt 1 exited 0 after it was declared lost; not taken: the job succeeded"
    )
    assert_whole()


def test_two_beats_that_read_the_same_late_success_take_it_once(retried):
    first = attempts(retried)[0]

    actions.late_success(first.pk)  # both read it as lost before either wrote
    actions.late_success(first.pk)

    moves = list(retried.events.order_by("id").values_list("from_state", "to_state"))
    assert moves[-2:] == [(State.QUEUED, State.SCHEDULED), (State.SCHEDULED, State.SUCCEEDED)]
    assert Job.objects.get(pk=retried.pk).retries_used == 0


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


def test_another_clusters_agent_cannot_report_a_lost_attempt_done(lost, west_agent):
    post(west_agent, "west", "heartbeat", exited_0(lost.attempts.get()))

    assert Job.objects.get(pk=lost.pk).state == State.QUEUED

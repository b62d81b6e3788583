"""The control plane's backstop for the runtime limit: an attempt that its agent lets run past
its limit, the stop grace and MLSCHED_RUNTIME_LIMIT_SLACK_S is asked to stop by the janitor, and
ends as a timeout once its agent reports its workers gone, as the agent's own enforcement ends
it: the job fails, visibly, and is not retried."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from clusters import agents
from clusters.backends.base import RUNNING, STOPPED, TIMED_OUT
from clusters.models import Allocation, Cluster
from jobs import actions, cycle, janitor
from jobs.clock import database_now
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_lock_order import run_beside_an_end_in_flight

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome
STOPPED_AT_600 = "ran past its runtime limit of 600s; the control plane stopped it"


def beat(agent, workers: list[dict]) -> dict:
    return post(agent, "east", "heartbeat", {"workers": workers}).json()


def past_the_backstop(attempt: Attempt, settings, seconds: float = 1) -> timedelta:
    """How long after the attempt's start the backstop takes it, and `seconds` more: its
    limit, the stop grace and the slack."""
    late = settings.MLSCHED_STOP_GRACE_S + settings.MLSCHED_RUNTIME_LIMIT_SLACK_S
    return timedelta(seconds=attempt.job.max_runtime_s + late + seconds)


def started_ago(attempt: Attempt, ago: timedelta) -> Attempt:
    """The attempt as if it had started `ago` before the database's now."""
    Attempt.objects.filter(pk=attempt.pk).update(started_at=database_now() - ago)
    attempt.refresh_from_db()
    return attempt


@pytest.fixture
def running(east, agent, alice, alpha):
    """Alice's one-worker job with a 600 s limit, on east, reported running. It retries user
    errors: a timeout must fail it all the same."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=600, retry_user_errors=True)
    cycle.run_cycle()
    beat(agent, report(job.attempts.get(), RUNNING))
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def attempt(running) -> Attempt:
    return running.attempts.select_related("job").get()


def test_it_asks_an_attempt_past_its_limit_grace_and_slack_to_stop_as_a_timeout(attempt, settings):
    now = attempt.started_at + past_the_backstop(attempt, settings)

    assert janitor.stop_past_limit(now) == 1

    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.reason) == (Outcome.TIMEOUT, STOPPED_AT_600)
    assert (attempt.stop_requested_at, attempt.outcome) == (now, "")


def test_it_leaves_an_attempt_within_its_limit_grace_and_slack_alone(attempt, settings):
    now = attempt.started_at + past_the_backstop(attempt, settings, seconds=0)

    assert janitor.stop_past_limit(now) == 0

    attempt.refresh_from_db()
    assert (attempt.stop_requested_at, attempt.stop_reason) == (None, "")


def test_it_leaves_an_attempt_already_asked_to_stop_to_that_stop(attempt, running, settings):
    actions.request_stop([running.pk], Outcome.PREEMPTED, "preempted for a higher-priority job")

    assert janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings)) == 0

    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.reason) == (
        Outcome.PREEMPTED, "preempted for a higher-priority job"
    )  # fmt: skip


def test_it_leaves_an_ended_attempt_alone(attempt, settings):
    actions.end_attempt(attempt.pk, Outcome.USER_ERROR, exit_code=1, reason="exit code 1")

    assert janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings)) == 0

    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.stop_requested_at) == (Outcome.USER_ERROR, None)


def test_it_leaves_an_attempt_that_has_not_started_to_the_start_timeout(east, settings):
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(max_runtime_s=600)
    cycle.run_cycle()
    attempt = job.attempts.select_related("job").get()
    now = attempt.scheduled_at + past_the_backstop(attempt, settings)

    assert janitor.stop_past_limit(now) == 0
    assert janitor.stop_unstarted(now) == 1
    attempt.refresh_from_db()
    assert attempt.stop_reason == Outcome.LOST


def test_a_retry_has_its_whole_limit_from_its_own_start(running, attempt, agent, settings):
    # The first attempt started an hour ago and was lost; the retry has just started.
    Job.objects.filter(pk=running.pk).update(started_at=timezone.now() - timedelta(hours=1))
    started_ago(attempt, timedelta(hours=1))
    actions.end_attempt(attempt.pk, Outcome.LOST, reason="its node went away")
    Job.objects.filter(pk=running.pk).update(not_before=None)
    cycle.run_cycle()
    retry = running.attempts.get(outcome="")
    beat(agent, report(retry, RUNNING))
    assert Attempt.objects.get(pk=retry.pk).started_at is not None

    assert janitor.stop_past_limit(database_now()) == 0
    assert Attempt.objects.get(pk=retry.pk).stop_requested_at is None


def test_the_agent_is_told_to_stop_it_with_the_stop_grace(attempt, agent, settings):
    janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings))

    answer = beat(agent, report(attempt, RUNNING))

    assert answer["stop"] == [
        {"attempt_id": attempt.pk, "grace_s": settings.MLSCHED_STOP_GRACE_S, "reason": "timeout"}
    ]
    assert answer["run"] == []


def test_once_its_agent_reports_the_workers_gone_the_job_fails_with_the_timeout_not_retried(
    running, attempt, agent, alice, settings
):
    janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings))

    beat(agent, report(attempt, STOPPED))

    running.refresh_from_db()
    assert (running.state, running.retries_used) == (State.FAILED, 0)
    assert running.events.last().reason == STOPPED_AT_600
    assert not Allocation.objects.active().filter(attempt=attempt).exists()
    client = APIClient()
    client.force_authenticate(alice)
    shown = client.get(f"/api/v1/jobs/{running.pk}/").json()
    assert (shown["state"], shown["attempts"][0]["outcome"]) == ("failed", "timeout")
    assert shown["attempts"][0]["reason"] == STOPPED_AT_600


@pytest.mark.parametrize("stopped_by", ["its agent", "the control plane"])
def test_a_job_stopped_at_its_limit_ends_alike_whoever_stopped_it(
    running, attempt, agent, settings, stopped_by
):
    if stopped_by == "its agent":
        timed_out = report(attempt, TIMED_OUT, codes=[-15])
        beat(agent, [{**w, "reason": "exceeded its runtime limit"} for w in timed_out])
    else:
        janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings))
        beat(agent, report(attempt, STOPPED, codes=[-15]))

    running.refresh_from_db()
    attempt.refresh_from_db()
    assert (attempt.outcome, running.state, running.retries_used) == (
        Outcome.TIMEOUT, State.FAILED, 0
    )  # fmt: skip
    assert "runtime limit" in running.events.last().reason


def test_an_attempt_stopped_at_its_limit_whose_agent_went_silent_ends_as_a_timeout(
    running, attempt, east, settings
):
    janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings))
    now = timezone.now()
    ClusterFactory(name="west", last_heartbeat=now)
    quiet = timedelta(seconds=settings.MLSCHED_AGENT_LOST_GRACE_S + 1)
    Cluster.objects.filter(pk=east.pk).update(last_heartbeat=now - quiet)

    agents.sweep_silent_clusters(now)

    running.refresh_from_db()
    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.reason) == (Outcome.TIMEOUT, STOPPED_AT_600)
    assert running.state == State.FAILED


def test_the_sweep_counts_the_attempts_it_stopped_on_the_databases_clock(attempt, settings):
    started_ago(attempt, past_the_backstop(attempt, settings, seconds=60))

    assert janitor.sweep()["past_limit"] == 1


def test_a_gang_past_its_limit_is_stopped_whole_and_fails(east, agent, settings):
    for i in range(2):
        NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8)
    gang = JobFactory(family=Family.TRAINING, workers=2, gpus=8, max_runtime_s=600)
    cycle.run_cycle()
    attempt = gang.attempts.select_related("job").get()
    beat(agent, report(attempt, RUNNING, RUNNING))
    attempt.refresh_from_db()

    assert janitor.stop_past_limit(attempt.started_at + past_the_backstop(attempt, settings)) == 1
    beat(agent, report(attempt, STOPPED, RUNNING))  # rank 1 takes its grace to checkpoint
    assert Job.objects.get(pk=gang.pk).state == State.RUNNING
    beat(agent, report(attempt, STOPPED, STOPPED))

    gang.refresh_from_db()
    attempt.refresh_from_db()
    assert (gang.state, attempt.outcome, attempt.reason) == (
        State.FAILED, Outcome.TIMEOUT, STOPPED_AT_600
    )  # fmt: skip
    assert not Allocation.objects.active().filter(attempt=attempt).exists()


def test_a_batch_shard_past_its_limit_fails_alone(east, agent, alice, alpha, settings):
    NodeFactory(cluster=east, gpu_count=8)
    spec = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
            "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 600, "shards": 3,
            "priority_class": PriorityClassFactory()}  # fmt: skip
    batch, _ = actions.submit(alice, alpha, spec)
    cycle.run_cycle()
    attempts = [shard.attempts.select_related("job").get() for shard in batch.batch()]
    beat(agent, [worker for a in attempts for worker in report(a, RUNNING)])
    overran = started_ago(attempts[1], past_the_backstop(attempts[1], settings))

    assert janitor.stop_past_limit(database_now()) == 1
    beat(agent, report(attempts[0], RUNNING) + report(overran, STOPPED)
         + report(attempts[2], RUNNING))  # fmt: skip

    states = [shard.state for shard in batch.batch()]
    assert states == [State.RUNNING, State.FAILED, State.RUNNING]
    assert Attempt.objects.get(pk=overran.pk).outcome == Outcome.TIMEOUT


@pytest.mark.django_db(transaction=True)
def test_it_waits_for_the_job_lock_before_it_touches_the_attempt(settings):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    job = JobFactory(gpus=1, max_runtime_s=600)
    cycle.run_cycle()
    attempt = job.attempts.select_related("job").get()
    actions.mark_running(attempt.pk, database_now())
    attempt.refresh_from_db()
    later = attempt.started_at + past_the_backstop(attempt, settings)

    run_beside_an_end_in_flight(job.pk, attempt.pk, janitor.stop_past_limit, later)

    assert Attempt.objects.get(pk=attempt.pk).stop_reason == Outcome.TIMEOUT

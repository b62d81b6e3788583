"""Attempts of a cluster whose agent went silent: the janitor ends them after a grace, as lost
unless a stop was asked for them, in which case they end as the stop asked."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters import agents
from clusters.backends.base import RUNNING
from clusters.models import Cluster
from jobs import actions, cycle
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


@pytest.fixture
def running(east, agent):
    """A 4-GPU training job placed on east and reported running."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, gpus=4, max_retries=3, preemptible=True)
    cycle.run_cycle()
    post(agent, "east", "heartbeat", {"workers": report(job.attempts.get(), RUNNING)})
    return job


def silence(east, settings) -> None:
    """East's agent has been silent past the lost grace, while west's still reports; the
    janitor sweeps."""
    now = timezone.now()
    ClusterFactory(name="west", last_heartbeat=now)
    quiet = settings.MLSCHED_AGENT_LOST_GRACE_S + 1
    Cluster.objects.filter(pk=east.pk).update(last_heartbeat=now - timedelta(seconds=quiet))
    agents.sweep_silent_clusters(now)


def test_a_preempted_attempt_of_a_silent_cluster_is_requeued_without_using_a_retry(
    running, east, settings
):
    actions.request_stop([running.pk], Outcome.PREEMPTED, "preempted for a higher-priority job")

    silence(east, settings)

    running.refresh_from_db()
    attempt = running.attempts.get()
    assert (attempt.outcome, attempt.reason) == (
        Outcome.PREEMPTED, "preempted for a higher-priority job"
    )  # fmt: skip
    assert (running.state, running.retries_used, running.not_before) == (State.QUEUED, 0, None)


def test_a_canceled_attempt_of_a_silent_cluster_ends_canceled(running, east, settings):
    actions.cancel(Job.objects.get(pk=running.pk))

    silence(east, settings)

    assert running.attempts.get().outcome == Outcome.CANCELED


def test_an_attempt_of_a_silent_cluster_not_asked_to_stop_is_lost_and_retried(
    running, east, settings
):
    silence(east, settings)

    running.refresh_from_db()
    assert running.attempts.get().outcome == Outcome.LOST
    assert (running.state, running.retries_used) == (State.QUEUED, 1)

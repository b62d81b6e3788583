"""Liveness is judged on one clock, the database's.

A web host records an agent's heartbeat and the scheduler's host sweeps for silent clusters:
with each on its own clock, a skew larger than the agent timeout would declare a live cluster
silent (its jobs lost and run twice) or keep a dead one's work waiting forever. The web host's
clock is skewed here by patching `timezone.now` around the agent's request only.
"""

import time
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from clusters.models import Cluster
from jobs import actions, cycle, janitor
from jobs.clock import database_now
from jobs.models import Attempt
from tests.factories import ClusterFactory, JobFactory, NodeFactory

SKEW = timedelta(minutes=10)  # past the agent timeout (15 s) and the lost grace (300 s)
NODE = {"name": "east-0", "cpu_milli": 96_000, "memory_mb": 1_024_000, "gpu_type": "A100",
        "gpu_count": 8}  # fmt: skip


@pytest.fixture
def attempt(east):
    NodeFactory(cluster=east, name="east-0")
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    return job.attempts.get()


def report_with_skewed_clock(
    agent, attempt, endpoint: str, skew: timedelta, phase: str = "running"
) -> None:
    """The agent reports through a web host whose clock is `skew` off."""
    payload = {
        "heartbeat": {"workers": [{"attempt_id": attempt.pk, "rank": 0, "phase": phase}]},
        "inventory": {"nodes": [NODE]},
    }[endpoint]
    real_now = timezone.now
    with mock.patch("django.utils.timezone.now", lambda: real_now() + skew):
        response = agent.post(f"/api/v1/agent/east/{endpoint}/", payload, format="json")
    assert response.status_code == 200, response.content


def another_cluster_reports():
    """Some other agent reaches the control plane: the sweep may declare work lost."""
    ClusterFactory(name="west", last_heartbeat=timezone.now())


@pytest.mark.parametrize("endpoint", ["heartbeat", "inventory"])
def test_it_keeps_a_cluster_live_when_its_web_host_clock_is_behind(agent, attempt, endpoint):
    report_with_skewed_clock(agent, attempt, endpoint, -SKEW)
    another_cluster_reports()

    swept = janitor.sweep()

    assert (swept["unhealthy"], swept["lost"]) == (0, 0)
    assert Cluster.objects.get(name="east").health == Cluster.Health.HEALTHY
    assert Attempt.objects.get(pk=attempt.pk).outcome == ""


def test_it_declares_a_silent_cluster_lost_when_its_web_host_clock_was_ahead(
    agent, attempt, settings
):
    settings.MLSCHED_AGENT_TIMEOUT_S = settings.MLSCHED_AGENT_LOST_GRACE_S = 1
    report_with_skewed_clock(agent, attempt, "heartbeat", SKEW)
    time.sleep(1.5)  # east's agent says nothing more
    another_cluster_reports()

    swept = janitor.sweep()

    assert (swept["unhealthy"], swept["lost"]) == (1, 1)
    assert Cluster.objects.get(name="east").health == Cluster.Health.UNHEALTHY
    assert Attempt.objects.get(pk=attempt.pk).outcome == Attempt.Outcome.LOST


@pytest.mark.parametrize("skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_an_end_reported_through_a_skewed_web_host_is_timed_on_the_database_clock(
    agent, attempt, settings, skew
):
    settings.MLSCHED_RETRY_BACKOFF_S = 30
    report_with_skewed_clock(agent, attempt, "heartbeat", skew, phase="lost")

    ended = Attempt.objects.select_related("job").get(pk=attempt.pk)
    now = database_now()
    assert ended.outcome == Attempt.Outcome.LOST
    assert abs((now - ended.ended_at).total_seconds()) < 60
    # The retry waits its backoff, neither ten minutes more nor none at all.
    assert 0 < (ended.job.not_before - now).total_seconds() <= 30


@pytest.mark.parametrize("skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_cancel_through_a_skewed_web_host_is_timed_on_the_database_clock(attempt, skew):
    real_now = timezone.now
    with mock.patch("django.utils.timezone.now", lambda: real_now() + skew):
        actions.cancel(attempt.job)

    asked = Attempt.objects.select_related("job").get(pk=attempt.pk)
    # The scheduler expects the workers back by this time plus the grace, on its own clock.
    assert abs((database_now() - asked.stop_requested_at).total_seconds()) < 60
    assert abs((database_now() - asked.job.finished_at).total_seconds()) < 60

"""An elastic gang's attempt runs at the size it started with (`Attempt.workers`), not at its
job's: its workers are told that world size, its ranks are 0..size-1, and it starts, runs and
succeeds as that gang. The job asks for 4 workers and may start with 2; its attempt has 2."""

import pytest

from clusters import agents
from clusters.agent.runner import spec_from_dict
from clusters.backends import base
from clusters.backends.base import EXITED, RUNNING
from jobs.models import Attempt, Job
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.jobs.test_elastic_accounting import started_with_two

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(east) -> Attempt:
    """Placed on east with 2 of its job's 4 workers, not started."""
    return started_with_two(cluster=east)


def beat(agent, attempt, *phases, codes=None):
    return post(agent, "east", "heartbeat", {"workers": report(attempt, *phases, codes=codes)})


def test_its_workers_are_told_a_world_size_of_two(agent, two):
    (spec,) = post(agent, "east", "heartbeat", {"workers": []}).json()["run"]

    told = spec_from_dict(spec)
    envs = [base.worker_env(told, worker, "east-0", "/ckpt") for worker in told.workers]
    assert [(env["RANK"], env["WORLD_SIZE"]) for env in envs] == [("0", "2"), ("1", "2")]
    # Its range, to keep its global batch whatever it started with: 2 to 4.
    assert {(env["MLSCHED_MIN_WORKERS"], env["MLSCHED_MAX_WORKERS"]) for env in envs} == {
        ("2", "4")
    }


def test_a_heartbeat_naming_rank_3_is_refused_as_outside_the_attempt(agent, two):
    response = post(agent, "east", "heartbeat", {"workers": [
        {"attempt_id": two.pk, "rank": 3, "phase": RUNNING}]})  # fmt: skip

    assert response.status_code == 400
    why = response.json()["workers"]["0"]["rank"]
    assert why == [f"Attempt {two.pk} has ranks 0 to 1, not 3."]


def test_a_heartbeat_naming_rank_1_is_taken(agent, two):
    response = post(agent, "east", "heartbeat", {"workers": [
        {"attempt_id": two.pk, "rank": 1, "phase": RUNNING}]})  # fmt: skip

    assert response.status_code == 200


def test_it_has_started_once_its_two_ranks_run_and_runs_on_without_the_others(agent, two):
    for _ in range(2):  # the second beat, after a worker ran, looks for missing ranks
        assert beat(agent, two, RUNNING, RUNNING).status_code == 200

    two.refresh_from_db()
    assert (two.outcome, two.started_at is not None) == ("", True)
    assert Job.objects.get(pk=two.job_id).state == State.RUNNING


def test_it_succeeds_once_its_two_ranks_exit_0(agent, two):
    beat(agent, two, RUNNING, RUNNING)

    beat(agent, two, EXITED, EXITED, codes=[0, 0])

    assert Attempt.objects.get(pk=two.pk).outcome == Attempt.Outcome.SUCCEEDED
    assert Job.objects.get(pk=two.job_id).state == State.SUCCEEDED


def test_declared_lost_its_two_ranks_exiting_0_are_a_late_success(east, two):
    Attempt.objects.filter(pk=two.pk).update(outcome=Attempt.Outcome.LOST)
    exited = [base.WorkerStatus(two.pk, rank, EXITED, exit_code=0) for rank in range(2)]

    assert agents.succeeded_while_lost(east, {two.pk: exited}) == [two.pk]

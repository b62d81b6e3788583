"""Fixtures of the dependency tests (test_dependencies, test_dependency_kinds, test_singleton,
test_dependency_update): the "normal" priority class their submissions name, room for every job
of a test at once, and the jobs a submission might name."""

import pytest

from jobs import actions, cycle
from jobs.models import Attempt, Family, Job
from tests.factories import NodeFactory, PriorityClassFactory

STEP = {"name": "step", "family": Family.TRAINING, "image": "pytorch:2", "command": ["python"],
        "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 600}  # fmt: skip


@pytest.fixture
def normal_priority(db):
    """The class a submission names by default (the API's, the form's, the command line's)."""
    return PriorityClassFactory(name="normal", value=0)


@pytest.fixture
def room(db):
    """Room for every job of a test at once: only a dependency keeps one from being placed."""
    return NodeFactory.create_batch(2, gpu_count=8)


@pytest.fixture
def jobs(alice, alpha, charlie, gamma, room, normal_priority):
    """Jobs a submission of Alice's to alpha might name: its own, a batch, one that failed, one
    canceled, another tenant's, and an id no job has."""

    def step(owner, tenant, **spec) -> Job:
        job, _ = actions.submit(owner, tenant, {**STEP, "priority_class": normal_priority, **spec})
        return job

    mine, failed, canceled = step(alice, alpha), step(alice, alpha), step(alice, alpha)
    shards = list(step(alice, alpha, family=Family.BATCH_INFERENCE, shards=3).batch())
    cycle.run_cycle()
    attempt = failed.attempts.get(outcome="")
    actions.end_attempt(attempt.pk, Attempt.Outcome.USER_ERROR, exit_code=0, reason="done")
    actions.cancel(canceled, "canceled by alice")
    return {"mine": mine, "shard": shards[1], "batch": shards[0], "failed": failed,
            "canceled": canceled, "charlies": step(charlie, gamma),
            "missing": Job(pk=10**9)}  # fmt: skip

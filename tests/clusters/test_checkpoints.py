"""Checkpoint times the agents report: the latest kept per attempt, in one write per beat; never
one from before the attempt (every attempt of a job shares the checkpoint folder, so a retry
reports its predecessor's marker until it saves one of its own). And end to end: a job's
checkpoint line, read by the local backend, sets what a preemption wastes."""

import sys
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusters import agents
from clusters.agent.runner import Agent
from clusters.backends.base import CHECKPOINT_LINE, RUNNING, STOPPED
from jobs import actions, cycle
from jobs.models import Attempt, Family, LogChunk
from tests.clusters.test_agent_api import post, report
from tests.factories import JobFactory, NodeFactory
from tests.processes import wait_until

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome
AN_HOUR = timedelta(hours=1)


def beat(agent, workers, checkpoint_at=None) -> None:
    saved = {"checkpoint_at": checkpoint_at} if checkpoint_at is not None else {}
    post(agent, "east", "heartbeat", {"workers": [{**w, **saved} for w in workers]})


def an_hour_ago(attempts) -> None:
    """The attempts were placed, and started if they have, an hour earlier."""
    attempts.update(scheduled_at=F("scheduled_at") - AN_HOUR, started_at=F("started_at") - AN_HOUR)


def test_newer_checkpoints_of_many_attempts_are_written_in_one_query(agent, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    JobFactory.create_batch(6, gpus=1)
    cycle.run_cycle()
    attempts = Attempt.objects.filter(cluster=east)
    assert attempts.count() == 6
    running = [w for a in attempts for w in report(a, RUNNING)]
    beat(agent, running)  # the jobs start: writes of their own
    an_hour_ago(attempts)
    recent = timezone.now().timestamp() - 10

    with CaptureQueriesContext(connection) as queries:
        beat(agent, running, checkpoint_at=recent)

    writes = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "jobs_attempt"')]
    assert len(writes) == 1
    for attempt in attempts:
        assert abs(attempt.last_checkpoint_at.timestamp() - recent) < 0.01


def test_a_reported_checkpoint_is_kept_and_never_moves_back(agent, gang):
    an_hour_ago(gang.attempts.all())
    attempt = gang.attempts.get()
    recent = timezone.now().timestamp() - 10
    running = report(attempt, RUNNING, RUNNING)

    beat(agent, running[:1], checkpoint_at=recent)
    beat(agent, running[:1], checkpoint_at=recent - 60)

    attempt.refresh_from_db()
    assert abs(attempt.last_checkpoint_at.timestamp() - recent) < 0.01


@pytest.fixture
def retried(east, agent):
    """A training job whose first attempt checkpointed and was preempted, and whose second
    attempt has just been placed and reported running, with no checkpoint of its own yet: the
    folder still holds the first attempt's marker."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, gpus=4, preemptible=True)
    cycle.run_cycle()
    first = job.attempts.get()
    an_hour_ago(job.attempts.all())
    marker = timezone.now().timestamp() - 60
    beat(agent, report(first, RUNNING), checkpoint_at=marker)
    actions.request_stop([job.pk], Outcome.PREEMPTED, "preempted")
    beat(agent, report(first, STOPPED), checkpoint_at=marker)
    cycle.run_cycle()
    second = job.attempts.get(number=2)
    beat(agent, report(second, RUNNING), checkpoint_at=marker)
    return second


def test_a_retry_does_not_take_its_predecessors_checkpoint_as_its_own(retried):
    retried.refresh_from_db()

    assert retried.started_at is not None
    assert retried.last_checkpoint_at is None


def test_a_retry_preempted_before_its_first_checkpoint_wastes_only_its_own_time(agent, retried):
    actions.request_stop([retried.job_id], Outcome.PREEMPTED, "preempted")
    beat(agent, report(retried, STOPPED))

    retried.refresh_from_db()
    held = (retried.ended_at - retried.scheduled_at).total_seconds()
    assert retried.outcome == Outcome.PREEMPTED
    # Not the minute before it was placed (held to a rounding error: its whole time is lost).
    assert retried.wasted_gpu_seconds <= 4 * held + 1e-6


# Tenants as they were then too: the historical models below write rows of that time.
THEN = ("quotas", "0007_quota_flavor_of_any_gpu_type")
BEFORE_0021 = [("jobs", "0020_job_singleton"), THEN]
AFTER_0021 = [("jobs", "0021_checkpoints_of_their_own"), THEN]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_the_migration_forgets_checkpoints_attempts_took_from_their_predecessors():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_0021)
    old = executor.loader.project_state(BEFORE_0021).apps
    tenant = old.get_model("quotas", "Tenant").objects.create(name="t", slug="t")
    owner = old.get_model("auth", "User").objects.create(username="u")
    normal = old.get_model("quotas", "PriorityClass").objects.create(name="normal", value=0)
    job = old.get_model("jobs", "Job").objects.create(
        tenant=tenant, owner=owner, name="j", family="training", image="i", command=["x"],
        cpu_milli=1, memory_mb=1, gpus=2, workers=2, priority_class=normal, max_runtime_s=60,
    )  # fmt: skip
    placed = timezone.now() - AN_HOUR
    Attempt_ = old.get_model("jobs", "Attempt")

    def attempt(number, checkpoint, **times):
        return Attempt_.objects.create(
            job=job, number=number, scheduled_at=placed, started_at=placed + timedelta(minutes=1),
            last_checkpoint_at=checkpoint, **times,
        ).pk  # fmt: skip

    ended = {"outcome": "preempted", "ended_at": placed + timedelta(minutes=31),
             "wasted_gpu_seconds": 4 * 86_400.0}  # charged from a day-old checkpoint  # fmt: skip
    borrowed = attempt(1, placed - timedelta(days=1), **ended)
    own = attempt(2, placed + timedelta(minutes=11), **{**ended, "wasted_gpu_seconds": 4 * 1260.0})
    live = attempt(3, placed - timedelta(minutes=5))
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER_0021)

    rows = dict(Attempt.objects.values_list("pk", "last_checkpoint_at"))
    assert rows[borrowed] is None and rows[live] is None
    assert rows[own] == placed + timedelta(minutes=11)
    waste = dict(Attempt.objects.values_list("pk", "wasted_gpu_seconds"))
    assert waste[borrowed] == pytest.approx(4 * 31 * 60)  # 2 workers x 2 GPUs, placed to end
    assert waste[own] == 4 * 1260.0


class InProcessControlPlane:
    """The control plane's side of the agent protocol for one cluster, called in-process."""

    def __init__(self, cluster):
        self.cluster = cluster

    def inventory(self, nodes):
        return {}

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
        return agents.heartbeat(self.cluster, workers, resume_logs, usage_epoch=usage_epoch)

    def logs(self, lines):
        agents.store_logs(self.cluster, lines)
        return {}


def stepped_until(agent, check, timeout=15.0):
    """Run agent steps until `check()` is truthy; return its value."""
    value = wait_until(lambda: agent.step() or check(), timeout=timeout, interval=0.05)
    assert value, f"not true within {timeout} s"
    return value


# Waits for the file named by $SAVE_NOW, then saves a checkpoint and says so; runs on.
SAVES_WHEN_TOLD = """
import os, time
while not os.path.exists(os.environ["SAVE_NOW"]):
    time.sleep(0.05)
print(time.time(), flush=True)
print(os.environ["MLSCHED_CHECKPOINT_LINE"], flush=True)
time.sleep(60)
"""


def test_a_preempted_attempt_wastes_only_the_work_since_the_checkpoint_its_worker_printed(
    east, backend, tmp_path
):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    save_now = tmp_path / "save-now"
    command = [sys.executable, "-c", SAVES_WHEN_TOLD]
    job = JobFactory(preemptible=True, command=command, env={"SAVE_NOW": str(save_now)})
    cycle.run_cycle()
    attempt = job.attempts.get()
    agent = Agent(InProcessControlPlane(east), backend)
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).started_at)
    an_hour_ago(Attempt.objects.filter(pk=attempt.pk))

    save_now.touch()
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).last_checkpoint_at)
    actions.request_stop([job.pk], Outcome.PREEMPTED, "preempted")
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).ended_at)

    attempt.refresh_from_db()
    printed, line = LogChunk.objects.filter(attempt=attempt).order_by("seq")
    assert line.text == CHECKPOINT_LINE  # in the job's log as any other line
    assert 0 <= attempt.last_checkpoint_at.timestamp() - float(printed.text) < 2
    assert attempt.outcome == Outcome.PREEMPTED
    lost = attempt.ended_at - attempt.last_checkpoint_at
    placing = attempt.started_at - attempt.scheduled_at
    assert attempt.wasted_gpu_seconds == pytest.approx((lost + placing).total_seconds())
    assert attempt.wasted_gpu_seconds < 60  # not the hour since its start

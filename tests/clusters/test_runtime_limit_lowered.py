"""A running job's runtime limit, lowered (actions.set_runtime_limit), reaches its workers: the
heartbeat names each started attempt with its job's limit, the agent gives the backend a limit
that changed, and the local backend's shim stops a worker that has run that long, as timed out
(the Kubernetes backend's pods: tests/k8s/test_runtime_limit_lowered.py)."""

import json
import sys
import time
from types import SimpleNamespace

import pytest

from clusters.agent.runner import Agent
from clusters.backends import base, local_shim
from jobs import actions, cycle
from jobs.models import Attempt, Job
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.clusters.test_agent_runner import Recorder, Reports, running
from tests.clusters.test_checkpoints import InProcessControlPlane, stepped_until
from tests.clusters.test_local_backend import ended, phases, spec
from tests.factories import JobFactory, NodeFactory
from tests.processes import wait_until

pytestmark = pytest.mark.django_db
SLEEPS = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_the_heartbeat_names_a_started_attempt_with_its_jobs_limit_as_lowered(agent, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(gpus=1, max_runtime_s=3600)
    cycle.run_cycle()
    attempt = job.attempts.get()
    beat = {"workers": report(attempt, base.RUNNING)}
    post(agent, "east", "heartbeat", beat)

    actions.set_runtime_limit(Job.objects.get(pk=job.pk), 600, "alice")

    run = post(agent, "east", "heartbeat", beat).json()["run"]
    assert run == [{"attempt_id": attempt.pk, "max_runtime_s": 600}]


def test_the_agent_gives_the_backend_a_limit_that_changed_once():
    attempt = SimpleNamespace(pk=7)
    backend = Reports([running(attempt)])
    answers = [
        {"run": [{"attempt_id": attempt.pk, "max_runtime_s": limit}], "stop": []}
        for limit in (3600, 3600, 600, 600)
    ]
    control = Recorder()
    control.heartbeat = lambda *args, **kwargs: answers.pop(0)
    agent = Agent(control, backend)
    agent.limits[attempt.pk] = 3600  # as its start gave it

    for _ in range(4):
        agent.step()

    assert backend.lowered == [(attempt.pk, 600)]


def test_a_restarted_agent_gives_each_running_attempt_its_limit_once():
    attempt = SimpleNamespace(pk=7)
    backend = Reports([running(attempt)])
    control = Recorder(answer={"run": [{"attempt_id": attempt.pk, "max_runtime_s": 3600}],
                               "stop": []})  # fmt: skip
    agent = Agent(control, backend)  # it knows of no limit given before it began

    agent.step()
    agent.step()

    assert backend.lowered == [(attempt.pk, 3600)]


def started(backend, command=SLEEPS, runtime=3600, workers=1):
    backend.start(spec(command, workers=workers, runtime=runtime))
    assert wait_until(
        lambda: all((backend.worker_dir(1, r) / "child.pid").exists() for r in range(workers)),
        timeout=10,
    )


def test_a_lowered_limit_the_workers_have_run_past_stops_them_as_timed_out(backend):
    started(backend, workers=2)
    begun = time.monotonic()

    backend.lower_runtime_limit(1, 1)

    assert ended(backend, workers=2)
    assert {s.phase for s in phases(backend).values()} == {base.TIMED_OUT}
    assert time.monotonic() - begun < 1 + 2 + 5  # the shim reads it within a second or so


def test_a_lowered_limit_counts_from_the_launch_and_a_higher_one_is_left(backend):
    started(backend)
    backend.lower_runtime_limit(1, 30)
    backend.lower_runtime_limit(1, 3600)  # not lower: left

    written = backend.worker_dir(1, 0) / local_shim.LIMIT
    assert written.read_text() == "30"
    time.sleep(2)
    assert phases(backend)[0].phase == base.RUNNING  # 30 s from its launch: not yet
    backend.stop(1, grace_s=1)
    assert ended(backend)


# The worker prints its MLSCHED_STOP_AT, then its MLSCHED_STOP_AT_FILE as it reads it at once
# and once it has changed.
READS_STOP_AT = [
    sys.executable,
    "-c",
    """
import os, time
path = os.environ["MLSCHED_STOP_AT_FILE"]
first = open(path).read()
print(os.environ["MLSCHED_STOP_AT"], first, flush=True)
while open(path).read() == first:
    time.sleep(0.05)
print(open(path).read(), flush=True)
""",
]


def log_text(directory) -> str:
    """The worker's output lines so far, each ended by a newline."""
    records = (directory / "log").read_bytes().splitlines()
    return "".join(local_shim.parse_record(record)[1] + "\n" for record in records)


def test_the_stop_at_file_says_the_stop_sooner_by_what_the_limit_lost(backend):
    started(backend, command=READS_STOP_AT)
    directory = backend.worker_dir(1, 0)
    assert wait_until(lambda: (directory / "log").exists() and "\n" in log_text(directory), 10)

    backend.lower_runtime_limit(1, 600)

    assert ended(backend)
    variable, at_start, lowered = log_text(directory).split()
    assert at_start == variable
    assert int(lowered) == int(variable) - (3600 - 600)
    assert (directory / base.STOP_AT_FILE).stat().st_mode & 0o777 == 0o644  # the worker's user


def test_a_worker_that_ended_is_given_no_limit(backend):
    started(backend, command=[sys.executable, "-c", "pass"])
    assert ended(backend)

    backend.lower_runtime_limit(1, 1)

    assert not (backend.worker_dir(1, 0) / local_shim.LIMIT).exists()
    assert phases(backend)[0].phase == base.EXITED


def test_the_shim_keeps_the_lowest_limit_it_read_when_the_file_is_torn(tmp_path):
    limit = local_shim.limit_of(tmp_path, {"max_runtime_s": 3600})
    assert limit() == 3600
    (tmp_path / local_shim.LIMIT).write_text("60")
    assert limit() == 60
    (tmp_path / local_shim.LIMIT).write_text("")  # torn: the last one read stands
    assert limit() == 60
    (tmp_path / local_shim.LIMIT).write_text("7200")  # never above what it had
    assert limit() == 60


def test_a_running_job_whose_limit_is_lowered_below_its_run_fails_as_timed_out(east, backend):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(gpus=1, max_runtime_s=3600, command=SLEEPS, max_retries=3)
    cycle.run_cycle()
    attempt = job.attempts.get()
    agent = Agent(InProcessControlPlane(east), backend)
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).started_at)
    (directory,) = backend.worker_dirs(attempt.pk)
    assert json.loads((directory / "spec.json").read_text())["max_runtime_s"] == 3600

    actions.set_runtime_limit(Job.objects.get(pk=job.pk), 1, "alice")
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).ended_at)

    attempt.refresh_from_db()
    job.refresh_from_db()
    assert attempt.outcome == Attempt.Outcome.TIMEOUT
    assert job.state == State.FAILED  # a timeout is not retried

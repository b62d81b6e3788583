"""Real jobs through the whole system: the control plane (a live server), a scheduler process,
an agent process with the local backend, and the workers' own processes."""

import os
import signal
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.models import Cluster
from jobs import actions
from jobs.models import Attempt, Family, Job, LogChunk
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, PriorityClassFactory
from tests.processes import gone, manage, process_env, stop_platform, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
GRACE_S = 2


class Platform:
    def __init__(self, url: str, var: Path, **env):
        self.url, self.var = url, var
        self.cluster = ClusterFactory(name="local", health="healthy")
        self.token = self.cluster.rotate_token()
        self.env = process_env(MLSCHED_VAR_DIR=var, MLSCHED_STOP_GRACE_S=GRACE_S,
                               MLSCHED_AGENT_TOKEN=self.token, **env)  # fmt: skip
        self.scheduler = manage("run_scheduler", "--interval", "0.3", env=self.env)
        self.agent = None
        self.start_agent()

    def start_agent(self):
        self.agent = manage("run_agent", "--cluster", "local", "--url", self.url, "--inventory",
                            "2x8xA100", "--interval", "0.3", env=self.env)  # fmt: skip

    def workers_dir(self) -> Path:
        return self.var / "agents" / "local" / "workers"

    def child_pids(self, attempt: Attempt) -> list[int]:
        files = sorted((self.workers_dir() / str(attempt.pk)).glob("*/child.pid"))
        return [int(f.read_text()) for f in files]

    def stop(self):
        stop_platform((self.agent, self.scheduler), self.var)


@pytest.fixture
def platform(live_server, tmp_path, settings):
    settings.MLSCHED_STOP_GRACE_S = GRACE_S
    settings.MLSCHED_RETRY_BACKOFF_S = 0.5
    running = Platform(live_server.url, tmp_path)
    yield running
    running.stop()


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / f"job_{time.monotonic_ns()}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def wait_for_state(job: Job, *states: str, timeout: float = 60) -> str | None:
    def reached():
        job.refresh_from_db()
        return job.state if job.state in states else None

    return wait_until(reached, timeout, interval=0.2)


def logs(job: Job) -> list[str]:
    return list(
        LogChunk.objects.filter(attempt__job=job).order_by("attempt", "worker", "seq")
        .values_list("text", flat=True)
    )  # fmt: skip


RENDEZVOUS = """
    import os, socket, time
    rank, world = int(os.environ["RANK"]), os.environ["WORLD_SIZE"]
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    print(f"rank={rank} world={world} gpus={os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
    if rank == 0:
        server = socket.create_server((addr, port))
        server.settimeout(30)
        conn, _ = server.accept()
        conn.sendall(b"hello")
        conn.close()
    else:
        deadline = time.time() + 30
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=1)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        print("rank 1 got", conn.recv(5).decode(), flush=True)
"""


def test_a_two_worker_gang_starts_together_and_succeeds(platform, tmp_path):
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=8, gpu_types=["A100"],
                     command=script(tmp_path, RENDEZVOUS))  # fmt: skip

    assert wait_for_state(job, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED

    lines = logs(job)
    assert "rank=0 world=2 gpus=0,1,2,3,4,5,6,7" in lines
    assert "rank=1 world=2 gpus=0,1,2,3,4,5,6,7" in lines
    assert "rank 1 got hello" in lines  # both workers were up at once: they met
    attempt = job.attempts.get()
    nodes = set(attempt.allocations.values_list("node__name", flat=True))
    assert len(nodes) == 2  # same GPU indices, different nodes: disjoint devices
    assert list(job.events.values_list("to_state", flat=True)) == [
        State.SCHEDULED, State.RUNNING, State.SUCCEEDED]  # fmt: skip


def test_a_job_that_exits_3_fails_with_exit_code_3_and_no_retry(platform, tmp_path):
    job = JobFactory(gpus=1, max_retries=3,
                     command=script(tmp_path, "import sys; print('bad'); sys.exit(3)"))  # fmt: skip

    assert wait_for_state(job, State.FAILED, State.SUCCEEDED) == State.FAILED

    attempt = job.attempts.get()
    assert (attempt.outcome, attempt.exit_code) == (Attempt.Outcome.USER_ERROR, 3)
    job.refresh_from_db()
    assert job.retries_used == 0
    assert "bad" in logs(job)


RESUMABLE = """
    import os, pathlib, time
    checkpoint = pathlib.Path(os.environ["MLSCHED_CHECKPOINT_DIR"])
    if os.environ.get("MLSCHED_RESUME") == "1":
        print("resumed from", (checkpoint / "step").read_text(), "in", checkpoint, flush=True)
    else:
        (checkpoint / "step").write_text("step-42")
        print("first attempt in", checkpoint, flush=True)
        time.sleep(120)
"""


def test_a_worker_killed_by_sigkill_is_retried_and_resumes_from_its_checkpoint(platform, tmp_path):
    job = JobFactory(gpus=1, max_retries=2, command=script(tmp_path, RESUMABLE))
    assert wait_for_state(job, State.RUNNING)
    first = job.attempts.get()
    pids = wait_until(lambda: platform.child_pids(first), timeout=10)

    os.kill(pids[0], signal.SIGKILL)  # the node "loses" the worker

    assert wait_for_state(job, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED
    attempts = list(job.attempts.order_by("number"))
    assert [(a.number, a.outcome) for a in attempts] == [
        (1, Attempt.Outcome.INFRA_ERROR), (2, Attempt.Outcome.SUCCEEDED)]  # fmt: skip
    lines = logs(job)
    checkpoint = lines[0].split(" in ")[1]
    assert f"resumed from step-42 in {checkpoint}" in lines


SLOW_MARKED = """
    import os, sys, time
    with open(sys.argv[1], "a") as f:
        f.write(f"start {os.environ['MLSCHED_JOB_ID']} {os.getpid()}\\n")
    time.sleep(8)
    with open(sys.argv[1], "a") as f:
        f.write(f"end {os.environ['MLSCHED_JOB_ID']} {os.getpid()}\\n")
"""


def test_a_killed_and_restarted_agent_loses_no_job_and_runs_none_twice(platform, tmp_path):
    marks = tmp_path / "marks"
    command = [*script(tmp_path, SLOW_MARKED), str(marks)]
    jobs = [JobFactory(gpus=2, command=command) for _ in range(3)]
    assert all(wait_for_state(j, State.RUNNING) for j in jobs)

    platform.agent.send_signal(signal.SIGKILL)
    platform.agent.communicate(timeout=10)
    time.sleep(1)
    platform.start_agent()

    assert all(wait_for_state(j, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED for j in jobs)
    records = [line.split() for line in marks.read_text().splitlines()]
    started = sorted(job_id for kind, job_id, _ in records if kind == "start")
    ended = sorted(job_id for kind, job_id, _ in records if kind == "end")
    assert started == ended == sorted(str(j.pk) for j in jobs)  # each ran once, to its end
    assert all(j.attempts.count() == 1 for j in jobs)
    assert Cluster.objects.get(name="local").health == Cluster.Health.HEALTHY


def test_a_job_that_ended_while_its_silent_agent_was_declared_lost_succeeds_and_runs_once(
    live_server, tmp_path, settings
):
    settings.MLSCHED_STOP_GRACE_S = GRACE_S
    ClusterFactory(name="elsewhere", last_heartbeat=timezone.now() + timedelta(hours=1))
    # The janitor (in the scheduler) declares a silent agent's work lost after 3 s, well
    # before the job's 8 s are over; the retry would wait 600 s.
    platform = Platform(live_server.url, tmp_path, MLSCHED_AGENT_TIMEOUT_S=2,
                        MLSCHED_AGENT_LOST_GRACE_S=3, MLSCHED_RETRY_BACKOFF_S=600)  # fmt: skip
    try:
        marks = tmp_path / "marks"
        job = JobFactory(gpus=2, command=[*script(tmp_path, SLOW_MARKED), str(marks)])
        assert wait_for_state(job, State.RUNNING)
        platform.agent.send_signal(signal.SIGKILL)
        platform.agent.communicate(timeout=10)
        assert wait_for_state(job, State.QUEUED)  # declared lost, while its worker runs on
        assert wait_until(lambda: "end" in marks.read_text(), 30)  # and ends, exit 0

        platform.start_agent()

        assert wait_for_state(job, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED
        time.sleep(2)  # a few scheduler cycles: the retry is never placed
        assert [line.split()[0] for line in marks.read_text().splitlines()] == ["start", "end"]
        assert list(job.attempts.values_list("outcome", flat=True)) == [Attempt.Outcome.SUCCEEDED]
    finally:
        platform.stop()


STUBBORN = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ignoring SIGTERM", flush=True)
    time.sleep(300)
"""


def test_cancel_ends_all_processes_of_a_running_job_within_the_grace_period(platform, tmp_path):
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=1,
                     command=script(tmp_path, STUBBORN))  # fmt: skip
    assert wait_for_state(job, State.RUNNING)
    attempt = job.attempts.get()
    pids = wait_until(lambda: len(p := platform.child_pids(attempt)) == 2 and p, timeout=10)
    started = time.monotonic()

    actions.cancel(job)

    assert wait_until(lambda: all(gone(pid) for pid in pids), timeout=GRACE_S + 10)
    assert time.monotonic() - started < GRACE_S + 3
    attempt.refresh_from_db()
    assert wait_until(lambda: Attempt.objects.get(pk=attempt.pk).outcome, timeout=10) == "canceled"


def test_a_preempted_job_is_stopped_and_requeued_and_the_preemptor_runs(platform, tmp_path):
    low = JobFactory(family=Family.TRAINING, workers=2, gpus=8, preemptible=True,
                     priority_class=PriorityClassFactory(name="low", value=-100),
                     command=script(tmp_path, "import time; time.sleep(300)"))  # fmt: skip
    assert wait_for_state(low, State.RUNNING)
    victim = low.attempts.get()
    pids = wait_until(lambda: len(p := platform.child_pids(victim)) == 2 and p, timeout=10)

    high = JobFactory(family=Family.TRAINING, workers=2, gpus=8,
                      priority_class=PriorityClassFactory(name="high", value=100,
                                                          may_preempt=True),
                      command=script(tmp_path, "print('urgent work done')"))  # fmt: skip

    assert wait_for_state(high, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED
    assert all(gone(pid) for pid in pids)
    victim.refresh_from_db()
    low.refresh_from_db()
    assert victim.outcome == Attempt.Outcome.PREEMPTED
    assert low.retries_used == 0
    assert low.state in (State.QUEUED, State.SCHEDULED, State.RUNNING)  # back in line

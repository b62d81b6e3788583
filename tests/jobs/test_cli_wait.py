"""`wait ID` and `submit --wait`: the CLI blocks until the job has ended and exits as it did,
so a pipeline can run a job as one of its steps (Slurm's sbatch --wait, kubectl wait)."""

import json
import select
import subprocess
import sys
import time

import pytest

from jobs import actions
from jobs.cli.waiting import TIMED_OUT
from jobs.models import Attempt, Job
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import AttemptFactory, JobFactory, PriorityClassFactory
from tests.jobs.test_cli import SPEC, Canned, answering
from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def start_cli(live_server, alice):
    """Start the CLI against the live server; the test moves the job on meanwhile."""
    _, token = create_token(alice, "wait tests")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}

    def start(*args, url=None) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT,
                                env={**env, "MLSCHED_URL": url or env["MLSCHED_URL"]},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip

    return start


def said(waiting: subprocess.Popen, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = waiting.communicate(stdin, timeout=60)
    return waiting.returncode, out, err


def next_line(waiting: subprocess.Popen, timeout: float = 30) -> str:
    """The next line the CLI prints on its standard output (each is flushed whole)."""
    ready, _, _ = select.select([waiting.stdout], [], [], timeout)
    assert ready, f"no line in {timeout} s"
    return waiting.stdout.readline()


def until_read(waiting: subprocess.Popen, seconds: float = 1.5) -> None:
    """Let the CLI read the job once before it moves (it reads at once, then after a second)."""
    time.sleep(seconds)
    assert waiting.poll() is None


def test_wait_returns_once_the_job_has_succeeded_saying_each_state_it_went_through(
    start_cli, alpha, alice
):
    job = JobFactory(tenant=alpha, owner=alice)
    attempt = AttemptFactory(job=job)

    waiting = start_cli("wait", str(job.pk))
    until_read(waiting)
    actions.transition(job, State.SCHEDULED, "placed")
    actions.mark_running(attempt.pk)
    until_read(waiting)
    actions.end_attempt(attempt.pk, Attempt.Outcome.SUCCEEDED, exit_code=0)
    code, out, err = said(waiting)

    assert code == 0, err
    assert out == "succeeded\n"
    assert err.splitlines()[0] == f"job {job.pk} queued"
    assert f"job {job.pk} running" in err.splitlines()
    assert err.splitlines()[-1] == f"job {job.pk} succeeded"


def test_wait_exits_with_a_failed_jobs_exit_code_and_says_why_it_failed(start_cli, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    attempt = AttemptFactory(job=job)

    waiting = start_cli("wait", str(job.pk))
    until_read(waiting)
    actions.end_attempt(attempt.pk, Attempt.Outcome.USER_ERROR, exit_code=3,
                        reason="worker 0 exited with code 3")  # fmt: skip
    code, out, _ = said(waiting)

    assert code == 3
    assert out == "failed: worker 0 exited with code 3\n"


def test_a_job_failed_without_an_exit_code_or_canceled_exits_1(start_cli, alpha, alice):
    lost = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING, max_retries=0)
    attempt = AttemptFactory(job=lost)
    queued = JobFactory(tenant=alpha, owner=alice)

    waiting_lost = start_cli("wait", str(lost.pk))
    waiting_queued = start_cli("wait", str(queued.pk))
    until_read(waiting_queued)
    actions.end_attempt(attempt.pk, Attempt.Outcome.LOST, reason="its node went away")
    actions.cancel(queued, "canceled by alice")

    assert said(waiting_lost)[:2] == (1, "failed: lost: its node went away (retries exhausted)\n")
    assert said(waiting_queued)[:2] == (1, "canceled: canceled by alice\n")


def test_a_batch_is_waited_for_until_every_shard_has_ended(start_cli, alpha, alice):
    first = JobFactory(tenant=alpha, owner=alice, family="batch_inference", shards=2,
                       shard_index=0, state=State.SUCCEEDED)  # fmt: skip
    second = JobFactory(tenant=alpha, owner=alice, family="batch_inference", shards=2,
                        shard_index=1, parent=first, state=State.RUNNING)  # fmt: skip
    attempt = AttemptFactory(job=second)

    waiting = start_cli("wait", str(first.pk))
    until_read(waiting)
    actions.end_attempt(attempt.pk, Attempt.Outcome.USER_ERROR, exit_code=7, reason="exit 7")
    code, out, err = said(waiting)

    assert err.splitlines()[0] == f"job {first.pk} running"  # the batch's state, not shard 0's
    assert (code, out) == (1, "failed\n")  # no one exit code stands for the batch


def test_wait_gives_up_after_its_timeout_with_status_124(start_cli, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    began = time.monotonic()
    code, out, err = said(start_cli("wait", str(job.pk), "--timeout", "2"))

    assert code == TIMED_OUT == 124
    assert out == ""
    assert err.splitlines()[-1] == f"job {job.pk} still queued after 2 s"
    assert time.monotonic() - began < 30


def test_submit_wait_prints_the_new_job_then_waits_for_it(start_cli, alpha, alice):
    PriorityClassFactory(name="normal", value=0)

    waiting = start_cli("submit", "-", "--wait")
    waiting.stdin.write(json.dumps(SPEC))
    waiting.stdin.close()
    until_read(waiting, 3)
    job = Job.objects.get(owner=alice)
    actions.cancel(job, "canceled by alice")
    out, err = waiting.stdout.read(), waiting.stderr.read()
    waiting.wait(timeout=60)

    assert waiting.returncode == 1, err
    assert out.splitlines() == [f"{job.pk} queued", "canceled: canceled by alice"]


def test_submit_refuses_wait_with_test_only(start_cli):
    code, _, err = said(start_cli("submit", "-", "--wait", "--test-only"), json.dumps(SPEC))

    assert code == 2 and "--test-only submits none" in err


class Restarting(Canned):
    """A web app restarting behind its proxy: two 503s, then the job, ended."""

    answered = 0

    def do_GET(self):
        type(self).answered += 1
        if self.answered <= 2:
            self.reply(503, b"Service Unavailable", "text/plain")
            return
        job = {"id": 5, "state": "succeeded", "pending_reason": "", "end_reason": "exit code 0",
               "attempts": []}  # fmt: skip
        self.reply(200, json.dumps(job).encode())


def test_wait_asks_again_while_the_server_answers_503_and_then_ends(start_cli):
    with answering(type("Handler", (Restarting,), {"answered": 0})) as url:
        code, out, err = said(start_cli("wait", "5", url=url))

    assert (code, out) == (0, "succeeded\n"), err
    assert err.count("error 503: Service Unavailable: asking again") == 2


def test_any_other_refusal_ends_the_wait_at_once(start_cli):
    theirs = JobFactory()  # another team's

    code, _, err = said(start_cli("wait", str(theirs.pk)))

    assert code == 1 and err.startswith("error 404")


class RestartingLogs(Canned):
    """A job's log read while the web app restarts: its first page a 503, then its line."""

    answered = 0

    def do_GET(self):
        if self.path.startswith("/api/v1/jobs/5/logs/"):
            type(self).answered += 1
            if self.answered == 1:
                self.reply(503, b"Service Unavailable", "text/plain")
                return
            after = 0 if "after=0" in self.path else 1
            lines = [{"attempt": 1, "worker": 0, "stream": "stdout", "text": "hello"}]
            self.reply(200, json.dumps({"lines": lines[after:], "next": 1}).encode())
            return
        job = {"id": 5, "state": "succeeded", "parent": None, "shards": 1, "shard_index": 0}
        self.reply(200, json.dumps(job).encode())


def test_a_followed_log_is_read_again_once_the_server_answers_after_a_503(start_cli):
    with answering(type("Handler", (RestartingLogs,), {"answered": 0})) as url:
        code, out, err = said(start_cli("logs", "5", "-f", url=url))
    with answering(type("Handler", (RestartingLogs,), {"answered": 0})) as url:
        once = said(start_cli("logs", "5", url=url))

    assert (code, out) == (0, "[1.0] hello\n"), err
    assert "error 503: Service Unavailable: asking again" in err
    assert once[0] == 1 and once[2].startswith("error 503")  # read once: an error ends it


def test_wait_for_several_jobs_says_how_each_ended_and_fails_if_one_did(start_cli, alpha, alice):
    first = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    second = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    attempts = [AttemptFactory(job=first), AttemptFactory(job=second)]

    waiting = start_cli("wait", str(first.pk), str(second.pk))
    until_read(waiting)
    actions.end_attempt(attempts[1].pk, Attempt.Outcome.USER_ERROR, exit_code=3,
                        reason="worker 0 exited with code 3")  # fmt: skip
    told = next_line(waiting)  # said as it ends; the first still runs: the wait goes on
    assert waiting.poll() is None
    actions.end_attempt(attempts[0].pk, Attempt.Outcome.SUCCEEDED, exit_code=0)
    code, out, _ = said(waiting)

    assert code == 1  # not one job's exit code: 1 for any that did not succeed
    assert [told.rstrip("\n"), *out.splitlines()] == [
        f"{second.pk} failed: worker 0 exited with code 3",
        f"{first.pk} succeeded",
    ]


def test_wait_for_several_jobs_that_all_succeeded_exits_0(start_cli, alpha, alice):
    jobs = [JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED) for _ in range(3)]

    code, out, _ = said(start_cli("wait", *(str(job.pk) for job in jobs)))

    assert code == 0
    assert out.splitlines() == [f"{job.pk} succeeded" for job in jobs]

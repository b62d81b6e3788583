"""The exits of a job's own code it asks to retry (`retry_exit_codes`, Kubernetes'
podFailurePolicy onExitCodes): retried within max_retries as an infrastructure failure is, a
signal's death as 128+N, every other exit failing the job; taken by a submission, the submit
form and the CLI, shown by the job page and `status`, kept by a copy."""

import json
import sys

import pytest

from clusters.agent.runner import Agent
from clusters.backends.local import LocalBackend, parse_inventory
from jobs import actions, cycle
from jobs.cli import describe
from jobs.cli.written import exit_codes_in, exit_codes_said
from jobs.models import Attempt, Job, shell_code
from jobs.serializers import submission_of
from jobs.states import State
from tests.clusters.test_checkpoints import InProcessControlPlane, stepped_until
from tests.factories import JobFactory, NodeFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_exclude_nodes import SPEC, normal, submit  # noqa: F401 (a fixture)
from tests.jobs.test_min_workers_edit import portal_of
from tests.jobs.test_portal import FORM

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def placed(east, **fields) -> Job:
    """A job placed by the cycle and reported running."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(gpus=1, **fields)
    cycle.run_cycle()
    job.refresh_from_db()
    actions.transition(job, State.RUNNING, "started")
    return job


def exits(job: Job, code: int) -> Job:
    attempt = job.attempts.get(outcome="")
    reason = f"worker 0 exited with code {code}"
    actions.end_attempt(attempt.pk, Outcome.USER_ERROR, exit_code=code, reason=reason)
    return Job.objects.get(pk=job.pk)


def test_an_exit_it_names_is_retried_with_a_retry_used(east):
    job = exits(placed(east, retry_exit_codes=[75], max_retries=2), 75)

    assert (job.state, job.retries_used) == (State.QUEUED, 1)
    assert job.not_before is not None  # the backoff of an infrastructure failure
    assert job.events.last().reason.startswith("user_error: worker 0 exited with code 75; retry")


def test_an_exit_it_does_not_name_fails_it_at_once(east):
    job = exits(placed(east, retry_exit_codes=[75], max_retries=2), 3)

    assert (job.state, job.retries_used) == (State.FAILED, 0)
    assert job.events.last().reason == "worker 0 exited with code 3"


def test_once_its_retries_are_used_the_exit_fails_it_saying_so(east):
    job = exits(placed(east, retry_exit_codes=[75], max_retries=1, retries_used=1), 75)

    assert job.state == State.FAILED
    assert job.events.last().reason == "worker 0 exited with code 75 (retries exhausted)"


def test_a_set_up_failure_is_not_retried_whatever_its_code(east):
    job = placed(east, retry_exit_codes=[1], max_retries=2)
    attempt = job.attempts.get()

    actions.end_attempt(attempt.pk, Outcome.USER_ERROR, exit_code=1, reason="secret gone",
                        retriable=False)  # fmt: skip

    assert Job.objects.get(pk=job.pk).state == State.FAILED


@pytest.mark.parametrize(("code", "as_shell"), [(3, 3), (-11, 139), (-9, 137), (None, None)])
def test_a_signals_death_reads_as_a_shell_gives_it(code, as_shell):
    assert shell_code(code) == as_shell


def test_a_real_worker_killed_by_a_signal_it_names_is_retried_and_an_other_exit_fails_it(
    east, tmp_path
):
    """The local backend reports a worker killed by SIGSEGV as 139, as a shell does."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    backend = LocalBackend(tmp_path / "state", parse_inventory("1x8xA100", "local"),
                           tmp_path / "ckpt", default_grace_s=2)  # fmt: skip
    segfaults = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    exits_3 = [sys.executable, "-c", "import sys; sys.exit(3)"]
    retried = JobFactory(gpus=1, command=segfaults, retry_exit_codes=[139], max_retries=2)
    failed = JobFactory(gpus=1, command=exits_3, retry_exit_codes=[139], max_retries=2)
    cycle.run_cycle()
    agent = Agent(InProcessControlPlane(east), backend)

    stepped_until(agent, lambda: not Attempt.objects.filter(outcome="").exists(), timeout=30)

    retried, failed = Job.objects.get(pk=retried.pk), Job.objects.get(pk=failed.pk)
    assert (retried.state, retried.retries_used) == (State.QUEUED, 1)
    assert retried.attempts.get().exit_code == 139
    assert retried.attempts.get().reason == "worker 0 exited with code 139 (killed by SIGSEGV)"
    assert (failed.state, failed.retries_used) == (State.FAILED, 0)
    assert failed.attempts.get().exit_code == 3


def test_the_api_takes_them_in_order_and_a_copy_keeps_them(alice, alpha):
    answer = submit(alice, retry_exit_codes=[137, 75])

    assert answer.status_code == 201, answer.content
    assert answer.json()["retry_exit_codes"] == [75, 137]
    assert submission_of(Job.objects.get(pk=answer.json()["id"]))["retry_exit_codes"] == [75, 137]


@pytest.mark.parametrize(
    ("codes", "extra", "said"),
    [
        ([0], {}, "Ensure this value is greater than or equal to 1."),
        ([256], {}, "Ensure this value is less than or equal to 255."),
        ([75, 75], {}, "Exit code 75 is named twice."),
        ("75", {}, 'Expected a list of items but got type "str".'),
        ([75], {"retry_user_errors": True}, "retry_user_errors retries every exit code already"),
    ],
    ids=["zero", "past 255", "twice", "not a list", "beside retry_user_errors"],
)
def test_what_is_no_exit_code_once_is_a_400_naming_retry_exit_codes(alice, alpha, codes, extra,
                                                                   said):  # fmt: skip
    answer = submit(alice, retry_exit_codes=codes, **extra)

    assert answer.status_code == 400
    assert said in str(answer.json()["retry_exit_codes"])
    assert not Job.objects.exists()


def test_text_reads_runs_and_says_them_back():
    codes = exit_codes_in("75, 128-130 3")

    assert codes == [3, 75, 128, 129, 130]
    assert exit_codes_said(codes) == "3, 75, 128-130"
    assert exit_codes_said([1, 2]) == "1, 2"
    for wrong in ("0", "256", "5-3", "x", "1-300"):
        with pytest.raises(ValueError, match="no exit code from 1 to 255"):
            exit_codes_in(wrong)


def test_the_submit_form_takes_them_and_the_job_page_shows_them(alice, alpha):
    portal = portal_of(alice)

    done = portal.post("/jobs/new/", {**FORM, "retry_exit_codes": "75, 134-139"})
    job = Job.objects.get(name=FORM["name"])
    page = portal.get(f"/jobs/{job.pk}/").text
    copy = portal.get(f"/jobs/new/?copy={job.pk}").text
    refused = portal.post("/jobs/new/", {**FORM, "name": "other", "retry_exit_codes": "75, 300"})

    assert done.status_code == 302
    assert job.retry_exit_codes == [75, 134, 135, 136, 137, 138, 139]
    assert '<span id="retry-exit-codes">exit codes 75, 134-139 too</span>' in page
    assert 'name="retry_exit_codes" value="75, 134-139"' in copy
    assert refused.status_code == 400
    assert "&#x27;300&#x27; is no exit code from 1 to 255" in refused.text
    assert not Job.objects.filter(name="other").exists()


def test_the_cli_submits_and_describes_them(mlsched, alice, alpha, tmp_path):  # noqa: F811
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(SPEC))

    status, out, err = mlsched("submit", str(spec), "--retry-exit-codes", "75,128-130")
    job = Job.objects.get(pk=int(out.split()[0]))
    described = dict(describe.fields(json.loads(mlsched("status", str(job.pk))[1])))
    wrong = mlsched("submit", str(spec), "--retry-exit-codes", "0")

    assert status == 0, err
    assert job.retry_exit_codes == [75, 128, 129, 130]
    assert described["Retries"] == (
        "0 of 3 used (infrastructure failures and exit codes 75, 128-130)"
    )
    assert wrong[0] == 2 and "'0' is no exit code from 1 to 255" in wrong[2]

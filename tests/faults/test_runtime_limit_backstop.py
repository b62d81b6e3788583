"""The control plane's runtime limit backstop with real processes: a live server, a scheduler
process (whose janitor asks the stop), an agent process with the local backend that carries it
out, and the workers' own processes."""

import pytest

from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import JobFactory
from tests.faults.test_agent_processes import GRACE_S, Platform, logs, script, wait_for_state
from tests.processes import gone, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT_S = 3600

CHECKPOINTS_ON_SIGTERM = """
    import signal, sys, time
    def stop(*_):
        print("saving a checkpoint", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("training", flush=True)
    while True:
        time.sleep(0.1)
"""


@pytest.fixture
def unenforced(live_server, tmp_path, settings):
    """The platform, its control plane's deadline GRACE_S after an attempt's start: the agent's
    own, an hour away, stands for an agent that does not enforce the limit at all."""
    settings.MLSCHED_STOP_GRACE_S = GRACE_S
    running = Platform(live_server.url, tmp_path, MLSCHED_RUNTIME_LIMIT_SLACK_S=-LIMIT_S)
    yield running
    running.stop()


def test_a_gang_its_agent_lets_run_past_the_limit_is_stopped_with_its_grace_and_fails(
    unenforced, tmp_path
):
    command = script(tmp_path, CHECKPOINTS_ON_SIGTERM)
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=1, max_runtime_s=LIMIT_S,
                     retry_user_errors=True, command=command)  # fmt: skip
    assert wait_for_state(job, State.RUNNING)
    attempt = job.attempts.get()
    pids = wait_until(lambda: len(p := unenforced.child_pids(attempt)) == 2 and p, timeout=10)

    assert wait_for_state(job, State.FAILED, State.QUEUED, State.SUCCEEDED) == State.FAILED

    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.reason) == (
        Attempt.Outcome.TIMEOUT,
        f"ran past its runtime limit of {LIMIT_S}s; the control plane stopped it",
    )
    assert (job.retries_used, job.events.last().reason) == (0, attempt.reason)
    assert logs(job).count("saving a checkpoint") == 2  # each rank had its grace
    assert all(gone(pid) for pid in pids)

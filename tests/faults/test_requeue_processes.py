"""A requeue against a real agent and scheduler: the running workers get their grace period and
go, and the job runs again as its next attempt, no retry used."""

import pytest

from jobs import actions
from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import JobFactory
from tests.faults.test_agent_processes import (  # noqa: F401 - the platform fixture
    logs,
    platform,
    script,
    wait_for_state,
)
from tests.processes import gone, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FIRST_RUNS_SECOND_ENDS = """
    import os, time
    if os.environ["MLSCHED_ATTEMPT"] == "1":
        print("first attempt running", flush=True)
        time.sleep(300)
    print("second attempt done", flush=True)
"""


def test_a_requeued_job_is_stopped_and_runs_again_without_a_retry(platform, tmp_path):  # noqa: F811
    job = JobFactory(family=Family.TRAINING, gpus=8, max_retries=0,
                     command=script(tmp_path, FIRST_RUNS_SECOND_ENDS))  # fmt: skip
    assert wait_for_state(job, State.RUNNING)
    first = job.attempts.get()
    pids = wait_until(lambda: len(p := platform.child_pids(first)) == 1 and p, timeout=10)

    assert actions.requeue(job, "alice") == 1

    assert wait_for_state(job, State.SUCCEEDED, State.FAILED) == State.SUCCEEDED
    first.refresh_from_db()
    assert (first.outcome, first.reason) == (Attempt.Outcome.PREEMPTED, "requeued by alice")
    assert all(gone(pid) for pid in pids)
    job.refresh_from_db()
    assert (job.retries_used, job.attempts.count()) == (0, 2)
    assert logs(job)[-1].strip() == "second attempt done"

"""A worker whose image cannot be had, as a backend reports it (exited 127, the kubelet's
message as its reason): the job's own error, ended at once without using a retry."""

import pytest

from clusters import agents
from clusters.backends import base
from jobs.models import Attempt
from jobs.states import State

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome
NOT_FOUND = (
    "ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image "
    '"registry.local/trian:1": not found'
)


def test_an_image_that_cannot_be_had_is_the_users_error_with_the_kubelets_message():
    statuses = [base.WorkerStatus(1, 0, base.EXITED, 127, NOT_FOUND),
                base.WorkerStatus(1, 1, base.PENDING)]  # fmt: skip

    got = agents.attempt_outcome(statuses, 2, "")

    assert got == (Outcome.USER_ERROR, 127, f"worker 0 exited with code 127 ({NOT_FOUND})")


def test_a_job_whose_image_cannot_be_had_fails_at_once_without_using_a_retry(agent, gang):
    attempt = gang.attempts.get()
    workers = [{"attempt_id": attempt.pk, "rank": rank, "phase": base.EXITED, "exit_code": 127,
                "reason": NOT_FOUND} for rank in (0, 1)]  # fmt: skip

    agent.post("/api/v1/agent/east/heartbeat/", {"workers": workers}, format="json")

    gang.refresh_from_db()
    attempt.refresh_from_db()
    assert (gang.state, gang.retries_used) == (State.FAILED, 0)
    assert attempt.outcome == Outcome.USER_ERROR
    assert NOT_FOUND in attempt.reason

"""Reports that must not stand for what did not happen: a rank named twice or past its gang,
an exit without a code (refused whole, nothing of them applied), a log line named twice in one
batch (kept, counted and answered once)."""

import pytest

from clusters import agents
from clusters.backends import base
from clusters.models import Allocation, Cluster
from jobs import cycle
from jobs.models import Attempt, LogChunk
from jobs.states import State
from tests.clusters.test_agent_api import post
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def worker(attempt, rank, phase, code=None):
    return {"attempt_id": attempt.pk, "rank": rank, "phase": phase, "exit_code": code,
            "reason": ""}  # fmt: skip


def assert_untouched(gang):
    """The gang is as placed: scheduled, not seen running, every GPU still its own."""
    attempt = gang.attempts.get()
    gang.refresh_from_db()
    assert (gang.state, attempt.outcome, attempt.worker_ran_at) == (State.SCHEDULED, "", None)
    assert Allocation.objects.active().filter(attempt=attempt).count() == 16


def test_a_rank_reported_twice_is_refused_and_does_not_stand_for_the_missing_one(agent, gang):
    # Rank 0 reported exited 0 twice; rank 1 never reported: the gang has not succeeded.
    attempt = gang.attempts.get()
    workers = [worker(attempt, 0, base.EXITED, 0), worker(attempt, 0, base.EXITED, 0)]

    response = post(agent, "east", "heartbeat", {"workers": workers})

    assert response.status_code == 400
    assert list(response.json()["workers"]) == ["1"]
    assert "rank" in response.json()["workers"]["1"]
    assert_untouched(gang)


def test_a_rank_past_the_world_size_is_refused_and_does_not_start_the_gang(agent, gang):
    # Ranks 0 and 7 running; rank 1 of this 2-worker gang never came up.
    attempt = gang.attempts.get()
    workers = [worker(attempt, 0, base.RUNNING), worker(attempt, 7, base.RUNNING)]

    response = post(agent, "east", "heartbeat", {"workers": workers})

    assert response.status_code == 400
    assert "rank" in response.json()["workers"]["1"]
    assert_untouched(gang)


def test_a_refused_heartbeat_applies_nothing_of_its_sound_entries(agent, gang, east):
    NodeFactory(cluster=east, name="east-2", gpu_count=8)
    single = JobFactory(gpus=1)
    cycle.run_cycle()
    done = single.attempts.get()
    attempt = gang.attempts.get()
    before = Cluster.objects.get(pk=east.pk).last_heartbeat
    workers = [worker(done, 0, base.EXITED, 0),
               worker(attempt, 1, base.RUNNING), worker(attempt, 1, base.RUNNING)]  # fmt: skip

    response = post(agent, "east", "heartbeat", {"workers": workers})

    assert response.status_code == 400
    single.refresh_from_db()
    assert single.state == State.SCHEDULED
    assert Cluster.objects.get(pk=east.pk).last_heartbeat == before
    assert_untouched(gang)


def test_the_same_rank_of_two_attempts_is_two_workers(agent, gang, east):
    NodeFactory(cluster=east, name="east-2", gpu_count=8)
    single = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt, other = gang.attempts.get(), single.attempts.get()
    workers = [worker(attempt, 0, base.RUNNING), worker(attempt, 1, base.RUNNING),
               worker(other, 0, base.RUNNING)]  # fmt: skip

    response = post(agent, "east", "heartbeat", {"workers": workers})

    assert response.status_code == 200
    gang.refresh_from_db()
    single.refresh_from_db()
    assert (gang.state, single.state) == (State.RUNNING, State.RUNNING)


@pytest.mark.parametrize(
    ("workers", "want"),
    [
        ([(0, base.EXITED, 0), (0, base.EXITED, 0)], None),  # rank 1 has not ended
        ([(0, base.EXITED, 0), (7, base.EXITED, 0)], None),
        ([(1, base.EXITED, 0), (0, base.EXITED, 0)], Outcome.SUCCEEDED),  # in any order
    ],
)
def test_a_gang_succeeds_once_each_of_its_ranks_has_exited_0(workers, want):
    statuses = [base.WorkerStatus(1, rank, phase, code) for rank, phase, code in workers]

    got = agents.attempt_outcome(statuses, 2, "")

    assert (got[0] if got else None) == want


@pytest.mark.parametrize("exit_code", [None, "absent"])
def test_an_exited_worker_without_an_exit_code_is_refused_naming_the_field(agent, gang, exit_code):
    # "exited" is the process's own end: without its code, the job must not be failed as the
    # user's own error ("exited with code None") on its strength.
    attempt = gang.attempts.get()
    ended = worker(attempt, 0, base.EXITED, exit_code)
    if exit_code == "absent":
        del ended["exit_code"]

    response = post(agent, "east", "heartbeat",
                    {"workers": [ended, worker(attempt, 1, base.EXITED, 0)]})  # fmt: skip

    assert response.status_code == 400
    assert "exit_code" in response.json()["workers"]["0"]
    assert_untouched(gang)


def test_a_line_repeated_within_one_batch_is_stored_counted_and_answered_once(
    agent, gang, settings
):
    # Four copies of line 0 are one line: line 1 is within the rate of 4 lines a minute.
    settings.MLSCHED_TENANT_LOG_RATE = 4
    attempt = gang.attempts.get()
    line = {"attempt_id": attempt.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": "l0"}
    nxt = {**line, "seq": 1, "text": "l1"}

    response = post(agent, "east", "logs", {"lines": [line, line, line, line, nxt]})

    kept = list(LogChunk.objects.filter(attempt=attempt).order_by("seq")
                .values_list("text", flat=True))  # fmt: skip
    assert response.status_code == 200
    assert (kept, response.json()["stored"]) == (["l0", "l1"], 2)


def test_a_log_line_of_a_rank_past_the_world_size_is_refused_and_no_line_is_stored(agent, gang):
    # Ranks 0 and 1 of this 2-worker gang may log; rank 7 is none of its workers.
    attempt = gang.attempts.get()
    lines = [
        {"attempt_id": attempt.pk, "rank": rank, "seq": 0, "stream": "stdout", "text": "x"}
        for rank in (0, 1, 7)
    ]

    response = post(agent, "east", "logs", {"lines": lines})

    assert response.status_code == 400
    assert response.json()["lines"] == {
        "2": {"rank": [f"Attempt {attempt.pk} has ranks 0 to 1, not 7."]}
    }
    assert not LogChunk.objects.filter(attempt=attempt).exists()


def test_log_lines_of_every_rank_of_the_gang_are_stored(agent, gang):
    attempt = gang.attempts.get()
    lines = [
        {"attempt_id": attempt.pk, "rank": rank, "seq": seq, "stream": "stdout", "text": "x"}
        for rank in (0, 1)
        for seq in (0, 1)
    ]

    response = post(agent, "east", "logs", {"lines": lines})

    assert (response.status_code, response.json()) == (200, {"stored": 4})


def test_a_body_past_the_size_the_api_takes_is_refused_as_json(agent, gang, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    attempt = gang.attempts.get()
    line = {"attempt_id": attempt.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": "x" * 2048}

    response = post(agent, "east", "logs", {"lines": [line]})

    assert response.status_code == 413
    assert response.json() == {"detail": "The request body is over 1024 bytes."}
    assert not LogChunk.objects.filter(attempt=attempt).exists()

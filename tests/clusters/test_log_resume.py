"""Where a worker's stored log ends, for an agent restarted beside it: the stamps kept with the
lines, the position the heartbeat answers with, and the agent handing it to its backend."""

from datetime import UTC, datetime

import pytest

from clusters import agents
from clusters.agent.runner import Agent
from clusters.backends import base
from jobs import cycle
from jobs.models import LogChunk
from tests.clusters.test_agent_api import post, report
from tests.clusters.test_agent_runner import Recorder, Reports, east_agent, running
from tests.factories import ClusterFactory, JobFactory, NodeFactory

STAMP = 1_790_000_000.25  # exact as a float and to the microsecond


def line(attempt, seq, at=None):
    """A line of rank 0 as an agent sends it; one without a stamp as the local backend's."""
    sent = {"attempt_id": attempt.pk, "rank": 0, "seq": seq, "stream": "stdout", "text": f"l{seq}"}
    return sent if at is None else sent | {"at": at}


def asking(attempt, *ranks):
    return [{"attempt_id": attempt.pk, "rank": rank} for rank in ranks]


def beat(client, cluster, workers, asked):
    """A heartbeat that asks where the `asked` workers' logs end."""
    return post(client, cluster, "heartbeat", {"workers": workers, "resume_logs": asked})


@pytest.mark.django_db
def test_a_line_is_stored_with_the_stamp_the_agent_read_on_it(agent, gang):
    attempt = gang.attempts.get()

    post(agent, "east", "logs", {"lines": [line(attempt, 0, at=STAMP)]})

    assert LogChunk.objects.get().logged_at == datetime.fromtimestamp(STAMP, UTC)


@pytest.mark.django_db
def test_lines_without_stamps_are_stored_as_before_and_their_log_ends_by_seq_alone(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "logs", {"lines": [line(attempt, 0), line(attempt, 1)]})  # local

    workers = report(attempt, base.RUNNING, base.RUNNING)
    answer = beat(agent, "east", workers, asking(attempt, 0))

    assert list(LogChunk.objects.values_list("logged_at", flat=True)) == [None, None]
    assert answer.json()["resume_logs"] == [
        {"attempt_id": attempt.pk, "rank": 0, "seq": 1, "at": None, "taken": 0, "first": None}
    ]


@pytest.mark.django_db
def test_a_stamp_that_is_no_time_is_left_out_and_its_line_kept(agent, gang):
    attempt = gang.attempts.get()
    lines = [line(attempt, 0, at=-1.0), line(attempt, 1, at="soon")]

    response = post(agent, "east", "logs", {"lines": lines})

    assert response.json() == {"stored": 2}
    assert list(LogChunk.objects.values_list("logged_at", flat=True)) == [None, None]


@pytest.mark.django_db
def test_the_heartbeat_answers_where_each_asked_log_ends(agent, gang):
    attempt = gang.attempts.get()
    stamps = [STAMP, STAMP + 1, STAMP + 2, STAMP + 2]  # the last two written at once
    lines = [line(attempt, seq, at=at) for seq, at in enumerate(stamps)]
    post(agent, "east", "logs", {"lines": lines})

    workers = report(attempt, base.RUNNING, base.RUNNING)
    answer = beat(agent, "east", workers, asking(attempt, 0, 1))

    assert answer.json()["resume_logs"] == [
        {"attempt_id": attempt.pk, "rank": 0, "seq": 3, "at": STAMP + 2, "taken": 2,
         "first": {"at": STAMP, "text": "l0"}},
        {"attempt_id": attempt.pk, "rank": 1, "seq": None, "at": None, "taken": 0, "first": None},
    ]  # fmt: skip


@pytest.mark.django_db
def test_the_lines_taken_are_those_in_a_row_with_the_last_stamp(agent, gang):
    attempt = gang.attempts.get()
    stamps = [STAMP, STAMP + 1, STAMP, STAMP]  # the node's clock stepped back a second
    post(agent, "east", "logs", {"lines": [line(attempt, s, at=at) for s, at in enumerate(stamps)]})

    (end,) = beat(agent, "east", [], asking(attempt, 0)).json()["resume_logs"]

    assert (end["seq"], end["at"], end["taken"]) == (3, STAMP, 2)


@pytest.mark.django_db
def test_line_0_is_answered_with_its_stamp_and_its_head_as_kept(agent, gang):
    attempt = gang.attempts.get()
    zero = line(attempt, 0, at=STAMP) | {"text": "\x00" + "é" * (2 * base.LINE_HEAD)}
    post(agent, "east", "logs", {"lines": [zero]})

    (end,) = beat(agent, "east", [], asking(attempt, 0)).json()["resume_logs"]

    assert end["first"] == {"at": STAMP, "text": base.line_head(zero["text"])}
    assert end["first"]["text"] == "\ufffd" + "é" * (base.LINE_HEAD - 1)


@pytest.mark.django_db
def test_a_log_whose_line_0_is_not_stored_with_a_stamp_is_answered_without_it(agent, gang):
    attempt = gang.attempts.get()
    lines = [line(attempt, 0), line(attempt, 1, at=STAMP)]
    lines += [line(attempt, 5, at=STAMP) | {"rank": 1}]  # rank 1's line 0 is missing
    post(agent, "east", "logs", {"lines": lines})

    answer = beat(agent, "east", [], asking(attempt, 0, 1))

    assert [(e["seq"], e["taken"], e["first"]) for e in answer.json()["resume_logs"]] == [
        (1, 1, None),
        (5, 1, None),
    ]


@pytest.mark.django_db
def test_a_heartbeat_that_asks_nothing_is_answered_as_before(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "logs", {"lines": [line(attempt, 0, at=STAMP)]})

    answer = post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING)})

    assert sorted(answer.json()) == ["run", "stop"]


@pytest.mark.django_db
def test_another_clusters_agent_is_told_of_no_line_of_an_attempt_not_its_own(gang, agent_of):
    attempt = gang.attempts.get()
    agents.store_logs(attempt.cluster, [base.LogLine(attempt.pk, 0, 0, "stdout", "x", STAMP)])
    west = agent_of(ClusterFactory(name="west"))

    answer = beat(west, "west", [], asking(attempt, 0))

    assert answer.json()["resume_logs"] == [
        {"attempt_id": attempt.pk, "rank": 0, "seq": None, "at": None, "taken": 0, "first": None}
    ]


@pytest.mark.django_db
def test_a_malformed_ask_is_left_out_and_the_heartbeat_goes_through(agent, gang):
    attempt = gang.attempts.get()
    asked = ["7:0", {"attempt_id": "seven", "rank": 0}, {"attempt_id": attempt.pk, "rank": -1}]

    answer = beat(agent, "east", [], asked + asking(attempt, 1))

    assert answer.status_code == 200
    assert [(e["attempt_id"], e["rank"]) for e in answer.json()["resume_logs"]] == [(attempt.pk, 1)]


@pytest.mark.django_db
def test_one_beat_answers_for_so_many_workers_the_rest_at_the_next(agent, gang, monkeypatch):
    monkeypatch.setattr(agents, "RESUMES_PER_BEAT", 1)
    attempt = gang.attempts.get()

    answer = beat(agent, "east", [], asking(attempt, 0, 1))

    assert [e["rank"] for e in answer.json()["resume_logs"]] == [0]


class WaitingLogs(Reports):
    """A backend restarted beside workers whose logs wait to be told where they resume."""

    def __init__(self, statuses, waiting):
        super().__init__(statuses)
        self.waiting = list(waiting)
        self.resumed: list[dict] = []

    def logs_to_resume(self):
        return list(self.waiting)

    def resume_logs(self, points):
        self.resumed.append(points)
        self.waiting = [key for key in self.waiting if key not in points]


class RecordsAsks(Recorder):
    def __init__(self, answer):
        super().__init__(answer=answer)
        self.asked: list[list] = []

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
        self.asked.append(list(resume_logs))
        return super().heartbeat(workers)


def test_the_agent_asks_where_waiting_logs_end_and_hands_the_answer_to_its_backend():
    ends = [{"attempt_id": 7, "rank": 0, "seq": 4, "at": STAMP, "taken": 2},
            {"attempt_id": 7, "rank": 1, "seq": None, "at": None, "taken": 0}]  # fmt: skip
    control = RecordsAsks({"run": [], "stop": [], "resume_logs": ends})
    backend = WaitingLogs([], [(7, 0), (7, 1)])

    Agent(control, backend).step()

    assert control.asked == [[(7, 0), (7, 1)]]
    assert backend.resumed == [{(7, 0): base.LogResume(4, STAMP, 2), (7, 1): None}]


def test_the_agent_hands_line_0_over_and_leaves_a_malformed_one_out():
    end = {"attempt_id": 7, "seq": 4, "at": STAMP, "taken": 2}
    ends = [end | {"rank": 0, "first": {"at": STAMP - 9, "text": "l0"}},
            end | {"rank": 1, "first": "l0"}]  # fmt: skip
    backend = WaitingLogs([], [(7, 0), (7, 1)])

    Agent(RecordsAsks({"run": [], "stop": [], "resume_logs": ends}), backend).step()

    assert backend.resumed == [
        {
            (7, 0): base.LogResume(4, STAMP, 2, (STAMP - 9, "l0")),
            (7, 1): base.LogResume(4, STAMP, 2),
        }
    ]


def test_a_waiting_log_the_answer_leaves_out_is_asked_for_again():
    ends = [{"attempt_id": 7, "rank": 1, "seq": None, "at": None, "taken": 0},
            {"attempt_id": 7, "seq": 3}]  # fmt: skip
    control = RecordsAsks({"run": [], "stop": [], "resume_logs": ends})
    agent = Agent(control, WaitingLogs([], [(7, 0), (7, 1)]))

    agent.step()
    agent.step()

    assert control.asked == [[(7, 0), (7, 1)], [(7, 0)]]


def test_a_control_plane_that_does_not_say_has_waiting_logs_numbered_from_their_start():
    backend = WaitingLogs([], [(7, 0)])

    Agent(RecordsAsks({"run": [], "stop": []}), backend).step()  # an older release

    assert backend.resumed == [{(7, 0): None}]


@pytest.mark.django_db(transaction=True)
def test_a_restarted_agent_is_told_over_http_where_a_waiting_log_ends(live_server, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()
    shipped = [base.LogLine(attempt.pk, 0, seq, "stdout", f"l{seq}", STAMP + seq) for seq in (0, 1)]
    agents.store_logs(east, shipped)
    backend = WaitingLogs([running(attempt)], [(attempt.pk, 0)])

    east_agent(live_server, east, backend).step()

    first = (STAMP, "l0")
    assert backend.resumed == [{(attempt.pk, 0): base.LogResume(1, STAMP + 1, 1, first)}]

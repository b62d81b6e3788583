"""The agent loop with the local backend's real processes, and stand-ins for the control plane
that refuse or fail log batches, the inventory or heartbeats; and with the real control plane,
heartbeats that it refuses for a broken entry."""

import dataclasses
import json
import logging
import sys

import pytest
import requests

from clusters.agent.client import ControlPlane
from clusters.agent.runner import BATCH_BYTES, HOLD_HEARTBEAT_STEPS, Agent, batches
from clusters.backends import base
from clusters.backends.base import LogLine
from clusters.backends.local import LocalBackend, parse_inventory
from clusters.models import Cluster
from jobs import cycle
from jobs.models import Attempt, Job
from jobs.states import State
from tests.clusters.test_local_backend import ended, phases, spec
from tests.factories import JobFactory, NodeFactory
from tests.processes import wait_until

Outcome = Attempt.Outcome


def bad_request(body=None, status=400):
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body or {"detail": "Bad request."}).encode()
    return requests.HTTPError(f"{status} Client Error", response=response)


class RefusesLogs:
    """Answers heartbeats with nothing to run; refuses every log batch with `status` (a 400
    for its content, a 413 for its size)."""

    def __init__(self, status=400):
        self.log_calls: list[int] = []
        self.heartbeats = 0
        self.status = status

    def inventory(self, nodes):
        return {}

    def logs(self, lines):
        self.log_calls.append(len(lines))
        raise bad_request(status=self.status)

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
        self.heartbeats += 1
        return {"run": [], "stop": []}


@pytest.mark.parametrize("status", [400, 413])
def test_a_refused_log_batch_is_dropped_and_the_heartbeat_still_goes(backend, status):
    backend.start(spec([sys.executable, "-c", "print('hello')"]))
    assert ended(backend)
    control = RefusesLogs(status)
    agent = Agent(control, backend)

    agent.step()
    agent.step()

    assert control.log_calls == [1]  # sent once, not again
    assert control.heartbeats == 2
    assert agent.unsent == []


class RefusesInventory(RefusesLogs):
    def __init__(self):
        super().__init__()
        self.inventories = 0

    def inventory(self, nodes):
        self.inventories += 1
        raise bad_request()

    def logs(self, lines):
        return {}


def test_a_refused_inventory_does_not_stop_the_heartbeats(backend):
    control = RefusesInventory()
    agent = Agent(control, backend)

    agent.step()
    agent.step()

    assert control.inventories == 1  # tried again only at the next inventory step
    assert control.heartbeats == 2


def server_error():
    response = requests.Response()
    response.status_code = 500
    return requests.HTTPError("500 Server Error", response=response)


class Recorder:
    """Takes everything; answers heartbeats with `answer`. `failing` names the calls that raise."""

    def __init__(self, failing=(), answer=None):
        self.failing = set(failing)
        self.answer = answer or {"run": [], "stop": []}
        self.calls: list[str] = []
        self.batches: list[list] = []
        self.epochs: list[str] = []

    def inventory(self, nodes):
        self.calls.append("inventory")
        if "inventory" in self.failing:
            raise requests.ConnectionError("the API server restarts")
        return {}

    def logs(self, lines):
        self.calls.append("logs")
        if "logs" in self.failing:
            raise server_error()
        self.batches.append(lines)
        return {}

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
        self.calls.append("heartbeat")
        self.epochs.append(usage_epoch)
        return self.answer


def test_each_heartbeat_names_the_backends_run_of_counts(backend):
    control = Recorder()
    agent = Agent(control, backend)

    agent.step()
    agent.step()

    assert control.epochs == [backend.usage_epoch] * 2 and backend.usage_epoch


def test_a_failing_inventory_is_tried_again_next_step_and_the_heartbeats_go_on(backend):
    control = Recorder(failing={"inventory"})
    agent = Agent(control, backend)

    for _ in range(3):
        agent.step()

    assert control.calls.count("heartbeat") == 3
    assert control.calls.count("inventory") == 3
    control.failing.clear()
    agent.step()
    agent.step()
    assert control.calls.count("inventory") == 4  # reported: back to every INVENTORY_EVERY steps


def test_failing_log_shipping_holds_the_heartbeat_back_a_few_steps_only(backend):
    backend.start(spec([sys.executable, "-c", "print('last words')"]))
    assert ended(backend)
    control = Recorder(failing={"logs"})
    agent = Agent(control, backend)

    for _ in range(HOLD_HEARTBEAT_STEPS - 1):
        agent.step()
    held = control.calls.count("heartbeat")
    for _ in range(3):
        agent.step()

    assert held == 0  # the job is not reported ended before its last line is in
    assert control.calls.count("heartbeat") == 3
    assert [line.text for line in agent.unsent] == ["last words"]  # kept for a later step
    control.failing.clear()
    agent.step()
    assert [line.text for batch in control.batches for line in batch] == ["last words"]
    assert agent.unsent == []


def test_log_batches_stay_near_a_megabyte_however_long_the_lines(backend):
    lines = [LogLine(1, 0, seq, "stdout", "x" * 60_000) for seq in range(50)]

    sizes = [sum(len(json.dumps(line.text)) for line in batch) for batch in batches(lines)]

    assert sum(len(batch) for batch in batches(lines)) == 50
    assert len(sizes) > 1
    assert max(sizes) <= BATCH_BYTES


class StopFailsOnce(LocalBackend):
    """The local backend, whose first stop of an attempt fails (as a pod delete can)."""

    failed: set[int] = set()

    def stop(self, attempt_id, grace_s):
        if attempt_id not in self.failed:
            self.failed.add(attempt_id)
            raise RuntimeError("delete failed: 503")
        super().stop(attempt_id, grace_s)


def test_a_worker_still_running_past_its_stop_is_asked_to_stop_again(tmp_path):
    backend = StopFailsOnce(tmp_path / "state", parse_inventory("1x8xA100", "local"),
                            tmp_path / "ckpt", default_grace_s=2)  # fmt: skip
    StopFailsOnce.failed = set()
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(120)"]))
    assert wait_until(lambda: phases(backend).get(0) and phases(backend)[0].phase == base.RUNNING,
                      30)  # fmt: skip
    answer = {"run": [], "stop": [{"attempt_id": 1, "grace_s": 0, "reason": "preempted"}]}
    agent = Agent(Recorder(answer=answer), backend, restop_after_s=0)

    agent.step()  # the stop fails; the worker runs on, its GPUs still its own
    assert phases(backend)[0].phase == base.RUNNING
    agent.step()  # asked again

    assert ended(backend)
    assert phases(backend)[0].phase == base.STOPPED


class Reports:
    """A backend that reports these statuses, a list a step (the last one from then on), and
    records what it is asked to do. Its reports may be broken, as no real backend's are."""

    usage_epoch = "reports"

    def __init__(self, *steps: list[base.WorkerStatus]):
        self.steps = list(steps)
        self.asked: list[tuple[str, int]] = []
        self.lowered: list[tuple[int, int]] = []  # the runtime limits given, apart

    def inventory(self):
        return parse_inventory("1x8xA100", "east")

    def status(self):
        return self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]

    def logs(self):
        return []

    def logs_to_resume(self):
        return []

    def resume_logs(self, points):
        pass

    def start(self, spec):
        self.asked.append(("start", spec.attempt_id))

    def stop(self, attempt_id, grace_s):
        self.asked.append(("stop", attempt_id))

    def forget(self, attempt_id):
        self.asked.append(("forget", attempt_id))

    def lower_runtime_limit(self, attempt_id, max_runtime_s):
        self.lowered.append((attempt_id, max_runtime_s))


def running(attempt, rank=0):
    return base.WorkerStatus(attempt.pk, rank, base.RUNNING)


@pytest.fixture
def healthy_and_broken(east):
    """Two 1-GPU jobs placed on east's one node, their attempts in that order: the agent will
    report the first one's worker soundly, the second one's not."""
    NodeFactory(cluster=east, name="east-a100-0", gpu_count=8)
    jobs = [JobFactory(max_retries=3) for _ in range(2)]
    assert sorted(cycle.run_cycle().placed) == [job.pk for job in jobs]
    return [job.attempts.get() for job in jobs]


def east_agent(live_server, east, backend) -> Agent:
    return Agent(ControlPlane(live_server.url, "east", east.rotate_token()), backend)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "broken, why",
    [
        ([(0, base.RUNNING), (0, base.RUNNING)], "Rank 0 of attempt {} is reported twice."),
        ([(3, base.RUNNING)], "Attempt {} has ranks 0 to 0, not 3."),
        ([(0, base.EXITED)], "An exited worker needs its code."),  # and no exit code
    ],
    ids=["rank reported twice", "rank out of range", "exited without code"],
)
def test_a_heartbeat_refused_for_an_entry_goes_again_without_it_and_the_cluster_stays_alive(
    live_server, east, healthy_and_broken, caplog, broken, why
):
    healthy, other = healthy_and_broken
    backend = Reports(
        [running(healthy)] + [base.WorkerStatus(other.pk, rank, ph) for rank, ph in broken]
    )
    agent = east_agent(live_server, east, backend)
    beats = []

    with caplog.at_level(logging.ERROR, logger="clusters.agent.runner"):
        for _ in range(3):
            agent.step()
            beats.append(Cluster.objects.get(pk=east.pk).last_heartbeat)

    assert None not in beats and beats == sorted(set(beats))  # renewed at every step
    assert Job.objects.get(pk=healthy.job_id).state == State.RUNNING
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3  # the broken entry, once a step
    assert f"(attempt {other.pk}, rank {broken[-1][0]}, {broken[-1][1]}) dropped" in messages[0]
    assert why.format(other.pk) in messages[0]
    assert backend.asked == []  # a worker reported or dropped is not started again


@pytest.mark.django_db(transaction=True)
def test_the_attempt_of_a_dropped_entry_is_retried_as_lost_and_its_worker_stopped(
    live_server, east, healthy_and_broken
):
    healthy, other = healthy_and_broken
    backend = Reports(
        [running(healthy), running(other)],
        [running(healthy), running(other, rank=1)],  # its one worker, under a rank it cannot have
    )
    agent = east_agent(live_server, east, backend)

    agent.step()
    agent.step()

    other.refresh_from_db()
    assert (other.outcome, other.reason) == (Outcome.LOST, "worker 0: the agent no longer finds it")
    retried = Job.objects.get(pk=other.job_id)
    assert (retried.state, retried.retries_used) == (State.QUEUED, 1)
    # Lost, its GPUs given back: the worker must not run on.
    assert backend.asked == [("stop", other.pk)]
    assert Job.objects.get(pk=healthy.job_id).state == State.RUNNING


class RefusesHeartbeats(Recorder):
    """Refuses every heartbeat with a 400 whose body is `body`; keeps each one's entry count."""

    def __init__(self, body):
        super().__init__()
        self.body = body
        self.sent: list[int] = []

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
        self.sent.append(len(workers))
        raise bad_request(self.body)


@pytest.mark.parametrize(
    "body, sent",
    [
        ({"detail": "JSON parse error."}, [3]),
        ({"workers": ['Expected a list of items but got type "str".']}, [3]),
        ({"workers": {"non_field_errors": ["Ensure this field has no more than 9 elements."]}},
         [3]),
        ({"workers": {"7": {"rank": ["Rank 0 of attempt 1 is reported twice."]}}}, [3]),
        ({"workers": {"0": {"exit_code": ["An exited worker needs its code."]}}}, [3, 2, 1]),
        ({"workers": [{"exit_code": ["An exited worker needs its code."]}, {}, {}]},
         [3, 2, 1]),
        ({"workers": {"2": {"exit_code": ["An exited worker needs its code."]}}}, [3, 2]),
    ],
    ids=["not about workers", "not by entry", "not by position", "no such position",
         "by position, then again", "by position in a list, then again",
         "a position gone once the named entry is dropped"],
)  # fmt: skip
def test_a_refused_heartbeat_is_sent_again_at_most_twice_a_step(body, sent):
    control = RefusesHeartbeats(body)
    agent = Agent(control, Reports([base.WorkerStatus(1, rank, base.RUNNING) for rank in range(3)]))

    for _ in range(2):
        with pytest.raises(requests.HTTPError):
            agent.step()

    assert control.sent == sent * 2


@pytest.mark.django_db(transaction=True)
def test_a_report_broken_both_in_an_entry_and_in_its_ranks_is_taken_at_the_third_send(
    live_server, east, healthy_and_broken, caplog
):
    healthy, other = healthy_and_broken
    # Refused for the exited entry without its code; without it, for the healthy worker's
    # rank named twice; without that, taken.
    exited = base.WorkerStatus(other.pk, 0, base.EXITED)
    agent = east_agent(live_server, east, Reports([running(healthy), exited, running(healthy)]))

    with caplog.at_level(logging.ERROR, logger="clusters.agent.runner"):
        agent.step()

    assert Cluster.objects.get(pk=east.pk).last_heartbeat is not None
    assert Job.objects.get(pk=healthy.job_id).state == State.RUNNING
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert f"(attempt {other.pk}, rank 0, exited) dropped" in messages[0]
    assert "An exited worker needs its code." in messages[0]
    assert f"Rank 0 of attempt {healthy.pk} is reported twice." in messages[1]


def test_a_run_spec_with_fields_this_agent_does_not_know_is_still_started():
    """A control plane upgraded before its agents may send fields they do not know yet."""
    sent = dataclasses.asdict(spec(["true"]))
    sent["later"], sent["workers"][0]["later"] = 1, 2
    backend = Reports([])

    Agent(Recorder(answer={"run": [sent], "stop": []}), backend).step()

    assert backend.asked == [("start", sent["attempt_id"])]

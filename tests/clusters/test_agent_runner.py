"""The agent loop with the local backend's real processes, and stand-ins for the control plane
that refuse or fail log batches or the inventory."""

import json
import logging
import sys
import threading

import pytest
import requests

from clusters.agent.client import ControlPlane
from clusters.agent.runner import BATCH_BYTES, HOLD_HEARTBEAT_STEPS, Agent, batches
from clusters.backends import base
from clusters.backends.base import LogLine
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, phases, spec
from tests.factories import AttemptFactory, JobFactory
from tests.processes import wait_until


def bad_request():
    response = requests.Response()
    response.status_code = 400
    return requests.HTTPError("400 Client Error: Bad Request", response=response)


class RefusesLogs:
    """Answers heartbeats with nothing to run; refuses every log batch with a 400."""

    def __init__(self):
        self.log_calls: list[int] = []
        self.heartbeats = 0

    def inventory(self, nodes):
        return {}

    def logs(self, lines):
        self.log_calls.append(len(lines))
        raise bad_request()

    def heartbeat(self, workers):
        self.heartbeats += 1
        return {"run": [], "stop": []}


def test_a_refused_log_batch_is_dropped_and_the_heartbeat_still_goes(backend):
    backend.start(spec([sys.executable, "-c", "print('hello')"]))
    assert ended(backend)
    control = RefusesLogs()
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

    def heartbeat(self, workers):
        self.calls.append("heartbeat")
        return self.answer


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


class SameRankTwice:
    """A backend whose report names one worker twice (no real backend does)."""

    def __init__(self, attempt_id: int):
        self.worker = base.WorkerStatus(attempt_id, 0, base.RUNNING)

    def inventory(self):
        return parse_inventory("1x8xA100", "local")

    def status(self):
        return [self.worker, self.worker]

    def logs(self):
        return []


@pytest.mark.django_db(transaction=True)
def test_a_refused_heartbeat_is_logged_with_what_the_control_plane_names(live_server, east, caplog):
    attempt = AttemptFactory(job=JobFactory(), cluster=east)
    control = ControlPlane(live_server.url, "east", east.rotate_token())
    agent = Agent(control, SameRankTwice(attempt.pk), interval=0.1)
    stop = threading.Event()
    loop = threading.Thread(target=agent.run_forever, args=(stop,))

    with caplog.at_level(logging.ERROR, logger="clusters.agent.runner"):
        loop.start()
        try:
            wait_until(lambda: caplog.records, timeout=20)
        finally:
            stop.set()
            loop.join(timeout=10)

    message = caplog.records[0].getMessage()
    assert message.startswith("control plane refused the report")
    assert f"Rank 0 of attempt {attempt.pk} is reported twice." in message

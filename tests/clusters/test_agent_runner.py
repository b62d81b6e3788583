"""The agent loop with the local backend's real processes, and a stand-in for the control
plane that refuses log batches or the inventory."""

import sys

import requests

from clusters.agent.runner import Agent
from tests.clusters.test_local_backend import ended, spec


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

"""The cluster agent's loop driving the Kubernetes backend, with a stand-in for the control
plane's side of the agent protocol (what should run, what should stop)."""

from dataclasses import asdict

from clusters.agent.runner import Agent
from clusters.backends import base
from tests.k8s.conftest import NAMESPACE, eventually, two_worker_gang


class ControlPlaneStandIn:
    """Answers heartbeats with the attempts to run and to stop; keeps what it is sent."""

    def __init__(self):
        self.run: list[base.AttemptSpec] = []
        self.stop: list[dict] = []
        self.workers: list[base.WorkerStatus] = []
        self.lines: list[base.LogLine] = []

    def inventory(self, nodes):
        return {}

    def heartbeat(self, workers):
        self.workers = workers
        return {"run": [asdict(spec) for spec in self.run], "stop": list(self.stop)}

    def logs(self, lines):
        self.lines.extend(lines)
        return {}


def reported(control, agent):
    agent.step()
    return sorted((w.rank, w.phase, w.exit_code) for w in control.workers)


def shipped(control, agent):
    agent.step()
    return len(control.lines)


def test_it_runs_a_gang_through_the_agent_until_it_is_forgotten(kube, backend):
    control = ControlPlaneStandIn()
    control.run = [two_worker_gang()]
    agent = Agent(control, backend)

    agent.step()  # the gang is wanted and not there: started
    for rank in (0, 1):
        kube.append_log(NAMESPACE, f"mlsched-11-{rank}", f"rank {rank} done")
        kube.exit_pod(NAMESPACE, f"mlsched-11-{rank}", 0)
    want = [(0, base.EXITED, 0), (1, base.EXITED, 0)]
    eventually(lambda: reported(control, agent) == want)
    eventually(lambda: shipped(control, agent) == 2)
    control.run = []  # the control plane has recorded the end
    agent.step()  # ended, reported and no longer wanted: forgotten

    assert kube.pods() == []
    assert sorted((line.rank, line.seq, line.text) for line in control.lines) == [
        (0, 0, "rank 0 done"),
        (1, 0, "rank 1 done"),
    ]


def test_it_stops_a_gang_the_control_plane_cancels(kube, backend):
    control = ControlPlaneStandIn()
    control.run = [two_worker_gang()]
    agent = Agent(control, backend)
    agent.step()
    for rank in (0, 1):
        kube.run_pod(NAMESPACE, f"mlsched-11-{rank}")
    eventually(
        lambda: reported(control, agent) == [(0, base.RUNNING, None), (1, base.RUNNING, None)]
    )

    control.stop = [{"attempt_id": 11, "grace_s": 20, "reason": "canceled"}]

    want = [(0, base.STOPPED, None), (1, base.STOPPED, None)]
    eventually(lambda: reported(control, agent) == want)
    assert sorted(d[3] for d in kube.deletions if d[0] == "pods") == [20, 20]

"""The cluster agent's loop driving the Kubernetes backend, with a stand-in for the control
plane's side of the agent protocol (what should run, what should stop)."""

from dataclasses import asdict

from clusters.agent.runner import Agent
from clusters.backends import base
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, two_worker_gang
from tests.k8s.server import ApiError


class ControlPlaneStandIn:
    """Answers heartbeats with the attempts to run and to stop; keeps what it is sent."""

    def __init__(self):
        self.run: list[base.AttemptSpec] = []
        self.stop: list[dict] = []
        self.workers: list[base.WorkerStatus] = []
        self.lines: list[base.LogLine] = []

    def inventory(self, nodes):
        return {}

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
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


ENDED = {base.EXITED, base.FAILED, base.STOPPED, base.LOST, base.TIMED_OUT}


class EndingControlPlane(ControlPlaneStandIn):
    """Like clusters.agents.heartbeat: an attempt all of whose workers ended is ended in the
    same request, so the answer no longer lists it; notes the lines it had at that moment."""

    def __init__(self, specs):
        super().__init__()
        self.run = list(specs)
        self.lines_at_end: dict[int, list[str]] = {}

    def heartbeat(self, workers, resume_logs=(), usage_epoch=""):
        for spec in list(self.run):
            mine = [w for w in workers if w.attempt_id == spec.attempt_id]
            if len(mine) == spec.world_size and all(w.phase in ENDED for w in mine):
                self.run.remove(spec)
                had = [line.text for line in self.lines if line.attempt_id == spec.attempt_id]
                self.lines_at_end[spec.attempt_id] = had
        return super().heartbeat(workers)


def test_the_control_plane_never_sees_an_end_before_its_last_lines(kube, make_backend):
    backend = make_backend(retry_s=30)  # a reader that lost its stream waits long to retry
    control = EndingControlPlane([one_gpu_worker()])
    agent = Agent(control, backend)
    agent.step()
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    kube.append_log(NAMESPACE, "mlsched-7-0", "epoch 1")
    eventually(lambda: shipped(control, agent) == 1)
    kube.drop_watches()  # an API server restart: the followed log stream ends
    eventually(lambda: kube.open_log_streams() == 0)

    kube.append_log(NAMESPACE, "mlsched-7-0", "final loss 0.12", "saved model")
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    eventually(lambda: agent.step() or 7 in control.lines_at_end)
    agent.step()  # ended and no longer wanted: forgotten

    assert control.lines_at_end[7] == ["epoch 1", "final loss 0.12", "saved model"]
    assert kube.pods() == []


def test_a_stop_whose_delete_failed_still_takes_the_pod_away(kube, backend):
    control = EndingControlPlane([one_gpu_worker()])
    agent = Agent(control, backend)
    agent.step()
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    eventually(lambda: reported(control, agent) == [(0, base.RUNNING, None)])
    unavailable = ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")
    kube.fail("DELETE", "/pods/mlsched-7-0$", unavailable)

    control.run = []
    control.stop = [{"attempt_id": 7, "grace_s": 5, "reason": "canceled"}]
    agent.step()  # asks the backend to stop it, once; the delete fails

    eventually(lambda: agent.step() or kube.pods() == [])
    eventually(lambda: reported(control, agent) == [(0, base.STOPPED, None)])


def kept_of(attempt_id, *parts) -> list[str]:
    """The sets and dicts of `parts` that still hold something of the attempt, by name."""
    return [
        f"{type(part).__name__}.{name}"
        for part in parts
        for name, value in vars(part).items()
        if isinstance(value, set | dict)
        and any((key[0] if isinstance(key, tuple) else key) == attempt_id for key in value)
    ]


def test_nothing_of_a_forgotten_attempt_is_kept_once_its_pods_are_gone(kube, backend):
    control = EndingControlPlane([one_gpu_worker()])
    agent = Agent(control, backend)
    agent.step()
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    kube.append_log(NAMESPACE, "mlsched-7-0", "done")
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    eventually(lambda: agent.step() or 7 in control.lines_at_end)

    agent.step()  # ended and no longer wanted: forgotten

    assert kube.pods() == []
    # An agent forgets an attempt for every one it ever ran: it must not keep one per attempt.
    parts = (backend, backend._watcher, backend._logs)
    try:
        eventually(lambda: kept_of(7, *parts) == [])
    except AssertionError:
        raise AssertionError(f"still kept: {kept_of(7, *parts)}") from None

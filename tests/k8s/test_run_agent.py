"""`run_agent --backend kubernetes`: the backend it builds from its options and a kubeconfig,
the node labels it reports as topology (`--topology-label KEY=NODE_LABEL`), and how long a
missing mount may fail before its worker does (`--mount-failure SECONDS`)."""

import re

import pytest
from django.core.management import CommandError, call_command

from clusters.management.commands import run_agent
from clusters.management.commands.run_agent import kubernetes_backend

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "%s"}}]
users: [{name: test, user: {token: t}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


def test_the_agents_kubernetes_options_reach_the_backend(kube, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG % kube.url)

    backend = kubernetes_backend(
        "east", str(config), "ckpt", None, not_ready_grace_s=45.0, isolate_namespaces=False
    )
    try:
        names = sorted(node.name for node in backend.inventory())
    finally:
        backend.close()

    assert names == ["gpu-a", "gpu-b"]  # it talks to the server the kubeconfig names
    assert (backend.not_ready_grace_s, backend.isolate_namespaces) == (45.0, False)


class FirstInventory:
    """Stands for the agent: reads its backend's nodes once instead of running."""

    topology: dict[str, dict[str, str]] = {}

    def __init__(self, control, backend, interval, health=None):
        self.backend = backend

    def run_forever(self, stop):
        try:
            FirstInventory.topology = {n.name: n.topology for n in self.backend.inventory()}
        finally:
            self.backend.close()


def run_kubernetes_agent(config, *options):
    call_command("run_agent", "--cluster", "east", "--backend", "kubernetes",
                 "--kubeconfig", str(config), *options)  # fmt: skip


@pytest.fixture
def kubeconfig(kube, tmp_path, monkeypatch):
    """A kubeconfig naming the test server; run_agent's agent is a FirstInventory."""
    monkeypatch.setenv("MLSCHED_AGENT_TOKEN", "t")
    monkeypatch.setattr(run_agent, "Agent", FirstInventory)
    monkeypatch.setattr(FirstInventory, "topology", {})
    monkeypatch.setattr(run_agent.signal, "signal", lambda *_: None)
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG % kube.url)
    return config


def test_topology_labels_given_replace_the_defaults_on_every_node(kube, kubeconfig):
    kube.add_node("h100-1", gpus=8, labels={"cloud.example/nvlink-block": "b7",
                                            "mlsched.io/rack": "r9"})  # fmt: skip

    run_kubernetes_agent(kubeconfig, "--topology-label", "block=cloud.example/nvlink-block",
                         "--topology-label", "zone=topology.kubernetes.io/zone")  # fmt: skip

    assert FirstInventory.topology == {
        "gpu-a": {"zone": "z1"},  # its mlsched.io/rack is no longer read
        "gpu-b": {"zone": "z1"},
        "h100-1": {"block": "b7"},
    }


def test_without_topology_labels_the_defaults_are_read(kube, kubeconfig):
    run_kubernetes_agent(kubeconfig)

    assert FirstInventory.topology["gpu-a"] == {"zone": "z1", "rack": "r1"}


@pytest.mark.parametrize(
    ("options", "why"),
    [
        (["Rack=mlsched.io/rack"], "'Rack=mlsched.io/rack': KEY is no key a job could ask for"),
        (["mlsched.io/rack=mlsched.io/rack"], "KEY is no key a job could ask for"),
        (["x" * 64 + "=mlsched.io/rack"], "KEY is no key a job could ask for"),
        (["rack"], "'rack': NODE_LABEL is no node label's key"),
        (["rack=mlsched.io/rack label"], "NODE_LABEL is no node label's key"),
        (["rack=a", "rack=b"], "rack is given twice"),
    ],
)
def test_a_bad_topology_label_is_refused_at_start_naming_it(kubeconfig, options, why):
    pairs = [arg for pair in options for arg in ("--topology-label", pair)]

    with pytest.raises(CommandError, match=f"--topology-label.*{re.escape(why)}"):
        run_kubernetes_agent(kubeconfig, *pairs)

    assert FirstInventory.topology == {}  # no agent started


def test_topology_labels_are_refused_with_the_local_backend(monkeypatch):
    monkeypatch.setenv("MLSCHED_AGENT_TOKEN", "t")

    with pytest.raises(CommandError, match="--topology-label is for --backend kubernetes"):
        call_command("run_agent", "--cluster", "east", "--topology-label", "rack=r")


class KeptAgent:
    """Stands for the agent: keeps the agent run_agent built (its backend closed) instead of
    running."""

    built = None

    def __init__(self, control, backend, interval, health=None):
        self.backend, self.health = backend, health

    def run_forever(self, stop):
        KeptAgent.built = self
        self.backend.close()


def test_mount_failure_sets_how_long_a_missing_mount_may_fail_before_the_worker_does(
    kubeconfig, monkeypatch
):
    monkeypatch.setattr(run_agent, "Agent", KeptAgent)

    run_kubernetes_agent(kubeconfig, "--mount-failure", "90.5")

    assert KeptAgent.built.backend._mounts.persisted_s == 90.5


@pytest.mark.parametrize("option", ["--mount-failure", "--not-ready-grace"])
@pytest.mark.parametrize("seconds", ["0", "-5", "0.0", "soon", "", "nan", "inf"])
def test_a_time_not_above_zero_seconds_is_refused_naming_its_option(kubeconfig, option, seconds):
    with pytest.raises(CommandError, match=f"argument {option}: a number of seconds above 0"):
        run_kubernetes_agent(kubeconfig, option, seconds)

    assert FirstInventory.topology == {}  # no agent started


class ReadyInventory(FirstInventory):
    """Reads which of its backend's nodes are ready, once."""

    ready: dict[str, bool] = {}

    def run_forever(self, stop):
        try:
            ReadyInventory.ready = {n.name: n.ready for n in self.backend.inventory()}
        finally:
            self.backend.close()


def test_tolerated_taints_reach_the_backend(kube, kubeconfig, monkeypatch):
    monkeypatch.setattr(run_agent, "Agent", ReadyInventory)
    kube.taint("gpu-a", "dedicated", "NoExecute", "mlsched")
    kube.taint("gpu-b", "other", "NoExecute")

    run_kubernetes_agent(kubeconfig, "--tolerate-taint", "dedicated")

    assert ReadyInventory.ready == {"gpu-a": True, "gpu-b": False}


def test_a_bad_taint_key_or_the_local_backend_is_refused(kubeconfig, monkeypatch):
    with pytest.raises(CommandError, match="--tolerate-taint 'a b': KEY is no taint's key"):
        run_kubernetes_agent(kubeconfig, "--tolerate-taint", "a b")
    with pytest.raises(CommandError, match="--tolerate-taint is for --backend kubernetes"):
        call_command("run_agent", "--cluster", "east", "--tolerate-taint", "dedicated")


def test_the_gpu_runtime_class_reaches_the_backend_and_a_bad_name_is_refused(
    kubeconfig, monkeypatch
):
    monkeypatch.setattr(run_agent, "Agent", KeptAgent)

    run_kubernetes_agent(kubeconfig, "--gpu-runtime-class", "nvidia")

    assert KeptAgent.built.backend.gpu_runtime_class == "nvidia"
    with pytest.raises(CommandError, match="--gpu-runtime-class 'NVIDIA': NAME is no Runtime"):
        run_kubernetes_agent(kubeconfig, "--gpu-runtime-class", "NVIDIA")
    with pytest.raises(CommandError, match="--gpu-runtime-class is for --backend kubernetes"):
        call_command("run_agent", "--cluster", "east", "--gpu-runtime-class", "nvidia")


def test_unhealthy_conditions_reach_the_backend_and_a_bad_type_is_refused(
    kube, kubeconfig, monkeypatch
):
    monkeypatch.setattr(run_agent, "Agent", ReadyInventory)
    kube.set_node_condition("gpu-b", "KernelDeadlock", True, "DockerHung")

    run_kubernetes_agent(kubeconfig, "--unhealthy-condition", "KernelDeadlock")

    assert ReadyInventory.ready == {"gpu-a": True, "gpu-b": False}
    for bad in ("a b", "Ready"):
        with pytest.raises(CommandError, match=f"--unhealthy-condition '{bad}': TYPE is no"):
            run_kubernetes_agent(kubeconfig, "--unhealthy-condition", bad)
    with pytest.raises(CommandError, match="--unhealthy-condition is for --backend kubernetes"):
        call_command("run_agent", "--cluster", "east", "--unhealthy-condition", "KernelDeadlock")


def test_a_health_check_reaches_the_agent_with_its_interval_and_timeout(kubeconfig, monkeypatch):
    monkeypatch.setattr(run_agent, "Agent", KeptAgent)

    run_kubernetes_agent(kubeconfig, "--health-check", "nhc -t 50", "--health-check-interval",
                         "120", "--health-check-timeout", "50")  # fmt: skip
    health = KeptAgent.built.health
    run_kubernetes_agent(kubeconfig)

    assert (health.command, health.interval_s, health.timeout_s) == ("nhc -t 50", 120.0, 50.0)
    assert KeptAgent.built.health is None

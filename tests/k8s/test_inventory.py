"""inventory(): nodes as the scheduler sees them, read from the Kubernetes node list."""

from clusters.backends.base import NodeInventory
from tests.k8s.conftest import A100


def test_it_reads_allocatable_resources_and_the_gpu_type(kube, backend):
    nodes = {node.name: node for node in backend.inventory()}

    assert nodes["gpu-a"] == NodeInventory(
        name="gpu-a",
        cpu_milli=64000,
        memory_mb=512 * 1024,
        gpu_type=A100,
        gpu_count=8,
        gpu_shareable=False,
        topology={"zone": "z1", "rack": "r1"},
        ready=True,
    )


def test_it_reads_millicores_and_cpu_only_nodes(kube, backend):
    kube.add_node("cpu-1", cpu="7500m", memory="30Gi")

    (node,) = [n for n in backend.inventory() if n.name == "cpu-1"]

    assert (node.cpu_milli, node.memory_mb, node.gpu_count, node.gpu_type) == (7500, 30720, 0, "")


def test_it_marks_nodes_labelled_shareable(kube, backend):
    labels = {"mlsched.io/gpu-shareable": "true"}
    kube.add_node("t4-1", gpus=1, product="Tesla-T4", labels=labels)

    (node,) = [n for n in backend.inventory() if n.name == "t4-1"]

    assert node.gpu_shareable


def test_it_reads_topology_through_configured_labels(kube, make_backend):
    kube.add_node("h100-1", gpus=8, labels={"cloud.example/nvlink-block": "b7"})
    backend = make_backend(topology_labels={"nvlink": "cloud.example/nvlink-block"})

    (node,) = [n for n in backend.inventory() if n.name == "h100-1"]

    assert node.topology == {"nvlink": "b7"}


def test_it_reports_a_not_ready_node_not_ready(kube, backend):
    kube.set_node_ready("gpu-b", False)

    assert {n.name: n.ready for n in backend.inventory()} == {"gpu-a": True, "gpu-b": False}


def test_it_says_why_a_node_is_not_ready_as_its_kubelet_posted_it(kube, backend):
    kube.set_node_ready("gpu-b", False, reason="KubeletNotReady", message="PLEG is not healthy")

    said = {n.name: n.not_ready for n in backend.inventory()}

    assert said == {
        "gpu-a": "",
        "gpu-b": "not Ready in Kubernetes (KubeletNotReady: PLEG is not healthy)",
    }


def test_it_reports_a_cordoned_node_not_ready(kube, backend):
    kube.cordon("gpu-a")

    listed = {n.name: (n.ready, n.not_ready) for n in backend.inventory()}

    assert listed == {
        "gpu-a": (False, "cordoned in Kubernetes (spec.unschedulable)"),
        "gpu-b": (True, ""),
    }


def test_it_leaves_out_a_removed_node(kube, backend):
    kube.remove_node("gpu-b")

    assert [n.name for n in backend.inventory()] == ["gpu-a"]


def test_it_reports_a_node_tainted_noexecute_not_ready_unless_its_pods_tolerate_it(
    kube, make_backend
):
    kube.taint("gpu-a", "dedicated", "NoExecute", "mlsched")
    kube.taint("gpu-b", "nvidia.com/gpu", "NoSchedule", "present")  # met by GPU pods

    plain = {n.name: n.ready for n in make_backend().inventory()}
    tolerant = {n.name: n.ready for n in make_backend(tolerated_taints=("dedicated",)).inventory()}
    (said,) = [n.not_ready for n in make_backend().inventory() if n.name == "gpu-a"]

    assert plain == {"gpu-a": False, "gpu-b": True}
    assert tolerant == {"gpu-a": True, "gpu-b": True}
    assert said == (
        "tainted dedicated:NoExecute, which the agent's pods do not tolerate "
        "(run_agent --tolerate-taint dedicated)"
    )


def test_it_reports_a_node_tainted_noschedule_not_ready_unless_its_pods_tolerate_it(
    kube, make_backend
):
    # Pods bound to their node never meet kube-scheduler's taints: the agent keeps its own off.
    kube.taint("gpu-a", "reserved-for", "NoSchedule", "inference")
    kube.taint("gpu-b", "node.kubernetes.io/disk-pressure", "NoSchedule")

    plain = {n.name: (n.ready, n.not_ready) for n in make_backend().inventory()}
    tolerant = make_backend(tolerated_taints=("reserved-for",)).inventory()

    assert plain == {
        "gpu-a": (
            False,
            "tainted reserved-for:NoSchedule, which the agent's pods do not tolerate "
            "(run_agent --tolerate-taint reserved-for)",
        ),
        "gpu-b": (
            False,
            "tainted node.kubernetes.io/disk-pressure:NoSchedule, which the agent's pods do "
            "not tolerate (run_agent --tolerate-taint node.kubernetes.io/disk-pressure)",
        ),
    }
    assert {n.name: n.ready for n in tolerant} == {"gpu-a": True, "gpu-b": False}


def test_the_noschedule_taints_guaranteed_gpu_pods_meet_and_soft_ones_keep_nodes_ready(
    kube, backend
):
    # Memory pressure keeps BestEffort pods off alone; the GPU resource's taint keeps off pods
    # that do not ask for GPUs (ExtendedResourceToleration); PreferNoSchedule is a preference.
    kube.taint("gpu-a", "node.kubernetes.io/memory-pressure", "NoSchedule")
    kube.taint("gpu-a", "nvidia.com/gpu", "NoSchedule", "present")
    kube.taint("gpu-b", "spot", "PreferNoSchedule")

    assert {n.name: n.ready for n in backend.inventory()} == {"gpu-a": True, "gpu-b": True}


def test_a_not_ready_nodes_own_taint_is_left_to_its_ready_condition(kube, backend):
    kube.taint("gpu-a", "node.kubernetes.io/unreachable", "NoExecute")

    assert {n.name: n.ready for n in backend.inventory()} == {"gpu-a": True, "gpu-b": True}


def test_a_node_with_a_condition_the_agent_is_told_is_a_problem_is_not_ready_saying_it(
    kube, make_backend
):
    kube.set_node_condition("gpu-a", "GPUProblem", True, "XidError", "Xid 79 on GPU 3")
    kube.set_node_condition("gpu-b", "KernelDeadlock", False, "KernelHasNoDeadlock")
    kube.set_node_condition("gpu-b", "FrequentDockerRestart", True, "Restarts")  # not named

    plain = {n.name: n.ready for n in make_backend().inventory()}
    told = make_backend(unhealthy_conditions=("GPUProblem", "KernelDeadlock")).inventory()

    assert plain == {"gpu-a": True, "gpu-b": True}
    assert {n.name: (n.ready, n.not_ready) for n in told} == {
        "gpu-a": (False, "GPUProblem in Kubernetes (XidError: Xid 79 on GPU 3)"),
        "gpu-b": (True, ""),
    }

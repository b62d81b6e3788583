"""The FGD protocol: trace reading, ordering, inflation, placement and discretisation."""

import numpy as np
import pytest

from jobs.placement.fit_policies import POLICIES
from jobs.placement.fragmentation import TaskShape
from jobs.simulator import fgd
from jobs.simulator.openb import Node, Pod, read_nodes, read_pods


def pod(name, gpu_milli=1000, num_gpu=1, cpu=1000):
    return Pod(name, cpu, 0, num_gpu, gpu_milli)


def test_it_reads_gpu_nodes_only(n4_gpu_nodes):
    nodes = read_nodes(n4_gpu_nodes)
    assert [n.name for n in nodes] == ["node-0", "node-1", "node-2"]
    assert sum(n.gpus for n in nodes) == 8


def test_it_reads_pods_and_their_shapes(p12_mixed_pods):
    pods = {p.name: p for p in read_pods(p12_mixed_pods)}
    assert pods["pod-00"].shape == TaskShape(4000, 500)
    assert pods["pod-04"].shape == TaskShape(8000, 2000)
    assert pods["pod-05"].shape == TaskShape(2000, 0)
    assert pods["pod-07"].shape == TaskShape(4000, 700, frozenset({"T4"}))
    assert pods["pod-04"].gpu_request == 2000


def test_it_reads_pod_lists_without_a_gpu_spec_column(tmp_path):
    path = tmp_path / "multigpu.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,4,1000\n")
    assert read_pods(path)[0].shape == TaskShape(1000, 4000)


def test_prepare_is_deterministic_per_seed(n4_gpu_nodes, p12_mixed_pods):
    nodes, pods = read_nodes(n4_gpu_nodes), read_pods(p12_mixed_pods)
    a, b = fgd.prepare(nodes, pods, 42, 1.3), fgd.prepare(nodes, pods, 42, 1.3)
    c = fgd.prepare(nodes, pods, 43, 1.3)
    assert [p.name for p in a.pods] == [p.name for p in b.pods]
    assert [n.name for n in a.nodes] == [n.name for n in b.nodes]
    assert [p.name for p in a.pods] != [p.name for p in c.pods]


def test_inflation_stops_before_passing_the_target(n4_gpu_nodes, p12_mixed_pods):
    nodes, pods = read_nodes(n4_gpu_nodes), read_pods(p12_mixed_pods)
    trial = fgd.prepare(nodes, pods, 7, 1.3)
    total = sum(p.gpu_request for p in trial.pods)
    # 8 GPUs x 1.3 = 10,400 milli; the originals request 6,700.
    assert len(trial.pods) > len(pods)
    assert total <= 10_400
    assert total > 10_400 - 2000  # the largest pod could not be added
    assert sorted(p.name for p in trial.pods[: len(pods)]) == sorted(p.name for p in pods)


def test_a_trace_above_the_target_is_trimmed():
    nodes = [Node("n", 64000, 1 << 20, 1, "G2")]
    pods = [pod(f"p{i}") for i in range(5)]
    trial = fgd.prepare(nodes, pods, 1, 1.3)
    assert sum(p.gpu_request for p in trial.pods) <= 1300
    assert len(trial.pods) == 1


def test_a_pod_that_fits_nowhere_fails_and_still_counts_as_arrived():
    nodes = [Node("n", 64000, 1 << 20, 1, "G2")]
    trial = fgd.Trial(nodes, [pod("a"), pod("b"), pod("c", 500)], [pod("a")])
    outcome = fgd.run(trial, "bestfit")
    assert outcome.failed == 2
    assert outcome.arrived_milli.tolist() == [1000, 2000, 2500]
    assert outcome.allocated_milli.tolist() == [1000, 1000, 1000]


def test_pods_never_leave_and_never_overcommit(n4_gpu_nodes, p12_mixed_pods):
    nodes, pods = read_nodes(n4_gpu_nodes), read_pods(p12_mixed_pods)
    for policy in POLICIES:
        outcome = fgd.run(fgd.prepare(nodes, pods, 3, 1.3), policy)
        assert np.all(np.diff(outcome.allocated_milli) >= 0)
        assert outcome.allocated_milli[-1] <= 8000
        assert outcome.idle_milli[-1] == 8000 - outcome.allocated_milli[-1]


def test_discretise_averages_events_by_rounded_arrived_load():
    arrived = np.array([10, 14, 16, 30])
    values = np.array([1.0, 3.0, 5.0, 7.0])
    curve = fgd.discretise(arrived, values, capacity_milli=1000)
    assert curve[1] == pytest.approx(2.0)  # 1.0 % and 1.4 % round to 1
    assert curve[2] == pytest.approx(5.0)  # 1.6 % rounds to 2
    assert curve[3] == pytest.approx(7.0)
    assert curve[0] == pytest.approx(2.0)  # none at 0: events within +-1 (the k=1 events)
    assert curve[130] is None
    assert len(curve) == 131


def test_mlsched_runs_with_the_clusters_gpus_per_model():
    # One T4 GPU (first in node order) and four P100 GPUs; as many T4-only as P100-only pods.
    # FGD rates both models alike for the unrestricted first pod and takes the T4, so the T4
    # pod then fails; mlsched knows the T4 is scarce and leaves it to the T4 pod.
    nodes = [Node("t4", 64000, 1 << 20, 1, "T4")]
    nodes += [Node(f"p100-{i}", 64000, 1 << 20, 1, "P100") for i in range(4)]
    free = pod("free")
    t4 = Pod("t4-only", 1000, 0, 1, 1000, "T4")
    p100 = Pod("p100-only", 1000, 0, 1, 1000, "P100")
    originals = [free, pod("free-2"), t4, p100]
    trial = fgd.Trial(nodes, [free, t4], originals)
    assert fgd.run(trial, "fgd").failed == 1
    assert fgd.run(trial, "mlsched").failed == 0

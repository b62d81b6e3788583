"""One FGD-protocol run on the real Alibaba trace, when the shared trace folder is present."""

import time
from pathlib import Path

import pytest

from jobs.simulator import fgd
from jobs.simulator.openb import read_nodes, read_pods

TRACE = Path(__file__).resolve().parents[3] / "shared/traces/alibaba-gpu-2023/csv"
needs_trace = pytest.mark.skipif(
    not TRACE.exists(), reason=f"shared Alibaba trace folder absent ({TRACE}); skipped"
)


@pytest.fixture(scope="module")
def default_trial():
    nodes = read_nodes(TRACE / "openb_node_list_gpu_node.csv")
    pods = read_pods(TRACE / "openb_pod_list_default.csv")
    return fgd.prepare(nodes, pods, 42, 1.3)


@needs_trace
def test_the_cluster_is_the_published_one(default_trial):
    assert len(default_trial.nodes) == 1213
    assert sum(n.gpus for n in default_trial.nodes) == 6212
    assert 10_700 < len(default_trial.pods) < 10_900  # published: 10,866 for their generator


@needs_trace
@pytest.mark.parametrize(
    "policy, low, high, budget_s", [("fgd", 4.3, 5.3, 30), ("mlsched", 3.5, 4.77, 60)]
)
def test_fgd_and_mlsched_land_near_their_marks_quickly(default_trial, policy, low, high, budget_s):
    started = time.perf_counter()
    outcome = fgd.run(default_trial, policy)
    elapsed = time.perf_counter() - started
    unallocated = 100 - fgd.allocation_curve(outcome)[100]
    assert low < unallocated < high
    # Only catches a lost cache (minutes per run); bench/results holds the measured timings.
    assert elapsed < budget_s

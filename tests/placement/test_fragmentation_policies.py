"""Each node-level fit scorer's choice on small, hand-built cases."""

import pytest

from jobs.placement.fit_policies import (
    POLICIES,
    NodeView,
    bestfit,
    choose,
    dotprod,
    fgd_score,
    gpuclustering,
    gpupacking,
    make_scorer,
)
from jobs.placement.fragmentation import TaskShape, WorkloadClass

HALF = TaskShape(cpu_milli=4000, gpu_milli=500)
ONE = TaskShape(cpu_milli=8000, gpu_milli=1000)
CPU_ONLY = TaskShape(cpu_milli=4000, gpu_milli=0)
WORKLOAD = (WorkloadClass(HALF, 0.5), WorkloadClass(ONE, 0.5))


def node(*free_gpu: int, cpu: int = 64000, gpu_type: str = "G2", hosted=()) -> NodeView:
    return NodeView(gpu_type, cpu, tuple(free_gpu), frozenset(hosted))


def test_bestfit_prefers_the_node_with_least_left_over():
    nodes = [node(1000, 1000), node(1000, 500)]
    index, fit = choose(nodes, HALF, bestfit)
    assert index == 1
    assert fit.take == (0, 500)


def test_bestfit_puts_a_share_on_the_tightest_gpu():
    fit = bestfit(node(1000, 600, 800), HALF)
    assert fit.take == (0, 500, 0)


def test_dotprod_prefers_the_node_with_less_free_along_the_request():
    nodes = [node(1000, 1000, 1000, 1000), node(1000, 0, 0, 0, cpu=8000)]
    index, _ = choose(nodes, ONE, dotprod)
    assert index == 1


def test_gpupacking_prefers_an_already_shared_gpu():
    nodes = [node(1000, 1000), node(1000, 600)]
    index, fit = choose(nodes, HALF, gpupacking)
    assert index == 1
    assert fit.take == (0, 500)


def test_gpupacking_prefers_a_used_node_over_an_idle_one_for_whole_gpus():
    nodes = [node(1000, 1000), node(1000, 0)]
    index, _ = choose(nodes, ONE, gpupacking)
    assert index == 1


def test_gpuclustering_prefers_nodes_hosting_the_same_affinity():
    nodes = [node(1000, 1000), node(1000, 600, hosted={"1-gpu"}), node(1000, 600, hosted={"share"})]
    index, _ = choose(nodes, HALF, gpuclustering)
    assert index == 2


def test_fgd_keeps_whole_gpus_free_for_whole_gpu_tasks():
    # Putting the share on the idle node would break a whole GPU that ONE needs.
    scorer = make_scorer("fgd", WORKLOAD)
    nodes = [node(1000), node(600)]
    index, fit = choose(nodes, HALF, scorer)
    assert index == 1
    assert fit.take == (500,)


def test_mlsched_also_keeps_whole_gpus_free_for_whole_gpu_tasks():
    scorer = make_scorer("mlsched", WORKLOAD)
    index, fit = choose([node(1000), node(600)], HALF, scorer)
    assert index == 1
    assert fit.take == (500,)


def test_mlsched_avoids_leaving_a_gap_the_next_typical_task_cannot_fill():
    # Workload: shares of 500. Putting a 500 share on the 700 GPU leaves 200 that no typical
    # task can use; on the idle GPU it leaves 500, which the next share fills exactly.
    workload = (WorkloadClass(HALF, 1.0),)
    fit = make_scorer("mlsched", workload)(node(700, 1000), HALF)
    assert fit.take == (0, 500)


def test_fgd_score_is_the_published_rounded_sigmoid():
    assert fgd_score(0) == 50
    assert fgd_score(-1_000_000) == 100
    assert fgd_score(1_000_000) == 0
    assert fgd_score(40) == 49
    assert fgd_score(100) == 47


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_refuses_a_node_the_task_does_not_fit(policy):
    scorer = make_scorer(policy, WORKLOAD)
    assert scorer(node(400, 400), HALF) is None
    assert scorer(node(1000, cpu=1000), HALF) is None
    assert scorer(node(1000, gpu_type="T4"), TaskShape(4000, 500, frozenset({"V100"}))) is None


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_cpu_only_tasks_without_taking_gpu(policy):
    scorer = make_scorer(policy, WORKLOAD)
    assert scorer(node(1000, 500), CPU_ONLY).take == (0, 0)


def test_choose_breaks_ties_by_node_order():
    nodes = [node(1000), node(1000), node(1000)]
    index, _ = choose(nodes, HALF, make_scorer("fgd", WORKLOAD))
    assert index == 0

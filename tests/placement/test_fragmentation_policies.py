"""Each node-level fit scorer's choice on small, hand-built cases."""

import pytest

from jobs.placement.fit_policies import (
    POLICIES,
    MlschedCost,
    NodeView,
    bestfit,
    choose,
    cpu_per_gpu_milli,
    dotprod,
    fgd_score,
    filled_waste,
    gpuclustering,
    gpupacking,
    leftover_waste,
    make_mlsched,
    make_scorer,
    type_pressure,
)
from jobs.placement.fragmentation import FragmentationTable, TaskShape, WorkloadClass

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


def test_cpu_per_gpu_milli_counts_cpu_only_classes_and_respects_types():
    typed = TaskShape(cpu_milli=2000, gpu_milli=1000, gpu_types=frozenset({"T4"}))
    workload = (
        WorkloadClass(ONE, 0.5),  # 8000 CPU per 1000 GPU milli
        WorkloadClass(CPU_ONLY, 0.25),  # 4000 CPU, no GPU
        WorkloadClass(typed, 0.25),  # T4 only
    )
    # G2: (0.5 x 8000 + 0.25 x 4000) / (0.5 x 1000) = 10 CPU milli per GPU milli.
    assert cpu_per_gpu_milli(workload, "G2") == pytest.approx(10.0)
    # T4 also serves the typed class: (4000 + 1000 + 500) / (500 + 250).
    assert cpu_per_gpu_milli(workload, "T4") == pytest.approx(5500 / 750)
    assert cpu_per_gpu_milli((WorkloadClass(typed, 1.0),), "G2") is None


def test_type_pressure_is_restricted_demand_share_over_supply_share():
    t4 = TaskShape(cpu_milli=2000, gpu_milli=1000, gpu_types=frozenset({"T4"}))
    either = TaskShape(cpu_milli=2000, gpu_milli=1000, gpu_types=frozenset({"T4", "P100"}))
    workload = (WorkloadClass(ONE, 0.5), WorkloadClass(t4, 0.25), WorkloadClass(either, 0.25))
    pressure = type_pressure(workload, {"G2": 80, "T4": 10, "P100": 10})
    # T4: (0.25 + 0.125) of the demand on 10 % of the GPUs; P100: 0.125 on 10 %; G2: none.
    assert pressure == pytest.approx({"G2": 0.0, "T4": 3.75, "P100": 1.25})
    assert type_pressure((WorkloadClass(ONE, 1.0),), {"G2": 8}) == {"G2": 0.0}


def test_mlsched_leaves_gpu_models_that_restricted_tasks_need():
    # As many T4-only as P100-only tasks, but 2 T4 GPUs against 8 P100: FGD rates both nodes
    # alike for an unrestricted task; mlsched spends the plentiful P100s.
    t4_only = TaskShape(cpu_milli=4000, gpu_milli=1000, gpu_types=frozenset({"T4"}))
    p100_only = TaskShape(cpu_milli=4000, gpu_milli=1000, gpu_types=frozenset({"P100"}))
    workload = (
        WorkloadClass(ONE, 0.5),
        WorkloadClass(t4_only, 0.25),
        WorkloadClass(p100_only, 0.25),
    )
    nodes = [node(1000, 1000, gpu_type="T4"), node(1000, 1000, gpu_type="P100")]
    index, _ = choose(nodes, ONE, make_scorer("mlsched", workload, {"T4": 2, "P100": 8}))
    assert index == 1
    # Without the cluster's GPU supply there is no pressure: the tie goes to the first node.
    index, _ = choose(nodes, ONE, make_scorer("mlsched", workload))
    assert index == 0


def test_mlsched_keeps_cpu_on_nodes_whose_gpus_would_be_stranded():
    # Typical tasks need 8 CPU cores per GPU. The CPU-heavy task would leave the CPU-poor node
    # 12 cores for 2 idle GPUs (half a GPU stranded; FGD sees no fragment as one task still
    # fits); on the CPU-rich node nothing is stranded.
    heavy = TaskShape(cpu_milli=16000, gpu_milli=1000)
    workload = (WorkloadClass(ONE, 1.0),)
    poor, rich = node(1000, 1000, 1000, cpu=28000), node(1000, 1000, 1000, cpu=96000)
    scorer = make_mlsched(FragmentationTable(workload), lookahead_weight=0.0, stranding_weight=1.0)
    index, _ = choose([poor, rich], heavy, scorer)
    assert index == 1
    no_cpu_term = make_mlsched(
        FragmentationTable(workload), lookahead_weight=0.0, stranding_weight=0.0
    )
    index, _ = choose([poor, rich], heavy, no_cpu_term)
    assert index == 0


def test_mlsched_puts_a_share_on_the_tightest_gpu_among_equal_levels():
    # Only whole-GPU tasks are typical: any leftover share room is fragment alike, so FGD's
    # level ties; the share then takes the GPU it fills most tightly.
    workload = (WorkloadClass(ONE, 1.0),)
    scorer = make_mlsched(FragmentationTable(workload), lookahead_weight=0.0, stranding_weight=0.0)
    fit = scorer(node(900, 600, 800), HALF)
    assert fit.take == (0, 500, 0)


SHARES = {size: TaskShape(cpu_milli=4000, gpu_milli=size) for size in (50, 320, 470, 650)}
SHARE_MIX = (
    WorkloadClass(ONE, 0.5),
    WorkloadClass(SHARES[470], 0.2),
    WorkloadClass(SHARES[320], 0.2),
    WorkloadClass(SHARES[650], 0.095),
    WorkloadClass(SHARES[50], 0.005),  # rare: under 1 % of GPU tasks
)


def test_leftover_waste_is_what_popular_shares_cannot_fill():
    waste = leftover_waste(SHARE_MIX)
    assert waste[1000] == 0
    assert waste[530] == 60  # one 470
    assert waste[350] == 30  # one 320
    assert waste[640] == 0  # two 320s
    assert waste[210] == 210  # only the rare 50 would fit
    assert waste[0] == 0


def test_mlsched_pairs_a_share_with_room_another_typical_share_fills():
    # A 320 on the GPU with 530 free leaves 210 that no popular share fits; on the one with
    # 680 free it leaves 360, where a later 320 fits. FGD alone picks the 530 GPU.
    table = FragmentationTable(SHARE_MIX)
    nodes = [node(530), node(680)]
    paired = make_mlsched(table, lookahead_weight=0.0, stranding_weight=0.0)
    index, _ = choose(nodes, SHARES[320], paired)
    assert index == 1
    unpaired = make_mlsched(table, lookahead_weight=0.0, stranding_weight=0.0, pairing_weight=0.0)
    index, _ = choose(nodes, SHARES[320], unpaired)
    assert index == 0


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


EIGHT_TEN = TaskShape(cpu_milli=4000, gpu_milli=810)
SIXTEENTH = TaskShape(cpu_milli=4000, gpu_milli=160)
HOLES_MIX = (WorkloadClass(ONE, 0.6), WorkloadClass(EIGHT_TEN, 0.3), WorkloadClass(SIXTEENTH, 0.1))


def test_the_expected_leftover_knows_a_hole_that_too_few_shares_fill_stays_open():
    # Every 810 leaves 190 that only a 160 fits, and a third as many 160s arrive: most stay open.
    reachable = leftover_waste(HOLES_MIX)
    expected = filled_waste(HOLES_MIX)
    assert reachable[190] == 30
    assert expected[190] > 100
    assert expected == filled_waste(HOLES_MIX)  # deterministic


def test_pairing_waste_counts_holes_the_free_cpu_cannot_serve_as_unfillable():
    costs = MlschedCost(FragmentationTable(HOLES_MIX))
    # 190 free: a 160 fits it if the node has the 4000 milli-CPU a 160 asks for.
    assert costs.pairing_waste(64000, (190, 1000)) == costs.filled[190]
    assert costs.pairing_waste(3000, (190, 1000)) == costs.filled[190] + (190 - 30)
    assert costs.pairing_waste(0, (1000, 1000)) == 0  # whole free GPUs are not holes

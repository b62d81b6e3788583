"""The FGD fragmentation measure on hand-computed cases."""

import pytest

from jobs.placement.fragmentation import (
    FragmentationTable,
    TaskShape,
    WorkloadClass,
    class_fragment,
    fgd_delta,
    lookahead_change,
    node_fragmentation,
    typical_workload,
)

HALF = TaskShape(cpu_milli=4000, gpu_milli=500)
ONE = TaskShape(cpu_milli=8000, gpu_milli=1000)
TWO = TaskShape(cpu_milli=8000, gpu_milli=2000)
CPU_ONLY = TaskShape(cpu_milli=4000, gpu_milli=0)


def test_it_counts_gpus_below_the_share_as_fragment_when_the_task_fits():
    # Paper, Fig. 4 style: free (1000, 300), a 500-milli task fits; the 300 is a fragment.
    assert class_fragment(32000, [1000, 300], HALF) == 300


def test_it_counts_all_idle_gpu_when_the_task_lacks_gpu():
    assert class_fragment(32000, [900, 300], ONE) == 1200


def test_it_counts_all_idle_gpu_when_the_task_lacks_cpu():
    assert class_fragment(2000, [1000, 1000], HALF) == 2000


def test_it_counts_all_idle_gpu_for_cpu_only_tasks():
    assert class_fragment(32000, [1000, 400], CPU_ONLY) == 1400


def test_it_counts_all_idle_gpu_on_a_gpu_type_the_task_refuses():
    t4_only = TaskShape(4000, 500, frozenset({"T4"}))
    assert class_fragment(32000, [1000, 1000], t4_only, gpu_type="V100") == 2000
    assert class_fragment(32000, [1000, 1000], t4_only, gpu_type="T4") == 0


def test_it_weights_fragments_by_popularity():
    workload = [WorkloadClass(HALF, 0.5), WorkloadClass(ONE, 0.3), WorkloadClass(TWO, 0.2)]
    # HALF fits, fragment 300; ONE fits, fragment 300 + 600; TWO lacks GPU, fragment 1900.
    frag = node_fragmentation(32000, [1000, 300, 600], workload)
    assert frag == pytest.approx(0.5 * 300 + 0.3 * 900 + 0.2 * 1900)


def test_it_finds_no_fragment_on_a_full_node():
    assert node_fragmentation(0, [0, 0], [WorkloadClass(HALF, 1.0)]) == 0


def test_fgd_delta_puts_a_share_where_fragmentation_grows_least():
    workload = [WorkloadClass(HALF, 1.0)]
    # On the 600 GPU the leftover 100 is a fragment (+100); on the 1000 GPU the leftover 500 is
    # still usable, but the 600 stays usable too (+0).
    delta, take = fgd_delta(32000, [600, 1000], HALF, workload)
    assert delta == 0
    assert take == (0, 500)


def test_fgd_delta_takes_the_first_free_whole_gpus():
    delta, take = fgd_delta(32000, [500, 1000, 1000, 1000], TWO, [WorkloadClass(ONE, 1.0)])
    assert take == (0, 1000, 1000, 0)
    assert delta == 0


def test_fgd_delta_is_none_when_the_task_does_not_fit():
    assert fgd_delta(32000, [400, 400], HALF, [WorkloadClass(HALF, 1.0)]) is None
    assert fgd_delta(1000, [1000], HALF, [WorkloadClass(HALF, 1.0)]) is None


def test_typical_workload_keeps_the_most_frequent_shapes_up_to_the_coverage():
    shapes = [HALF] * 60 + [ONE] * 36 + [TWO] * 4
    workload = typical_workload(shapes, coverage=0.95)
    assert [c.shape for c in workload] == [HALF, ONE]
    assert sum(c.weight for c in workload) == pytest.approx(1.0)
    assert workload[0].weight == pytest.approx(60 / 96)


def test_the_table_matches_the_direct_measure():
    workload = [WorkloadClass(HALF, 0.7), WorkloadClass(ONE, 0.3)]
    table = FragmentationTable(workload)
    for cpu, gpus in [(32000, (1000, 300)), (2000, (1000, 1000)), (8000, (200, 700, 1000))]:
        assert table.node(cpu, gpus) == pytest.approx(node_fragmentation(cpu, gpus, workload))


def _brute_lookahead(cpu, gpus, workload):
    """Per class (most popular first): weight x best growth of one more task, None if no fit."""
    total = sum(c.weight for c in workload)
    out = []
    for c in sorted(workload, key=lambda c: -c.weight):
        fit = fgd_delta(cpu, gpus, c.shape, workload)
        out.append(None if fit is None else c.weight / total * fit[0])
    return out


def test_lookahead_change_ignores_classes_the_placement_shuts_out():
    assert lookahead_change([10.0, 5.0, None], [12.0, None, None]) == 2.0


def test_the_table_and_its_lookahead_match_brute_force_on_random_states():
    import random

    rng = random.Random(7)
    shapes = [HALF, ONE, TWO, CPU_ONLY, TaskShape(12000, 300), TaskShape(2000, 810)]
    workload = [WorkloadClass(s, w) for s, w in zip(shapes, [5, 3, 1, 2, 1, 2], strict=True)]
    table = FragmentationTable(workload)
    for _ in range(300):
        gpus = [
            rng.choice([0, 100, 190, 300, 500, 690, 1000]) for _ in range(rng.choice([1, 2, 4]))
        ]
        cpu = rng.randrange(0, 40000, 500)
        assert table.node(cpu, gpus) == pytest.approx(node_fragmentation(cpu, gpus, workload))
        got, want = table.lookahead(cpu, gpus), _brute_lookahead(cpu, gpus, workload)
        assert [g is None for g in got] == [w is None for w in want]
        assert [g for g in got if g is not None] == pytest.approx(
            [w for w in want if w is not None]
        )

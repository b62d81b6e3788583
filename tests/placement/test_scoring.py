"""The scorers: best fit, FGD fragmentation growth, and the learned workload mix."""

from __future__ import annotations

from jobs.placement import QueuedJob, ShapeCount
from jobs.placement.capacity import Capacity
from jobs.placement.fragmentation import (
    FragmentationTable,
    TaskShape,
    WorkloadClass,
    lookahead_change,
    node_fragmentation,
)
from jobs.placement.scoring import (
    ScoringContext,
    best_fit,
    fgd_level,
    fragmentation_aware,
    learn_workload,
)
from tests.placement.builders import n4_t4_shared_nodes

SHARES_OF_300 = (WorkloadClass(TaskShape(1000, 300), 1.0),)


def context(workload=SHARES_OF_300) -> ScoringContext:
    return ScoringContext(Capacity(n4_t4_shared_nodes(1), (), 0), workload)


def test_fragmentation_score_is_the_fgd_level_of_the_growth():
    score = fragmentation_aware(context())
    before, after = (1000, 400, 1000, 1000), (1000, 100, 1000, 1000)
    growth = node_fragmentation(7000, after, SHARES_OF_300, "t4") - node_fragmentation(
        8000, before, SHARES_OF_300, "t4"
    )
    assert growth == 100
    assert _level(score(("t4", 8000, before, 7000, after))) == fgd_level(growth)
    assert score(("t4", 8000, before, 7000, (700, 400, 1000, 1000))) > fgd_level(growth) + 0.01


def test_best_fit_prefers_less_left_over():
    score = best_fit(context())
    tight = score(("t4", 8000, (1000, 500, 0, 0), 7000, (1000, 0, 0, 0)))
    loose = score(("t4", 8000, (1000,) * 4, 7000, (1000, 500, 1000, 1000)))
    assert tight > loose


def test_fgd_level_has_a_hundred_steps():
    assert fgd_level(0) == 0.5
    assert fgd_level(-1e9) == 1.0 and fgd_level(1e9) == 0.0


def test_the_workload_counts_every_worker_and_recent_history():
    queue = [QueuedJob("a", "t", workers=3, cpu_milli=1000, gpus=1)]
    recent = [ShapeCount(500, 250, 1)]
    classes = learn_workload(queue, recent, coverage=1.0, max_classes=8)
    weights = {(c.shape.cpu_milli, c.shape.gpu_milli): c.weight for c in classes}
    assert weights == {(1000, 1000): 0.75, (500, 250): 0.25}


def test_the_workload_keeps_only_the_most_popular_classes():
    queue = [QueuedJob(f"j{i}", "t", workers=10 - i, gpu_milli=100 * (i + 1)) for i in range(5)]
    classes = learn_workload(queue, (), coverage=1.0, max_classes=2)
    assert [c.shape.gpu_milli for c in classes] == [100, 200]
    assert abs(sum(c.weight for c in classes) - 1.0) < 1e-9


def test_the_lookahead_adds_how_much_worse_the_next_typical_task_fares():
    ctx = context()
    ctx.lookahead_weight = 0.25
    table = FragmentationTable(SHARES_OF_300)
    before, after = (1000, 1000, 1000, 1000), (1000, 1000, 1000, 500)
    growth = table.node(7000, after, "t4") - table.node(8000, before, "t4")
    ahead = lookahead_change(
        table.lookahead(8000, before, "t4"), table.lookahead(7000, after, "t4")
    )
    score = fragmentation_aware(ctx)(("t4", 8000, before, 7000, after))
    assert _level(score) == fgd_level(growth + 0.25 * ahead)


def test_inside_a_level_a_share_prefers_the_gpu_it_fills_most_tightly():
    score = fragmentation_aware(context((WorkloadClass(TaskShape(1000, 1000), 1.0),)))
    # Whole-GPU work sees no fragmentation in either move: the same level, tighter is higher.
    tight = score(("t4", 8000, (1000, 500, 1000, 1000), 7000, (1000, 200, 1000, 1000)))
    loose = score(("t4", 8000, (1000, 800, 1000, 1000), 7000, (1000, 500, 1000, 1000)))
    assert _level(tight) == _level(loose)
    assert tight > loose


def test_a_share_pays_for_room_popular_shares_cannot_fill():
    ctx = context(
        (WorkloadClass(TaskShape(1000, 300), 0.5), WorkloadClass(TaskShape(1000, 400), 0.5))
    )
    ctx.pairing_weight = 1.5
    score = fragmentation_aware(ctx)
    # 300 on a free GPU leaves 700 = 300 + 400; on a 400 GPU it leaves 100, which nothing fills.
    assert score(("t4", 8000, (1000,) * 4, 7000, (700, 1000, 1000, 1000))) > score(
        ("t4", 8000, (400, 1000, 1000, 1000), 7000, (100, 1000, 1000, 1000))
    )


def _level(score: float) -> float:
    """The FGD level of a score, without the tie-break below one level."""
    return int(round(score * 10000) // 100) / 100

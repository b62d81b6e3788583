"""Pluggable node scorers: which node (and which GPUs on it) a task should take.

A scorer rates a *move*: a node's state before and after the task lands on it, as
``(gpu_type, cpu_before, gpus_before, cpu_after, gpus_after)``. Scores lie in [0, 1], higher is
better; the policy's weights combine them. Scorers only see node state, so equal states score
the same and the combined score is cached per move for the whole cycle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from jobs.placement import fragmentation
from jobs.placement.capacity import Capacity
from jobs.placement.fit_policies import MlschedCost, NodeBefore, fgd_score
from jobs.placement.model import WHOLE_GPU, Policy, QueuedJob, ShapeCount

Move = tuple[str, int, tuple[int, ...], int, tuple[int, ...]]
ScoreFn = Callable[[Move], float]


class ScoringContext:
    """Cycle-wide facts the scorers normalise with, and the typical workload mix."""

    def __init__(
        self,
        capacity: Capacity,
        workload: tuple[fragmentation.WorkloadClass, ...],
        lookahead_weight: float = 0.0,
        stranding_weight: float = 0.0,
        gpu_model_weight: float = 0.0,
        pairing_weight: float = 0.0,
    ):
        self.lookahead_weight = lookahead_weight
        self.stranding_weight = stranding_weight
        self.gpu_model_weight = gpu_model_weight
        self.pairing_weight = pairing_weight
        self.gpu_supply: Counter[str] = Counter()
        for node in capacity.nodes:
            if node.gpu_type:
                self.gpu_supply[node.gpu_type] += len(node.gpus)
        self.max_cpu = max((n.cap_cpu for n in capacity.nodes), default=1) or 1
        most_gpus = max((len(n.gpus) for n in capacity.nodes), default=1)
        self.max_gpu_milli = max(most_gpus, 1) * WHOLE_GPU
        self.workload = workload


def best_fit(ctx: ScoringContext) -> ScoreFn:
    """Least leftover on the node after the move (the FGD paper's BestFit, in [0, 1])."""

    def score(move: Move) -> float:
        _, _, _, cpu_after, gpus_after = move
        left = 0.5 * cpu_after / ctx.max_cpu + 0.5 * sum(gpus_after) / ctx.max_gpu_milli
        return 1.0 - min(left, 1.0)

    return score


def fgd_level(delta: float) -> float:
    """FGD's score (``fit_policies.fgd_score``: sigmoid(-delta / 1000) cut to 100 levels) in
    [0, 1]. The cut is part of the method: near-equal deltas tie and the node order then packs
    tasks together, which measurably lowers the idle GPU share.
    """
    return fgd_score(delta) / 100


def fragmentation_aware(ctx: ScoringContext) -> ScoreFn:
    """The production placement cost (``fit_policies.MlschedCost``: FGD's fragmentation growth
    plus lookahead, CPU stranding, GPU-model pressure and share pairing) on FGD's 100 levels.
    A GPU share ranks first by its pairing loss, then by level, then by how tightly it fills
    its GPU; only a share's score can fall below 0."""
    costs = MlschedCost(
        fragmentation.FragmentationTable(ctx.workload),
        lookahead_weight=ctx.lookahead_weight,
        stranding_weight=ctx.stranding_weight,
        gpu_model_weight=ctx.gpu_model_weight,
        pairing_weight=ctx.pairing_weight,
        gpu_supply=ctx.gpu_supply,
    )
    states: dict[tuple, NodeBefore] = {}  # a node state is priced once for all its moves

    def score(move: Move) -> float:
        gpu_type, cpu_before, gpus_before, cpu_after, gpus_after = move
        if not gpus_before:
            return 1.0
        share = _shared_gpu(gpus_before, gpus_after)
        key = (gpu_type, cpu_before, gpus_before)
        state = states.get(key)
        if state is None:
            state = states[key] = costs.before(gpu_type, cpu_before, gpus_before)
        return costs.score(state, cpu_after, gpus_after, share) / 100

    return score


def _shared_gpu(before: tuple[int, ...], after: tuple[int, ...]) -> int | None:
    """The GPU a share of one GPU landed on, or None for whole GPUs (or no GPU)."""
    changed = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    if len(changed) != 1:
        return None
    i = changed[0]
    return None if before[i] == WHOLE_GPU and after[i] == 0 else i


SCORERS: dict[str, Callable[[ScoringContext], ScoreFn]] = {
    "best_fit": best_fit,
    "fragmentation": fragmentation_aware,
}


class WeightedScorer:
    """The policy's scorers combined by weight, cached per move."""

    def __init__(self, policy: Policy, ctx: ScoringContext):
        unknown = [name for name, _ in policy.scorers if name not in SCORERS]
        if unknown:
            raise ValueError(f"unknown scorers: {unknown}")
        self.parts = [(w, SCORERS[name](ctx)) for name, w in policy.scorers if w]
        self.cluster_costs = dict(policy.cluster_costs)
        self._cache: dict[Move, float] = {}
        # Best GPU choice and score per (node state, request shape); filled by fit.rate.
        self.rates: dict[tuple, tuple] = {}

    def __call__(self, move: Move) -> float:
        """The weighted score of a move."""
        value = self._cache.get(move)
        if value is None:
            value = sum(w * fn(move) for w, fn in self.parts)
            self._cache[move] = value
        return value


def learn_workload(
    queued: Iterable[QueuedJob], recent: Iterable[ShapeCount], coverage: float, max_classes: int
) -> tuple[fragmentation.WorkloadClass, ...]:
    """The typical task mix: one entry per worker in the queue, plus recent history counts."""
    raw: Counter[tuple] = Counter()
    for job in queued:
        if job.workers > 0:
            raw[(job.cpu_milli, job.worker_gpu_milli, job.gpu_types)] += job.workers
    for seen in recent:
        if seen.count > 0:
            raw[(seen.cpu_milli, seen.gpu_milli, seen.gpu_types)] += seen.count
    counts: Counter[fragmentation.TaskShape] = Counter()
    for (cpu, gpu, types), count in raw.items():
        counts[fragmentation.TaskShape(cpu, gpu, frozenset(types))] += count
    # A Counter is a mapping of counts: typical_workload counts it without expanding it.
    classes = fragmentation.typical_workload(counts, coverage)
    if len(classes) <= max_classes:
        return classes
    # Keep the most popular classes only: each class costs time on every scored move.
    kept = classes[:max_classes]
    total = sum(c.weight for c in kept)
    return tuple(fragmentation.WorkloadClass(c.shape, c.weight / total) for c in kept)

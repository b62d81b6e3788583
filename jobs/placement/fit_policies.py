"""Node-level fit scorers: where on one node a task goes, and how good that is.

Each scorer answers, for one node state and one task, ``Fit(score, take)`` (higher score is
better; ``take[i]`` is the GPU milli taken from GPU ``i``) or None if the task does not fit. A
chooser picks the node with the highest score, the first node in the given order on ties, so a
caller fixes tie-breaking by how it orders nodes. Scorers see only the node's state, so callers
may cache a scorer's answer per (state, task). Pure: no Django, no I/O.

The published baselines (random, bestfit, dotprod, gpupacking, gpuclustering, fgd) follow the
FGD paper's simulator; ``mlsched`` is the production scorer.
"""

from __future__ import annotations

import functools
import math
import random
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from jobs.placement.fragmentation import (
    MILLI,
    FragmentationTable,
    TaskShape,
    WorkloadClass,
    candidate_takes,
    fits,
    lookahead_change,
)

# Normalisers of the published BestFit and DotProduct scores: the largest node in the trace.
MAX_CPU_MILLI = 128_000
MAX_GPU_MILLI = 8 * MILLI


@dataclass(frozen=True)
class NodeView:
    """The free resources of one node, as a scorer sees them."""

    gpu_type: str
    free_cpu_milli: int
    free_gpu_milli: tuple[int, ...]
    # GPU affinities (see ``gpu_affinity``) of the tasks on the node; only gpuclustering reads it.
    hosted: frozenset[str] = field(default_factory=frozenset)


class Fit(NamedTuple):
    """A scorer's answer: higher ``score`` is better; ``take[i]`` is milli taken from GPU i."""

    score: float
    take: tuple[int, ...]


Scorer = Callable[[NodeView, TaskShape], Fit | None]


def _after(node: NodeView, task: TaskShape, take: Sequence[int]) -> tuple[int, list[int]]:
    gpu = [g - t for g, t in zip(node.free_gpu_milli, take, strict=True)]
    return node.free_cpu_milli - task.cpu_milli, gpu


def _takes(node: NodeView, task: TaskShape) -> list[tuple[int, ...]]:
    if not fits(node.free_cpu_milli, node.free_gpu_milli, task, node.gpu_type):
        return []
    return candidate_takes(node.free_gpu_milli, task)


def _best(node: NodeView, task: TaskShape, rate: Callable[[tuple[int, ...]], float]) -> Fit | None:
    """The highest-rated GPU choice on the node; the lowest GPU index wins ties."""
    best: Fit | None = None
    for take in _takes(node, task):
        score = rate(take)
        if best is None or score > best.score:
            best = Fit(score, take)
    return best


def _tightest(node: NodeView, task: TaskShape) -> tuple[int, ...] | None:
    """The default GPU choice: a share goes on the fullest GPU that fits (first on ties)."""
    takes = _takes(node, task)
    if not takes:
        return None
    if 0 < task.gpu_milli < MILLI:
        return min(takes, key=lambda t: node.free_gpu_milli[t.index(task.gpu_milli)])
    return takes[0]


def first_fit(node: NodeView, task: TaskShape) -> Fit | None:
    """Every fitting node scores 0 (random's feasibility check) with the default GPU choice."""
    take = _tightest(node, task)
    return None if take is None else Fit(0.0, take)


def bestfit(node: NodeView, task: TaskShape) -> Fit | None:
    """Least leftover: 1 - 0.5 cpu_left/MAX_CPU - 0.5 gpu_left/MAX_GPU, on the tightest GPU.

    Computed in integers (proportional to the published score) so equal nodes tie exactly.
    """
    take = _tightest(node, task)
    if take is None:
        return None
    cpu_left, gpu = _after(node, task, take)
    return Fit(-(cpu_left * MAX_GPU_MILLI + sum(gpu) * MAX_CPU_MILLI), take)


def dotprod(node: NodeView, task: TaskShape) -> Fit | None:
    """Tetris-style alignment, as published: the smaller the dot product, the higher the score.

    Vectors are (CPU, total GPU milli), each normalised by the largest node; the score is
    int(100 x (1 - dot / 2)), so near-equal nodes tie and the node order decides.
    """
    take = _tightest(node, task)
    if take is None:
        return None
    gpu_req = task.gpu_count * task.per_gpu_milli
    dot = (node.free_cpu_milli / MAX_CPU_MILLI) * (task.cpu_milli / MAX_CPU_MILLI) + (
        sum(node.free_gpu_milli) / MAX_GPU_MILLI
    ) * (gpu_req / MAX_GPU_MILLI)
    return Fit(int(100 * (1 - dot / 2)), take)


def gpupacking(node: NodeView, task: TaskShape) -> Fit | None:
    """Prefer already-shared GPUs, then free GPUs on a used node, then an idle node.

    Published tiers and integer scores: [50, 100] for shared GPUs (fuller is better), [33, 50]
    for a used node (fewer newly opened GPUs is better), [0, 33] for an idle node.
    """
    take = _tightest(node, task)
    if take is None:
        return None
    if task.gpu_count == 0:
        return Fit(0, take)
    free = node.free_gpu_milli
    fully_free = sum(1 for g in free if g == MILLI)
    if fully_free == len(free):
        return Fit(max(100 // 3 - fully_free, fully_free), take)
    used = [g for g, t in zip(free, take, strict=True) if t]
    opened = sum(1 for g in used if g == MILLI)
    if opened:
        return Fit(max(100 // 2 - opened, 100 // 3), take)
    return Fit(max(100 - sum(g * 100 // MILLI for g in used) // 10, 100 // 2), take)


def gpu_affinity(task: TaskShape) -> str:
    """The clustering key of a GPU task: every share alike, whole GPUs by count."""
    return "share" if task.gpu_milli < MILLI else f"{task.gpu_count}-gpu"


def gpuclustering(node: NodeView, task: TaskShape) -> Fit | None:
    """Prefer nodes hosting only tasks of the same affinity, then mixed ones with it, then idle.

    Published quarters of [0, 100]: only-same > mixed-with-same > idle > others, fuller nodes
    first inside a quarter. CPU-only tasks score 0 everywhere.
    """
    take = _tightest(node, task)
    if take is None:
        return None
    if task.gpu_count == 0:
        return Fit(0, take)
    hosted, mine = node.hosted, gpu_affinity(task)
    quarter = (3 if len(hosted) == 1 else 2) if mine in hosted else (0 if hosted else 1)
    fill = 25 * (MAX_GPU_MILLI - sum(node.free_gpu_milli)) // MAX_GPU_MILLI
    return Fit(fill + 25 * quarter, take)


def fgd_score(delta: float) -> int:
    """The published FGD score: int(sigmoid(-delta / 1000) x 100).

    The truncation to 100 levels is part of the method's behaviour: near-equal deltas tie and
    then the node order decides, which packs tasks together.
    """
    x = max(-700.0, min(700.0, delta / 1000.0))  # exp() overflows past ~709
    return int(100.0 / (1.0 + math.exp(x)))


def make_fgd(table: FragmentationTable) -> Scorer:
    """The FGD scorer (Weng et al., ATC '23) for the table's workload."""

    def fgd(node: NodeView, task: TaskShape) -> Fit | None:
        before = table.node(node.free_cpu_milli, node.free_gpu_milli, node.gpu_type)

        def rate(take: tuple[int, ...]) -> float:
            cpu_left, gpu = _after(node, task, take)
            return fgd_score(table.node(cpu_left, gpu, node.gpu_type) - before)

        return _best(node, task, rate)

    return fgd


def cpu_per_gpu_milli(workload: Sequence[WorkloadClass], gpu_type: str = "") -> float | None:
    """CPU milli the workload brings per GPU milli, over the classes that may run on the type.

    CPU-only classes count too: they take CPU from GPU nodes. None if no GPU class accepts the
    type (its GPUs cannot be stranded by CPU then).
    """
    cpu = gpu = 0.0
    for c in workload:
        if c.shape.accepts(gpu_type):
            cpu += c.weight * c.shape.cpu_milli
            gpu += c.weight * c.shape.gpu_count * c.shape.per_gpu_milli
    return cpu / gpu if gpu else None


def type_pressure(
    workload: Sequence[WorkloadClass], gpu_supply: Mapping[str, int]
) -> dict[str, float]:
    """Per GPU model: the share of GPU demand that only some models may serve, over its supply.

    A class restricted to k models spreads its GPU demand evenly over them; the result is that
    demand as a share of all GPU demand, divided by the model's share of the cluster's GPUs.
    Unrestricted classes add nothing, so a workload without type constraints gives all zeros.
    """
    total_supply = sum(gpu_supply.values())
    demand = {t: 0.0 for t in gpu_supply}
    total = 0.0
    for c in workload:
        gpu = c.weight * c.shape.gpu_count * c.shape.per_gpu_milli
        total += gpu
        types = [t for t in c.shape.gpu_types if t in demand]
        for t in types:
            demand[t] += gpu / len(types)
    if not total or not total_supply:
        return {t: 0.0 for t in gpu_supply}
    return {
        t: (demand[t] / total) / (n / total_supply) if n else 0.0 for t, n in gpu_supply.items()
    }


def popular_shares(workload: Sequence[WorkloadClass], min_share: float = 0.01) -> dict[int, int]:
    """The share sizes making up at least ``min_share`` of the GPU tasks, each with the least CPU
    any of its classes asks (a node with less free CPU cannot host that size)."""
    gpu_weight = sum(c.weight for c in workload if c.shape.gpu_count)
    weight: dict[int, float] = {}
    cpu: dict[int, int] = {}
    for c in workload:
        size = c.shape.gpu_milli
        if 0 < size < MILLI:
            weight[size] = weight.get(size, 0.0) + c.weight
            cpu[size] = min(cpu.get(size, c.shape.cpu_milli), c.shape.cpu_milli)
    return {s: cpu[s] for s in sorted(weight) if gpu_weight and weight[s] / gpu_weight >= min_share}


def leftover_waste(
    workload: Sequence[WorkloadClass], min_share: float = 0.01, sizes: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Per free milli r of one GPU (0..1000): the part no combination of popular shares fills.

    Popular shares are the share sizes making up at least ``min_share`` of the GPU tasks (or the
    ``sizes`` given); rare ones are left out as too few arrive to count on them. Any number of
    each may be combined, e.g. with popular 470 and 320 shares 530 free leaves 60 (one 470) and
    350 leaves 30. A whole free GPU counts 0: whole-GPU tasks use it.
    """
    popular = popular_shares(workload, min_share) if sizes is None else sizes
    return _leftover_waste(tuple(sorted(popular)))


# Every cycle asks again, mostly for the same few popular sizes.
@functools.lru_cache(maxsize=64)
def _leftover_waste(popular: tuple[int, ...]) -> tuple[int, ...]:
    waste = list(range(MILLI + 1))
    for r in range(MILLI + 1):
        for size in popular:
            if size > r:
                break
            waste[r] = min(waste[r], waste[r - size])
    waste[MILLI] = 0
    return tuple(waste)


# GPUs of the synthetic cluster ``filled_waste`` fills: enough for stable means, few enough to
# learn in milliseconds. The estimate depends on the workload's proportions, not on the size.
FILL_GPUS = 2048


@functools.lru_cache(maxsize=16)
def filled_waste(
    workload: tuple[WorkloadClass, ...], rounds: int = 3, prior: float = 30.0
) -> tuple[float, ...]:
    """Per free milli r of one GPU: the free milli it is expected to end with, learnt by filling.

    ``leftover_waste`` says what popular shares *could* fill; this says what they *do*, given
    how many of each arrive and who else wants the same holes (a 190 beside an 810 mostly stays
    open: the few shares that fit it are wanted elsewhere too). Starting from
    ``leftover_waste``, each round fills ``FILL_GPUS`` bare GPUs (no nodes, no CPU) with tasks
    drawn, with a fixed seed, from the workload mix until the arrived GPU equals their capacity:
    whole-GPU tasks take free GPUs, a share takes the GPU, partly used or free, where the current
    estimate grows least (the tightest on ties). The new estimate for r is the mean final free
    milli of the GPUs that passed through r, pulled toward the start by ``prior`` samples.
    Deterministic for a workload, and cached.
    """
    base = leftover_waste(workload)
    value = [float(x) for x in base]
    value[MILLI] = 0.0
    classes = [(c.shape.gpu_milli, c.weight) for c in workload if c.shape.gpu_count]
    if not any(size < MILLI for size, _ in classes):
        return tuple(value)  # without shares no GPU is ever partly used: nothing to learn
    sizes = [size for size, _ in classes]
    weights = [weight for _, weight in classes]
    for _ in range(rounds):
        rng = random.Random(0)
        holes: dict[int, list[int]] = {}  # free milli -> partly used GPUs
        paths: list[list[int]] = []  # per opened GPU, its free milli after each share
        free, arrived = FILL_GPUS, 0
        while True:
            size = rng.choices(sizes, weights)[0]
            arrived += size
            if arrived > FILL_GPUS * MILLI:
                break
            if size >= MILLI:
                if free >= size // MILLI:
                    free -= size // MILLI
                continue
            best = None
            for r, gpus in holes.items():
                if r >= size and gpus:
                    key = (value[r - size] - value[r], r)
                    best = key if best is None or key < best else best
            if free:
                key = (value[MILLI - size], MILLI)
                best = key if best is None or key < best else best
            if best is None:
                continue
            r = best[1]
            if r == MILLI:
                free -= 1
                gpu = len(paths)
                paths.append([])
            else:
                gpu = holes[r].pop()
            paths[gpu].append(r - size)
            if r - size > 0:
                holes.setdefault(r - size, []).append(gpu)
        total, count = [0.0] * MILLI, [0] * MILLI
        for path in paths:
            for r in set(path):
                if r < MILLI:
                    total[r] += path[-1]
                    count[r] += 1
        value = [
            (total[r] + prior * base[r]) / (count[r] + prior) if count[r] else value[r]
            for r in range(MILLI)
        ] + [0.0]
    return tuple(value)


# A milli of a share's pairing loss outweighs every FGD level: shares pair first.
PAIRING_FIRST = 1000.0


class MlschedCost:
    """The production scorer's cost of a placement, in GPU milli like FGD's fragmentation growth:

    - the node's fragmentation growth against the workload mix (FGD);
    - ``lookahead_weight`` x how much worse the next typical task would fare on the node
      (``lookahead_change``);
    - ``stranding_weight`` x the growth of the node's CPU-stranded GPU milli: idle GPU milli beyond
      what the free CPU can serve at the workload's CPU per GPU milli (``cpu_per_gpu_milli``);
    - ``gpu_model_weight`` x the GPU milli taken x the model's pressure (``type_pressure``, from
      ``gpu_supply``, the cluster's GPUs per model): tasks that may run anywhere leave the
      models that restricted tasks need;
    - for a GPU share, ``pairing_weight`` x the growth of the GPU's free milli that popular
      shares cannot fill (``leftover_waste``): a share goes where it leaves room that another
      typical share fits exactly, e.g. a 320 beside a 650 rather than beside a 470.

    ``before`` reads a node state once; ``after`` prices each way of landing on it and
    ``score`` puts that on FGD's 100 levels. A share is first placed by its pairing loss
    (``pairing_loss``, ranked before any level): how much the node's partly used GPUs are
    expected to end up emptier (``filled_waste``), counting as unfillable the holes its
    remaining CPU can no longer serve. Both the simulator's ``mlsched`` and the live
    scheduler's fragmentation scorer use it; the weights' defaults are ``Policy``'s.
    """

    def __init__(
        self,
        table: FragmentationTable,
        lookahead_weight: float = 0.25,
        stranding_weight: float = 0.1,
        gpu_model_weight: float = 1.0,
        pairing_weight: float = 1.5,
        gpu_supply: Mapping[str, int] | None = None,
    ):
        self.table = table
        self.lookahead_weight, self.stranding_weight = lookahead_weight, stranding_weight
        self.pairing_weight = pairing_weight
        workload = table.workload
        self.pressure = (
            {t: gpu_model_weight * p for t, p in type_pressure(workload, gpu_supply).items()}
            if gpu_supply and gpu_model_weight
            else {}
        )
        self.waste = leftover_waste(workload)
        self.filled = filled_waste(tuple(workload))
        # Popular share sizes by the least CPU they need; per CPU floor, what those that still
        # fit cannot fill.
        floors = popular_shares(workload)
        self._cuts = sorted(set(floors.values()))
        self._reach = [
            leftover_waste(workload, sizes=[s for s, c in floors.items() if c <= cut])
            for cut in self._cuts
        ]
        self._ratio: dict[str, float | None] = {}

    def _per_milli(self, gpu_type: str) -> float | None:
        if not self.stranding_weight:
            return None
        if gpu_type not in self._ratio:
            # A workload that asks no CPU cannot strand GPUs by CPU either.
            self._ratio[gpu_type] = cpu_per_gpu_milli(self.table.workload, gpu_type) or None
        return self._ratio[gpu_type]

    def before(self, gpu_type: str, cpu: int, gpus: Sequence[int]) -> NodeBefore:
        """What ``after`` needs to know of the node before the placement."""
        per_milli = self._per_milli(gpu_type)
        return NodeBefore(
            gpu_type,
            gpus,
            self.table.node(cpu, gpus, gpu_type),
            self.table.lookahead(cpu, gpus, gpu_type),
            _stranded(cpu, gpus, per_milli),
            per_milli,
            self.pairing_waste(cpu, gpus),
        )

    def pairing_waste(self, cpu: int, gpus: Sequence[int]) -> float:
        """Milli the node's partly used GPUs are expected to end with unused: ``filled_waste``
        per GPU, plus what shares that no longer fit the node's free CPU would have filled."""
        index = bisect_right(self._cuts, cpu) - 1
        reach = self._reach[index] if index >= 0 else None
        waste, filled = self.waste, self.filled
        total = 0.0
        for g in gpus:
            if 0 < g < MILLI:
                total += filled[g] + ((reach[g] if reach else g) - waste[g])
        return total

    def after(self, node: NodeBefore, cpu: int, gpus: Sequence[int], share: int | None) -> float:
        """The cost of leaving the node at (cpu, gpus); ``share`` is the GPU a share lands on."""
        table, gpu_type = self.table, node.gpu_type
        cost = table.node(cpu, gpus, gpu_type) - node.fragment
        cost += self.pressure.get(gpu_type, 0.0) * (sum(node.gpus) - sum(gpus))
        cost += self.lookahead_weight * lookahead_change(
            node.lookahead, table.lookahead(cpu, gpus, gpu_type)
        )
        if node.cpu_per_milli is not None:
            stranded = _stranded(cpu, gpus, node.cpu_per_milli)
            cost += self.stranding_weight * (stranded - node.stranded)
        if share is not None:
            cost += self.pairing_weight * (self.waste[gpus[share]] - self.waste[node.gpus[share]])
        return cost

    def score(self, node: NodeBefore, cpu: int, gpus: Sequence[int], share: int | None) -> float:
        """``after``'s cost as an FGD score (0-100, higher is better). A share ranks first by
        its pairing loss (``PAIRING_FIRST`` points per milli; none with ``pairing_weight`` 0),
        then by level, then, below one level, by how tightly it fills its GPU."""
        level = fgd_score(self.after(node, cpu, gpus, share))
        if share is None:
            return level
        tightness = 0.5 * (1 - gpus[share] / MILLI)
        if not self.pairing_weight:  # pairing turned off
            return level + tightness
        loss = self.pairing_waste(cpu, gpus) - node.pairing
        return level + tightness - PAIRING_FIRST * loss


class NodeBefore(NamedTuple):
    """A node's state before a placement, as ``MlschedCost`` prices it."""

    gpu_type: str
    gpus: Sequence[int]
    fragment: float
    lookahead: tuple[float | None, ...]
    stranded: float
    cpu_per_milli: float | None
    pairing: float


def _stranded(cpu: int, gpus: Sequence[int], per_milli: float | None) -> float:
    if per_milli is None:
        return 0.0
    return max(0.0, sum(gpus) - cpu / per_milli)


def make_mlsched(table: FragmentationTable, **weights) -> Scorer:
    """The production scorer: ``MlschedCost`` (``weights`` are its keyword arguments) on FGD's
    100 levels.

    Near-equal placements tie and the node order packs them (see ``fgd_score``); inside a level
    a GPU share prefers the GPU it fills most tightly.
    """
    costs = MlschedCost(table, **weights)

    def mlsched(node: NodeView, task: TaskShape) -> Fit | None:
        state = costs.before(node.gpu_type, node.free_cpu_milli, node.free_gpu_milli)
        share = 0 < task.gpu_milli < MILLI

        def rate(take: tuple[int, ...]) -> float:
            cpu_left, gpu = _after(node, task, take)
            i = next(j for j, t in enumerate(take) if t) if share else None
            return costs.score(state, cpu_left, gpu, i)

        return _best(node, task, rate)

    return mlsched


def choose(nodes: Sequence[NodeView], task: TaskShape, scorer: Scorer) -> tuple[int, Fit] | None:
    """Index and fit of the best node for the task; the first node wins ties. None if none fit."""
    best: tuple[int, Fit] | None = None
    for i, node in enumerate(nodes):
        fit = scorer(node, task)
        if fit is not None and (best is None or fit.score > best[1].score):
            best = (i, fit)
    return best


def make_scorer(
    name: str, workload: Sequence[WorkloadClass], gpu_supply: Mapping[str, int] | None = None
) -> Scorer:
    """The scorer for a policy name (``random`` scores every fitting node alike).

    ``gpu_supply`` (the cluster's GPUs per model) is read by ``mlsched`` only.
    """
    simple = {
        "random": first_fit,
        "bestfit": bestfit,
        "dotprod": dotprod,
        "gpupacking": gpupacking,
        "gpuclustering": gpuclustering,
    }
    if name in simple:
        return simple[name]
    table = FragmentationTable(workload)
    if name == "fgd":
        return make_fgd(table)
    if name == "mlsched":
        return make_mlsched(table, gpu_supply=gpu_supply)
    raise ValueError(f"unknown fit policy {name!r}")


POLICIES = ("random", "bestfit", "dotprod", "gpupacking", "gpuclustering", "fgd", "mlsched")

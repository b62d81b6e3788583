"""GPU fragmentation measure of the FGD paper (Weng et al., USENIX ATC '23).

A node's fragmentation is the expected amount of its idle GPU (in milli) that a task drawn from
the typical workload could not use. For each workload class with popularity ``w``:

- a CPU-only class, or a class that cannot run on the node (too little CPU, too few GPUs with
  enough free milli, or the wrong GPU type) sees every idle GPU milli as fragment;
- a class that fits sees as fragment only the GPUs whose free milli is below its per-GPU need.

The node's fragmentation is the popularity-weighted sum. Pure: no Django, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

MILLI = 1000


@dataclass(frozen=True)
class TaskShape:
    """What one task (one pod, one worker) asks of a node.

    ``gpu_milli`` below 1000 is a share of one GPU; 1000 or more is a multiple of 1000, i.e.
    that many whole GPUs. ``gpu_types`` lists acceptable GPU models; empty means any.
    """

    cpu_milli: int
    gpu_milli: int
    gpu_types: frozenset[str] = field(default_factory=frozenset)

    @property
    def gpu_count(self) -> int:
        """Number of GPUs touched: 0 for CPU-only, 1 for a share, N for N whole GPUs."""
        if self.gpu_milli <= 0:
            return 0
        return 1 if self.gpu_milli < MILLI else self.gpu_milli // MILLI

    @property
    def per_gpu_milli(self) -> int:
        """Milli needed on each GPU touched."""
        return min(self.gpu_milli, MILLI)

    def accepts(self, gpu_type: str) -> bool:
        """Whether a node with this GPU model satisfies the type constraint."""
        return not self.gpu_types or gpu_type in self.gpu_types


@dataclass(frozen=True)
class WorkloadClass:
    """A typical task shape and its popularity (weights are usually normalised to sum to 1)."""

    shape: TaskShape
    weight: float


def typical_workload(
    shapes: Iterable[TaskShape], coverage: float = 0.95
) -> tuple[WorkloadClass, ...]:
    """The most frequent shapes that together cover ``coverage`` of the tasks, renormalised.

    This is the FGD paper's "target workload": shapes sorted by frequency (most frequent first),
    kept until their cumulative share reaches the coverage, then weights scaled to sum to 1.
    """
    counts = Counter(shapes)
    total = sum(counts.values())
    if not total:
        return ()
    # Sorting on the shape fields after the count keeps the cut-off deterministic on ties.
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _shape_order(kv[0])))
    kept: list[tuple[TaskShape, int]] = []
    covered = 0
    for shape, count in ranked:
        kept.append((shape, count))
        covered += count
        if covered >= coverage * total:
            break
    return tuple(WorkloadClass(shape, count / covered) for shape, count in kept)


def _shape_order(shape: TaskShape) -> tuple:
    return (shape.cpu_milli, shape.gpu_milli, sorted(shape.gpu_types))


def class_fragment(
    free_cpu_milli: int, free_gpu_milli: Sequence[int], shape: TaskShape, gpu_type: str = ""
) -> int:
    """Idle GPU milli on the node that tasks of this one shape could not use."""
    idle = sum(free_gpu_milli)
    if shape.gpu_count == 0 or not shape.accepts(gpu_type) or free_cpu_milli < shape.cpu_milli:
        return idle
    need = shape.per_gpu_milli
    if sum(1 for g in free_gpu_milli if g >= need) < shape.gpu_count:
        return idle
    return sum(g for g in free_gpu_milli if g < need)


def node_fragmentation(
    free_cpu_milli: int,
    free_gpu_milli: Sequence[int],
    workload: Sequence[WorkloadClass],
    gpu_type: str = "",
) -> float:
    """Expected GPU milli on the node unusable by the workload (the FGD paper's definition)."""
    return sum(
        c.weight * class_fragment(free_cpu_milli, free_gpu_milli, c.shape, gpu_type)
        for c in workload
    )


def fits(
    free_cpu_milli: int, free_gpu_milli: Sequence[int], task: TaskShape, gpu_type: str = ""
) -> bool:
    """Whether the task fits the node's free CPU, GPUs and GPU type (memory is not checked)."""
    if free_cpu_milli < task.cpu_milli or not (task.gpu_count == 0 or task.accepts(gpu_type)):
        return False
    need = task.per_gpu_milli
    return task.gpu_count == 0 or sum(1 for g in free_gpu_milli if g >= need) >= task.gpu_count


def candidate_takes(free_gpu_milli: Sequence[int], task: TaskShape) -> list[tuple[int, ...]]:
    """The distinct ways to take GPU milli for the task, as per-GPU milli taken.

    A share may go on any GPU with enough free milli (one candidate per distinct free value, on
    the first GPU that has it, in index order); whole GPUs
    take the first fully free GPUs, as the Open-GPU-Share allocator does. CPU-only takes nothing.
    """
    n = len(free_gpu_milli)
    if task.gpu_count == 0:
        return [(0,) * n]
    if task.gpu_milli < MILLI:
        # GPUs with the same free milli are interchangeable: offer the first of each.
        first: dict[int, int] = {}
        for i, g in enumerate(free_gpu_milli):
            if g >= task.gpu_milli:
                first.setdefault(g, i)
        return [
            tuple(task.gpu_milli if j == i else 0 for j in range(n)) for i in sorted(first.values())
        ]
    whole = [i for i, g in enumerate(free_gpu_milli) if g >= MILLI][: task.gpu_count]
    if len(whole) < task.gpu_count:
        return []
    return [tuple(MILLI if i in whole else 0 for i in range(n))]


def fgd_delta(
    free_cpu_milli: int,
    free_gpu_milli: Sequence[int],
    task: TaskShape,
    workload: Sequence[WorkloadClass],
    gpu_type: str = "",
) -> tuple[float, tuple[int, ...]] | None:
    """Fragmentation increase for the best way to put the task on the node, and the milli taken.

    Returns ``(delta, take)`` where ``take[i]`` is the milli taken from GPU ``i``; among GPU
    choices with the same delta the lowest index wins. None if the task does not fit.
    """
    if not fits(free_cpu_milli, free_gpu_milli, task, gpu_type):
        return None
    before = node_fragmentation(free_cpu_milli, free_gpu_milli, workload, gpu_type)
    best: tuple[float, tuple[int, ...]] | None = None
    for take in candidate_takes(free_gpu_milli, task):
        after_gpu = [g - t for g, t in zip(free_gpu_milli, take, strict=True)]
        after = node_fragmentation(free_cpu_milli - task.cpu_milli, after_gpu, workload, gpu_type)
        if best is None or after - before < best[0]:
            best = (after - before, take)
    return best


class FragmentationTable:
    """Node fragmentation for one workload, cached per distinct node state.

    A cluster has far fewer distinct (GPU type, free CPU, free GPU multiset) states than nodes,
    and a placement changes one node, so caching makes scoring every node for every task cheap.
    Classes are grouped by their GPU need so one state is measured in a few bisects:
    fragment = idle x (total weight) - sum over groups that fit of (idle - small) x weight with
    enough CPU.
    """

    def __init__(self, workload: Sequence[WorkloadClass], lookahead_classes: int = 30):
        self.workload = tuple(workload)
        # The lookahead only needs the most popular classes; the tail barely moves it.
        ranked = sorted(self.workload, key=lambda c: -c.weight)[:lookahead_classes]
        share = sum(c.weight for c in ranked) or 1.0
        self._ahead_classes = [(c.shape, c.weight / share) for c in ranked]
        self._ahead: dict[tuple, tuple[float | None, ...]] = {}
        # Fragmentation depends on free CPU only through "cpu >= class CPU" tests, so states are
        # cached by the largest threshold not above the free CPU: far fewer distinct keys.
        cpus = {c.shape.cpu_milli for c in self.workload}
        self._cuts = sorted(cpus | {0})
        self._ahead_cuts = sorted(
            cpus | {a.cpu_milli + b for a, _ in self._ahead_classes for b in cpus}
        )
        # GPU types matter only if some class restricts them.
        self._typed = any(c.shape.gpu_types for c in self.workload)
        self._total = sum(c.weight for c in self.workload)
        groups: dict[tuple[int, int, frozenset[str]], list[tuple[int, float]]] = {}
        for c in self.workload:
            if c.shape.gpu_count:
                key = (c.shape.per_gpu_milli, c.shape.gpu_count, c.shape.gpu_types)
                groups.setdefault(key, []).append((c.shape.cpu_milli, c.weight))
        # Per group: CPU thresholds ascending and the weight of classes needing at most each.
        self._groups = []
        for (need, count, types), members in groups.items():
            members.sort()
            cumulative = list(accumulate(w for _, w in members))
            self._groups.append((need, count, types, [cpu for cpu, _ in members], cumulative))
        self._cache: dict[tuple, float] = {}

    def node(self, free_cpu_milli: int, free_gpu_milli: Sequence[int], gpu_type: str = "") -> float:
        """Fragmentation of a node in this state (same value as ``node_fragmentation``)."""
        gpus = tuple(sorted(free_gpu_milli))
        cpu = _floor(self._cuts, free_cpu_milli)
        key = (gpu_type if self._typed else "", cpu, gpus)
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = self._measure(cpu, gpus, gpu_type)
        return value

    def _measure(self, cpu: int, gpus: tuple[int, ...], gpu_type: str) -> float:
        prefix = [0, *accumulate(gpus)]
        idle = prefix[-1]
        frag = idle * self._total
        if not idle:
            return 0.0
        for need, count, types, cpus, cumulative in self._groups:
            at = bisect_left(gpus, need)
            if len(gpus) - at < count or (types and gpu_type not in types):
                continue
            fitting = bisect_right(cpus, cpu)
            if fitting:
                frag -= (idle - prefix[at]) * cumulative[fitting - 1]
        return frag

    def lookahead(
        self, free_cpu_milli: int, free_gpu_milli: Sequence[int], gpu_type: str = ""
    ) -> tuple[float | None, ...]:
        """Per popular class, the weighted fragmentation growth if its next task lands here.

        Entry ``p`` is ``weight_p x`` the growth of class p's best GPU choice on this node, or
        None if p does not fit. Compare two states with ``lookahead_change``.
        """
        gpus = tuple(sorted(free_gpu_milli))
        cpu = _floor(self._ahead_cuts, free_cpu_milli)
        key = (gpu_type if self._typed else "", cpu, gpus)
        value = self._ahead.get(key)
        if value is None:
            value = self._ahead[key] = self._look(cpu, gpus, gpu_type)
        return value

    def _look(self, cpu: int, gpus: tuple[int, ...], gpu_type: str) -> tuple[float | None, ...]:
        before = self.node(cpu, gpus, gpu_type)
        out: list[float | None] = []
        for shape, weight in self._ahead_classes:
            best = None
            if cpu >= shape.cpu_milli and (shape.gpu_count == 0 or shape.accepts(gpu_type)):
                for after in _after_states(gpus, shape):
                    frag = self.node(cpu - shape.cpu_milli, after, gpu_type)
                    best = frag if best is None or frag < best else best
            out.append(None if best is None else weight * (best - before))
        return tuple(out)


def lookahead_change(before: Sequence[float | None], after: Sequence[float | None]) -> float:
    """How much worse the next typical task fares on the node after a placement than before.

    Only classes that still fit count: a class the placement shuts out is already charged by
    the fragmentation growth, and must not look like a saving here.
    """
    return sum(a - b for a, b in zip(after, before, strict=True) if a is not None and b is not None)


def _floor(cuts: list[int], cpu: int) -> int:
    """The largest cut not above cpu (cpu itself if below every cut, e.g. negative)."""
    i = bisect_right(cuts, cpu)
    return cuts[i - 1] if i else cpu


def _after_states(gpus: tuple[int, ...], shape: TaskShape) -> list[tuple[int, ...]]:
    """Distinct sorted GPU states after placing the shape on a sorted free-GPU tuple."""
    if shape.gpu_count == 0:
        return [gpus]
    if shape.gpu_milli >= MILLI:
        full = [i for i, g in enumerate(gpus) if g >= MILLI][: shape.gpu_count]
        if len(full) < shape.gpu_count:
            return []
        return [tuple(sorted(0 if i in full else g for i, g in enumerate(gpus)))]
    need = shape.gpu_milli
    out = []
    for i, g in enumerate(gpus):
        # GPUs with equal free milli give the same state; try each distinct value once.
        if g >= need and (i == 0 or gpus[i - 1] != g):
            out.append(tuple(sorted((*gpus[:i], g - need, *gpus[i + 1 :]))))
    return out

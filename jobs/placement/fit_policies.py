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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from jobs.placement.fragmentation import (
    MILLI,
    FragmentationTable,
    TaskShape,
    WorkloadClass,
    candidate_takes,
    fits,
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
    # Share sizes (milli) of the tasks already on the node; only gpuclustering reads it.
    hosted_gpu_milli: frozenset[int] = field(default_factory=frozenset)


class Fit(NamedTuple):
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


def first_fit(node: NodeView, task: TaskShape) -> Fit | None:
    """Every fitting node scores 0; the task takes the first GPUs that fit (random's choice)."""
    takes = _takes(node, task)
    return Fit(0.0, takes[0]) if takes else None


def bestfit(node: NodeView, task: TaskShape) -> Fit | None:
    """Least leftover: 1 - 0.5 cpu_left/MAX_CPU - 0.5 gpu_left/MAX_GPU, on the tightest GPU.

    Computed in integers (proportional to the published score) so equal nodes tie exactly.
    """

    def rate(take: tuple[int, ...]) -> float:
        cpu_left, gpu = _after(node, task, take)
        tight = -min((g for g, t in zip(gpu, take, strict=True) if t), default=0)
        node_left = cpu_left * MAX_GPU_MILLI + sum(gpu) * MAX_CPU_MILLI
        # The node leftover dominates; the tightest GPU only orders choices inside a node.
        return -node_left * 10_000 + tight

    return _best(node, task, rate)


def dotprod(node: NodeView, task: TaskShape) -> Fit | None:
    """Tetris-style alignment: the smallest dot product of request and what is left, max-normed.

    GPU dimensions are merged into one total; the tightest GPU is taken for a share.
    """
    req_cpu = task.cpu_milli / MAX_CPU_MILLI
    req_gpu = task.gpu_count * task.per_gpu_milli / MAX_GPU_MILLI

    def rate(take: tuple[int, ...]) -> float:
        cpu_left, gpu = _after(node, task, take)
        tight = min((g for g, t in zip(gpu, take, strict=True) if t), default=0)
        dot = req_cpu * cpu_left / MAX_CPU_MILLI + req_gpu * sum(gpu) / MAX_GPU_MILLI
        return -dot - tight * 1e-9

    return _best(node, task, rate)


def gpupacking(node: NodeView, task: TaskShape) -> Fit | None:
    """Prefer an already-shared GPU, then a partly used node, then an idle node."""
    node_used = any(g < MILLI for g in node.free_gpu_milli)

    def rate(take: tuple[int, ...]) -> float:
        shared = any(t and g < MILLI for g, t in zip(node.free_gpu_milli, take, strict=True))
        tier = 2 if shared else (1 if node_used else 0)
        tight = min((g for g, t in zip(node.free_gpu_milli, take, strict=True) if t), default=0)
        return tier * 10_000 - tight

    return _best(node, task, rate)


def gpuclustering(node: NodeView, task: TaskShape) -> Fit | None:
    """Prefer nodes hosting shares of the same size, then idle nodes, then mixed nodes."""
    takes = _takes(node, task)
    if not takes:
        return None
    if task.gpu_milli in node.hosted_gpu_milli:
        return Fit(2.0, takes[0])
    return Fit(1.0 if not node.hosted_gpu_milli else 0.0, takes[0])


def fgd_score(delta: float) -> int:
    """The published FGD score: int(sigmoid(-delta / 1000) x 100).

    The truncation to 100 levels is part of the method's behaviour: near-equal deltas tie and
    then the node order decides, which packs tasks together.
    """
    return int(100.0 / (1.0 + math.exp(delta / 1000.0)))


def make_fgd(table: FragmentationTable) -> Scorer:
    """The FGD scorer (Weng et al., ATC '23) for the table's workload."""

    def fgd(node: NodeView, task: TaskShape) -> Fit | None:
        before = table.node(node.free_cpu_milli, node.free_gpu_milli, node.gpu_type)

        def rate(take: tuple[int, ...]) -> float:
            cpu_left, gpu = _after(node, task, take)
            return fgd_score(table.node(cpu_left, gpu, node.gpu_type) - before)

        return _best(node, task, rate)

    return fgd


def make_mlsched(table: FragmentationTable) -> Scorer:
    """The production scorer: least fragmentation growth, then least leftover on the node."""

    def mlsched(node: NodeView, task: TaskShape) -> Fit | None:
        before = table.node(node.free_cpu_milli, node.free_gpu_milli, node.gpu_type)

        def rate(take: tuple[int, ...]) -> float:
            cpu_left, gpu = _after(node, task, take)
            delta = table.node(cpu_left, gpu, node.gpu_type) - before
            left = cpu_left / MAX_CPU_MILLI + sum(gpu) / MAX_GPU_MILLI
            return fgd_score(delta) * 1e6 - left

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


def make_scorer(name: str, workload: Sequence[WorkloadClass]) -> Scorer:
    """The scorer for a policy name (``random`` scores every fitting node alike)."""
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
        return make_mlsched(table)
    raise ValueError(f"unknown fit policy {name!r}")


POLICIES = ("random", "bestfit", "dotprod", "gpupacking", "gpuclustering", "fgd", "mlsched")

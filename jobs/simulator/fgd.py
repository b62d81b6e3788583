"""The FGD paper's packing experiment (USENIX ATC '23), re-implemented.

Protocol: GPU nodes only; pods sorted by name and shuffled with the seed; the list inflated (or
trimmed) to ``tune`` x cluster GPU capacity; nodes put in a random order by the same seed (the
order breaks ties between equal scores); pods placed one at a time on arrival, never moved and
never finished; a pod that does not fit fails and is dropped. After every pod the allocated and
arrived GPU milli are recorded, then discretised by arrived load in percent.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jobs.placement.fit_policies import NodeView, Scorer, gpu_affinity, make_scorer
from jobs.placement.fragmentation import FragmentationTable, TaskShape, typical_workload
from jobs.simulator.openb import Node, Pod

MAX_ARRIVED_PCT = 130


@dataclass
class Trial:
    """Nodes in tie-break order and pods in arrival order, as one seed lays them out."""

    nodes: list[Node]
    pods: list[Pod]
    originals: list[Pod]
    seed: int = 0


@dataclass
class Outcome:
    """Per-pod records of one run."""

    arrived_milli: np.ndarray
    allocated_milli: np.ndarray
    frag_milli: np.ndarray
    idle_milli: np.ndarray
    failed: int
    capacity_milli: int


def prepare(nodes: Sequence[Node], pods: Sequence[Pod], seed: int, tune: float) -> Trial:
    """Order the pods and nodes for one seed, inflating the pods to ``tune`` x GPU capacity."""
    rng = random.Random(seed)
    capacity = sum(n.gpus for n in nodes) * 1000
    ordered = sorted(pods, key=lambda p: p.name)
    rng.shuffle(ordered)
    arrivals = _inflate(ordered, rng, tune * capacity) if tune > 0 else list(ordered)
    node_order = sorted(nodes, key=lambda n: n.name)
    rng.shuffle(node_order)
    return Trial(node_order, arrivals, list(pods), seed)


def _inflate(ordered: list[Pod], rng: random.Random, target: float) -> list[Pod]:
    """Append random copies until the next would pass the target, or drop pods down to it."""
    total = sum(p.gpu_request for p in ordered)
    arrivals = list(ordered)
    if total > target:
        while total > target and arrivals:
            total -= arrivals.pop(rng.randrange(len(arrivals))).gpu_request
        return arrivals
    if not any(p.gpu_request for p in ordered):
        return arrivals
    while True:
        pod = ordered[rng.randrange(len(ordered))]
        if total + pod.gpu_request > target:
            return arrivals
        arrivals.append(pod)
        total += pod.gpu_request


class Cluster:
    """Free resources of every node as arrays, plus an interned state id per node.

    Nodes in the same state score the same for a task, so a pod is scored once per distinct
    feasible state rather than once per node; that is what makes a run take seconds.
    """

    def __init__(self, nodes: Sequence[Node], track_hosted: bool = False):
        width = max(n.gpus for n in nodes)
        self.models = [n.model for n in nodes]
        self.cpu = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        # Missing GPU slots hold -1 so they never satisfy a request.
        self.gpu = np.full((len(nodes), width), -1, dtype=np.int64)
        for i, n in enumerate(nodes):
            self.gpu[i, : n.gpus] = 1000
        self.gpus = [n.gpus for n in nodes]
        # Per node: fully free GPUs and the largest free share; a pod's GPU filter reads these
        # two columns instead of scanning every GPU of every node.
        self.full = (self.gpu == 1000).sum(axis=1)
        self.top = self.gpu.max(axis=1)
        self.track_hosted = track_hosted
        self.hosted: list[frozenset[str]] = [frozenset()] * len(nodes)
        self._ids: dict[NodeView, int] = {}
        self.views: list[NodeView] = []
        self.state = np.array([self._intern(i) for i in range(len(nodes))], dtype=np.int64)
        self._type_masks: dict[frozenset[str], np.ndarray] = {}

    def view(self, i: int) -> NodeView:
        free = tuple(int(g) for g in self.gpu[i, : self.gpus[i]])
        return NodeView(self.models[i], int(self.cpu[i]), free, self.hosted[i])

    def _intern(self, i: int) -> int:
        view = self.view(i)
        sid = self._ids.get(view)
        if sid is None:
            sid = self._ids[view] = len(self.views)
            self.views.append(view)
        return sid

    def feasible(self, pod: Pod, shape: TaskShape) -> np.ndarray:
        """Indices of the nodes passing the filter (CPU, memory, GPU count and milli, type)."""
        mask = (self.cpu >= pod.cpu_milli) & (self.mem >= pod.memory_mib)
        if shape.gpu_milli >= 1000:
            mask &= self.full >= shape.gpu_count
        elif shape.gpu_milli > 0:
            mask &= self.top >= shape.gpu_milli
        if shape.gpu_count and shape.gpu_types:
            mask &= self._type_mask(shape.gpu_types)
        return np.flatnonzero(mask)

    def _type_mask(self, types: frozenset[str]) -> np.ndarray:
        mask = self._type_masks.get(types)
        if mask is None:
            mask = np.array([m in types for m in self.models])
            self._type_masks[types] = mask
        return mask

    def place(self, i: int, pod: Pod, shape: TaskShape, take: Sequence[int]) -> None:
        """Take the pod's resources from node i."""
        self.cpu[i] -= pod.cpu_milli
        self.mem[i] -= pod.memory_mib
        self.gpu[i, : len(take)] -= np.asarray(take, dtype=np.int64)
        self.full[i] = (self.gpu[i] == 1000).sum()
        self.top[i] = self.gpu[i].max()
        if self.track_hosted and shape.gpu_milli:
            self.hosted[i] = self.hosted[i] | {gpu_affinity(shape)}
        self.state[i] = self._intern(i)


def run(trial: Trial, policy: str) -> Outcome:
    """Place the trial's pods one at a time with the policy and record every event."""
    workload = typical_workload(p.shape for p in trial.originals)
    supply: dict[str, int] = {}
    for node in trial.nodes:
        supply[node.model] = supply.get(node.model, 0) + node.gpus
    scorer = make_scorer(policy, workload, supply)
    table = FragmentationTable(workload)
    cluster = Cluster(trial.nodes, track_hosted=policy == "gpuclustering")
    rng = random.Random(trial.seed)  # only the random policy draws from it
    n = len(trial.pods)
    arrived, allocated = np.zeros(n, np.int64), np.zeros(n, np.int64)
    frag, idle = np.zeros(n), np.zeros(n, np.int64)
    frag_total = sum(
        table.node(v.free_cpu_milli, v.free_gpu_milli, v.gpu_type)
        for v in map(cluster.view, range(len(trial.nodes)))
    )
    idle_total = int(cluster.gpu[cluster.gpu > 0].sum())
    cache: dict = {}
    arr = alloc = failed = 0
    for k, (pod, shape) in enumerate(zip(trial.pods, [p.shape for p in trial.pods], strict=True)):
        arr += pod.gpu_request
        pick = _pick(cluster, pod, shape, scorer, cache, rng if policy == "random" else None)
        if pick is None:
            failed += 1
        else:
            i, take = pick
            old = cluster.views[cluster.state[i]]
            cluster.place(i, pod, shape, take)
            new = cluster.views[cluster.state[i]]
            frag_total += table.node(new.free_cpu_milli, new.free_gpu_milli, new.gpu_type)
            frag_total -= table.node(old.free_cpu_milli, old.free_gpu_milli, old.gpu_type)
            alloc += pod.gpu_request
            idle_total -= pod.gpu_request
        arrived[k], allocated[k], frag[k], idle[k] = arr, alloc, frag_total, idle_total
    capacity = sum(n.gpus for n in trial.nodes) * 1000
    return Outcome(arrived, allocated, frag, idle, failed, capacity)


def _pick(
    cluster: Cluster,
    pod: Pod,
    shape: TaskShape,
    scorer: Scorer,
    cache: dict,
    rng: random.Random | None,
):
    """The chosen node index and GPU take, or None when no node fits."""
    idx = cluster.feasible(pod, shape)
    if not len(idx):
        return None
    if rng is not None:
        i = int(idx[rng.randrange(len(idx))])
        fit = scorer(cluster.views[cluster.state[i]], shape)
        assert fit is not None  # a feasible node has a fit
        return i, fit.take
    # Distinct states in node order: the first node of a state is its best tie-breaker, and
    # a later state wins only with a strictly higher score.
    ids = cluster.state[idx].tolist()
    shapes = cache.setdefault("shapes", {})
    # Scores are cached per (state, shape); the shape's small integer id keeps hashing cheap.
    sk = shapes.setdefault(shape, len(shapes)) << 32
    best, best_sid = None, -1
    for sid in dict.fromkeys(ids):
        key = sk | sid
        fit = cache.get(key)
        if fit is None:
            fit = cache[key] = scorer(cluster.views[sid], shape)
        if fit is not None and (best is None or fit.score > best.score):
            best, best_sid = fit, sid
    if best is None:
        return None
    return int(idx[ids.index(best_sid)]), best.take


def discretise(
    arrived_milli: np.ndarray, values: np.ndarray, capacity_milli: int
) -> list[float | None]:
    """Mean of values over events whose arrived load rounds to k %, for k in 0..130.

    Where no event rounds to k (a large pod jumped over it), the events within k +- 1 are used.
    """
    pct = np.floor(arrived_milli / capacity_milli * 100 + 0.5).astype(np.int64)
    out: list[float | None] = []
    for k in range(MAX_ARRIVED_PCT + 1):
        sel = values[pct == k]
        if not len(sel):
            sel = values[(pct >= k - 1) & (pct <= k + 1)]
        out.append(float(sel.mean()) if len(sel) else None)
    return out


def allocation_curve(outcome: Outcome) -> list[float | None]:
    """GPU allocation ratio (%) by arrived load 0..130 % (analysis_allo_discrete.csv)."""
    ratio = outcome.allocated_milli / outcome.capacity_milli * 100
    return discretise(outcome.arrived_milli, ratio, outcome.capacity_milli)


def fragmentation_curve(outcome: Outcome) -> list[float | None]:
    """Fragmented GPU as % of capacity by arrived load (analysis_frag_discrete.csv)."""
    amount = outcome.frag_milli / outcome.capacity_milli * 100
    return discretise(outcome.arrived_milli, amount, outcome.capacity_milli)


def fragmentation_ratio_curve(outcome: Outcome) -> list[float | None]:
    """Fragmented GPU as % of idle GPU by arrived load (analysis_frag_ratio_discrete.csv)."""
    ratio = outcome.frag_milli / np.maximum(outcome.idle_milli, 1) * 100
    return discretise(outcome.arrived_milli, ratio, outcome.capacity_milli)

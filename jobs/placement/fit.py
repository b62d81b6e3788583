"""Finding nodes for one task or one gang in the indexed capacity.

A search looks only at buckets that can hold the request, stops a bucket a few nodes after its
first fit, and compares distinct node states with the weighted scorers. Searches return slots
for the caller to commit; only ``find_tasks`` allocates as it goes, so that each shard sees the
ones before it, and gives everything back unless told to keep it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from jobs.placement.capacity import Group, NodeState, Takes
from jobs.placement.model import WHOLE_GPU, Policy
from jobs.placement.scoring import WeightedScorer

# A worker's slot: node, GPU takes, cpu, memory.
Slot = tuple[NodeState, Takes, int, int]
# More buckets than this past the first one that fits are not worth comparing.
BUCKET_SPAN = 2
# Groups (GPU type x cluster) with a fit to look at before the search stops.
GROUP_SPAN = 2


@dataclass
class Need:
    """One worker's shape and where it may go.

    ``start`` and ``end`` are when the job would start and be sure to end (by its runtime
    limit); ``windows`` counts the maintenance windows and bookings that start before that end:
    with any, a node whose window starts before that end and ends after that start is off
    limits, unless the window is booked for the job's ``tenant`` (or ``bookings_open``, to ask
    whether bookings alone keep it off); and so is a node in ``avoid``, where the job failed
    before, in ``exclude``, one it never runs on, or without one of the ``features`` it
    requires (``shut``). A ``whole`` worker (an exclusive job's) takes a node to itself: one
    with exactly ``gpus`` GPUs (``shut`` otherwise) and nothing on it (``free_for``), all of
    whose CPU and memory its slot holds (``slot``)."""

    gpus: int
    milli: int
    cpu: int
    mem: int
    groups: list[Group]
    avoid_held: bool = False
    windows: int = 0
    start: float = 0.0
    end: float = float("inf")
    avoid: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()
    tenant: str = ""
    bookings_open: bool = False
    # A gang's topology domain: the label key all its nodes must share a value of ("": none).
    together: str = ""
    whole: bool = False

    @property
    def limited(self) -> bool:
        """Whether some node may be off limits for it (``shut``)."""
        return bool(self.windows or self.avoid or self.exclude or self.features or self.whole)

    def free_for(self, node: NodeState) -> bool:
        """Whether the node's free CPU and memory hold the worker (a whole one: nothing else
        is there); its GPUs are the caller's check."""
        if node.cpu < self.cpu or node.mem < self.mem:
            return False
        return not self.whole or node.idle

    def slot(self, node: NodeState, takes: Takes) -> Slot:
        """The worker's slot on the node: what it asks for, or all of the node if whole."""
        if self.whole:
            return (node, takes, node.cpu, node.mem)
        return (node, takes, self.cpu, self.mem)

    def shut(self, node: NodeState) -> bool:
        """Whether the node's maintenance window, the job's failure there, its exclusion or a
        feature it lacks keeps the worker off it."""
        if self.windows:
            if node.closes < self.end and self.start < node.opens:
                booked = node.reserved_for
                if not booked or (booked != self.tenant and not self.bookings_open):
                    return True
            after = node.after  # the window after a booking, which its tenant's work ignores
            if after is not None and after[0] < self.end and self.start < after[1]:
                booked = after[2]
                if not booked or (booked != self.tenant and not self.bookings_open):
                    return True
        if self.features and not self.features <= node.features:
            return True
        if self.whole and len(node.gpus) != self.gpus:
            return True
        return node.id in self.avoid or node.id in self.exclude


def gpu_options(node: NodeState, gpus: int, milli: int) -> list[Takes]:
    """The distinct ways to give one worker its GPUs on this node (empty: it does not fit)."""
    if gpus:
        whole = [i for i, m in enumerate(node.gpus) if m >= WHOLE_GPU][:gpus]
        return [tuple((i, WHOLE_GPU) for i in whole)] if len(whole) == gpus else []
    if not milli:
        return [()]
    # One option per distinct free level (equal GPUs score the same), tightest first so that
    # ties between scores fill the fullest GPU.
    first: dict[int, int] = {}
    for i, free in enumerate(node.gpus):
        if free >= milli and free not in first:
            first[free] = i
    return [((first[free], milli),) for free in sorted(first)]


def _buckets(group: Group, need: Need) -> list[dict[NodeState, None]]:
    # Every node in these buckets has the GPUs the worker needs; only CPU and memory are left
    # to check.
    if need.gpus:
        return group.by_full[need.gpus :]
    if need.milli:
        return group.share_buckets(need.milli)
    return group.by_full


def group_can_hold(group: Group, need: Need, workers: int = 1) -> bool:
    """Whether the group's free totals could cover ``workers`` workers (a cheap filter)."""
    if group.cpu_total < need.cpu * workers or group.mem_total < need.mem * workers:
        return False
    if need.gpus:
        return group.full_total >= need.gpus * workers
    return group.milli_total >= need.milli * workers


class _Collector:
    """Gathers rated candidate nodes for one worker across groups and buckets."""

    def __init__(self, need: Need, scorer: WeightedScorer, policy: Policy, spread, distinct):
        self.need, self.scorer, self.policy = need, scorer, policy
        self.spread, self.distinct = spread, distinct
        self.out: list[tuple[NodeState, Takes, float]] = []
        self.seen: set = set()
        # A share looks at partly used GPUs first; a node already offered there is skipped
        # when it comes again in the buckets of entirely free GPUs.
        self.repeat = need.milli if need.milli and not need.gpus else WHOLE_GPU + 1
        self.by_cluster = bool(policy.cluster_costs)

    def group(self, group: Group) -> bool:
        """Buckets from the tightest fit up; True if any node of the group fits. A group whose
        every node the job excludes is not walked (a job pinned to a few nodes, ``only_nodes``,
        excludes nearly every other group whole)."""
        if self.need.exclude and group.ids <= self.need.exclude:
            return False
        spans = 0
        for bucket in _buckets(group, self.need):
            if bucket:
                spans += self._bucket(bucket, group)
            if spans >= BUCKET_SPAN or len(self.out) >= self.policy.candidates_per_task:
                break
        return spans > 0

    def _bucket(self, bucket: dict[NodeState, None], group: Group) -> bool:
        # Look a few nodes past the first fit: equal nodes score alike, so a longer look
        # rarely finds a better state.
        need, spread, seen = self.need, self.spread, self.seen
        cpu, mem, avoid, depth = need.cpu, need.mem, need.avoid_held, self.policy.scan_depth
        limited = need.limited
        looked = -1
        for node in bucket:
            if looked >= 0:
                looked += 1
                if looked > depth:
                    break
            if node.cpu < cpu or node.mem < mem or (avoid and node.held):
                continue
            if limited and (need.shut(node) or not need.free_for(node)):
                continue
            if node.partial >= self.repeat and bucket is not group.partial.get(node.partial):
                continue
            looked = max(looked, 0)
            # Nodes with equal keys score alike: one of them stands for all.
            key = (
                (
                    node.gpu_type,
                    node.cpu,
                    node.mem,
                    node.gpus,
                    spread.get(node, 0) if spread else 0,
                    node.cluster if self.by_cluster else "",
                )
                if self.distinct
                else node
            )
            if key not in seen:
                seen.add(key)
                rated = rate(node, need, self.scorer)
                if rated is not None:
                    self.out.append(rated)
        return looked >= 0


def rate(node: NodeState, need: Need, scorer: WeightedScorer):
    """The node's best GPU choice for the worker and its weighted score, or None if its GPUs
    cannot hold the worker (CPU and memory are the caller's check).

    Cached per node state and request shape: most nodes share their state with many others.
    """
    key = (node.gpu_type, node.cpu, node.gpus, need.gpus, need.milli, need.cpu)
    known = scorer.rates.get(key)
    if known is None:
        best, best_score = None, -1e18
        for takes in gpu_options(node, need.gpus, need.milli):
            score = scorer(_move(node, takes, need.cpu))
            if score > best_score:
                best, best_score = takes, score
        known = scorer.rates[key] = (best, best_score)
    if known[0] is None:
        return None
    costs = scorer.cluster_costs
    return node, known[0], known[1] - costs.get(node.cluster, 0.0) if costs else known[1]


def _candidates(need: Need, scorer, policy: Policy, spread=None, distinct=True) -> list:
    collector = _Collector(need, scorer, policy, spread, distinct)
    hits = 0
    for group in need.groups:
        if len(collector.out) >= policy.candidates_per_task or hits >= GROUP_SPAN:
            break
        if group_can_hold(group, need):
            hits += collector.group(group)
    return collector.out


def _best(candidates: list, policy: Policy, spread=None):
    # The first of equal scores wins: candidates come in bucket order, tightest first.
    best = None
    best_score = -1e18
    weight = policy.spread_weight
    for candidate in candidates:
        score = candidate[2]
        if spread:
            score += weight / (1 + spread.get(candidate[0], 0))
        if score > best_score:
            best, best_score = candidate, score
    return None if best is None else (best[0], best[1])


def find_task(
    need: Need, scorer: WeightedScorer, policy: Policy, spread: dict | None = None
) -> tuple[NodeState, Takes] | None:
    """The best node and GPU choice for one worker, or None if nothing fits."""
    return _best(_candidates(need, scorer, policy, spread), policy, spread)


def find_tasks(
    need: Need,
    workers: int,
    scorer: WeightedScorer,
    policy: Policy,
    capacity,
    spread: bool,
    keep: bool = False,
) -> list[Slot] | None:
    """Slots for independent workers (shards), all or none.

    The workers are allocated as they are found; on failure, or unless ``keep``, they are
    given back. Candidates are collected once and reused: placing a worker only changes the
    node it lands on, so only that node is rated again. With ``spread``, nodes already
    holding a worker of the job score lower.
    """
    slots: list[Slot] = []
    counts: dict | None = {} if spread else None
    pool: list = []
    found = False
    try:
        for _ in range(workers):
            pick = _best(pool, policy, counts)
            if pick is None:
                pool = _candidates(need, scorer, policy, counts, distinct=False)
                pick = _best(pool, policy, counts)
                if pick is None:
                    return None
            node, takes, cpu, mem = need.slot(*pick)
            slots.append((node, capacity.allocate(node, takes, cpu, mem), cpu, mem))
            if counts is not None:
                counts[node] = counts.get(node, 0) + 1
            _refresh(pool, node, need, scorer)
        found = True
    finally:
        if not (found and keep):
            for node, takes, cpu, mem in reversed(slots):
                capacity.release(node, takes, cpu, mem)
    return slots


def _refresh(pool: list, node: NodeState, need: Need, scorer: WeightedScorer) -> None:
    for i, candidate in enumerate(pool):
        if candidate[0] is node:
            rated = rate(node, need, scorer) if need.free_for(node) else None
            if rated is not None:
                pool[i] = rated
            else:
                del pool[i]
            return


def _move(node: NodeState, takes: Takes, cpu: int):
    after = list(node.gpus)
    for index, milli in takes:
        after[index] -= milli
    return (node.gpu_type, node.cpu, node.gpus, node.cpu - cpu, tuple(after))


def find_gang(
    need: Need, workers: int, scorer: WeightedScorer, policy: Policy, topology: bool = True
) -> list[Slot] | None:
    """Slots for all workers in one group on the fewest nodes, or None (all or nothing).

    A gang that fits on one node goes where the scorers like it best (its cluster's cost
    counted). Otherwise plans are ranked by node count, then by their cluster's cost, then by
    sharing a topology label (most specific level first), then by the GPUs left idle on the
    chosen nodes (packing), then by the scorers, then by group order.
    """
    groups = [g for g in need.groups if group_can_hold(g, need, workers)]
    # A whole worker takes its node: a gang of them, as many nodes.
    alone = workers == 1 or not need.whole
    one_node = [g for g in groups if need.gpus * workers <= g.max_gpus and alone]
    if one_node:
        whole = dataclasses.replace(
            need, gpus=need.gpus * workers, milli=0, cpu=need.cpu * workers,
            mem=need.mem * workers, groups=one_node,
        )  # fmt: skip
        found = find_task(whole, scorer, policy)
        if found is not None:
            return _slots([(found[0], workers)], need)
    best = None
    for index, group in enumerate(groups):
        if best is not None and not _may_beat(best[0], _fewest_nodes(group, need, workers)):
            continue
        plan = _multi_node_plan(group, need, workers, (scorer, policy), index, topology)
        if plan is not None and (best is None or plan[0] < best[0]):
            best = plan
    return None if best is None else _slots(best[1], need)


def _may_beat(rank: tuple, fewest: int) -> bool:
    # A later group wins only with fewer nodes, or with as many and a better tie-break than
    # a plan on a cluster without cost that already shares the most specific label and leaves
    # nothing idle (such a group could still score better; that small loss buys skipping most
    # groups).
    return fewest < rank[0] or (fewest == rank[0] and rank[1:5] != (0, 0, 0, 0))


def _fewest_nodes(group: Group, need: Need, workers: int) -> int:
    """A lower bound on the nodes the gang needs in the group, from the GPU buckets alone."""
    if not need.gpus:
        return 1
    left, nodes = workers, 0
    for full in range(group.max_gpus, need.gpus - 1, -1):
        per, count = full // need.gpus, len(group.by_full[full])
        if per * count >= left:
            return nodes + -(-left // per)
        left -= per * count
        nodes += count
    return 1 << 30


def _capacity_of(node: NodeState, need: Need) -> int:
    if need.whole:
        return int(need.free_for(node))
    k = node.full // need.gpus if need.gpus else 1 << 30
    if need.cpu:
        k = min(k, node.cpu // need.cpu)
    if need.mem:
        k = min(k, node.mem // need.mem)
    return k


def _gang_candidates(group: Group, need: Need, workers: int, limit: int) -> list:
    out: list[tuple[NodeState, int]] = []
    total = 0
    start = max(need.gpus, 0)
    limited = need.limited
    for full in range(group.max_gpus, start - 1, -1):
        for node in group.by_full[full]:
            if (need.avoid_held and node.held) or (limited and need.shut(node)):
                continue
            k = _capacity_of(node, need)
            if k > 0:
                out.append((node, k))
                total += k
                if total >= workers and len(out) >= limit:
                    return out
    return out if total >= workers else []


def _greedy(ranked: list[tuple[NodeState, int]], workers: int) -> list | None:
    """Fewest nodes: the largest first, then the tightest node that covers the remainder.

    ``ranked`` is sorted by capacity, largest first, then node order.
    """
    chosen: list[tuple[NodeState, int]] = []
    left = workers
    for i, (node, k) in enumerate(ranked):
        if k >= left:
            last = min((c for c in ranked[i:] if c[1] >= left), key=lambda c: (c[1], c[0].order))
            chosen.append((last[0], left))
            return chosen
        chosen.append((node, k))
        left -= k
    return None


def _multi_node_plan(group, need, workers, ctx, index, topology):
    scorer, policy = ctx
    if need.together:
        return _domain_plan(group, need, workers, ctx, index)
    cands = _gang_candidates(group, need, workers, policy.gang_candidate_nodes)
    cands.sort(key=lambda c: (-c[1], c[0].order))
    plain = _greedy(cands, workers)
    if plain is None:
        return None
    cost = scorer.cluster_costs.get(group.cluster, 0.0) if scorer.cluster_costs else 0.0
    # (nodes, cluster cost, not under a shared label, [label depth,] idle GPUs, score, index)
    tie = _tie_break(plain, need, scorer)
    best: tuple[tuple, list] = ((len(plain), cost, 1, *tie, index), plain)
    if not topology:
        return best
    fewest = len(plain)
    depth = max((len(n.topology) for n, _ in cands), default=0)
    for level in range(depth):
        by_label: dict[str, list] = {}
        for node, k in cands:
            if level < len(node.topology):
                by_label.setdefault(node.topology[level], []).append((node, k))
        for label in sorted(by_label):
            members = by_label[label]  # still sorted largest first
            # Cheap bounds first: the label's largest nodes must hold the gang.
            if len(members) < fewest or sum(k for _, k in members[:fewest]) < workers:
                continue
            chosen = _greedy(members, workers)
            if chosen is not None and len(chosen) == fewest:
                tie = _tie_break(chosen, need, scorer)
                rank = ((fewest, cost, 0, level, *tie, index), chosen)
                if rank[0] < best[0]:
                    best = rank
        if best[0][2] == 0:
            break  # a more specific shared label beats any broader one
    return best


def _domain_plan(group, need, workers, ctx, index):
    """The best plan inside one domain of the gang's topology key (nodes sharing one value of
    it), by the same ranks as any plan; None if no domain holds the gang now. Every node of
    the group is a candidate: a domain's nodes may be none of the largest."""
    scorer, _ = ctx
    prefix = need.together + "="
    domains: dict[str, list] = {}
    for node, k in _gang_candidates(group, need, workers, 1 << 30):
        label = next((t for t in node.topology if t.startswith(prefix)), None)
        if label is not None:
            domains.setdefault(label, []).append((node, k))
    cost = scorer.cluster_costs.get(group.cluster, 0.0) if scorer.cluster_costs else 0.0
    best = None
    for label in sorted(domains):
        members = sorted(domains[label], key=lambda c: (-c[1], c[0].order))
        if sum(k for _, k in members) < workers:
            continue
        chosen = _greedy(members, workers)
        if chosen is not None:
            rank = (len(chosen), cost, 0, *_tie_break(chosen, need, scorer), index)
            if best is None or rank < best[0]:
                best = (rank, chosen)
    return best


def _tie_break(chosen, need: Need, scorer: WeightedScorer) -> tuple[int, float]:
    """GPUs left idle on the chosen nodes (fewer packs better), then the scorers' verdict."""
    idle, score = 0, 0.0
    for node, count in chosen:
        idle += node.full - count * need.gpus
        whole = [i for i, m in enumerate(node.gpus) if m >= WHOLE_GPU][: count * need.gpus]
        score += scorer(_move(node, tuple((i, WHOLE_GPU) for i in whole), count * need.cpu))
    return idle, -score


def _slots(chosen: list[tuple[NodeState, int]], need: Need) -> list[Slot]:
    slots: list[Slot] = []
    for node, count in chosen:
        free = [i for i, m in enumerate(node.gpus) if m >= WHOLE_GPU]
        for w in range(count):
            picked = free[w * need.gpus : (w + 1) * need.gpus]
            slots.append(need.slot(node, tuple((i, WHOLE_GPU) for i in picked)))
    return slots

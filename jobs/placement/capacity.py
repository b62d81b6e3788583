"""Mutable free capacity for one cycle, indexed so a task never scans every node.

Schedulable nodes are grouped by (GPU type, cluster, shareable). Inside a group, nodes sit in
buckets by their number of entirely free GPUs, and nodes with a partly used GPU are also kept
in a ``partial`` set. A task needing g whole GPUs looks only at buckets >= g; a GPU share looks
at ``partial`` first. Group totals answer "could it fit at all" in O(1).

A node's ``gpus`` are each GPU's largest free range, what fits and scores read. On a shareable
node that gave its free ranges the node also keeps them (``ranges``): there every GPU take
names its range, (index, milli, start), what running work holds is given back exactly there,
and a share placed in the cycle goes where the commit will put it (``allocate``). Elsewhere
a take is (index, milli) and a GPU's free milli one number.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable

from jobs.placement import ranges
from jobs.placement.model import WHOLE_GPU, Node, QueuedJob, RunningJob

# ((gpu index, milli), ...): the GPU part of one worker's placement on one node; on a node
# that keeps its ranges, ((gpu index, milli, start), ...) once placed.
Takes = tuple[tuple[int, ...], ...]


class NodeState:
    """One node's free capacity during the cycle."""

    __slots__ = (
        "order",
        "id",
        "cluster",
        "gpu_type",
        "gpus",
        "cpu",
        "mem",
        "full",
        "partial",
        "shareable",
        "topology",
        "group",
        "held",
        "milli",
        "cap_cpu",
        "cap_mem",
        "ranges",
        "spare",
        "closes",
        "opens",
        "reserved_for",
        "after",
        "features",
    )

    def __init__(self, node: Node, order: int):
        self.order = order
        self.id = node.id
        self.cluster = node.cluster
        self.gpu_type = node.gpu_type
        self.gpus = tuple(node.gpu_free_milli)
        self.cpu = node.cpu_free_milli
        self.mem = node.memory_free_mb
        self.shareable = node.gpu_shareable
        self.topology = node.topology
        self.features = node.features
        self.group: Group | None = None
        # True while the node belongs to a reservation the job being decided must avoid.
        self.held = False
        # The next maintenance window: what starts before ``opens`` must end by ``closes``.
        inf = float("inf")
        self.closes = inf if node.closes_at is None else node.closes_at
        self.opens = inf if node.opens_at is None else node.opens_at
        if self.closes == inf:
            self.opens = -inf
        self.reserved_for = node.reserved_for
        # After a booking, the first window of another kind: (start, end, booked for).
        after = node.after
        self.after = None if after is None else (after[0], inf if after[1] is None else after[1],
                                                 after[2])  # fmt: skip
        self.cap_cpu = node.cpu_free_milli
        self.cap_mem = node.memory_free_mb
        # Each GPU's free ranges, on a shareable node that gave them (else None), and the free
        # milli in all of them.
        self.ranges: list[ranges.Ranges] | None = None
        self.spare = 0
        if node.gpu_shareable and len(node.gpu_free_ranges) == len(self.gpus) and self.gpus:
            self.ranges = [ranges.of(free) for free in node.gpu_free_ranges]
            self.gpus = tuple(ranges.largest(free) for free in self.ranges)
            self.spare = sum(map(ranges.total, self.ranges))
        self._count()

    def _count(self) -> None:
        full = partial = total = 0
        for m in self.gpus:
            total += m
            if m >= WHOLE_GPU:
                full += 1
            elif partial < m:
                partial = m
        self.full = full
        # The most free milli on a partly used GPU (0: none): it indexes GPU-share fits.
        self.partial = partial
        # Free GPU milli in all: with ranges kept, the smaller ones count too.
        self.milli = total if self.ranges is None else self.spare

    @property
    def idle(self) -> bool:
        """Whether nothing runs or is placed here: every GPU, all its CPU and memory free."""
        return self.cpu == self.cap_cpu and self.mem == self.cap_mem and self.full == len(self.gpus)

    def forget_ranges(self) -> None:
        """Keep only each GPU's largest free range (some range on the node is unknown)."""
        self.ranges = None
        self.spare = 0
        self._count()

    def change_ranges(self, takes: Takes, sign: int) -> None:
        """Give back (``sign`` 1) or take (-1) the takes' ranges; ``gpus`` follows."""
        free = self.ranges
        assert free is not None
        change = ranges.give if sign > 0 else ranges.take
        gpus = list(self.gpus)
        for index, milli, start in takes:
            if milli >= WHOLE_GPU:  # the whole GPU: all of it free, or none
                free[index] = ranges.IDLE if sign > 0 else ()
            else:
                free[index] = change(free[index], start, milli)
            gpus[index] = ranges.largest(free[index])
            self.spare += sign * milli
        self.gpus = tuple(gpus)

    def pin(self, takes: Takes) -> Takes:
        """The takes with their ranges: a share goes to the tightest free range that holds it
        on its GPU, the lowest of equal ones (the commit's rule); a whole GPU starts at 0.
        (A worker takes whole GPUs or one share, so no two takes share a GPU.)"""
        if len(takes[0]) > 2:
            return takes
        free = self.ranges
        assert free is not None
        pinned = []
        for index, milli in takes:
            start = 0 if milli >= WHOLE_GPU else ranges.tightest(free[index], milli)
            assert start is not None, "the caller has checked the share fits"
            pinned.append((index, milli, start))
        return tuple(pinned)


class Group:
    """Schedulable nodes of one (GPU type, cluster, shareable) and their free totals."""

    __slots__ = (
        "key",
        "gpu_type",
        "cluster",
        "shareable",
        "by_full",
        "partial",
        "full_total",
        "milli_total",
        "cpu_total",
        "mem_total",
        "cap_cpu",
        "cap_mem",
        "_levels",
        "ids",
    )

    def __init__(self, key: tuple[str, str, bool], max_gpus: int):
        self.key = key
        self.gpu_type, self.cluster, self.shareable = key
        self.by_full: list[dict[NodeState, None]] = [{} for _ in range(max_gpus + 1)]
        # Nodes with a partly used GPU, by the most free milli on such a GPU.
        self.partial: dict[int, dict[NodeState, None]] = {}
        self.full_total = 0
        self.milli_total = 0
        self.cpu_total = 0
        self.mem_total = 0
        # The largest node's CPU and memory capacity: a bigger worker can never fit here.
        self.cap_cpu = 0
        self.cap_mem = 0
        self._levels: list[int] | None = None
        # Its nodes' ids, whatever they hold: a job that excludes them all looks at none.
        self.ids: set[str] = set()

    def add(self, node: NodeState) -> None:
        """Index the node and count its free resources."""
        self.by_full[node.full][node] = None
        if node.partial:
            level = self.partial.get(node.partial)
            if level is None:
                level = self.partial[node.partial] = {}
                self._levels = None
            level[node] = None
        self.full_total += node.full
        self.milli_total += node.milli
        self.cpu_total += node.cpu
        self.mem_total += node.mem

    def remove(self, node: NodeState) -> None:
        """Undo ``add`` (before the node's numbers change)."""
        del self.by_full[node.full][node]
        if node.partial:
            level = self.partial[node.partial]
            del level[node]
            if not level:
                del self.partial[node.partial]
                self._levels = None
        self.full_total -= node.full
        self.milli_total -= node.milli
        self.cpu_total -= node.cpu
        self.mem_total -= node.mem

    @property
    def max_gpus(self) -> int:
        return len(self.by_full) - 1

    def could_hold(self, job: QueuedJob) -> bool:
        """Whether one worker of the job fits the largest of these nodes, were they idle."""
        return (
            job.gpus <= self.max_gpus
            and job.cpu_milli <= self.cap_cpu
            and (job.memory_mb <= self.cap_mem)
        )

    def admits(self, job: QueuedJob) -> bool:
        """Whether the job's workers may run on this group's nodes: its clusters, its GPU
        types, a share only on shareable GPUs."""
        if job.clusters and self.cluster not in job.clusters:
            return False
        if not job.worker_gpu_milli:
            return True
        if not self.gpu_type or (job.gpu_types and self.gpu_type not in job.gpu_types):
            return False
        return self.shareable or bool(job.gpus)

    def offers(self, features: frozenset[str]) -> bool:
        """Whether some node of the group offers every one of these features."""
        return not features or any(
            features <= node.features for bucket in self.by_full for node in bucket
        )

    @property
    def totals(self) -> tuple[int, int, int, int]:
        """Its free whole GPUs, GPU milli, CPU and memory."""
        return (self.full_total, self.milli_total, self.cpu_total, self.mem_total)

    def share_buckets(self, milli: int) -> list[dict[NodeState, None]]:
        """Buckets whose nodes all have a GPU with ``milli`` free: tightest partial GPUs
        first (filling fragments), then nodes by their count of entirely free GPUs."""
        if self._levels is None:
            self._levels = sorted(self.partial)
        levels = self._levels
        start = bisect.bisect_left(levels, milli)
        return [self.partial[level] for level in levels[start:]] + self.by_full[1:]


class Capacity:
    """All nodes of the snapshot with their free capacity, updated as the cycle allocates."""

    def __init__(self, nodes: Iterable[Node], running: Iterable[RunningJob], seed: int):
        ordered = sorted(nodes, key=lambda n: n.id)
        # A seeded order breaks ties between equal nodes: replays agree, yet load does not
        # always pile onto the same lowest-numbered nodes.
        random.Random(seed).shuffle(ordered)
        self.nodes = [NodeState(n, i) for i, n in enumerate(ordered)]
        self.by_id = {n.id: n for n in self.nodes}
        self._releases: dict[str, list] = {}
        # What an exclusive job keeps idle beside its allocation, by (job id, node id): GPU
        # takes, CPU, memory.
        self._sole: dict[tuple[str, str], tuple[Takes, int, int]] = {}
        self._add_running_to_capacity(running)
        self.groups: dict[tuple[str, str, bool], Group] = {}
        self.unhealthy: dict[tuple[str, str], int] = {}
        for raw, node in zip(ordered, self.nodes, strict=True):
            if raw.schedulable and raw.healthy:
                self._group_for(node, len(raw.gpu_free_milli)).add(node)
                node.group = self.groups[(node.gpu_type, node.cluster, node.shareable)]
                node.group.ids.add(node.id)
                node.group.cap_cpu = max(node.group.cap_cpu, node.cap_cpu)
                node.group.cap_mem = max(node.group.cap_mem, node.cap_mem)
            else:
                key = (node.gpu_type, node.cluster)
                self.unhealthy[key] = self.unhealthy.get(key, 0) + 1
        # Nodes with a maintenance window, by when they open: a reservation may start there
        # then. ``closings``: every start of a window, sorted (a job ending by the first
        # of them sees every node; a later end, fewer).
        shut = [n for n in self.nodes if n.group is not None and n.closes < float("inf")]
        after = [(n, n.after) for n in shut if n.after is not None]
        opening = [(n.opens, n) for n in shut] + [(window[1], n) for n, window in after]
        self.openings = sorted(opening, key=lambda o: (o[0], o[1].order))
        self.closings = sorted([n.closes for n in shut] + [window[0] for _, window in after])
        self.booked = any(n.reserved_for for n in shut)
        self.clusters = sorted({n.cluster for n in self.nodes})
        # Every (GPU type, cluster, shareable) present, healthy or not, to explain failures.
        self.inventory = {(n.gpu_type, n.cluster, n.shareable) for n in self.nodes}

    def _add_running_to_capacity(self, running: Iterable[RunningJob]) -> None:
        # Node capacity = free + what running jobs hold; it tells "too large ever" apart.
        for job in running:
            for a in job.allocations:
                node = self.by_id.get(a.node_id)
                if node is not None:
                    node.cap_cpu += a.cpu_milli
                    node.cap_mem += a.memory_mb
                    # A share that does not say where it lies: the node's ranges cannot be
                    # kept, only their largest.
                    if node.ranges is not None and not _ranges_known(a.gpus, a.gpu_starts):
                        node.forget_ranges()
        # An exclusive job's nodes take nothing else: it holds the rest of them too, and gives
        # it back as it ends.
        for job in running:
            if job.exclusive:
                for a in job.allocations:
                    node = self.by_id.get(a.node_id)
                    if node is not None:
                        node.forget_ranges()  # what it keeps idle is its GPUs' free milli
                        rest = tuple((i, m) for i, m in enumerate(node.gpus) if m)
                        self._sole[(job.id, node.id)] = (rest, node.cpu, node.mem)
                        node.gpus = (0,) * len(node.gpus)
                        node.cpu = node.mem = 0
                        node._count()

    def _group_for(self, node: NodeState, ngpus: int) -> Group:
        key = (node.gpu_type, node.cluster, node.shareable)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(key, ngpus)
        elif ngpus > group.max_gpus:
            group.by_full.extend({} for _ in range(ngpus - group.max_gpus))
        return group

    def releases(self, job: RunningJob) -> list[tuple[NodeState, Takes, int, int]]:
        """What the job gives back when it ends, per node (nodes not in the snapshot skipped)."""
        known = self._releases.get(job.id)
        if known is None:
            known = self._releases[job.id] = []
            for a in job.allocations:
                node = self.by_id.get(a.node_id)
                if node is None:
                    continue
                takes: Takes
                if node.ranges is None:
                    takes = tuple((i, m) for i, m in a.gpus if 0 <= i < len(node.gpus))
                else:
                    starts = a.gpu_starts
                    if len(starts) != len(a.gpus):  # whole GPUs: they start at 0
                        starts = (0,) * len(a.gpus)
                    takes = tuple(
                        (i, m, s)
                        for (i, m), s in zip(a.gpus, starts, strict=True)
                        if 0 <= i < len(node.gpus)
                    )
                rest, cpu, mem = self._sole.get((job.id, node.id), ((), 0, 0))
                known.append((node, takes + rest, a.cpu_milli + cpu, a.memory_mb + mem))
        return known

    def allocate(self, node: NodeState, takes: Takes, cpu: int, mem: int) -> Takes:
        """Take resources from a node (the caller has checked they are free); the takes as
        taken, with their ranges where the node keeps them (``NodeState.pin``)."""
        if node.ranges is not None and takes:
            takes = node.pin(takes)
        self._change(node, takes, -cpu, -mem, -1)
        return takes

    def release(self, node: NodeState, takes: Takes, cpu: int, mem: int) -> None:
        """Give resources back to a node."""
        self._change(node, takes, cpu, mem, 1)

    def _change(self, node: NodeState, takes: Takes, cpu: int, mem: int, sign: int) -> None:
        group = node.group
        if group is not None:
            group.remove(node)
        if takes and node.ranges is not None:
            node.change_ranges(takes, sign)
        elif takes:
            gpus = list(node.gpus)
            for index, milli in takes:
                gpus[index] += sign * milli
            node.gpus = tuple(gpus)
        node.cpu += cpu
        node.mem += mem
        node._count()
        if group is not None:
            group.add(node)


def _ranges_known(gpus: tuple[tuple[int, int], ...], starts: tuple[int, ...]) -> bool:
    """Whether an allocation says where its GPU ranges lie (a whole GPU starts at 0)."""
    return len(starts) == len(gpus) or all(m >= WHOLE_GPU for _, m in gpus)

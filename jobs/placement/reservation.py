"""Head-of-line reservations (EASY backfill) and start-time estimates from expected ends.

The first job that cannot fit gets the earliest node set that frees up as running jobs reach
their expected end, or as nodes come out of maintenance. Those nodes are then *held*: a later
job may use them only if it is sure to end (now + max runtime) before the reservation starts;
otherwise it must go elsewhere. There is one such reservation per pool of node groups (GPU
type x cluster x shareable): a later blocked job may reserve only in groups no earlier
reservation holds nodes of.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from jobs.placement.capacity import Capacity, Group, NodeState, Takes
from jobs.placement.model import RunningJob

Release = tuple[NodeState, Takes, int, int]


@dataclass(frozen=True)
class Reservation:
    """Nodes held for ``job_id`` from ``start``."""

    job_id: str
    start: float
    node_ids: tuple[str, ...]


class Held:
    """The cycle's reservations, one per disjoint pool of node groups, and which of their
    nodes are flagged ``held`` now: those of the reservations the job being decided must avoid
    (the fit and victim searches skip held nodes of a need with ``avoid_held``)."""

    def __init__(self) -> None:
        self.reservations: list[Reservation] = []
        self._nodes: list[list[NodeState]] = []  # each reservation's
        self.owner: dict[tuple, int] = {}  # group key -> the reservation holding its nodes
        self.flagged: tuple[int, ...] | None = ()
        self._unreserved: dict[tuple, list[Group]] = {}
        # Group list (by identity) -> the reservations holding nodes of its groups (owners_of).
        self._owners: dict[int, tuple[tuple[int, ...], float, float]] = {}

    def unreserved(self, groups: list[Group]) -> list[Group]:
        """The groups no reservation holds nodes of (``groups`` itself if none is held)."""
        if not self.owner:
            return groups
        # Kept alive and keyed by the reservation count: caches key on list identity.
        key = (id(groups), len(self.reservations))
        free = self._unreserved.get(key)
        if free is None:
            free = [g for g in groups if g.key not in self.owner]
            if len(free) == len(groups):
                free = groups
            self._unreserved[key] = free
        return free

    def avoided(self, end: float, groups: list[Group]) -> tuple[int, ...]:
        """The reservations, in pools of ``groups`` (a job's), whose nodes a job ending at
        ``end`` must stay off: it would still run when they start. Each pool's reservation is
        respected on its own. (A job that reserved is not decided again in the cycle, so it
        never avoids its own.)"""
        if not self.reservations:
            return ()
        owners = self._owners.get(id(groups))
        if owners is None:
            owners = self._owners[id(groups)] = self.owners_of(groups)
        held, first, last = owners
        if end > last:
            return held
        if end <= first:
            return ()
        return tuple(i for i in held if end > self.reservations[i].start)

    def owners_of(self, groups: list[Group]) -> tuple[tuple[int, ...], float, float]:
        """The reservations holding nodes of the groups, and the first and last of their
        starts (a job ending after the last avoids them all)."""
        held = tuple(sorted({self.owner.get(g.key, -1) for g in groups} - {-1}))
        starts = [self.reservations[i].start for i in held]
        return held, min(starts, default=float("inf")), max(starts, default=float("inf"))

    def flag(self, avoided: tuple[int, ...]) -> None:
        """Mark as ``held`` exactly the nodes of the reservations in ``avoided``."""
        if avoided == self.flagged:
            return
        for i, nodes in enumerate(self._nodes):
            held = i in avoided
            for node in nodes:
                node.held = held
        self.flagged = avoided

    def hold(self, job_id: str, start: float, nodes: list[NodeState]) -> tuple[str, ...]:
        """Hold the nodes for the job from ``start``; their ids."""
        node_ids = tuple(sorted(node.id for node in nodes))
        for node in nodes:
            if node.group is not None:  # (every node of the capacity has one)
                self.owner[node.group.key] = len(self.reservations)
        self.reservations.append(Reservation(job_id, start, node_ids))
        self._nodes.append(nodes)
        self.flagged = None  # the next job flags what it must avoid
        self._owners.clear()
        return node_ids

    def held_until(self, groups: list[Group], now: float) -> float:
        """When a job that avoids the flagged reservations may first use one of the groups
        (``now``, if one of them is held by none of those)."""
        starts = []
        for g in groups:
            owner = self.owner.get(g.key)
            if owner is None or owner not in (self.flagged or ()):
                return now
            starts.append(self.reservations[owner].start)
        return min(starts)


def releases_of(job: RunningJob, capacity: Capacity) -> list[Release]:
    """What the job gives back, per node it holds (nodes not in the snapshot are skipped)."""
    return capacity.releases(job)


def ending_jobs(running: Iterable[RunningJob], now: float) -> list[tuple[float, RunningJob]]:
    """Running jobs with a known end, soonest first; overdue ones are due now."""
    ends = [(max(j.expected_end, now), j) for j in running if j.expected_end is not None]
    ends.sort(key=lambda e: (e[0], e[1].id))
    return ends


def earliest_fit(
    capacity: Capacity,
    ends: list[tuple[float, RunningJob]],
    groups: list[Group],
    fit: Callable[[float], list | None],
) -> tuple[float, list] | None:
    """The first moment after which ``fit`` succeeds for a start then, and its slots; capacity
    is restored.

    Jobs are released in order of their expected end, on the nodes of ``groups`` only (``fit``
    looks nowhere else), and nodes of those groups open after their maintenance window; ``fit``
    is only retried after one of them changes, given the moment.
    """
    wanted = {id(g) for g in groups}
    opens = [
        (when, None)
        for when, node in capacity.openings
        if id(node.group) in wanted and when < float("inf")
    ]
    events = sorted([*ends, *opens], key=lambda e: e[0]) if opens else ends
    done: list[Release] = []
    found = None
    try:
        i = 0
        while i < len(events) and found is None:
            when = events[i][0]
            touched = False
            while i < len(events) and events[i][0] == when:
                job = events[i][1]
                if job is None:  # a node opens
                    touched = True
                else:
                    for release in releases_of(job, capacity):
                        if id(release[0].group) in wanted:
                            capacity.release(*release)
                            done.append(release)
                            touched = True
                i += 1
            if touched:
                slots = fit(when)
                if slots is not None:
                    found = (when, slots)
    finally:
        for node, takes, cpu, mem in reversed(done):
            capacity.allocate(node, takes, cpu, mem)
    return found


class Timeline:
    """Cumulative GPU milli freed over time, for cheap start estimates: per GPU type (key: the
    type) and per node group (key: the group's (GPU type, cluster, shareable)); of the nodes
    offering every one of ``features`` alone."""

    def __init__(
        self,
        ends: list[tuple[float, RunningJob]],
        capacity: Capacity,
        features: frozenset[str] = frozenset(),
    ):
        self.times: dict[str | tuple, list[float]] = {}
        self.freed: dict[str | tuple, list[int]] = {}
        for when, job in ends:
            for node, takes, _, _ in releases_of(job, capacity):
                if features and not features <= node.features:
                    continue
                milli = sum(t[1] for t in takes)
                if milli:
                    self._add(node.gpu_type, when, milli)
                    if node.group is not None:
                        self._add(node.group.key, when, milli)

    def _add(self, key: str | tuple, when: float, milli: int) -> None:
        times = self.times.setdefault(key, [])
        freed = self.freed.setdefault(key, [])
        times.append(when)
        freed.append((freed[-1] if freed else 0) + milli)

    def earliest(self, key: str | tuple, shortfall: int) -> float | None:
        """When at least ``shortfall`` milli of the GPU type or group ``key`` will have been
        freed (None: never)."""
        freed = self.freed.get(key)
        if not freed:
            return None
        if shortfall <= 0:
            return self.times[key][0]
        i = bisect.bisect_left(freed, shortfall)
        return self.times[key][i] if i < len(freed) else None

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
    type) and per node group (key: the group's (GPU type, cluster, shareable))."""

    def __init__(self, ends: list[tuple[float, RunningJob]], capacity: Capacity):
        self.times: dict[str | tuple, list[float]] = {}
        self.freed: dict[str | tuple, list[int]] = {}
        for when, job in ends:
            for node, takes, _, _ in releases_of(job, capacity):
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

"""What keeps a job off nodes that could hold it, besides the nodes held for reservations:
maintenance windows and bookings (``Node.closes_at``, ``opens_at``, ``reserved_for``), and the
nodes where an earlier attempt of it failed for the infrastructure (``QueuedJob.avoid_nodes``).
``fit.Need.shut`` applies them; the cycle sets them on a job's need (``starting``,
``Avoiding``) and says why a job they alone keep off waits, and until when.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from jobs.placement import explain
from jobs.placement.capacity import Capacity, Group, NodeState
from jobs.placement.fit import Need
from jobs.placement.model import QueuedJob
from jobs.placement.quota_gate import end_of

if TYPE_CHECKING:
    from jobs.placement.engine import Cycle

# The reasons of a job that only windows keep off: it is told when the first of them ends.
WINDOWS = ("maintenance", "booked")


def starting(capacity: Capacity, need: Need, job: QueuedJob, start: float) -> Need:
    """The need of the job started at ``start``: the windows it must keep off are those that
    end after then and start before its runtime limit would end it (bookings for its own
    tenant aside)."""
    need.start = start
    need.tenant = job.tenant
    need.end = end_of(job, start)
    need.windows = windows_before(capacity, need.end)
    return need


def windows_before(capacity: Capacity, end: float) -> int:
    """How many windows start before ``end``, when a job is sure to have ended: jobs with as
    many see the same nodes (0: none starts in time to matter)."""
    closings = capacity.closings
    return bisect.bisect_left(closings, end) if closings else 0


class Avoiding:
    """The nodes a request keeps off for having failed there, asked once per request and node
    set in a cycle."""

    def __init__(self) -> None:
        self._known: dict[tuple, frozenset[str]] = {}

    def __call__(self, job: QueuedJob, groups: list[Group]) -> frozenset[str]:
        """The job's ``avoid_nodes``; none if no other nodes of its groups (nor those it
        excludes) could hold it even idle, so that it runs again where it failed rather than
        never."""
        if not job.avoid_nodes:
            return frozenset()
        key = (id(groups), job.avoid_nodes, job.exclude_nodes, job.features, job.family,
               job.workers, job.gpus, job.gpu_milli, job.cpu_milli, job.memory_mb)  # fmt: skip
        known = self._known.get(key)
        if known is None:
            avoid = frozenset(job.avoid_nodes)
            off = avoid | frozenset(job.exclude_nodes)
            known = avoid if explain.holds_without(job, groups, off) else frozenset()
            self._known[key] = known
        return known


def window_reason(cycle: Cycle, job: QueuedJob, need: Need) -> str:
    """Which windows keep off a job that would fit without them: bookings for other tenants
    alone (``booked``), or maintenance."""
    if cycle.capacity.booked and cycle.fits_but_for(job, need, bookings=True):
        return "booked"
    return "maintenance"


def first_opening(capacity: Capacity, need: Need) -> float | None:
    """When the first window that keeps the job off a node of its groups ends, and no other
    window of that node keeps it off from then (None: none does)."""
    wanted = {id(g) for g in need.groups}
    start, end = need.start, need.end
    try:
        for when, node in capacity.openings:
            if when == float("inf"):
                break
            if id(node.group) not in wanted or not need.shut(node):
                continue
            need.start, need.end = when, when + (end - start)
            if not need.shut(node):
                return when
            need.start, need.end = start, end
    finally:
        need.start, need.end = start, end
    return None


def opening_reason(nodes: list[NodeState], start: float) -> str:
    """The reason of a reservation of these nodes from ``start``: what it waits for if a
    window ends then on a node it holds (``booked`` if every such window is a booking),
    else ``head_of_line``."""
    ending = [node.reserved_for for node in nodes if node.opens == start]
    ending += [node.after[2] for node in nodes if node.after and node.after[1] == start]
    if not ending:
        return "head_of_line"
    return "booked" if all(ending) else "maintenance"

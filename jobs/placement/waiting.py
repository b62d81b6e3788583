"""Why a job that neither fits, nor preempts, nor reserves waits, and from when it should fit:
its reason and estimated start, asked once per kind of request and capacity epoch
(``Cycle.blocked``).

The reason names the one thing that keeps it out if there is one: work in its grace period
(``waiting_for_preemption``), maintenance windows or bookings (``off_limits.window_reason``),
the nodes it failed on (``avoiding_failed_nodes``), the nodes held for a reservation it must
respect (``waiting_for_reservation``), or else a shortage (``explain.shortage``). The estimate
is when enough GPUs should have freed up, from the running work's expected ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.placement import explain, off_limits
from jobs.placement.capacity import Group
from jobs.placement.fit import Need
from jobs.placement.model import TRAINING, WHOLE_GPU, QueuedJob

if TYPE_CHECKING:
    from jobs.placement.engine import Cycle


def reason(cycle: Cycle, job: QueuedJob, need: Need) -> str:
    """What keeps the job out: the first thing that, lifted alone, would let it fit now."""
    if cycle.leaving_makes_room(job, need):
        return "waiting_for_preemption"
    if need.windows and cycle.fits_but_for(job, need, windows=True):
        return off_limits.window_reason(cycle, job, need)
    if need.avoid and cycle.fits_but_for(job, need, failed=True):
        return "avoiding_failed_nodes"
    if need.avoid_held and cycle.fits_but_for(job, need, held=True):
        return "waiting_for_reservation"
    both = need.windows and need.avoid_held
    if both and cycle.fits_but_for(job, need, windows=True, held=True):
        return off_limits.window_reason(cycle, job, need)
    return explain.shortage(job, need, cycle.initial)


def estimate(cycle: Cycle, job: QueuedJob, need: Need) -> float | None:
    """When enough GPUs should have freed up: a gang needs them in one group (one cluster and
    type), independent workers in one GPU type; not before the start of the reservations it
    must respect in every such group."""
    per = job.worker_gpu_milli
    if not per:
        return None
    options: list[tuple[str | tuple, list[Group]]]
    if job.family == TRAINING:
        options = [(g.key, [g]) for g in need.groups]
    else:
        types = sorted({g.gpu_type for g in need.groups})
        options = [(t, [g for g in need.groups if g.gpu_type == t]) for t in types]
    best = None
    for key, groups in options:
        free = sum(g.full_total * WHOLE_GPU if job.gpus else g.milli_total for g in groups)
        when = cycle.timeline.earliest(key, per * job.workers - free)
        if when is not None and need.avoid_held:
            when = max(when, cycle.held.held_until(groups, cycle.now))
        if when is not None and (best is None or when < best):
            best = when
    return best

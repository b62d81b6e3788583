"""Elastic training gangs (``QueuedJob.min_workers`` below ``workers``; torchrun's
``--nnodes=MIN:MAX``, Kueue's partial admission, Slurm's ``--nodes=MIN-MAX``): the size one
starts with when its whole gang does not fit now (``Cycle._decide``).

Before the fit it is cut to the most workers its owner's GPU limit and its tenant's GPU-hour
budget allow (``within_limits``); then it takes the most workers that fit now, at least its
fewest (``largest_fit``), unless its whole gang should end sooner by waiting
(``sooner_smaller``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobs.placement import waiting
from jobs.placement.capacity import Group
from jobs.placement.fit import Need
from jobs.placement.model import QueuedJob, RunningJob

if TYPE_CHECKING:
    from jobs.placement.engine import Cycle


def within_limits(cycle: Cycle, job: QueuedJob) -> QueuedJob:
    """An elastic gang cut to the most workers the GPU limits over it (its user's in its
    tenant, its class's) and its tenant's GPU-hour budget let it start with (its fewest if
    none: they then refuse it)."""
    per = job.worker_gpu_milli
    if job.fewest == job.workers or not per:
        return job
    runtime = job.max_runtime or 0.0
    workers = job.workers
    while workers > job.fewest and not (
        cycle.gpu_limits.room(job, workers * per)
        and cycle.budgets.fits(job.tenant, workers * per, runtime)
    ):
        workers -= 1
    return job.sized(workers)


def largest_fit(
    cycle: Cycle,
    job: QueuedJob,
    least: QueuedJob,
    groups: list[Group],
    avoided: tuple[int, ...],
    holds: Callable[[QueuedJob, list], bool] | None = None,
) -> QueuedJob | None:
    """The largest size of an elastic gang below its whole that fits now (None: not even its
    fewest); with ``holds``, whose slots it also accepts.

    Fewer workers fit wherever more do, so the sizes are searched by halving: a few searches,
    each remembered by ``Cycle.fit`` (a size that failed fails for any larger)."""

    def fits(sized: QueuedJob) -> bool:
        slots = cycle.fit_now(sized, groups, avoided, keep=False)[1]
        return isinstance(slots, list) and (holds is None or holds(sized, slots))

    if not fits(least):
        return None
    low, high = least.workers, job.workers - 1  # low fits; the whole gang did not
    while low < high:
        mid = (low + high + 1) // 2
        if fits(job.sized(mid)):
            low = mid
        else:
            high = mid - 1
    return job.sized(low)


def sooner_smaller(
    cycle: Cycle,
    whole: QueuedJob,
    sized: QueuedJob,
    need: Need,
    groups: list[Group],
    running: RunningJob | None = None,
) -> bool:
    """Whether an elastic gang that fits now as ``sized`` would end sooner by starting so than
    by waiting for its whole gang: its runtime limit is for its fewest workers, and a gang of
    more runs faster in proportion; the whole gang's start is searched on the nodes as a
    reservation's is (``waiting.earliest_start``: the running work's ends in order, a fit
    after each). Yes when that cannot be known (no runtime limit, a whole gang that never
    fits). ``running``: the gang's own attempt, weighing a restart, its room counted free
    already."""
    if whole.max_runtime is None or cycle.too_large(whole, groups):
        return True
    work = whole.max_runtime * whole.fewest  # worker-seconds
    whole_start = waiting.earliest_start(cycle, whole, need, running)
    return whole_start is None or (
        cycle.now + work / sized.workers <= whole_start + work / whole.workers
    )

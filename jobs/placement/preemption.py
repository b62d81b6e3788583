"""Choosing victims: the fewest whole gangs, least work lost, that let a job fit.

Victims are preemptible running jobs of a lower tier, or borrowed work of another tenant when
the preemptor is reclaiming its own guarantee: borrowed work is reclaimed whether or not it is
preemptible (running on another tenant's idle guarantee is running on loan). Work already asked
to stop is nobody's victim again. Borrowed work goes first, then the work with the fewest
GPU-seconds since its last checkpoint. Victims are released one by one until the job
fits; then each one that turns out not to be needed is put back. If the job never fits, nothing
is preempted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from jobs.placement.capacity import Capacity, Group
from jobs.placement.model import RunningJob
from jobs.placement.reservation import releases_of


def lost_gpu_seconds(job: RunningJob, now: float) -> float:
    """GPU-seconds of work thrown away if the job stops now."""
    since = job.last_checkpoint if job.last_checkpoint is not None else job.started_at
    return job.gpu_milli / 1000.0 * max(now - since, 0.0)


def eligible(
    running: Iterable[RunningJob], tier: int, tenant: str, reclaiming: bool, lost: dict
) -> list[RunningJob]:
    """Jobs a job of ``tier`` from ``tenant`` may evict, cheapest to lose first.

    ``lost`` maps a job id to its ``lost_gpu_seconds``.
    """
    out = [
        j
        for j in running
        if not j.stopping
        and (
            (j.preemptible and j.tier < tier) or (reclaiming and j.borrowed and j.tenant != tenant)
        )
    ]
    out.sort(key=lambda j: (not j.borrowed, lost[j.id], j.tier, j.id))
    return out


def choose_victims(
    capacity: Capacity,
    candidates: list[RunningJob],
    groups: list[Group],
    fit: Callable[[], list | None],
    limit: int,
) -> tuple[list[RunningJob], list] | None:
    """Victims and the job's slots, with the victims' resources left released; or None.

    Only candidates holding something in ``groups`` can help, so only those are tried.
    """
    wanted = {id(g) for g in groups}
    useful = [
        j for j in candidates if any(id(r[0].group) in wanted for r in releases_of(j, capacity))
    ][:limit]
    victims: list[RunningJob] = []
    for job in useful:
        release(capacity, job)
        victims.append(job)
        if fit() is not None:
            break
    else:
        for job in victims:
            restore(capacity, job)
        return None
    return _prune(capacity, victims, fit)


def _prune(capacity: Capacity, victims: list[RunningJob], fit) -> tuple[list, list]:
    # The greedy pass may have taken victims that a later, bigger one made unnecessary.
    kept: list[RunningJob] = []
    for job in reversed(victims[:-1]):
        restore(capacity, job)
        if fit() is None:
            release(capacity, job)
            kept.append(job)
    kept.append(victims[-1])
    slots = fit()
    assert slots is not None  # the set still makes room: each restore was checked
    return sorted(kept, key=lambda j: j.id), slots


def release(capacity: Capacity, job: RunningJob) -> None:
    """Give the job's resources back to ``capacity`` (as if it had ended)."""
    for freed in releases_of(job, capacity):
        capacity.release(*freed)


def restore(capacity: Capacity, job: RunningJob) -> None:
    """Take back what ``release`` gave."""
    for node, takes, cpu, mem in releases_of(job, capacity):
        capacity.allocate(node, takes, cpu, mem)

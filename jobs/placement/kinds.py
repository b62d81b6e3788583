"""Kinds of request: the keys under which one cycle remembers what failed to fit
(``Cycle.fit``) and reuses a waiting job's answer (``Cycle.decide``, ``Cycle.blocked``)."""

from __future__ import annotations

from jobs.placement.fit import Need
from jobs.placement.model import QueuedJob


def request_of(job: QueuedJob) -> tuple:
    """Everything of a job that ``Cycle._decide`` reads when the job waits."""
    return (
        job.tenant,
        job.tier,
        job.family,
        job.may_preempt,
        job.workers,
        job.min_workers,
        job.gpus,
        job.gpu_milli,
        job.cpu_milli,
        job.memory_mb,
        job.gpu_types,
        job.clusters,
        job.avoid_nodes,
        job.exclude_nodes,
        job.features,
        job.topology,
        job.exclusive,
    )


def at_most(a: tuple, b: tuple) -> bool:
    """Whether shape ``a`` asks for no more than ``b`` in every dimension."""
    return a[0] <= b[0] and a[1] <= b[1] and a[2] <= b[2] and a[3] <= b[3] and a[4] <= b[4]


def class_of(job: QueuedJob, need: Need, avoided: tuple[int, ...] | None) -> tuple[tuple, tuple]:
    """Jobs of one kind fit, or fail, alike; a larger shape of a kind is never easier.

    Group lists are cached and shared, so their identity stands for their contents; the
    reservations whose held nodes the job avoids, the maintenance windows, the nodes it
    failed on, those it excludes, the features it requires and whether it takes nodes to
    itself, that keep it off nodes, are part of the kind.
    """
    kind = (
        job.family, id(need.groups), avoided if need.avoid_held else (), bool(job.gpus),
        need.windows, need.avoid, need.exclude, need.tenant if need.windows else "",
        need.bookings_open, need.together, need.features,
        # A whole worker takes nodes of exactly its GPUs: fewer are no easier.
        need.gpus if need.whole else None,
    )  # fmt: skip
    return kind, (job.workers, need.gpus, need.milli, need.cpu, need.mem)

"""Elastic training gangs that grow (``grow``): a gang that started with fewer than its whole
gang restarts larger once there is room, as AdaptDL and Pollux resize jobs. Its attempt is
asked to stop with its grace period for a checkpoint; the job, first of the queue while its
claim on the room lasts (``QueuedJob.preempting``), then starts again with the most workers
that fit (a gang with a claim does not wait for a larger gang), and resumes from its
checkpoint.

The queue goes first: a gang grows only into room no queued job waits for. In a cycle where a
queued job waits for room (for any reason but a limit, its quota or a request no node takes)
in a node group the gang may use, the gang keeps its size. Beyond that it grows
- after it has run ``Policy.grow_after_s`` (a restart costs a checkpoint and a start);
- by one worker at least, within its tenant's guarantee (borrowed room may be reclaimed,
  which would stop it whole), its user's GPU limit and its tenant's GPU-hour budget, off the
  nodes held for a reservation, its own nodes counted free; to fewer than its limits allow
  only if that larger gang should not end sooner by waiting for more room, as
  ``elastic.sooner_smaller`` decides a start (it would grow a second time);
- when it should end sooner so: its runtime limit read as its fewest workers' with a linear
  speed-up (as ``elastic.sooner_smaller`` reads it), what its last checkpoint kept of its
  work, and the time the restart takes (``Policy.eviction_grace_s``), by more than that time
  again; without a runtime limit, when it has checkpointed since it started (a restart loses
  what it did since its last checkpoint, and without one, all of it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from jobs.placement import elastic, explain, preemption
from jobs.placement.decision import PENDING, PREEMPTS, RESERVED, Grow, Outcome
from jobs.placement.model import Elastic, RunningJob, gpu_flavor
from jobs.placement.quota_gate import end_of

if TYPE_CHECKING:
    from jobs.placement.capacity import Group
    from jobs.placement.engine import Cycle

# Why a queued job may wait that no room would lift: it does not stand in a gang's way.
NOT_FOR_ROOM = explain.LIMITS | {
    "quota_exceeded",
    "no_matching_cluster",
    "agent_release",
    "no_such_gpu_type",
    "gpu_sharing_not_allowed",
    "no_healthy_nodes",
    "worker_too_large",
    "invalid_request",
}


def grow(cycle: Cycle, outcomes: Mapping[str, Outcome]) -> tuple[Grow, ...]:
    """The running elastic gangs to restart larger, the highest tier first, then the oldest."""
    after = cycle.policy.grow_after_s
    if after is None or not cycle.snapshot.elastic:
        return ()
    wanted = _groups_wanted(cycle, outcomes)
    grown = []
    gangs = sorted(cycle.snapshot.elastic, key=lambda e: (-e.job.tier, e.job.submit_time, e.job.id))
    for gang in gangs:
        running = cycle.running.get(gang.job.id)
        if running is None or running.stopping or running.id in cycle.evicted:
            continue
        if cycle.now - running.started_at < after or gang.workers >= gang.job.workers:
            continue
        groups = cycle.groups_for(gang.job)
        if not groups or any(g.key in wanted for g in groups):
            continue
        found = _larger(cycle, gang, running, groups)
        if found is not None:
            grown.append(found)
    return tuple(grown)


def _groups_wanted(cycle: Cycle, outcomes: Mapping[str, Outcome]) -> set[tuple]:
    """The node groups some queued job waits for room in."""
    queued = {job.id: job for job in cycle.snapshot.queued}
    wanted: set[tuple] = set()
    for outcome in outcomes.values():
        waits = outcome.status in (RESERVED, PREEMPTS) or (
            outcome.status == PENDING and outcome.reason not in NOT_FOR_ROOM
        )
        if waits:
            wanted.update(g.key for g in cycle.groups_for(queued[outcome.job_id]))
    return wanted


def _larger(cycle: Cycle, gang: Elastic, running: RunningJob, groups: list[Group]) -> Grow | None:
    """The gang's restart, larger, if it should take it: its room is taken for it (the rest
    of what it holds stays its own until it has gone). None leaves everything as it was."""
    used = cycle.usage_of(running)
    _count(cycle, running, used, -1)  # as if it had gone
    grown = None
    try:
        # What failed to fit before may fit with its room: the cycle's memo of failures was
        # kept on less capacity.
        cycle.failed = {}
        least = replace(gang.job, min_workers=gang.workers + 1).sized(gang.workers + 1)
        sized = _largest(cycle, gang, least, groups)
        if sized is None:
            return None
        sooner = _sooner(cycle, gang, running, sized.workers)
        if sooner is False:
            return None
        avoided = cycle.held.avoided(end_of(sized, cycle.now), groups)
        _, slots = cycle.fit_now(sized, groups, avoided, keep=True)
        assert isinstance(slots, list)
        cycle.ledger.charge(sized.tenant, _demand(sized, slots))
        cycle.user_limits.charge(sized.tenant, sized.owner, sized.workers * sized.worker_gpu_milli)
        cycle.budgets.charge(sized)
        back = cycle.now + cycle.policy.eviction_grace_s
        for _, rest in preemption.left_over([running], slots, cycle.capacity, back):
            preemption.restore(cycle.capacity, rest)
        grown = Grow(gang.job.id, sized.workers, gang.workers, sooner)
        return grown
    finally:
        cycle.failed = {}
        cycle.epoch += 1
        if grown is None:
            _count(cycle, running, used, 1)


def _largest(cycle: Cycle, gang: Elastic, least, groups: list[Group]):
    """The most workers, above what the gang runs with, that its limits allow and that fit
    now inside its tenant's guarantee (None: not one more, or fewer than its limits allow
    while that larger gang should end sooner by waiting: ``elastic.sooner_smaller``)."""
    job = elastic.within_limits(cycle, replace(gang.job, min_workers=least.workers))
    if cycle.user_limits.refusal(job) or cycle.budgets.refusal(job):
        return None
    avoided = cycle.held.avoided(end_of(job, cycle.now), groups)

    def guaranteed(sized, slots) -> bool:
        return cycle.ledger.within_guarantee(sized.tenant, _demand(sized, slots))

    need, slots = cycle.fit_now(job, groups, avoided, keep=False)
    if isinstance(slots, list) and guaranteed(job, slots):
        return job
    if job.workers == least.workers:
        return None
    sized = elastic.largest_fit(cycle, job, least, groups, avoided, guaranteed)
    # Not while the larger gang should end sooner by waiting for more room: it would grow
    # again then, a second restart.
    if sized is None or need is None or not elastic.sooner_smaller(cycle, job, sized, need, groups):
        return None
    return sized


def _sooner(cycle: Cycle, gang: Elastic, running: RunningJob, workers: int):
    """How much sooner the gang should end restarted with ``workers`` (None: it has no runtime
    limit, and has checkpointed); False when it should not restart."""
    job, cost = gang.job, cycle.policy.eviction_grace_s
    checkpoint = running.last_checkpoint
    kept_until = checkpoint if checkpoint is not None and checkpoint > running.started_at else None
    if job.max_runtime is None:
        return None if kept_until is not None else False
    work = job.max_runtime * job.fewest  # worker-seconds
    kept = gang.workers * (kept_until - running.started_at) if kept_until is not None else 0.0
    ends = running.started_at + work / gang.workers
    ends_grown = cycle.now + cost + max(work - kept, 0.0) / workers
    sooner = ends - ends_grown
    return sooner if sooner > cost else False


def _demand(job, slots) -> dict[str, int]:
    """The quota flavors the slots take."""
    asks = {"cpu": job.cpu_milli * len(slots), "memory": job.memory_mb * len(slots)}
    for node, takes, _, _ in slots:
        if takes:
            flavor = gpu_flavor(node.gpu_type)
            asks[flavor] = asks.get(flavor, 0) + sum(t[1] for t in takes)
    return asks


def _count(cycle: Cycle, running: RunningJob, used: Mapping[str, int], sign: int) -> None:
    """Take the running gang's hold off the cycle's capacity, quota, user limit and budget
    (``sign`` -1), or put it back (1)."""
    if sign < 0:
        preemption.release(cycle.capacity, running)
    else:
        preemption.restore(cycle.capacity, running)
    cycle.ledger.charge(running.tenant, used, sign)
    cycle.user_limits.charge(running.tenant, running.owner, sign * running.gpu_milli)
    if running.expected_end is not None:
        runs = cycle.budgets.in_period(running.tenant, running.expected_end - cycle.now)
        cycle.budgets.take(running.tenant, sign * running.gpu_milli * runs)

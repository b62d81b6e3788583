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
  ``elastic.sooner_smaller`` decides a start (it would grow a second time; its own end,
  its room counted free already, frees nothing more in that search);
- when it should end sooner so: its runtime limit read as its fewest workers' with a linear
  speed-up (as ``elastic.sooner_smaller`` reads it), what its last checkpoint kept of its
  work, and the time the restart takes (``Policy.eviction_grace_s``), by more than that time
  again; without a runtime limit, when it has checkpointed since it started (a restart loses
  what it did since its last checkpoint, and without one, all of it).

While a gang stopped to grow is in its grace period (``Snapshot.regrowing``) it still runs:
before the queue, the room it restarts into is held for it from when its attempt should have
gone (``hold``), as a blocked job's reservation is held, so work placed meanwhile keeps off
those nodes unless it ends by then. Only where no reservation holds its pool yet, and only if
that room is there by then: a gang that could not restart at that size then is held nothing
(once requeued it starts with what fits, first of the queue by its claim).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from jobs.placement import elastic, explain, off_limits, preemption
from jobs.placement.decision import PENDING, PREEMPTS, RESERVED, Grow, Outcome
from jobs.placement.fit import group_can_hold
from jobs.placement.gpu_limits import held_until
from jobs.placement.model import Elastic, RunningJob, gpu_flavor
from jobs.placement.quota_gate import end_of
from jobs.placement.reservation import earliest_fit

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


def hold(cycle: Cycle) -> None:
    """Hold, for each gang stopping to restart larger, the nodes it restarts on, from when
    its attempt should have gone (the highest tier first, then the oldest)."""
    for gang in sorted(cycle.snapshot.regrowing, key=_seniority):
        running = cycle.running.get(gang.job.id)
        if running is None or not running.stopping or running.expected_end is None:
            continue  # gone: requeued, its claim puts it first
        job = replace(gang.job, min_workers=None).sized(gang.workers)
        groups = cycle.groups_for(job)
        if not groups or not cycle.may_reserve(job, groups):
            continue
        by = max(running.expected_end, cycle.now)
        need = cycle.need(job, cycle.held.unreserved(groups), ())
        found = _beside(cycle, job, running, need, by) or _freed_by(cycle, job, need, by)
        if found is not None:
            start, nodes = found
            cycle.reservation_tries += 1
            cycle.held.hold(job.id, start, nodes)


def _beside(cycle: Cycle, job, running: RunningJob, need, by: float):
    """(``by``, its own nodes and those the workers it adds fit on now), or None: what else
    is free now stays free for others. Not for a topology domain, which its own nodes' domain
    would have to hold (``_freed_by`` searches it)."""
    per = job.worker_gpu_milli
    own = [cycle.capacity.by_id[a.node_id] for a in running.allocations
           if a.node_id in cycle.capacity.by_id]  # fmt: skip
    adds = job.workers - running.gpu_milli // per if per else 0
    if job.topology or not own or adds < 1 or not job.workers > adds:
        return None
    home = [g for g in need.groups if any(node.group is g for node in own)]
    if len(home) != 1:
        return None
    groups, need.groups = need.groups, home
    try:
        extra = job.sized(adds)
        slots = cycle.fits(extra, off_limits.starting(cycle.capacity, need, extra, by))
    finally:
        need.groups = groups
    if slots is None:
        return None
    return by, list({n.id: n for n in [*own, *(s[0] for s in slots)]}.values())


def _freed_by(cycle: Cycle, job, need, by: float):
    """(the first moment by ``by`` its whole restart fits, the nodes it fits on), or None."""

    def fit(when: float):
        if not any(group_can_hold(g, need, job.workers) for g in need.groups):
            return None
        return cycle.fits(job, off_limits.starting(cycle.capacity, need, job, when))

    ends = [(when, j) for when, j in cycle.ends if when <= by]
    found = earliest_fit(cycle.capacity, ends, need.groups, fit)
    if found is None:
        return None
    start, slots = found
    return start, list({n.id: n for n, _, _, _ in slots}.values())


def grow(cycle: Cycle, outcomes: Mapping[str, Outcome]) -> tuple[Grow, ...]:
    """The running elastic gangs to restart larger, the highest tier first, then the oldest."""
    after = cycle.policy.grow_after_s
    if after is None or not cycle.snapshot.elastic:
        return ()
    wanted = _groups_wanted(cycle, outcomes)
    grown = []
    for gang in sorted(cycle.snapshot.elastic, key=_seniority):
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


def _seniority(gang: Elastic) -> tuple:
    return -gang.job.tier, gang.job.submit_time, gang.job.id


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
        sized = _largest(cycle, gang, running, least, groups)
        if sized is None:
            return None
        sooner = _sooner(cycle, gang, running, sized.workers)
        if sooner is False:
            return None
        avoided = cycle.held.avoided(end_of(sized, cycle.now), groups)
        _, slots = cycle.fit_now(sized, groups, avoided, keep=True)
        assert isinstance(slots, list)
        cycle.ledger.charge(sized.tenant, _demand(sized, slots))
        cycle.gpu_limits.charge(
            sized, sized.workers * sized.worker_gpu_milli, end_of(sized, cycle.now)
        )
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


def _largest(cycle: Cycle, gang: Elastic, running: RunningJob, least, groups: list[Group]):
    """The most workers, above what the gang runs with, that its limits allow and that fit
    now inside its tenant's guarantee (None: not one more, or fewer than its limits allow
    while that larger gang should end sooner by waiting: ``elastic.sooner_smaller``)."""
    job = elastic.within_limits(cycle, replace(gang.job, min_workers=least.workers))
    if cycle.gpu_limits.refusal(job)[1] or cycle.budgets.refusal(job):
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
    if sized is None or need is None:
        return None
    if not elastic.sooner_smaller(cycle, job, sized, need, groups, running):
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
    """Take the running gang's hold off the cycle's capacity, quota, GPU limits and budget
    (``sign`` -1), or put it back (1)."""
    if sign < 0:
        preemption.release(cycle.capacity, running)
    else:
        preemption.restore(cycle.capacity, running)
    cycle.ledger.charge(running.tenant, used, sign)
    cycle.gpu_limits.charge(running, sign * running.gpu_milli, held_until(running))
    if running.expected_end is not None:
        runs = cycle.budgets.in_period(running.tenant, running.expected_end - cycle.now)
        cycle.budgets.take(running.tenant, sign * running.gpu_milli * runs)

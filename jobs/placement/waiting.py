"""A job that does not fit now and evicts nothing (``Cycle.blocked``): the earliest nodes held
for it (``reserve``, EASY backfill's head-of-line reservation), or else why it waits and from
when it should fit: its reason and estimated start, asked once per kind of request and
capacity epoch.

The reason names the one thing that keeps it out if there is one: work in its grace period
(``waiting_for_preemption``), maintenance windows or bookings (``off_limits.window_reason``),
the nodes it failed on (``avoiding_failed_nodes``), the nodes it excludes (``excluded_nodes``),
the nodes held for a reservation it must respect (``waiting_for_reservation``), or else a
shortage (``explain.shortage``). The estimate is when enough GPUs should have freed up, from
the running work's expected ends (for shares of a GPU, enough room in the free ranges that
ending work leaves).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from jobs.placement import explain, off_limits, preemption, ranges
from jobs.placement.capacity import Group, NodeState
from jobs.placement.decision import Outcome
from jobs.placement.fit import Need, group_can_hold
from jobs.placement.model import TRAINING, WHOLE_GPU, QueuedJob, RunningJob, as_running
from jobs.placement.reservation import earliest_fit

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
    if need.exclude and cycle.fits_but_for(job, need, excluded=True):
        return "excluded_nodes"
    if need.features and cycle.fits_but_for(job, need, features=True):
        return "lacking_features"
    if need.whole and cycle.fits_but_for(job, need, shared=True):
        return "nodes_in_use"
    if need.avoid_held and cycle.fits_but_for(job, need, held=True):
        return "waiting_for_reservation"
    if need.together and cycle.fits_but_for(job, need, topology=True):
        return "topology"
    both = need.windows and need.avoid_held
    if both and cycle.fits_but_for(job, need, windows=True, held=True):
        return off_limits.window_reason(cycle, job, need)
    return explain.shortage(job, need, cycle.initial)


def estimate(
    cycle: Cycle, job: QueuedJob, need: Need, gone: RunningJob | None = None
) -> float | None:
    """When enough GPUs should have freed up: a gang needs them in one group (one cluster and
    type), independent workers in one GPU type, on the nodes offering every feature it
    requires; not before the start of the reservations it must respect in every such group.
    ``gone``: running work the cycle already counts free (a gang weighing its own restart),
    whose end frees nothing more. An exclusive job's (``Need.whole``) is when enough nodes of
    its are left empty (``_whole_estimate``)."""
    if need.whole:
        return _whole_estimate(cycle, job, need, gone)
    per = job.worker_gpu_milli
    if not per:
        return None
    if not job.gpus:  # shares: no gang takes them, so none weighs its own restart
        return _share_estimate(cycle, job, need)
    if job.family == TRAINING and need.together:
        return _domain_estimate(cycle, job, need, gone)
    features = need.features
    timeline = cycle.timeline_of(features)
    counted: dict[str | tuple, int] = {}
    gone_at = math.inf
    if gone is not None and gone.expected_end is not None:
        gone_at = max(gone.expected_end, cycle.now)
        for node, takes, _, _ in cycle.capacity.releases(gone):
            if not features <= node.features:
                continue
            milli = sum(t[1] for t in takes)
            keys: list[str | tuple] = [node.gpu_type]
            if node.group is not None:
                keys.append(node.group.key)
            for key in keys:
                counted[key] = counted.get(key, 0) + milli
    options: list[tuple[str | tuple, list[Group]]]
    if job.family == TRAINING:
        options = [(g.key, [g]) for g in need.groups]
    else:
        types = sorted({g.gpu_type for g in need.groups})
        options = [(t, [g for g in need.groups if g.gpu_type == t]) for t in types]
    best = None
    for key, groups in options:
        free = sum(_full(g, features) for g in groups) * WHOLE_GPU
        when = timeline.earliest(key, per * job.workers - free)
        if when is not None and when >= gone_at:  # past its end, its GPUs count once
            when = timeline.earliest(key, per * job.workers - free + counted.get(key, 0))
        if when is not None and need.avoid_held:
            when = max(when, cycle.held.held_until(groups, cycle.now))
        if when is not None and (best is None or when < best):
            best = when
    return best


def _whole_estimate(
    cycle: Cycle, job: QueuedJob, need: Need, gone: RunningJob | None
) -> float | None:
    """When enough nodes an exclusive job may take (of exactly its GPUs, its features, not
    excluded; a gang's in one group) are left empty by the running work's expected ends, one
    worker a node; not before the start of the reservations it must respect there. None if
    some of that work has no known end. ``gone``: work counted gone already; work evicted in
    this cycle is gone by the eviction grace."""
    emptied = cycle.emptied_at(gone)
    groups = [[g] for g in need.groups] if job.family == TRAINING else [need.groups]
    best = math.inf
    for pool in groups:
        empty = heapq.nsmallest(
            job.workers,
            (
                emptied[node.id]
                for g in pool
                for node in cycle.sized(g, need.gpus)
                if not need.shut(node) and node.cap_cpu >= need.cpu and node.cap_mem >= need.mem
            ),
        )
        if len(empty) >= job.workers:
            when = empty[-1]
            if need.avoid_held:
                when = max(when, cycle.held.held_until(pool, cycle.now))
            best = min(best, when)
    return None if best == math.inf else best


def _full(group: Group, features: frozenset[str]) -> int:
    """The group's idle GPUs, on its nodes offering every one of ``features``."""
    if not features:
        return group.full_total
    return sum(n.full for b in group.by_full for n in b if features <= n.features)


def _domain_estimate(
    cycle: Cycle, job: QueuedJob, need: Need, gone: RunningJob | None
) -> float | None:
    """``estimate`` for a gang of whole GPUs that keeps its nodes in one topology domain: when
    enough GPUs should have freed up in one domain (a group's nodes sharing one value of the
    label, a node without it alone, of those offering every feature it requires), not across
    its whole group."""
    prefix = need.together + "="
    domains: dict[NodeState, tuple] = {}
    free: dict[tuple, int] = {}
    for group in need.groups:
        for bucket in group.by_full:
            for node in bucket:
                if need.features and not need.features <= node.features:
                    continue
                label = next((t for t in node.topology if t.startswith(prefix)), node.id)
                domain = domains[node] = (group.key, label)
                free[domain] = free.get(domain, 0) + node.full * WHOLE_GPU
    wanted = job.worker_gpu_milli * job.workers
    # As the whole group's estimate: enough free now is no start now (something else keeps
    # it out), but a start once some work in its groups ends.
    enough = any(amount >= wanted for amount in free.values())
    best = None
    for when, running in cycle.ends:
        if running is gone:
            continue
        touched = False
        for node, takes, _, _ in cycle.capacity.releases(running):
            of = domains.get(node)
            if of is not None:
                touched = True
                free[of] += sum(t[1] for t in takes)
                enough = enough or free[of] >= wanted
        if touched and enough:
            best = when
            break
    if best is not None and need.avoid_held:
        best = max(best, cycle.held.held_until(need.groups, cycle.now))
    return best


def _share_estimate(cycle: Cycle, job: QueuedJob, need: Need) -> float | None:
    """``estimate`` for shares of a GPU (independent workers: no gang takes shares): each needs
    its milli in one free range of one GPU, so what counts is how many shares the GPUs' free
    ranges hold side by side (``ranges.shares``), not their free milli. As running work reaches
    its expected end, in that order, its ranges join the free ranges they touch
    (``ranges.give``), until the GPUs of one type (on the nodes offering every feature the job
    requires) hold all the workers; not before the reservations the job must respect there.
    Enough room now is no start now (something else keeps it out), but a start once some work
    on those GPUs ends."""
    per, workers = job.worker_gpu_milli, job.workers
    groups_of: dict[str, list[Group]] = {}
    room: dict[str, int] = {}
    for group in need.groups:
        groups_of.setdefault(group.gpu_type, []).append(group)
        # Idle GPUs hold WHOLE_GPU // per each; a partly used one only what its ranges hold,
        # and none if its largest range is smaller than a share.
        if need.features:  # the nodes offering them alone
            featured = [n for b in group.by_full for n in b if need.features <= n.features]
            held = sum(n.full for n in featured) * (WHOLE_GPU // per)
            held += sum(_shares_now(node, per) for node in featured if node.partial >= per)
        else:
            held = group.full_total * (WHOLE_GPU // per)
            for level, nodes in group.partial.items():
                if level >= per:
                    held += sum(_shares_now(node, per) for node in nodes)
        room[group.gpu_type] = room.get(group.gpu_type, 0) + held
    pools = {id(group): group.gpu_type for group in need.groups}
    bound = dict.fromkeys(groups_of, -math.inf)
    if need.avoid_held:
        bound = {pool: cycle.held.held_until(of, cycle.now) for pool, of in groups_of.items()}
    free: dict[tuple[NodeState, int], ranges.Ranges] = {}
    best = math.inf
    for when, running in cycle.ends:
        if when >= best:
            break
        touched = set()
        for node, takes, _, _ in cycle.capacity.releases(running):
            pool = pools.get(id(node.group))
            if pool is None or not need.features <= node.features:
                continue
            touched.add(pool)
            for index, milli, *start in takes:
                before = free.get((node, index))
                if before is None:
                    before = _free_ranges(node, index)
                if milli >= WHOLE_GPU:
                    after = ranges.IDLE
                elif start:
                    after = ranges.give(before, start[0], milli)
                else:  # a node that keeps no ranges: its GPU's free milli, as one range
                    after = ((0, ranges.total(before) + milli),)
                free[node, index] = after
                room[pool] += ranges.shares(after, per) - ranges.shares(before, per)
        for pool in touched:
            if room[pool] >= workers:
                best = min(best, max(when, bound[pool]))
    return None if best == math.inf else best


def _free_ranges(node: NodeState, index: int) -> ranges.Ranges:
    """The GPU's free ranges now: those the node keeps, else its free milli as one range."""
    if node.ranges is not None:
        return node.ranges[index]
    return ((0, node.gpus[index]),) if node.gpus[index] else ()


def _shares_now(node: NodeState, per: int) -> int:
    """How many shares of ``per`` the node's partly used GPUs hold now."""
    return sum(
        ranges.shares(_free_ranges(node, index), per)
        for index, largest in enumerate(node.gpus)
        if per <= largest < WHOLE_GPU
    )


def reserve(cycle: Cycle, job: QueuedJob, need: Need) -> Outcome | None:
    """Hold for the job the earliest nodes that free up in the pools no earlier reservation
    holds (``Cycle.may_reserve`` made sure there is one)."""
    ends, early = _ends(cycle, job)
    groups, need.groups = need.groups, cycle.held.unreserved(need.groups)
    try:
        found = _earliest(cycle, job, need, ends)
    finally:
        need.groups = groups
    if found is None:
        return None
    start, slots = found
    nodes = list({node.id: node for node, _, _, _ in slots}.values())
    node_ids = cycle.held.hold(job.id, start, nodes)
    # No new epoch: a job's answer depends on the reservations it avoids, which are part
    # of the keys of the answers kept (the reservation takes no capacity).
    reason = off_limits.opening_reason(nodes, start)
    if reason == "head_of_line" and start in early.values():
        reason = "waiting_for_exempt_work"
    return explain.reserved(job, node_ids, start, reason)


def earliest_start(
    cycle: Cycle, job: QueuedJob, need: Need, gone: RunningJob | None = None
) -> float | None:
    """When the job would first fit on the nodes, searched as a reservation's start is (the
    running work's ends in order, a fit after each that touches its groups) but holding
    nothing, in all its groups. ``gone``: running work the cycle counts free already (a gang
    weighing its own restart), whose end frees nothing more."""
    ends, _ = _ends(cycle, job, gone)
    found = _earliest(cycle, job, need, ends)
    return None if found is None else found[0]


def _ends(
    cycle: Cycle, job: QueuedJob, gone: RunningJob | None = None
) -> tuple[list[tuple[float, RunningJob]], dict[str, float]]:
    """The running work's ends, in order, as a search for the job's start reads them: work
    placed in this cycle and work leaving (its grace period) too, and exempt work the job may
    evict once its exemption ends at that end (``early``, by job id); not work evicted, nor
    ``gone``."""
    # Work placed in this cycle, as running work; only what was placed since the last
    # try is converted.
    placed = cycle.placed_running
    placed += [(when, as_running(j, s)) for when, j, s in cycle.placed_ends[len(placed) :]]
    early = {}
    if cycle.exempt and job.may_preempt and cycle.policy.preemption:
        grace = cycle.policy.eviction_grace_s
        early = preemption.exempt_ends(cycle.exempt, job.tier, cycle.now, grace, cycle.evicted)
    ends = [(early.get(j.id, end), j) for end, j in cycle.ends if j.id not in cycle.evicted]
    unknown = [cycle.running[i] for i in early if cycle.running[i].expected_end is None]
    ends += [(early[j.id], j) for j in unknown]
    if gone is not None:
        ends = [(end, j) for end, j in ends if j is not gone]
    return sorted(ends + placed + cycle.leaving_ends, key=lambda e: (e[0], e[1].id)), early


def _earliest(
    cycle: Cycle, job: QueuedJob, need: Need, ends: list[tuple[float, RunningJob]]
) -> tuple[float, list] | None:
    """The first of ``ends`` after which the job fits in ``need.groups``, and its slots,
    with the windows and bookings as they will be then (``off_limits.starting``)."""
    workers = job.workers if job.family == TRAINING else 1

    def attempt(when: float):
        if not any(group_can_hold(g, need, workers) for g in need.groups):
            return None
        return cycle.fits(job, off_limits.starting(cycle.capacity, need, job, when))

    try:
        return earliest_fit(cycle.capacity, ends, need.groups, attempt)
    finally:
        off_limits.starting(cycle.capacity, need, job, cycle.now)

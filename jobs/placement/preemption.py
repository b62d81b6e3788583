"""Choosing victims: whole jobs, few and cheap to lose, whose end lets a job fit.

Who may be evicted (``eligible``):

- by tier: preemptible work of a lower tier, if the job's priority class may preempt;
- by reclaim, preemptible or not (running on another tenant's idle guarantee is running on
  loan): work of another tenant of the job's cohort that is over its guarantee of a flavor the
  job needs (its GPU type; CPU and memory for CPU-only work), if the job's tenant has a real
  guarantee of that flavor (more than 0) and stays inside its guarantees with the job
  (``reclaimable``). Who borrows is read from the cycle's quota ledger, not from the flag set
  when the work was placed: a tenant whose other work has ended since borrows no more, and work
  asked to stop (in its grace period, or evicted earlier in the cycle) counts as gone. A tenant
  gives back work only while it is still over its guarantee, the one most over first.
- by fair share (``Policy.fair_share_preemption``, off by default; Kueue's fair-sharing
  preemption, Volcano's reclaim): preemptible work of no higher tier, of a tenant that holds more
  GPUs for its weight than the job's tenant will with the job (``over_fair_share``), and only
  as far as it keeps at least as many for its weight as that: the victim's tenant could not
  take the GPUs back the same way, so two tenants never evict each other in turn. A GPU job's
  right only; shares count the GPUs held now, work asked to stop as gone.

Work already asked to stop is nobody's victim again.

Which (``choose_victims``), as Kubernetes picks the node to preempt on: on each node, victims
are taken in order (reclaimed work first, the tenant most over its guarantee first, then the
fewest GPU-seconds lost since the last checkpoint) until the node has room for one more worker
of the job, and those the last one made unnecessary are put back: that is a *step*. Steps are
taken cheapest first (reclaiming only, then least work lost per worker made room for) over all
nodes until the job fits; then every victim not needed after all is put back.
``max_victims_per_job`` bounds the victims chosen, not the candidates looked at. If the job
never fits, nothing is preempted.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from typing import NamedTuple

from jobs.placement import ranges
from jobs.placement.capacity import Capacity, NodeState, Takes
from jobs.placement.decision import FAIR_SHARE, PRIORITY, QUOTA
from jobs.placement.fit import Need, Slot
from jobs.placement.model import WHOLE_GPU, RunningJob, allocation
from jobs.placement.quota import Ledger, flavors_held
from jobs.placement.reservation import releases_of

# (tenant, flavor) -> how much more than its guarantee the tenant uses; (tenant, SHARE) -> the
# GPU milli it holds beyond its fair share against the job's tenant.
Excess = dict[tuple[str, str], int]
SHARE = "share"
# ((tenant, flavor), amount) for each flavor a victim holds that its tenant is over on.
Claims = tuple[tuple[tuple[str, str], int], ...]
MANY = 1 << 30


class Candidate(NamedTuple):
    """A running job that may be evicted for the job, and why."""

    job: RunningJob
    lost: float
    by_tier: bool
    # Non-empty for borrowed work the job may reclaim.
    claims: Claims = ()
    # Its tenant's largest excess over a guarantee (reclaimed work only).
    excess: int = 0


# A candidate's part on one node: what it frees there.
Part = tuple[Candidate, Takes, int, int]
# (key, victims): the victims to stop on a node for room for more workers.
Step = tuple[tuple, list[Candidate]]


def lost_gpu_seconds(job: RunningJob, now: float) -> float:
    """GPU-seconds of work thrown away if the job stops now."""
    since = job.last_checkpoint if job.last_checkpoint is not None else job.started_at
    return job.gpu_milli / 1000.0 * max(now - since, 0.0)


def costs(running: Collection[RunningJob], now: float) -> dict[str, float]:
    """Each running job's ``lost_gpu_seconds``, cheapest first (the dict keeps the order); on a
    tie, work placed on borrowed quota first.

    Built once per cycle: finding one job's victims then filters, rather than sorts, the
    running work.
    """
    lost = {j.id: lost_gpu_seconds(j, now) for j in running}
    ranked = sorted(running, key=lambda j: (lost[j.id], not j.borrowed, j.tier, j.id))
    return {j.id: lost[j.id] for j in ranked}


# -- who may be evicted ----------------------------------------------------------------------


def reclaimable(ledger: Ledger, tenant: str, demands: Iterable[Mapping[str, int]]) -> Excess:
    """What the tenant may reclaim for a job asking one of ``demands`` (one per GPU type the job
    may use): the excess of the cohort's other tenants over their guarantee of each flavor the
    tenant has a real guarantee of, needs, and stays inside its guarantees with."""
    out: Excess = {}
    cohort = ledger.cohort.get(tenant)
    for want in demands:
        if not ledger.within_guarantee(tenant, want):
            continue
        for flavor in _needed(want):
            quota = ledger.quota.get((tenant, flavor))
            if quota is not None and quota.guaranteed > 0:
                out.update(_over_guarantee(ledger, cohort, flavor, tenant))
    return out


def over_fair_share(ledger: Ledger, tenant: str, gpus: int, weights: Mapping[str, float]) -> Excess:
    """The GPU milli each other tenant holds beyond what the tenant will hold for its weight once
    it runs ``gpus`` more: what it may lose for the tenant's job by fair share (any GPU type;
    shares of one resource compare as held / weight, the totals cancelling out)."""
    held: dict[str, int] = {}
    for (owner, flavor), amount in ledger.usage.items():
        if flavor.startswith("gpu:"):
            held[owner] = held.get(owner, 0) + amount - ledger.going.get((owner, flavor), 0)
    after = (held.get(tenant, 0) + gpus) / weights.get(tenant, 1.0)
    out: Excess = {}
    for other, milli in held.items():
        loss = int(milli - after * weights.get(other, 1.0))
        if other != tenant and loss > 0:
            out[(other, SHARE)] = loss
    return out


def _needed(want: Mapping[str, int]) -> list[str]:
    """The flavors a demand asks for: its GPU type, CPU and memory alike. A GPU job needs a
    node's cores too, and work over its CPU guarantee (CPU-only work filling a GPU node) holds
    them from an owner inside its own; what is reclaimed for a flavor stays within the
    borrower's excess of it (eligible, _open)."""
    return [flavor for flavor, amount in want.items() if amount]


def _over_guarantee(ledger: Ledger, cohort: str | None, flavor: str, but: str) -> Excess:
    out: Excess = {}
    for tenant, theirs in ledger.cohort.items():
        quota = ledger.quota.get((tenant, flavor))
        if theirs == cohort and tenant != but and quota is not None:
            excess = ledger.staying(tenant, flavor) - quota.guaranteed
            if excess > 0:
                out[(tenant, flavor)] = excess
    return out


def eligible(
    running: Mapping[str, RunningJob],
    lost: Mapping[str, float],
    gone: Container[str],
    below: int,
    excess: Excess,
    capacity: Capacity,
    fair_tier: float = -math.inf,
) -> list[Candidate]:
    """Jobs that may be evicted for a job, in the order to take them.

    ``lost`` is ``costs`` (cheapest first); ``gone`` the jobs already evicted. Preemptible work
    of a tier under ``below`` goes by tier; work holding a flavor its tenant has ``excess`` of
    (``reclaimable``), or preemptible work of a tier up to ``fair_tier`` whose tenant is over
    its fair share (``over_fair_share``), is reclaimed, before the rest, the tenant most over
    first.
    """
    over = {tenant for tenant, _ in excess}
    reclaimed: list[Candidate] = []
    by_tier: list[Candidate] = []
    for job_id, cost in lost.items():
        job = running[job_id]
        tier_ok = job.preemptible and job.tier < below
        if not (tier_ok or job.tenant in over) or job.stopping or job_id in gone:
            continue
        fair = job.preemptible and job.tier <= fair_tier
        claims = _claims(job, excess, capacity, fair) if job.tenant in over else ()
        if claims:
            most = max(excess[key] for key, _ in claims)
            reclaimed.append(Candidate(job, cost, tier_ok, claims, most))
        elif tier_ok:
            by_tier.append(Candidate(job, cost, True))
    reclaimed.sort(key=lambda c: -c.excess)  # stable: least work lost first for equal excess
    return reclaimed + by_tier


def cause(candidate: Candidate) -> str:
    """Why the candidate may go: by tier first, then for a guarantee, else for fair share."""
    if candidate.by_tier:
        return PRIORITY
    return FAIR_SHARE if all(key[1] == SHARE for key, _ in candidate.claims) else QUOTA


def _claims(job: RunningJob, excess: Excess, capacity: Capacity, fair: bool) -> Claims:
    """What evicting the job gives back of each excess of its tenant's: of its flavors, and
    with ``fair`` (it may go by fair share), its GPUs of any type."""
    held = {"cpu": 0, "memory": 0, **flavors_held(job, capacity.by_id)}
    if fair:
        held[SHARE] = sum(amount for flavor, amount in held.items() if flavor.startswith("gpu:"))
    keys = ((job.tenant, flavor) for flavor, amount in held.items() if amount)
    return tuple((key, held[key[1]]) for key in keys if key in excess)


def _open(candidate: Candidate, excess: Excess, spent: dict) -> bool:
    """Whether the candidate may still go: by tier, or its tenant is still over on a flavor,
    or over its fair share by all the candidate holds (it keeps at least its fair share)."""
    return candidate.by_tier or any(
        excess[k] - spent.get(k, 0) >= amount if k[1] == SHARE else excess[k] > spent.get(k, 0)
        for k, amount in candidate.claims
    )


def _spend(candidate: Candidate, spent: dict, sign: int) -> None:
    for key, amount in candidate.claims:
        spent[key] = spent.get(key, 0) + sign * amount


# -- which ones ------------------------------------------------------------------------------


def freeing_quota(
    ledger: Ledger,
    tenant: str,
    candidates: list[Candidate],
    usage_of: Callable[[RunningJob], Mapping[str, int]],
    allows: Callable[[], bool],
) -> list[RunningJob] | None:
    """The tenant's own work to evict so that its quota covers a job (``allows()``): the
    candidates in order until it does, their usage left given back in ``ledger``; None, with
    the ledger as it was, if all of them are not enough."""
    taken: list[RunningJob] = []
    for candidate in candidates:
        ledger.charge(tenant, usage_of(candidate.job), -1)
        taken.append(candidate.job)
        if allows():
            return taken
    for job in taken:
        ledger.charge(tenant, usage_of(job))
    return None


def choose_victims(
    capacity: Capacity,
    candidates: list[Candidate],
    excess: Excess,
    need: Need,
    workers: int,
    fit: Callable[[], list | None],
    limit: int,
) -> tuple[list[RunningJob], list] | None:
    """Victims and the job's slots, with the victims' resources left released; or None.

    ``need`` is one worker's shape and where it may go, ``workers`` how many there are,
    ``excess`` what ``eligible`` was given, ``fit`` the job's slots in the capacity as it is.
    """
    nodes = _by_node(capacity, candidates, need)
    # A node's steps are worked out only once its first one could be the cheapest left: the
    # heap holds a lower bound of its key until then (and sorts it first on a tie).
    heap = []
    for order, (node, parts) in nodes.items():
        floor = _floor(node, parts, need, workers)
        if floor is not None:
            heap.append((floor, 0, order, 0))
    heapq.heapify(heap)
    plans: dict[int, list[Step]] = {}
    taken: dict[str, Candidate] = {}  # in the order taken
    spent: dict = {}
    per_group: dict[int, int] = {}
    while heap:
        _, worked_out, order, k = heapq.heappop(heap)
        node, parts = nodes[order]
        if not worked_out:
            parts = [part for part in parts if part[0].job.id not in taken]
            plans[order] = _node_steps(node, parts, need, workers, excess, limit)
        else:
            step = plans[order][k][1]
            group = id(node.group)
            if per_group.get(group, 0) + len(step) > limit:
                continue  # more victims in the group than allowed; the node's next steps too
            per_group[group] = per_group.get(group, 0) + _take(capacity, step, excess, spent, taken)
            if fit() is not None:
                return _keep(capacity, list(taken.values()), fit, limit)
            k += 1
        if k < len(plans[order]):
            heapq.heappush(heap, (plans[order][k][0], 1, order, k))
    for victim in reversed(taken.values()):
        restore(capacity, victim.job)
    return None


def _by_node(
    capacity: Capacity, candidates: list[Candidate], need: Need
) -> dict[int, tuple[NodeState, list[Part]]]:
    """Candidates' parts on the nodes the job may use, in candidate order, by node order."""
    wanted = {id(g) for g in need.groups}
    found: dict[NodeState, list[Part]] = {}
    useless: set[NodeState] = set()
    for candidate in candidates:
        for node, takes, cpu, mem in capacity.releases(candidate.job):
            parts = found.get(node)
            if parts is None:
                if node in useless:
                    continue
                off_limits = (need.avoid_held and node.held) or need.shut(node)
                if id(node.group) not in wanted or off_limits:
                    useless.add(node)
                    continue
                parts = found[node] = []
            parts.append((candidate, takes, cpu, mem))
    return {node.order: (node, parts) for node, parts in found.items()}


def _floor(node: NodeState, parts: list[Part], need: Need, workers: int) -> tuple | None:
    """At most the key of the node's first step (see ``_step_key``), found cheaply; None if
    the node has room for every worker already or its candidates are too few to make more.
    A whole worker (``Need.whole``) needs everything on the node gone."""
    slots = node.full if need.gpus else _free_slots(node, need)
    if need.whole:
        if node.idle:
            return None
        have, fewest = 0, len(parts)
    else:
        have, fewest = _room(slots, node.cpu, node.mem, need), 1
        if have >= workers:
            return None
    if not need.whole and need.gpus and slots // need.gpus <= have:
        # Short of whole GPUs: it takes at least that many over the most one victim frees here.
        most = max(len(part[1]) for part in parts)
        short = need.gpus * (have + 1) - slots
        fewest = -(-short // most) if most else len(parts) + 1
    if fewest > len(parts):
        return None
    losts = [part[0].lost for part in parts]
    lost = min(losts) if fewest == 1 else sum(sorted(losts)[:fewest])
    most_over = max((part[0].excess for part in parts if part[0].claims), default=None)
    if most_over is None:
        return (True, 0, lost / (workers - have), 0)
    return (False, -most_over, lost / (workers - have), 0)


def _take(
    capacity: Capacity, step: list[Candidate], excess: Excess, spent: dict, taken: dict
) -> int:
    """Release the step's victims not yet taken whose tenant may still lose work; how many."""
    count = 0
    for victim in step:
        if victim.job.id not in taken and _open(victim, excess, spent):
            release(capacity, victim.job)
            _spend(victim, spent, 1)
            taken[victim.job.id] = victim
            count += 1
    return count


def _node_steps(
    node: NodeState, parts: list[Part], need: Need, workers: int, excess: Excess, limit: int
) -> list[Step]:
    """The victims to stop on one node, step by step: each step makes room for more workers."""
    room = _Room(node, need)
    have = room.workers()
    spent: dict = {}
    pending = list(parts)
    plan: list[Step] = []
    count = 0
    while pending and have < workers:
        tried: list[Part] = []
        while pending and room.workers() <= have:
            part = pending.pop(0)
            if _open(part[0], excess, spent):
                room.change(part, 1)
                _spend(part[0], spent, 1)
                tried.append(part)
        if room.workers() <= have:
            break  # the rest of the node's candidates cannot make room
        kept = _reprieve(room, tried, have, spent, pending)
        count += len(kept)
        if count > limit:
            break
        victims = [part[0] for part in kept]
        gain = room.workers() - have
        plan.append((_step_key(victims, min(gain, workers - have)), victims))
        have += gain
    return plan


def _reprieve(
    room: _Room, tried: list[Part], have: int, spent: dict, pending: list[Part]
) -> list[Part]:
    """The tried victims still needed for room for more than ``have`` workers; the others go
    back to the front of ``pending``, in order."""
    kept = [tried[-1]]
    back = []
    for part in reversed(tried[:-1]):
        room.change(part, -1)
        if room.workers() > have:
            _spend(part[0], spent, -1)
            back.append(part)
        else:
            room.change(part, 1)
            kept.append(part)
    pending[:0] = back[::-1]
    return kept[::-1]


def _step_key(victims: list[Candidate], gained: int) -> tuple:
    reclaimed = [v for v in victims if v.claims]
    return (
        len(reclaimed) < len(victims),  # evicts by tier
        -min((v.excess for v in reclaimed), default=0),
        sum(v.lost for v in victims) / gained,
        sum(not v.job.borrowed for v in victims),  # a tie: work placed on borrowed quota first
    )


def _slots_of(gpus: Iterable[int], need: Need) -> int:
    """Whole GPUs free, or shares of the job's size the GPUs have room for."""
    if need.gpus:
        return sum(m >= WHOLE_GPU for m in gpus)
    return sum(m // need.milli for m in gpus) if need.milli else 0


def _ranges_slots(free: ranges.Ranges, need: Need) -> int:
    """``_slots_of`` for one GPU whose free ranges are known."""
    if need.gpus:
        return int(free == ranges.IDLE)
    return ranges.shares(free, need.milli) if need.milli else 0


def _free_slots(node: NodeState, need: Need) -> int:
    """``_slots_of`` the node's GPUs, range by range where the node keeps them."""
    if node.ranges is None:
        return _slots_of(node.gpus, need)
    return sum(_ranges_slots(free, need) for free in node.ranges)


def _room(slots: int, cpu: int, mem: int, need: Need) -> int:
    """How many workers of the job fit in ``slots`` (``_slots_of``), ``cpu`` and ``mem``."""
    n = cpu // need.cpu if need.cpu else MANY
    if need.mem:
        n = min(n, mem // need.mem)
    if need.gpus:
        n = min(n, slots // need.gpus)
    elif need.milli:
        n = min(n, slots)
    return n


class _Room:
    """A node's free room, in workers of the job, while victims are tried on it."""

    __slots__ = ("gpus", "ranges", "cpu", "mem", "need", "slots", "node")

    def __init__(self, node: NodeState, need: Need):
        self.gpus = list(node.gpus)
        self.ranges = None if node.ranges is None else list(node.ranges)
        self.cpu = node.cpu
        self.mem = node.mem
        self.need = need
        self.slots = _free_slots(node, need)
        self.node = node

    def workers(self) -> int:
        """How many workers of the job fit: a whole one only with nothing left on the node."""
        need = self.need
        if need.whole:
            node = self.node
            idle = self.cpu == node.cap_cpu and self.mem == node.cap_mem
            idle = idle and self.slots == len(self.gpus)
            return int(idle and node.cap_cpu >= need.cpu and node.cap_mem >= need.mem)
        return _room(self.slots, self.cpu, self.mem, need)

    def change(self, part: Part, sign: int) -> None:
        """Free (``sign`` 1) or take back (-1) what the part holds."""
        _, takes, cpu, mem = part
        if self.ranges is not None:
            self._change_ranges(takes, sign)
        else:
            for index, milli in takes:
                before = self.gpus[index]
                self.gpus[index] = after = before + sign * milli
                self.slots += _slots_of((after,), self.need) - _slots_of((before,), self.need)
        self.cpu += sign * cpu
        self.mem += sign * mem

    def _change_ranges(self, takes: Takes, sign: int) -> None:
        # A victim frees its own ranges: room for a share only where they join a large enough
        # free range.
        assert self.ranges is not None
        change = ranges.give if sign > 0 else ranges.take
        for index, milli, start in takes:
            before = self.ranges[index]
            self.ranges[index] = after = change(before, start, milli)
            self.slots += _ranges_slots(after, self.need) - _ranges_slots(before, self.need)


def _keep(
    capacity: Capacity, taken: list[Candidate], fit: Callable[[], list | None], limit: int
) -> tuple[list[RunningJob], list] | None:
    # Steps taken early may have been made unnecessary by later ones: put back, most costly
    # first, every victim the job fits without.
    kept: list[Candidate] = []
    for victim in reversed(taken):
        restore(capacity, victim.job)
        if fit() is None:
            release(capacity, victim.job)
            kept.append(victim)
    if len(kept) > limit:
        for victim in kept:
            restore(capacity, victim.job)
        return None
    slots = fit()
    assert slots is not None  # the set still makes room: each restore was checked
    return sorted((v.job for v in kept), key=lambda j: j.id), slots


def release(capacity: Capacity, job: RunningJob) -> None:
    """Give the job's resources back to ``capacity`` (as if it had ended)."""
    for freed in releases_of(job, capacity):
        capacity.release(*freed)


def restore(capacity: Capacity, job: RunningJob) -> None:
    """Take back what ``release`` gave."""
    for node, takes, cpu, mem in releases_of(job, capacity):
        capacity.allocate(node, takes, cpu, mem)


def left_over(
    victims: list[RunningJob], slots: list[Slot], capacity: Capacity, back: float
) -> list[tuple[float, RunningJob]]:
    """What the victims hold that the preemptor's slots do not take, one stopping job per
    victim with when it is gone: by ``back`` at the latest (the slots take from the victims'
    room first, then from room that was free; where the node keeps its GPU ranges, a victim
    keeps exactly the parts of its ranges the slots do not cover)."""
    taken = _taken_by(slots)
    left: list[tuple[float, RunningJob]] = []
    for victim in victims:
        allocations = []
        for node, takes, cpu, mem in capacity.releases(victim):
            gpus, spans, rest = taken.get(node.id, ({}, {}, [0, 0]))
            kept: list[tuple[int, ...]] = []
            for take in takes:
                index, milli = take[0], take[1]
                if len(take) > 2:
                    parts = ranges.outside(take[2], milli, spans.get(index, ()))
                    kept += [(index, part, start) for start, part in parts]
                    continue
                used = min(milli, gpus.get(index, 0))
                gpus[index] = gpus.get(index, 0) - used
                if milli > used:
                    kept.append((index, milli - used))
            cpu_used, mem_used = min(cpu, rest[0]), min(mem, rest[1])
            rest[0] -= cpu_used
            rest[1] -= mem_used
            if kept or cpu > cpu_used or mem > mem_used:
                allocations.append(allocation(node.id, tuple(kept), cpu - cpu_used, mem - mem_used))
        if allocations:
            end = min(victim.expected_end or back, back)
            leaving = dataclasses.replace(
                victim,
                id=f"{victim.id}:leaving",
                allocations=tuple(allocations),
                expected_end=end,
                stopping=True,
            )
            left.append((end, leaving))
    return left


# Per node: GPU milli taken by GPU index, the (start, milli) ranges taken by GPU index where
# the node keeps its ranges, and [CPU, memory] taken.
Taken = dict[str, tuple[dict[int, int], dict[int, list[tuple[int, int]]], list[int]]]


def _taken_by(slots: list[Slot]) -> Taken:
    """What the slots take, per node."""
    taken: Taken = {}
    for node, takes, cpu, mem in slots:
        gpus, spans, rest = taken.setdefault(node.id, ({}, {}, [0, 0]))
        for take in takes:
            if len(take) > 2:
                spans.setdefault(take[0], []).append((take[2], take[1]))
            else:
                gpus[take[0]] = gpus.get(take[0], 0) + take[1]
        rest[0] += cpu
        rest[1] += mem
    return taken


def exempt_ends(
    exempt: list[RunningJob], tier: int, now: float, grace: float, evicted: Container[str]
) -> dict[str, float]:
    """When work in its exempt time that a job of ``tier`` may evict by tier will be gone if it
    is evicted as soon as that time ends: its end then plus the eviction ``grace``, for the work
    whose runtime limit would end it later (or that has none). A reservation counts on it."""
    ends = {}
    for victim in exempt:
        end = max(victim.exempt_until or 0.0, now) + grace
        later = victim.expected_end is None or end < victim.expected_end
        if victim.tier < tier and later and victim.id not in evicted:
            ends[victim.id] = end
    return ends

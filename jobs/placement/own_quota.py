"""Preemption inside a tenant's quota (Kueue's ``withinClusterQueue: LowerPriority``).

A job its own tenant's quota blocks, of a class that may preempt, evicts the tenant's own
preemptible work of lower tiers, if that makes it fit, quota and capacity together; never
another tenant's work for its own quota. While work asked to stop (the tenant's, or its
cohort's where the cohort's quota is what is short) would give back enough quota once gone, it
evicts nobody and waits for that.

Victims, lowest tier first, then least work lost: taken until the quota covers the job; then,
if the room is on the wrong nodes, more of them node by node (``preemption.choose_victims``);
then, if the job still does not fit (a batch's further shards need quota too, or the quota
freed is of a GPU type without room), more in order until it does. Every victim it fits
without is put back, last chosen first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from jobs.placement import explain, preemption
from jobs.placement.capacity import Group
from jobs.placement.decision import Outcome
from jobs.placement.model import QueuedJob, RunningJob
from jobs.placement.quota import charged

if TYPE_CHECKING:
    from jobs.placement.engine import Cycle


class OwnWork:
    """Each tenant's running work that may be evicted for its own quota, lowest tier first."""

    def __init__(self, running: Iterable[RunningJob]):
        self.by_tenant: dict[str, list[RunningJob]] = {}
        self.lowest_fixed: dict[str, int] = {}  # the lowest tier of its work not preemptible
        self._held: dict[tuple[str, int, int], dict[str, int]] = {}
        for job in sorted(running, key=lambda j: (j.tier, j.id)):
            if job.preemptible and not job.stopping:
                self.by_tenant.setdefault(job.tenant, []).append(job)
            elif not job.stopping:
                self.lowest_fixed.setdefault(job.tenant, job.tier)

    def held_below(
        self, tenant: str, tier: int, gone: set[str], usage_of: Callable[[RunningJob], dict]
    ) -> dict[str, int]:
        """What ``below`` holds, by flavor. Kept per tenant and tier until more work is
        evicted (``gone`` only grows): a long queue of blocked jobs asks it again and again."""
        key = (tenant, tier, len(gone))
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = {}
            for job in self.below(tenant, tier, gone):
                for flavor, amount in usage_of(job).items():
                    held[flavor] = held.get(flavor, 0) + amount
        return held

    def below(self, tenant: str, tier: int, gone: set[str]) -> list[RunningJob]:
        """The tenant's work of a tier under ``tier`` not evicted yet."""
        out = []
        for job in self.by_tenant.get(tenant, ()):
            if job.tier >= tier:
                break
            if job.id not in gone:
                out.append(job)
        return out


def preempt_own(
    cycle: Cycle, job: QueuedJob, groups: list[Group], avoided: tuple[int, ...]
) -> Outcome | None:
    """The job's outcome if it evicts its tenant's own work or waits for work leaving; None
    if neither (it waits for quota)."""
    if not job.may_preempt:
        return None
    quota, ledger = cycle.quota, cycle.ledger
    if ledger.going and quota.allowed_if(job, groups, gone=True):
        return explain.pending(job, "waiting_for_preemption")
    held = cycle.own_work.held_below(job.tenant, job.tier, cycle.evicted, cycle.usage_of)
    # No such work, or even all of it would not do (too little, or the room is held for an
    # earlier job of the tenant): no search, and no try spent.
    if not held or not quota.allowed_if(job, groups, less=held):
        return None
    if not cycle.may_search_victims(job):
        return None
    own = cycle.own_work.below(job.tenant, job.tier, cycle.evicted)
    cycle.searched_victims = True
    cycle.preemption_tries += 1
    lost = cycle.lost()
    candidates = [preemption.Candidate(j, lost[j.id], True) for j in own]
    candidates.sort(key=lambda c: (c.job.tier, c.lost))
    chosen = _choose(cycle, job, groups, avoided, candidates)
    if chosen is None:
        return None
    slots, victims = chosen
    outcome = cycle.preempted_for(job, slots, sorted(victims, key=lambda j: j.id))
    # Until the victims have gone the tenant holds what they hold, and the job nothing; once
    # they have, the job holds its part.
    used = charged(job, slots)
    ledger.charge(job.tenant, used, -1)
    ledger.leave(job.tenant, used, -1)
    return outcome


def nothing_to_free(cycle: Cycle, job: QueuedJob, groups: list[Group]) -> str:
    """Why a job of a class that may preempt evicts none of its tenant's own work for its
    quota, when its tenant runs work of a lower priority: it may not be preempted, or all of
    it would not free enough; "" otherwise (nothing of a lower priority runs, or eviction
    could free enough and it waits for another reason: the room, the search's budget)."""
    if not job.may_preempt:
        return ""
    held = cycle.own_work.held_below(job.tenant, job.tier, cycle.evicted, cycle.usage_of)
    if not held:
        fixed = cycle.own_work.lowest_fixed.get(job.tenant)
        if fixed is not None and fixed < job.tier:
            return "its tenant's work of a lower priority may not be preempted"
        return ""
    if not cycle.quota.allowed_if(job, groups, less=held):
        return (
            "evicting all of its tenant's preemptible work of a lower priority would not free "
            "enough"
        )
    return ""


def _choose(
    cycle: Cycle,
    job: QueuedJob,
    groups: list[Group],
    avoided: tuple[int, ...],
    candidates: list[preemption.Candidate],
) -> tuple[list, list[RunningJob]] | None:
    """The job's slots and its victims, their resources left released (their quota charged
    again); None, with capacity and ledger as they were."""
    quota, ledger, tenant = cycle.quota, cycle.ledger, job.tenant
    limit = cycle.policy.max_victims_per_job

    def fit():
        allowed = quota.allowed(job, groups)
        return cycle.fits(job, cycle.need(job, allowed, avoided)) if allowed else None

    victims: list[RunningJob] = []

    def take(victim: RunningJob) -> None:
        preemption.release(cycle.capacity, victim)
        ledger.charge(tenant, cycle.usage_of(victim), -1)
        victims.append(victim)

    rest = list(candidates)
    while rest and not quota.allowed(job, groups):
        take(rest.pop(0).job)
    if fit() is None and quota.allowed(job, groups):
        # The quota is there but not the room: more of the same work, node by node.
        need = cycle.need(job, quota.allowed(job, groups), avoided)
        found = preemption.choose_victims(cycle.capacity, rest, {}, need, job.workers, fit, limit)
        for victim in found[0] if found is not None else ():
            ledger.charge(tenant, cycle.usage_of(victim), -1)
            victims.append(victim)
        taken = {v.id for v in victims}
        rest = [c for c in rest if c.job.id not in taken]
    while rest and len(victims) < 2 * limit and fit() is None:
        take(rest.pop(0).job)
    slots = _spare(cycle, victims, fit)
    for victim in victims:  # charged until they have gone (Cycle._evict)
        ledger.charge(tenant, cycle.usage_of(victim))
    if slots is None or len(victims) > limit:
        for victim in victims:
            preemption.restore(cycle.capacity, victim)
        return None
    return slots, victims


def _spare(cycle: Cycle, victims: list[RunningJob], fit: Callable[[], list | None]):
    """Put back, last chosen first, each victim (released, quota given back) the job fits
    without; the job's slots then, or None if it does not fit even with all of them."""
    if fit() is None:
        return None
    ledger = cycle.ledger
    for victim in reversed(list(victims)):
        preemption.restore(cycle.capacity, victim)
        ledger.charge(victim.tenant, cycle.usage_of(victim))
        if fit() is not None:
            victims.remove(victim)
        else:
            preemption.release(cycle.capacity, victim)
            ledger.charge(victim.tenant, cycle.usage_of(victim), -1)
    return fit()

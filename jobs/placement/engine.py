"""The placement cycle: ``place(snapshot) -> Decision``.

1. Index the snapshot: free capacity, quota ledger, scorers, queue order.
2. Take jobs in queue order (strict tiers, fair share, aging, submit time, id).
3. For each: check the request, its candidate node groups and its quota; then place it, or
   preempt for it, or reserve nodes for it (the first blocked job of a node pool no earlier
   reservation holds), or explain why it waits.
4. Then restart running elastic gangs larger where the queue left room (``growth.py``);
   before the queue, the room of those stopping to do so is held for them.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Mapping
from dataclasses import replace

from jobs.placement import (
    elastic,
    explain,
    growth,
    kinds,
    off_limits,
    own_quota,
    preemption,
    waiting,
)
from jobs.placement.batch_limit import BatchLimits
from jobs.placement.budget import Budgets
from jobs.placement.capacity import Capacity, Group, NodeState
from jobs.placement.decision import (
    PENDING,
    PLACED,
    PREEMPTS,
    PRIORITY,
    RESERVED,
    Decision,
    Outcome,
)
from jobs.placement.fit import Need, Slot, find_gang, find_task, find_tasks
from jobs.placement.gpu_limits import GpuLimits
from jobs.placement.model import (
    BATCH_INFERENCE,
    TRAINING,
    WHOLE_GPU,
    QueuedJob,
    RunningJob,
    Snapshot,
)
from jobs.placement.ordering import QueueOrder, resources_of, running_gpus, worker_gpus
from jobs.placement.own_quota import OwnWork
from jobs.placement.quota import Ledger, charged, flavors_held
from jobs.placement.quota_gate import QuotaGate, demand, end_of
from jobs.placement.reservation import Held, Timeline, ending_jobs
from jobs.placement.scoring import ScoringContext, WeightedScorer, learn_workload

# Marks a task search that stopped on quota rather than capacity.
QUOTA = "quota"


def place(snapshot: Snapshot) -> Decision:
    """Decide, for every queued job, where it runs now or why it waits. Pure and deterministic."""
    with _collector_paused():
        cycle = Cycle(snapshot)
        growth.hold(cycle)  # the room of gangs stopping to restart larger
        # A job ordered above its tier comes again at its own place if it still waits there.
        outcomes: dict[str, Outcome] = {}
        # Placing is what a cycle is for; only jobs left waiting count toward the depth, and
        # not one a limit no capacity lifts holds (explain.LIMITS): a batch of 10,000
        # throttled shards, or one user's 10,000 jobs past their limit, each decided at no
        # cost, would otherwise stop the cycle for everyone behind them.
        depth = snapshot.policy.queue_depth
        waiting = 0
        for job in cycle.order:
            if depth is not None and waiting >= depth:
                break
            earlier = outcomes.get(job.id)
            if earlier is None or earlier.status == PENDING:
                outcome = outcomes[job.id] = cycle.decide(job)
                waiting += (
                    outcome.status in (PENDING, RESERVED) and outcome.reason not in explain.LIMITS
                )
        if len(outcomes) < len(snapshot.queued):
            for job in snapshot.queued:
                if job.id not in outcomes:
                    outcomes[job.id] = explain.beyond_depth(job)
        grown = growth.grow(cycle, outcomes)  # with what the queue left
        return Decision(tuple(outcomes.values()), tuple(cycle.preempted), grown, cycle.order.totals)


@contextlib.contextmanager
def _collector_paused():
    # A cycle allocates many small containers and no garbage cycles; the cyclic garbage
    # collector would rescan the whole (large) snapshot over and over, 10-40% of the time on
    # big snapshots. It is switched back on (and catches up) as soon as the cycle ends.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Cycle:
    """The mutable state of one cycle; ``decide`` is called once per job in queue order."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self.policy = policy = snapshot.policy
        self.now = snapshot.now
        self.capacity = Capacity(snapshot.nodes, snapshot.running, snapshot.seed)
        self.ledger = Ledger(snapshot.tenants)
        self.gpu_limits = GpuLimits(snapshot.tenants, snapshot.running, self.now)
        self.budgets = Budgets(snapshot.tenants, snapshot.running, self.now)
        self.batch_limits = BatchLimits(snapshot.queued, snapshot.running, self.now)
        self.quota = QuotaGate(self.ledger, self.now)
        # Each distinct tuple of excluded nodes as a set, made once: the jobs pinned alike
        # share one tuple (the snapshot's), of nearly every node's id.
        self._excluded: dict[int, tuple[tuple[str, ...], frozenset[str]]] = {}
        workload = learn_workload(
            snapshot.queued,
            snapshot.recent_shapes,
            policy.workload_coverage,
            policy.workload_max_classes,
        )
        context = ScoringContext(
            self.capacity,
            workload,
            policy.lookahead_weight,
            policy.stranding_weight,
            policy.gpu_model_weight,
            policy.pairing_weight,
        )
        self.scorer = WeightedScorer(policy, context)
        # Inside a tier, a tenant whose next job fits its guarantee goes before tenants whose
        # next job would borrow (only when some cohort has quotas).
        borrows = self._borrows if self.ledger.quota else None
        self.order = QueueOrder(
            snapshot.queued, snapshot.tenants, self._totals(), policy, self.now, borrows
        )
        self.running = {j.id: j for j in snapshot.running}
        self.ends = ending_jobs(snapshot.running, self.now)
        self.timelines: dict[frozenset[str], Timeline] = {
            frozenset(): Timeline(self.ends, self.capacity)
        }
        self.placed_ends: list[tuple[float, QueuedJob, list[Slot]]] = []
        self.placed_running: list[tuple[float, RunningJob]] = []
        # What victims of this cycle hold beyond their preemptor's slots, by their end.
        self.leaving_ends: list[tuple[float, RunningJob]] = []
        self.initial = {k: g.totals for k, g in self.capacity.groups.items()}
        self.evicted: set[str] = set()
        self.preempted: list[str] = []
        # One reservation per disjoint pool of node groups (EASY backfill per pool).
        self.held = Held()
        self.preemption_tries = 0
        self.preemptors: dict[str, int] = {}
        staying = [j for j in snapshot.running if not j.stopping]
        self.lowest_victim_tier = min((j.tier for j in staying if j.preemptible), default=1 << 62)
        # Work in its grace period: what it holds comes back without evicting anybody else.
        self.leaving = [j for j in snapshot.running if j.stopping]
        # Preemptible work in its exempt time: victims-to-be of reservations (exempt_ends).
        self.exempt = [j for j in staying if j.exempt_until is not None]
        for j in self.leaving:
            self.ledger.leave(j.tenant, self.usage_of(j))
        # Work each tenant may evict for its own quota (own_quota.py).
        self.own_work = OwnWork(snapshot.running)
        self.reservation_tries = 0
        self._lost: dict[str, float] | None = None
        self._emptied: tuple[tuple, dict[str, float]] | None = None
        self._sized: dict[tuple, list[NodeState]] = {}
        self.failed: dict[tuple, list[tuple]] = {}
        # Bumped whenever capacity changes: cached explanations are only valid inside an epoch.
        self.epoch = 0
        self._pending: dict[tuple, tuple[str, float | None]] = {}
        self._groups: dict[tuple, list[Group]] = {}
        self._too_large_shapes: dict[tuple, bool] = {}
        # The nodes each request keeps off for having failed there (off_limits.Avoiding).
        self.avoiding = off_limits.Avoiding()
        self._repeats: dict[tuple, Outcome] = {}
        self.searched_victims = False

    def _totals(self) -> dict[str, float]:
        nodes = self.capacity.nodes
        return {
            "gpu": float(sum(len(n.gpus) for n in nodes) * WHOLE_GPU),
            "cpu": float(sum(n.cap_cpu for n in nodes)),
            "memory": float(sum(n.cap_mem for n in nodes)),
        }

    # -- step 3: one job ---------------------------------------------------------------------

    def decide(self, job: QueuedJob) -> Outcome:
        """The outcome for one job, updating capacity, quota and fair share if it is placed.

        A long queue is mostly jobs that wait for the same reason as an equal request before
        them. While nothing has changed since (capacity, quota, the reservations it must
        avoid), and that request neither searched for victims nor could have reserved, the
        answer is reused.
        """
        # Before the reused answers: they are keyed by the request, not its batch or user.
        # The batch's limit first: it counts nothing, while the user's limit holds a
        # preemptor's ask as soon as it lets it through.
        refusal = self.batch_limits.refusal(job)
        if refusal:
            return explain.over_batch_limit(job, refusal, self.batch_limits.estimate(job))
        job = elastic.within_limits(self, job)
        code, refusal = self.gpu_limits.refusal(job)
        if refusal:
            return explain.over_gpu_limit(job, code, refusal, self.gpu_limits.estimate(job))
        refusal = self.budgets.refusal(job)
        if refusal:
            return explain.over_budget(job, refusal, self.budgets.estimate(job))
        if job.preempting:  # its claim on its batch's turn, until it starts (batch_limit.py)
            self.batch_limits.charge(job)
        groups = self.groups_for(job)
        avoided = self.held.avoided(end_of(job, self.now), groups)
        key = None
        if not self.may_reserve(job, groups):
            key = (
                kinds.request_of(job),
                avoided,
                off_limits.windows_before(self.capacity, end_of(job, self.now)),
                self.quota.end_key(job),
                self.epoch,
                self.ledger.version,
                self.order.ahead_of_tier,  # ahead of its tier it has fewer rights
            )
            known = self._repeats.get(key)
            if known is not None:
                return known.for_job(job.id)
        self.searched_victims = False
        outcome = self._decide(job, groups, avoided)
        if key is not None and outcome.status == PENDING and not self.searched_victims:
            self._repeats[key] = outcome
        return outcome

    def may_reserve(self, job: QueuedJob, groups: list[Group] | None = None) -> bool:
        """Whether the job could reserve nodes if blocked: tries are left and some of its
        groups (by default every group it matches) is in a pool no reservation holds yet."""
        if (
            self.order.ahead_of_tier
            or not self.policy.backfill
            or self.reservation_tries >= self.policy.max_reservation_attempts
        ):
            return False
        return bool(self.held.unreserved(self.groups_for(job) if groups is None else groups))

    def _decide(self, job: QueuedJob, groups: list[Group], avoided: tuple[int, ...]) -> Outcome:
        problem = explain.invalid(job)
        if problem:
            return explain.pending(job, problem)
        if not groups:
            if job.features and self.groups_for(replace(job, features=frozenset())):
                return explain.pending(job, "no_node_with_features")
            return explain.pending(job, explain.missing(job, self.capacity))
        least = job.sized(job.fewest)
        if self.too_large(least, groups):
            alone = job.exclusive and not self.too_large(replace(least, exclusive=False), groups)
            return explain.pending(least, "no_node_to_itself" if alone else "worker_too_large")
        if least.topology and self.too_large(least, groups, domains=True):
            return explain.pending(least, "topology_too_small")
        need, slots = self.fit_now(job, groups, avoided, keep=True)
        if least is not job and not isinstance(slots, list):
            # An elastic gang: the most workers that fit now, at least its fewest, unless its
            # whole gang should end sooner by waiting (not once it has stopped work for this
            # room: a preemptor's, or its own to grow); else it waits, evicts or reserves for
            # its fewest, as a gang of that size would.
            sized = elastic.largest_fit(self, job, least, groups, avoided)
            whole_sooner = (
                sized
                and not job.preempting
                and not elastic.sooner_smaller(self, job, sized, need, groups)
            )
            if slots is None and whole_sooner:
                return self.blocked(job, need)
            job = sized or least
            need, slots = self.fit_now(job, groups, avoided, keep=True)
        if isinstance(slots, list):
            return self.commit(job, slots, PLACED)
        if slots == QUOTA:
            return self._over_quota(job, groups, avoided)
        return self.blocked(job, need)

    def fit_now(self, job: QueuedJob, groups: list[Group], avoided: tuple[int, ...], keep: bool):
        """(need, slots) for the job now within its quota: slots as ``fit`` gives them, or
        QUOTA (need None) when its quota allows none of its groups."""
        allowed = self.quota.allowed(job, groups)
        if not allowed:
            return None, QUOTA
        need = self.need(job, allowed, avoided)
        return need, self.fit(job, need, keep=keep)

    def too_large(self, job: QueuedJob, groups: list[Group], domains: bool = False) -> bool:
        """``explain.too_large``, or with ``domains`` ``explain.domains_too_small``, asked once
        per shape and group list: what they read (node sizes, their labels) does not change
        in a cycle."""
        topology = job.topology if domains else None
        key = (id(groups), job.family, job.workers, job.gpus, job.cpu_milli, job.memory_mb,
               topology, job.features, job.exclusive)  # fmt: skip
        known = self._too_large_shapes.get(key)
        if known is None:
            check = explain.domains_too_small if domains else explain.too_large
            known = self._too_large_shapes[key] = check(job, groups)
        return known

    def groups_for(self, job: QueuedJob) -> list[Group]:
        """Healthy node groups that match the job's GPU types, sharing and cluster selector,
        with a node that offers every feature it requires."""
        share = not job.gpus and job.gpu_milli > 0
        key = (job.gpu_types, job.clusters, share, job.worker_gpu_milli > 0, job.features)
        groups = self._groups.get(key)
        if groups is None:
            groups = [g for _, g in sorted(self.capacity.groups.items())
                      if g.admits(job) and g.offers(job.features)]  # fmt: skip
            # The job lists its GPU types most preferred first; ties between nodes go that way.
            groups.sort(key=lambda g: _preference(job.gpu_types, g.gpu_type))
            self._groups[key] = groups
        return groups

    def _borrows(self, job: QueuedJob) -> bool:
        """Whether the whole job would borrow on every GPU type it may use."""
        return self.quota.borrows(job, self.groups_for(job))

    def _over_quota(self, job: QueuedJob, groups: list[Group], avoided: tuple[int, ...]) -> Outcome:
        """The job's quota does not cover it: it evicts its tenant's own lower classes for it,
        or waits; then its tenant's room is held for it. A job ahead of its tier does neither."""
        if self.order.ahead_of_tier:
            return explain.over_quota(job, self.quota.shortfall(job, groups))
        outcome = own_quota.preempt_own(self, job, groups, avoided)
        if outcome is not None and outcome.status == PREEMPTS:
            return outcome
        why = self.quota.shortfall(job, groups)  # before the hold: it says what is free now
        if why and outcome is None and (none := own_quota.nothing_to_free(self, job, groups)):
            why = f"{why}; {none}"
        self.quota.hold_for(job, groups, self._known_ends)
        return outcome or explain.over_quota(job, why)

    def _known_ends(self, tenant: str, flavor: str) -> list[tuple[float, int]]:
        """(end, amount of ``flavor``) of the tenant's work whose end is known: running (not
        evicted) and placed in this cycle with a runtime limit, each what it is charged."""
        ends = [
            (max(j.expected_end, self.now), self.usage_of(j).get(flavor, 0))
            for j in self.running.values()
            if j.tenant == tenant and j.expected_end is not None and j.id not in self.evicted
        ]
        ends += [(end, charged(job, slots).get(flavor, 0))
                 for end, job, slots in self.placed_ends if job.tenant == tenant]  # fmt: skip
        return [e for e in ends if e[1]]

    def need(self, job: QueuedJob, groups: list[Group], avoided: tuple[int, ...]) -> Need:
        need = Need(
            job.gpus, 0 if job.gpus else job.gpu_milli, job.cpu_milli, job.memory_mb, groups
        )
        self.held.flag(avoided)
        need.avoid_held = bool(avoided)
        need.together = job.topology if explain.is_gang(job) else ""
        need.avoid = self.avoiding(job, groups)
        need.exclude = self.excluded(job.exclude_nodes)
        need.features = job.features
        need.whole = job.exclusive
        return off_limits.starting(self.capacity, need, job, self.now)

    def excluded(self, nodes: tuple[str, ...]) -> frozenset[str]:
        """The nodes a job excludes as a set: made once per tuple (kept with it, so that its
        id names it alone)."""
        if not nodes:
            return frozenset()
        known = self._excluded.get(id(nodes))
        if known is None or known[0] is not nodes:
            known = self._excluded[id(nodes)] = (nodes, frozenset(nodes))
        return known[1]

    # -- fitting, with a memo of failures ----------------------------------------------------

    def fit(self, job: QueuedJob, need: Need, memo: bool = True, keep: bool = False):
        """Slots for every worker of the job, None if it does not fit, or QUOTA.

        With ``keep`` the slots found are already allocated; otherwise capacity is unchanged.
        """
        kind, shape = kinds.class_of(job, need, self.held.flagged)
        # A class that failed fails for any request at least as large, until something is
        # released: this is what keeps a saturated cycle fast.
        failures = self.failed.setdefault(kind, [])
        if memo and any(kinds.at_most(fail, shape) for fail in failures):
            return None
        slots = self._search(job, need, keep)
        if slots is None and memo:
            failures[:] = [f for f in failures if not kinds.at_most(shape, f)]
            failures.append(shape)
        return slots

    def _search(self, job: QueuedJob, need: Need, keep: bool):
        if job.family == TRAINING:
            slots = find_gang(need, job.workers, self.scorer, self.policy)
        elif job.workers == 1:
            found = find_task(need, self.scorer, self.policy)
            slots = None if found is None else [need.slot(*found)]
        else:
            return self._fit_tasks(job, need, job.family == BATCH_INFERENCE, keep)
        if slots is not None and keep:
            slots = self.take(slots)
        return slots

    def _fit_tasks(self, job: QueuedJob, need: Need, spread: bool, keep: bool):
        """Independent workers (shards), all or none; quota checked per worker's GPU type."""
        groups = need.groups
        # If every worker could go to any of the types within quota, skip per-shard checks.
        if self.quota.allowed(job, groups, job.workers) is groups:
            return find_tasks(
                need, job.workers, self.scorer, self.policy, self.capacity, spread, keep
            )
        slots: list[Slot] = []
        counts: dict | None = {} if spread else None
        outcome = None
        try:
            for _ in range(job.workers):
                need.groups = [g for g in groups if self.quota.one_more(job, g, slots)]
                if not need.groups:
                    return QUOTA
                found = find_task(need, self.scorer, self.policy, counts)
                if found is None:
                    return None
                node, takes, cpu, mem = need.slot(*found)
                slots.append((node, self.capacity.allocate(node, takes, cpu, mem), cpu, mem))
                if counts is not None:
                    counts[node] = counts.get(node, 0) + 1
            outcome = slots
        finally:
            need.groups = groups
            if outcome is None or not keep:
                for node, takes, cpu, mem in reversed(slots):
                    self.capacity.release(node, takes, cpu, mem)
        return slots

    # -- commit ------------------------------------------------------------------------------

    def take(self, slots: list[Slot]) -> list[Slot]:
        """Take the slots' resources; the slots as taken (with their GPU ranges, where the
        node keeps them)."""
        allocate = self.capacity.allocate
        return [(node, allocate(node, takes, cpu, m), cpu, m) for node, takes, cpu, m in slots]

    def commit(
        self, job: QueuedJob, slots: list[Slot], status: str, victims=(), causes=()
    ) -> Outcome:
        """Charge quota and fair share for the slots (already taken), and describe the
        result (``causes``: why each victim goes)."""
        self.epoch += 1
        used = charged(job, slots)
        self.ledger.charge(job.tenant, used)
        if not job.preempting:  # a preemptor is counted from its decision (decide)
            gpu = sum(amount for flavor, amount in used.items() if flavor.startswith("gpu:"))
            self.gpu_limits.charge(job, gpu, end_of(job, self.now))
            self.budgets.charge(job)
            self.batch_limits.charge(job)
        gpus = len(slots) * worker_gpus(job.worker_gpu_milli)  # one slot per worker
        self.order.charge(job.tenant, resources_of(used), owner=job.owner, gpus=gpus)
        # A job that evicts its own tenant's work starts once that has gone.
        evicting: dict[str, int] = {}
        for victim in victims:
            if victim.tenant == job.tenant:
                for flavor, amount in self.usage_of(victim).items():
                    evicting[flavor] = evicting.get(flavor, 0) + amount
        borrowed = self.ledger.borrowed_in(job.tenant, used, evicting)
        if job.max_runtime is not None:
            # Work placed now frees its nodes by its runtime limit: a later reservation
            # counts on that. Sorted in only when a reservation is searched for.
            self.placed_ends.append((self.now + job.max_runtime, job, slots))
        ids = tuple(j.id for j in victims)
        return explain.placed(job, slots, status, borrowed, ids, tuple(causes))

    # -- the job does not fit ----------------------------------------------------------------

    def blocked(self, job: QueuedJob, need: Need) -> Outcome:
        """Preempt for the job, reserve nodes for it, or say why it waits."""
        outcome = self._preempt(job, need)
        if outcome is not None:
            return outcome
        # A job ordered above its tier for waiting long goes first for what is free, but holds
        # nothing back; it may reserve when it comes again at its own place.
        if self.may_reserve(job, need.groups):
            self.reservation_tries += 1
            outcome = waiting.reserve(self, job, need)
            if outcome is not None:
                return outcome
        # Jobs of one class wait for the same reason until capacity changes.
        key = (*kinds.class_of(job, need, self.held.flagged), self.epoch)
        known = self._pending.get(key)
        if known is None:
            reason = waiting.reason(self, job, need)
            if reason in off_limits.WINDOWS:
                known = self._pending[key] = (reason, off_limits.first_opening(self.capacity, need))
            else:
                known = self._pending[key] = (reason, waiting.estimate(self, job, need))
        return explain.pending(job, *known)

    def _preempt(self, job: QueuedJob, need: Need) -> Outcome | None:
        excess = self._reclaimable(job, need)
        if excess is None or self.leaving_makes_room(job, need):
            return None
        # Looking for victims is what max_preemption_attempts bounds, found or not.
        self.searched_victims = True
        self.preemption_tries += 1
        # A job that may not preempt by tier still reclaims its guarantee from borrowers.
        tier = job.tier if job.may_preempt else self.lowest_victim_tier
        candidates = preemption.eligible(
            self.running, self.lost(), self.evicted, tier, excess, self.capacity,
            self._fair_tier(job),
        )  # fmt: skip
        chosen = preemption.choose_victims(
            self.capacity,
            candidates,
            excess,
            need,
            job.workers,
            lambda: self.fits(job, need),
            self.policy.max_victims_per_job,
        )
        if chosen is None:
            return None
        victims, slots = chosen
        taken = {v.id for v in victims}
        why = {c.job.id: preemption.cause(c) for c in candidates if c.job.id in taken}
        return self.preempted_for(job, slots, victims, [why[v.id] for v in victims])

    def preempted_for(
        self, job: QueuedJob, slots, victims: list[RunningJob], causes: list[str] | None = None
    ) -> Outcome:
        """Evict the victims (their resources already released) and give their room to the job;
        ``causes``, why each goes (by default: for a job of a higher tier).

        What they free beyond the job's slots is nobody's in this cycle: they run on it through
        their grace period (a job placed there now would be refused when the cycle commits),
        so it is taken back and counted as work leaving. Free capacity never grows by an
        eviction, so the failures the cycle remembers stay true.
        """
        for victim in victims:
            self._evict(victim)
        self.preemptors[job.tenant] = self.preemptors.get(job.tenant, 0) + 1
        slots = self.take(slots)
        causes = causes or [PRIORITY] * len(victims)
        outcome = self.commit(job, slots, PREEMPTS, victims, causes)
        back = self.now + self.policy.eviction_grace_s
        for end, rest in preemption.left_over(victims, slots, self.capacity, back):
            preemption.restore(self.capacity, rest)
            self.leaving.append(rest)
            self.leaving_ends.append((max(end, self.now), rest))
        return outcome

    def may_search_victims(self, job: QueuedJob) -> bool:
        """Whether preemption is on and the cycle's and the tenant's preemption budgets are not
        spent."""
        policy = self.policy
        return (
            policy.preemption
            and self.preemption_tries < policy.max_preemption_attempts
            and self.preemptors.get(job.tenant, 0) < policy.max_preemptions_per_tenant
        )

    def lost(self) -> dict[str, float]:
        """Each running job's GPU-seconds lost if evicted now, cheapest first (built once)."""
        if self._lost is None:
            self._lost = preemption.costs(list(self.running.values()), self.now)
        return self._lost

    def _reclaimable(self, job: QueuedJob, need: Need) -> dict | None:
        """What the job may reclaim from borrowers in its cohort (perhaps nothing), or None if
        it may evict nobody: then the running work is not scanned."""
        if not self.may_search_victims(job):
            return None
        types = sorted({g.gpu_type for g in need.groups})
        wants = [demand(job, gpu_type, job.workers) for gpu_type in types]
        excess = preemption.reclaimable(self.ledger, job.tenant, wants)
        if self._fair_tier(job) > -math.inf and job.tier >= self.lowest_victim_tier:
            gpus = job.workers * job.worker_gpu_milli
            excess |= preemption.over_fair_share(self.ledger, job.tenant, gpus, self.order.weights)
        by_tier = job.may_preempt and job.tier > self.lowest_victim_tier
        return excess if by_tier or excess else None

    def _fair_tier(self, job: QueuedJob) -> float:
        """The highest tier the job may evict by fair share (-inf: none): its own, for a GPU job
        decided at its own place when its class has it on, or leaves it to the policy that
        has it."""
        on = job.fair_share_preemption
        fair = (self.policy.fair_share_preemption if on is None else on) and job.worker_gpu_milli
        return job.tier if fair and not self.order.ahead_of_tier else -math.inf

    def leaving_makes_room(self, job: QueuedJob, need: Need) -> bool:
        """Whether work already asked to stop will make room for the job once it has gone.

        Then nobody else is evicted for it: a preemptor whose victims are still in their grace
        period would otherwise pick more victims every cycle until the first ones are gone.
        """
        if not self.leaving:
            return False
        for j in self.leaving:
            preemption.release(self.capacity, j)
        try:
            return self.fits(job, need) is not None
        finally:
            for j in self.leaving:
                preemption.restore(self.capacity, j)

    def fits(self, job: QueuedJob, need: Need):
        slots = self.fit(job, need, memo=False)
        return None if slots == QUOTA else slots

    def usage_of(self, job: RunningJob) -> dict[str, int]:
        """The quota flavors a running job holds."""
        return flavors_held(job, self.capacity.by_id)

    def _evict(self, victim: RunningJob) -> None:
        # The victim's resources were released by the search. Its quota stays charged until it
        # has gone (its tenant starts nothing more on it now), but is not reclaimed twice.
        used = self.usage_of(victim)
        self.ledger.leave(victim.tenant, used)
        self.order.charge(
            victim.tenant, resources_of(used), -1, owner=victim.owner, gpus=running_gpus(victim)
        )
        self.evicted.add(victim.id)
        self.preempted.append(victim.id)

    def emptied_at(self, gone: RunningJob | None = None) -> Mapping[str, float]:
        """When each node is left empty by the running work's expected ends (inf: some end
        not known; now: nothing runs there), by node id: work evicted in this cycle is gone by
        the eviction grace, ``gone`` counted gone already. Kept until the next eviction."""
        key = (len(self.evicted), None if gone is None else gone.id)
        if self._emptied is None or self._emptied[0] != key:
            back = self.now + self.policy.eviction_grace_s
            emptied = dict.fromkeys(self.capacity.by_id, self.now)
            for job in self.running.values():
                if job is gone:
                    continue
                end = math.inf if job.expected_end is None else max(job.expected_end, self.now)
                if job.id in self.evicted:
                    end = min(end, back)
                for a in job.allocations:
                    if emptied.get(a.node_id, end) < end:
                        emptied[a.node_id] = end
            self._emptied = (key, emptied)
        return self._emptied[1]

    def sized(self, group: Group, gpus: int) -> list[NodeState]:
        """The group's nodes of exactly ``gpus`` GPUs (their count does not change in a
        cycle)."""
        key = (group.key, gpus)
        nodes = self._sized.get(key)
        if nodes is None:
            nodes = [n for b in group.by_full for n in b if len(n.gpus) == gpus]
            nodes.sort(key=lambda n: n.order)
            self._sized[key] = nodes
        return nodes

    def timeline_of(self, features: frozenset[str]) -> Timeline:
        """The GPU milli the running work's ends free, on the nodes offering ``features``
        (built once a cycle for each set of features its jobs require)."""
        timeline = self.timelines.get(features)
        if timeline is None:
            timeline = self.timelines[features] = Timeline(self.ends, self.capacity, features)
        return timeline

    def fits_but_for(
        self,
        job: QueuedJob,
        need: Need,
        windows=False,
        held=False,
        failed=False,
        bookings=False,
        topology=False,
        excluded=False,
        features=False,
        shared=False,
    ) -> bool:
        """Whether the job would fit now if maintenance windows and bookings, the nodes held
        for the reservations it avoids, the nodes it failed on, bookings alone, its topology
        domain, the nodes it excludes, the features it requires, or its taking nodes to itself
        (``shared``: on nodes others use, as a job that is not exclusive) did not keep it
        off."""
        kept = (need.windows, need.avoid_held, need.avoid, need.bookings_open, need.together,
                need.exclude, need.features, need.whole)  # fmt: skip
        if windows:
            need.windows = 0
        if held:
            need.avoid_held = False
        if failed:
            need.avoid = frozenset()
        if topology:
            need.together = ""
        if excluded:
            need.exclude = frozenset()
        if features:
            need.features = frozenset()
        if shared:
            need.whole = False
        need.bookings_open = bookings
        try:
            return self.fit(job, need) not in (None, QUOTA)
        finally:
            (need.windows, need.avoid_held, need.avoid, need.bookings_open, need.together,
             need.exclude, need.features, need.whole) = kept  # fmt: skip


def _preference(gpu_types: tuple[str, ...], gpu_type: str) -> int:
    return gpu_types.index(gpu_type) if gpu_type in gpu_types else len(gpu_types)

"""The ``mlsched`` replay policy: builds a Snapshot, calls ``place()``, applies the Decision."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from jobs.placement import (
    PLACED,
    PREEMPTS,
    Allocation,
    Elastic,
    Node,
    Policy,
    QueuedJob,
    RunningJob,
    ShapeCount,
    Snapshot,
    Tenant,
    gpu_flavor,
    place,
)
from jobs.placement.model import TRAINING
from jobs.placement.ordering import recent_use
from jobs.simulator.replay import FAMILY_TIER
from jobs.simulator.traces import (
    JOB_CPU_PER_GPU,
    JOB_MEMORY_PER_GPU,
    NODE_CPU_PER_GPU,
    NODE_MEMORY_PER_GPU,
    TENANTS,
)

# Nodes of one rack share a topology label; gangs prefer one rack.
RACK_SIZE = 8
# How fast a tenant's recent use forgets: the live default (MLSCHED_FAIR_SHARE_HALF_LIFE_H).
HALF_LIFE_S = 24 * 3600.0


class EnginePolicy:
    """Drives the production placement engine with a virtual clock."""

    def __init__(self, policy: Policy | None = None, half_life_s: float = HALF_LIFE_S):
        self.recent: Counter[int] = Counter()
        self.policy = policy or Policy()
        # Each tenant's recent use, kept as the live cycle keeps it (jobs.recent_use), from what
        # the tenants held since the last cycle and when that was: what they hold changes only
        # at a cycle (an end frees a GPU, so one runs at every end).
        self.half_life_s = half_life_s
        self.recent_use: dict[str, dict[str, float]] = {}
        self._held: tuple[Tenant, ...] = ()
        self._held_since = 0.0
        # A job's request never changes and a run's allocation only when it restarts: both are
        # built once, not on every cycle.
        self._queued: dict[str, QueuedJob] = {}
        self._running: dict[str, tuple[int, RunningJob]] = {}
        # A node changes only when work starts or ends on it.
        self._nodes: dict[str, Node] = {}

    @property
    def grow_after_s(self) -> float | None:
        """How long a gang that started smaller runs before it may grow (None: never)."""
        return self.policy.grow_after_s

    def cycle(self, replay, now: float) -> None:
        # Victims leave the replay at once, but a cycle keeps what they free beyond their
        # preemptor's slots for their grace period: the next tick (one now) hands it out.
        for _ in range(2):
            if not _may_change(replay, self.policy.fair_share_preemption):
                return  # place() could only say why each job waits, which changes nothing here
            if not self._decide(replay, now):
                return

    def _decide(self, replay, now: float) -> bool:
        """One cycle, applied; whether it evicted anybody."""
        self._remember(now)
        decision = place(self.snapshot(replay, now))
        for victim in decision.preempted:
            if victim in replay.running:
                replay.preempt(victim, now)
        queued = {j.trace.id: j for j in replay.queue}
        for outcome in decision.outcomes:
            job = queued.get(outcome.job_id)
            if job is None or outcome.status not in (PLACED, PREEMPTS):
                continue
            slots = [(w.node_id, tuple(w.gpu_indices)) for w in outcome.workers]
            if _free(replay, slots):
                self.recent[job.per] += len(slots)
                replay.start(job, slots, now)
        for grown in decision.grown:
            if grown.job_id in replay.running:
                replay.grow(grown.job_id, now, self.policy.eviction_grace_s, grown.workers)
        self._held, self._held_since = self.tenants(replay), now
        return bool(decision.preempted)

    def _remember(self, now: float) -> None:
        """Bring each tenant's recent use up to ``now``: it held what it held after the last
        cycle until now."""
        if not self.half_life_s:
            return  # what each holds now alone
        for tenant in self._held:
            before = self.recent_use.get(tenant.id, {})
            seconds = now - self._held_since
            self.recent_use[tenant.id] = recent_use(before, tenant, seconds, self.half_life_s)

    def snapshot(self, replay, now: float) -> Snapshot:
        gangs = self.smaller_gangs(replay) if self.grow_after_s is not None else []
        stopping = [j for j in replay.running.values() if j.stops_at is not None]
        elastic = {j.trace.id for j in gangs}
        running = [self.running_job(j) for j in replay.running.values()]
        # The replay keeps all of a stopped gang's work: it models a checkpoint in the grace
        # period. So the core is told of a checkpoint a second ago and counts that work as
        # kept; its last start as its checkpoint would count none of it as kept, and seldom
        # find a restart worth its cost.
        running = [replace(r, last_checkpoint=now - 1) if r.id in elastic else r for r in running]
        return Snapshot(
            nodes=tuple(self.node(n, i) for i, n in enumerate(replay.nodes.values())),
            running=tuple(running),
            queued=tuple(self.queued_job(j) for j in replay.queue),
            tenants=self.tenants(replay),
            now=now,
            policy=self.policy,
            recent_shapes=tuple(
                ShapeCount(JOB_CPU_PER_GPU * per, 1000 * per, count)
                for per, count in sorted(self.recent.items())
            ),
            elastic=tuple(Elastic(self.queued_job(j), j.workers) for j in gangs),
            regrowing=tuple(Elastic(self.queued_job(j), j.restarts_with) for j in stopping),
        )

    @staticmethod
    def smaller_gangs(replay) -> list:
        """The running elastic gangs that started smaller and are not stopping."""
        return [
            j
            for j in replay.running.values()
            if j.least < j.whole and j.workers < j.whole and j.stops_at is None
        ]

    def tenants(self, replay) -> tuple[Tenant, ...]:
        """The replay's tenants with what their running jobs use, as the live snapshot gives
        them from the allocations: fair share orders the queue by it."""
        usage = {f"t{i}": {"cpu": 0, "memory": 0} for i in range(TENANTS)}
        for j in replay.running.values():
            used = usage.setdefault(j.tenant, {"cpu": 0, "memory": 0})
            gpu = gpu_flavor(replay.nodes[j.slots[0][0]].gpu_type)
            gpus = j.workers * j.per
            used[gpu] = used.get(gpu, 0) + 1000 * gpus
            used["cpu"] += JOB_CPU_PER_GPU * gpus
            used["memory"] += JOB_MEMORY_PER_GPU * gpus
        return tuple(
            Tenant(name, usage=used, recent_use=self.recent_use.get(name, {}))
            for name, used in usage.items()
        )

    def node(self, n, index: int) -> Node:
        node = self._nodes.get(n.id)
        if node is None or node.gpu_free_milli != tuple(n.free):
            node = self._nodes[n.id] = _node(n, index)
        return node

    def queued_job(self, j) -> QueuedJob:
        job = self._queued.get(j.trace.id)
        if job is None:
            job = self._queued[j.trace.id] = _queued(j)
        # A gang requeued to restart larger claims the room until it starts.
        return replace(job, preempting=True) if j.preempting else job

    def running_job(self, j) -> RunningJob:
        cached = self._running.get(j.trace.id)
        if cached is None or cached[0] != j.version:
            cached = self._running[j.trace.id] = (j.version, _running(j))
        return cached[1]


def _may_change(replay, fair_share: bool = False) -> bool:
    """Whether a cycle could start or evict anything: a GPU is free (every replay job asks
    whole GPUs), or a queued job's tier is above a running preemptible job's, or, with
    ``fair_share`` preemption, a queued job's tenant holds fewer GPUs than a tenant running
    preemptible work (a replay has no quotas to reclaim)."""
    if any(g == 1000 for n in replay.nodes.values() for g in n.free):
        return True
    victims = [j for j in replay.running.values() if _preemptible(j)]
    lowest = min((_tier(j) for j in victims), default=None)
    if lowest is None:
        return False
    if any(_tier(j) > lowest for j in replay.queue):
        return True
    if not fair_share:
        return False
    held: Counter[str] = Counter()
    for j in replay.running.values():
        held[j.tenant] += j.gpus
    most = max(held[j.tenant] for j in victims)
    # An elastic gang evicts for its fewest workers (Cycle._decide).
    return any(held[j.tenant] + j.least * j.per < most and _tier(j) >= lowest for j in replay.queue)


def _free(replay, slots) -> bool:
    # place() works on the snapshot; a slot freed twice would be an engine bug, so check.
    return all(replay.nodes[n].free[g] == 1000 for n, gpus in slots for g in gpus)


def _node(n, index: int) -> Node:
    gpus = len(n.free)
    used = sum(1 for g in n.free if g < 1000)
    return Node(
        id=n.id,
        cluster=n.cluster,
        gpu_type=n.gpu_type,
        gpu_free_milli=tuple(n.free),
        cpu_free_milli=NODE_CPU_PER_GPU * gpus - JOB_CPU_PER_GPU * used,
        memory_free_mb=NODE_MEMORY_PER_GPU * gpus - JOB_MEMORY_PER_GPU * used,
        topology=(f"rack={n.cluster}-{index // RACK_SIZE}",),
        name=n.id,
    )


def _running(j) -> RunningJob:
    allocations = tuple(
        Allocation(
            node_id,
            tuple((g, 1000) for g in gpus),
            JOB_CPU_PER_GPU * len(gpus),
            JOB_MEMORY_PER_GPU * len(gpus),
        )
        for node_id, gpus in j.slots
    )
    return RunningJob(
        id=j.trace.id,
        tenant=j.tenant,
        tier=_tier(j),
        preemptible=_preemptible(j),
        allocations=allocations,
        # A gang stopping to restart larger is due back when its grace period ends.
        expected_end=j.stops_at if j.stops_at is not None else j.start + j.limit,
        last_checkpoint=j.start,
        started_at=j.start,
        stopping=j.stops_at is not None,
    )


def _queued(j) -> QueuedJob:
    return QueuedJob(
        id=j.trace.id,
        tenant=j.tenant,
        family=j.family,
        tier=_tier(j),
        submit_time=j.trace.submit,
        workers=j.whole,
        min_workers=j.least if j.least < j.whole else None,
        cpu_milli=JOB_CPU_PER_GPU * j.per,
        memory_mb=JOB_MEMORY_PER_GPU * j.per,
        gpus=j.per,
        preemptible=_preemptible(j),
        max_runtime=j.limit,
    )


def _preemptible(j) -> bool:
    # The replay's rule: inference and evaluation may be preempted, training may not.
    return j.family != TRAINING


def _tier(j) -> int:
    # Latency first: evaluations, then batch inference, then training (as the priority policy).
    return FAMILY_TIER[j.family]

"""Dynamic replay of a job trace: arrivals, runs and departures on a virtual clock.

A cycle runs whenever a job arrives or ends. Policies:

- ``fifo``: submit order; the first job that does not fit blocks the queue.
- ``priority``: family tiers (evaluation, then batch inference, then training), submit order
  inside a tier; jobs that do not fit are skipped.
- ``fairshare``: the tenant using the fewest GPUs first, submit order inside a tenant; skips.
- ``mlsched``: the production ``jobs.placement.place(snapshot)`` (tiers, fair share, size and
  aging, head-of-line reservation with backfill, preemption, fragmentation-aware fit).
- ``sjf-oracle``: shortest job first by the real GPU-time (GPUs x duration), skipping what does
  not fit. No scheduler knows real durations: it is a reference for how much any ordering
  of the same jobs could cut the mean wait, not a policy to run.

Jobs never reveal their real duration to a policy: each carries a runtime limit of twice it
(a user's estimate). A preempted job is requeued and resumes its remaining work.

With ``elastic`` below 1, a training gang of several workers may start with that share of
them (rounded up; ``mlsched`` only, the others place whole gangs): a gang started with fewer
workers runs slower in proportion (its work is the trace's duration times its whole gang) and
its runtime limit covers its smallest size.

With ``grow`` as well (``mlsched`` only), a gang that started smaller restarts larger when
``place()`` says so (``Decision.grown``, ``jobs/placement/growth.py``), as the live scheduler
restarts it: its work so far is kept (it checkpoints in its grace period), its run ends
``Policy.eviction_grace_s`` later (the restart's cost: its GPUs come back then), and it is
requeued with its claim on the room (``QueuedJob.preempting``) to start again through
``place()`` with the most workers that fit, its remaining work running at that size's speed.
A gang whose work ends within the grace period ends as it would. Besides arrivals and ends, a
cycle runs when a gang that started smaller has run ``Policy.grow_after_s``, as the live
scheduler's periodic cycle would see it then.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from jobs.placement.fragmentation import FragmentationTable, TaskShape, typical_workload
from jobs.placement.model import EVALUATION, TRAINING
from jobs.simulator.traces import (
    JOB_CPU_PER_GPU,
    NODE_CPU_PER_GPU,
    ClusterSpec,
    TraceJob,
    family_of,
    tenant_of,
    worker_shape,
)

RUNTIME_LIMIT_FACTOR = 2.0
PROGRESS_EVERY_S = 10.0
FAMILY_TIER = {EVALUATION: 2, "batch_inference": 1, TRAINING: 0}


@dataclass
class SimNode:
    id: str
    cluster: str
    gpu_type: str
    free: list[int]  # free milli per GPU index


@dataclass
class SimJob:
    trace: TraceJob
    family: str
    tenant: str
    workers: int  # while it runs, the workers it started with; else its whole gang
    per: int  # whole GPUs per worker
    remaining: float  # in seconds of its whole gang
    first_start: float | None = None
    start: float = 0.0  # of the current run (read only while it runs)
    end: float | None = None
    slots: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    version: int = 0
    preempted: int = 0
    whole: int = 0  # its whole gang (set from workers)
    least: int = 0  # the fewest workers it may start with (set from workers: all)
    stops_at: float | None = None  # stopping to restart larger: when its GPUs come back
    restarts_with: int = 0  # stopping to restart larger: the workers it restarts with
    preempting: bool = False  # requeued to restart larger: its claim on the room until it starts
    grows: int = 0

    def __post_init__(self) -> None:
        self.whole = self.whole or self.workers
        self.least = self.least or self.workers

    @property
    def gpus(self) -> int:
        return self.workers * self.per

    @property
    def limit(self) -> float:
        """Its runtime limit, as long as its smallest gang may need."""
        slowest = self.trace.duration * self.whole / self.least
        return max(60.0, RUNTIME_LIMIT_FACTOR * slowest)

    def seconds(self, work: float) -> float:
        """How long its current gang takes for ``work`` seconds of its whole gang."""
        return work * self.whole / self.workers


@dataclass
class Result:
    """Per-job outcomes and the allocation timeline of one replay."""

    jobs: list[SimJob]
    timeline: list[tuple[float, int]]  # (time, GPUs allocated from then on)
    total_gpus: int
    preemptions: int
    never_fit: int
    frag_samples: list[tuple[float, float]]  # (time, % of free GPUs unusable by the job mix)
    grows: int = 0  # elastic gangs stopped to restart larger


class Replay:
    """The cluster, the queue and the event heap of one replay."""

    def __init__(
        self,
        clusters: Sequence[ClusterSpec],
        jobs: Sequence[TraceJob],
        policy,
        elastic: float = 1.0,
    ):
        self.nodes = {
            f"{c.name}-n{i:03d}": SimNode(
                f"{c.name}-n{i:03d}", c.name, c.gpu_type, [1000] * c.gpus_per_node
            )
            for c in clusters
            for i in range(c.nodes)
        }
        self.clusters = list(clusters)
        widest = max(c.gpus_per_node for c in clusters)
        largest = max(c.nodes * c.gpus_per_node for c in clusters)
        self.jobs = [self._job(t, widest, elastic) for t in jobs]
        self.never_fit = [j for j in self.jobs if j.gpus > largest]
        self.pending = [j for j in self.jobs if j.gpus <= largest]
        self.policy = policy
        self.queue: list[SimJob] = []
        self.running: dict[str, SimJob] = {}
        self.ends: list[tuple[float, int, str]] = []
        self.allocated = 0
        self.timeline: list[tuple[float, int]] = []
        self.frag: list[tuple[float, float]] = []
        self.preemptions = 0
        self.grows = 0
        # When a gang that started smaller may first grow (a cycle runs then).
        self.wakes: list[float] = []
        shapes = [TaskShape(JOB_CPU_PER_GPU * j.per, 1000 * j.per) for j in self.pending]
        # Every shape counts: the rare large gangs are the ones fragmentation hurts.
        self.table = FragmentationTable(typical_workload(shapes, coverage=1.0))

    @staticmethod
    def _job(t: TraceJob, widest: int, elastic: float) -> SimJob:
        workers, per = worker_shape(t, widest)
        family = family_of(t)
        least = math.ceil(elastic * workers) if family == TRAINING else workers
        return SimJob(t, family, tenant_of(t), workers, per, t.duration, least=max(1, least))

    def run(self, progress: Callable[[int, int], None] | None = None) -> Result:
        """Replay every job to completion; ``progress(started, total)`` is called as jobs
        start, at most once every few seconds of wall time."""
        arrivals = list(reversed(self.pending))
        said = time.monotonic()
        while arrivals or self.ends:
            if progress is not None and time.monotonic() - said >= PROGRESS_EVERY_S:
                said = time.monotonic()
                progress(
                    sum(1 for j in self.pending if j.first_start is not None), len(self.pending)
                )
            now = min(
                arrivals[-1].trace.submit if arrivals else float("inf"),
                self.ends[0][0] if self.ends else float("inf"),
                self.wakes[0] if self.wakes else float("inf"),
            )
            self._finish_until(now)
            while self.wakes and self.wakes[0] <= now:
                heapq.heappop(self.wakes)
            while arrivals and arrivals[-1].trace.submit <= now:
                self.queue.append(arrivals.pop())
            if self.queue or self._may_grow():
                self.policy.cycle(self, now)
            self.timeline.append((now, self.allocated))
            self.frag.append((now, self.fragmentation_pct()))
        total = sum(len(n.free) for n in self.nodes.values())
        return Result(
            self.jobs,
            self.timeline,
            total,
            self.preemptions,
            len(self.never_fit),
            self.frag,
            self.grows,
        )

    def fragmentation_pct(self) -> float:
        """Share (%) of the free GPUs that the trace's typical job mix could not use now."""
        free = frag = 0.0
        for n in self.nodes.values():
            idle = sum(n.free)
            if idle:
                used = sum(1 for g in n.free if g < 1000)
                cpu = NODE_CPU_PER_GPU * len(n.free) - JOB_CPU_PER_GPU * used
                frag += self.table.node(cpu, n.free, n.gpu_type)
                free += idle
        return 100 * frag / free if free else 0.0

    def _may_grow(self) -> bool:
        """Whether a gang that started smaller runs, and the policy grows gangs."""
        if self.policy.grow_after_s is None:
            return False
        return any(j.workers < j.whole and j.stops_at is None for j in self.running.values())

    def _finish_until(self, now: float) -> None:
        while self.ends and self.ends[0][0] <= now:
            _, version, job_id = heapq.heappop(self.ends)
            job = self.running.get(job_id)
            if job is None or job.version != version:
                continue
            if job.stops_at is not None:  # stopped to restart larger: back to the queue
                self._release(job)
                job.stops_at, job.preempting = None, True
                self.queue.append(job)
            else:
                job.end = job.start + job.seconds(job.remaining)
                self._release(job)

    def start(self, job: SimJob, slots: list[tuple[str, tuple[int, ...]]], now: float) -> None:
        """Run the job on the given (node, GPU indices) slots from ``now``, one a worker."""
        job.workers = len(slots)
        for node_id, gpus in slots:
            for g in gpus:
                self.nodes[node_id].free[g] -= 1000
        job.slots, job.start = slots, now
        job.first_start = now if job.first_start is None else job.first_start
        job.version += 1
        job.preempting = False
        self.allocated += job.gpus
        self.running[job.trace.id] = job
        grow_after = self.policy.grow_after_s
        if grow_after is not None and job.workers < job.whole:
            heapq.heappush(self.wakes, now + grow_after)
        # By identity: ``remove`` would compare the job with every one queued before it.
        del self.queue[next(i for i, queued in enumerate(self.queue) if queued is job)]
        heapq.heappush(self.ends, (now + job.seconds(job.remaining), job.version, job.trace.id))

    def preempt(self, job_id: str, now: float) -> None:
        """Stop a running job and requeue it with its remaining work (it checkpoints)."""
        job = self.running[job_id]
        job.remaining -= (now - job.start) * job.workers / job.whole
        job.preempted += 1
        job.version += 1
        self.preemptions += 1
        self._release(job)
        self.queue.append(job)

    def grow(self, job_id: str, now: float, grace: float, workers: int) -> bool:
        """Stop a running elastic gang to restart it with ``workers``: it keeps its work so
        far (it checkpoints in its grace period), its GPUs come back at ``now + grace`` and it
        is requeued then. False, and nothing changes, if its work ends by then anyway."""
        job = self.running[job_id]
        if job.start + job.seconds(job.remaining) <= now + grace:
            return False
        job.remaining -= (now - job.start) * job.workers / job.whole
        job.stops_at, job.restarts_with = now + grace, workers
        job.version += 1
        job.grows += 1
        self.grows += 1
        heapq.heappush(self.ends, (job.stops_at, job.version, job_id))
        return True

    def _release(self, job: SimJob) -> None:
        for node_id, gpus in job.slots:
            for g in gpus:
                self.nodes[node_id].free[g] += 1000
        self.allocated -= job.gpus
        job.slots, job.workers = [], job.whole
        del self.running[job.trace.id]


def first_fit(replay: Replay, job: SimJob) -> list[tuple[str, tuple[int, ...]]] | None:
    """Slots for the job inside one cluster: tightest node for one worker, fullest-free first
    for a gang (fewest nodes). None if no cluster can hold it now."""
    for cluster in replay.clusters:
        nodes = [n for n in replay.nodes.values() if n.cluster == cluster.name]
        free = {n.id: [i for i, g in enumerate(n.free) if g == 1000] for n in nodes}
        if job.workers == 1:
            fitting = [n for n in nodes if len(free[n.id]) >= job.per]
            if fitting:
                node = min(fitting, key=lambda n: len(free[n.id]))
                return [(node.id, tuple(free[node.id][: job.per]))]
            continue
        slots: list[tuple[str, tuple[int, ...]]] = []
        for node in sorted(nodes, key=lambda n: -len(free[n.id])):
            idle = free[node.id]
            while len(idle) >= job.per and len(slots) < job.workers:
                slots.append((node.id, tuple(idle[: job.per])))
                idle = idle[job.per :]
        if len(slots) == job.workers:
            return slots
    return None


class SimplePolicy:
    """An ordering plus first-fit; ``blocking`` stops at the first job that does not fit."""

    grow_after_s: float | None = None  # whole gangs only: nothing grows

    def __init__(self, key, blocking: bool):
        self.key, self.blocking = key, blocking

    def cycle(self, replay: Replay, now: float) -> None:
        for job in sorted(replay.queue, key=lambda j: self.key(replay, j)):
            slots = first_fit(replay, job)
            if slots:
                replay.start(job, slots, now)
            elif self.blocking:
                return


def _tenant_gpus(replay: Replay, tenant: str) -> int:
    return sum(j.gpus for j in replay.running.values() if j.tenant == tenant)


def _submit_key(_replay: Replay, job: SimJob) -> tuple:
    return (job.trace.submit, job.trace.id)


def _priority_key(_replay: Replay, job: SimJob) -> tuple:
    return (-FAMILY_TIER[job.family], job.trace.submit, job.trace.id)


def _fairshare_key(replay: Replay, job: SimJob) -> tuple:
    return (_tenant_gpus(replay, job.tenant), job.trace.submit, job.trace.id)


def _oracle_key(_replay: Replay, job: SimJob) -> tuple:
    return (job.trace.duration * job.gpus, job.trace.submit, job.trace.id)


def make_policy(
    name: str, half_life_h: float = 24.0, fair_share_preemption: bool = False, grow: bool = False
):
    """The replay policy for a name (see the module docstring); for ``mlsched``,
    ``half_life_h``, the hours in which a tenant's recent use halves (0: not counted),
    ``fair_share_preemption``, the live MLSCHED_FAIR_SHARE_PREEMPTION, and ``grow``: elastic
    gangs that started smaller restart larger after the live default of
    MLSCHED_ELASTIC_GROW_AFTER_S (``Policy.grow_after_s``)."""
    if name == "fifo":
        return SimplePolicy(_submit_key, blocking=True)
    if name == "priority":
        return SimplePolicy(_priority_key, blocking=False)
    if name == "fairshare":
        return SimplePolicy(_fairshare_key, blocking=False)
    if name == "sjf-oracle":
        return SimplePolicy(_oracle_key, blocking=False)
    if name == "mlsched":
        from jobs.placement import Policy
        from jobs.simulator.replay_engine import EnginePolicy

        policy = Policy(fair_share_preemption=fair_share_preemption)
        if not grow:
            policy = replace(policy, grow_after_s=None)
        return EnginePolicy(policy, half_life_s=half_life_h * 3600.0)
    raise ValueError(f"unknown replay policy {name!r}")


REPLAY_POLICIES = ("fifo", "priority", "fairshare", "mlsched", "sjf-oracle")

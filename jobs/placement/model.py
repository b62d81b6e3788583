"""The snapshot: everything one placement cycle may look at, as frozen dataclasses.

Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU (1000 = one whole GPU), times in
float seconds since the epoch. Quota flavors are ``"cpu"``, ``"memory"`` and ``"gpu:<type>"``;
GPU quota is counted in milli-GPU as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

TRAINING = "training"
BATCH_INFERENCE = "batch_inference"
EVALUATION = "evaluation"
FAMILIES = (TRAINING, BATCH_INFERENCE, EVALUATION)

WHOLE_GPU = 1000


def gpu_flavor(gpu_type: str) -> str:
    """The quota flavor name for a GPU type."""
    return f"gpu:{gpu_type}"


@dataclass(frozen=True)
class Node:
    """A node's free capacity right now (capacity minus live allocations).

    ``gpu_free_milli`` has one entry per GPU, by GPU index: the largest free milli range on it,
    the most one share can get there (shares hold ranges; 1000 means entirely free).
    ``gpu_free_ranges``, for a shareable node, lists each GPU's free (start, milli) ranges, by
    GPU index: then the core keeps every range exactly (``ranges.py``), so that what ending
    work frees joins only the ranges it touches. Without them (or if some running share on the
    node gives no start) it knows only the largest range per GPU and counts a share freed as
    added to it. ``topology`` lists labels (for example ``"nvlink=d3"``, ``"rack=r12"``), most
    specific first; a gang prefers nodes that share one. CPU-only nodes have ``gpu_type == ""``.
    ``closes_at`` and ``opens_at`` bound the node's next maintenance window (None: none planned;
    ``opens_at`` None: it does not end): work may start there only if it is sure to end
    (start + runtime limit) by ``closes_at``, or from ``opens_at`` on. A node in its window
    (``closes_at`` <= now) takes nothing until it opens. ``reserved_for``: the tenant the
    window is booked for ("": maintenance, for nobody); that tenant's work ignores it, and
    keeps off ``after`` instead: the first window after that booking of another kind, as
    (start, end or None, the tenant it is booked for or ""), which applies to everyone's work
    that would run into it. ``features``: what it offers that a job may require of its nodes
    (Slurm's node Features: ``ib``, ``nvme``).
    """

    id: str
    cluster: str
    gpu_type: str = ""
    gpu_free_milli: tuple[int, ...] = ()
    cpu_free_milli: int = 0
    memory_free_mb: int = 0
    gpu_shareable: bool = False
    topology: tuple[str, ...] = ()
    schedulable: bool = True
    healthy: bool = True
    name: str = ""
    gpu_free_ranges: tuple[tuple[tuple[int, int], ...], ...] = ()
    closes_at: float | None = None
    opens_at: float | None = None
    reserved_for: str = ""
    after: tuple[float, float | None, str] | None = None
    features: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Allocation:
    """What a running job holds on one node: ``gpus`` is ((gpu index, milli), ...);
    ``gpu_starts`` the start of each of those milli ranges, in the same order (needed for
    shares on nodes that give ``gpu_free_ranges``; a whole GPU starts at 0)."""

    node_id: str
    gpus: tuple[tuple[int, int], ...] = ()
    cpu_milli: int = 0
    memory_mb: int = 0
    gpu_starts: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunningJob:
    """A job holding resources. ``expected_end`` is start + runtime limit (None: unknown).

    A ``stopping`` job has been asked to stop (preempted or canceled) and is in its grace
    period: its resources come back by ``expected_end``, and it is nobody's victim again.
    """

    id: str
    tenant: str
    tier: int = 0
    preemptible: bool = False
    borrowed: bool = False
    allocations: tuple[Allocation, ...] = ()
    expected_end: float | None = None
    last_checkpoint: float | None = None
    started_at: float = 0.0
    stopping: bool = False
    # The submitting user ("": unknown): evicting the job gives its GPUs back to that user's
    # share inside the tenant: ``user_gpus``, as ``Tenant.user_use`` counted them (None: one
    # worker per allocation, as the core's own placements are).
    owner: str = ""
    user_gpus: float | None = None
    # The batch the job is a shard of (its first shard's id; None: no batch): a shard running,
    # or in its grace period, counts against its batch's limit (``batch_limit.py``).
    batch: str | None = None
    # Preemptible work in its class's preemption exempt time: not ``preemptible`` until then,
    # so only a reclaim evicts it now; a reservation of a job that may evict it by tier counts
    # on its room from then, plus the eviction grace (None: not exempt).
    exempt_until: float | None = None
    # Each worker has its node to itself (``QueuedJob.exclusive``): nothing else goes there
    # while it runs, though its allocation holds what it asked for alone.
    exclusive: bool = False

    @property
    def gpu_milli(self) -> int:
        """Total GPU milli held on all nodes."""
        return sum(m for a in self.allocations for _, m in a.gpus)


# A cluster id that never exists, naming why: the clusters the job selects have agents of a
# release that would start it without what it needs (its secrets, its registry credential).
NO_ABLE_AGENT = "no-able-agent"
# Another, naming why: every cluster its selector matches is interruptible (spot), and the job
# is not preemptible.
ONLY_INTERRUPTIBLE = "only-interruptible"


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting to be placed; every worker (gang member or shard) has the same shape.

    ``gpus`` is whole GPUs per worker; when it is 0, ``gpu_milli`` (< 1000) asks for a share of
    one GPU. ``gpu_types`` lists acceptable GPU types, most preferred first (empty: any).
    ``clusters`` is the cluster selector (empty: any; ``NO_ABLE_AGENT``: the selector matches
    clusters, but none whose agent can run it). ``max_runtime`` in seconds (None: unlimited)
    decides backfill.
    """

    id: str
    tenant: str
    family: str = TRAINING
    tier: int = 0
    priority: int = 0
    submit_time: float = 0.0
    workers: int = 1
    cpu_milli: int = 0
    memory_mb: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    gpu_types: tuple[str, ...] = ()
    preemptible: bool = False
    max_runtime: float | None = None
    clusters: tuple[str, ...] = ()
    # Whether the job's priority class may evict lower tiers. Reclaiming the tenant's own
    # guarantee from borrowers is allowed either way.
    may_preempt: bool = True
    # Whether it may evict by fair share (None: as Policy.fair_share_preemption), as its
    # priority class says.
    fair_share_preemption: bool | None = None
    # The job has evicted work for itself and not started since: the room its victims leave
    # is its claim (it is decided before the queue; see QueueOrder).
    preempting: bool = False
    # The submitting user ("": unknown). Inside a tenant, a user's jobs lose priority for the
    # GPUs the user holds (``Tenant.user_use``), so one user's long queue does not take all of
    # the team's share.
    owner: str = ""
    # The batch the job is a shard of (its first shard's id; None: no batch), and how many of
    # that batch's shards may run at once (None: no limit; Slurm's --array=...%N). A shard
    # that would take its batch past it waits (``batch_limit.py``).
    batch: str | None = None
    max_running_shards: int | None = None
    # Nodes where an earlier attempt of the job failed for the infrastructure (a node-level
    # fault: a GPU error, a pod evicted, a worker that never started): it keeps off them
    # unless no other node could ever hold it (``off_limits.Avoiding``).
    avoid_nodes: tuple[str, ...] = ()
    # Nodes the job never runs on (its ``exclude_nodes``, Slurm's --exclude, by the names the
    # snapshot found): unlike ``avoid_nodes``, never given up, whatever else is free.
    exclude_nodes: tuple[str, ...] = ()
    # What every node it runs on must offer (Slurm's --constraint=ib&nvme): a node without one
    # of them is off limits to it (``Node.features``).
    features: frozenset[str] = frozenset()
    # An elastic training gang's fewest workers (None: all of them): when its whole gang does
    # not fit it starts with the most that fit now, at least this many (``Cycle._decide``).
    min_workers: int | None = None
    # A training gang's topology domain: the key of a node topology label (``"rack"``,
    # ``"nvlink"``) whose one value all its nodes share, as Kueue's required topology and
    # Slurm's --switches keep a gang under one switch ("": any nodes of a group; see the fit).
    topology: str = ""
    # Its priority class's limits on GPUs held at once (GPU milli; None: none), on one user's
    # work of the class across tenants and on all the class's work (Slurm's QOS
    # MaxTRESPerUser and GrpTRES): past either it waits (``gpu_limits.py``).
    class_user_gpu_limit: int | None = None
    class_gpu_limit: int | None = None
    # Each worker takes a node to itself (Slurm's --exclusive): one with exactly ``gpus`` GPUs
    # (none for CPU-only work), on which nothing else runs; nothing else goes there while it
    # runs. Its quota counts what it asks for; the rest of the node stays idle.
    exclusive: bool = False

    @property
    def worker_gpu_milli(self) -> int:
        """GPU milli one worker needs (whole GPUs count 1000 each)."""
        return self.gpus * WHOLE_GPU if self.gpus else self.gpu_milli

    @property
    def fewest(self) -> int:
        """The fewest workers it may start with: its whole gang unless it is elastic."""
        if self.family == TRAINING and self.min_workers:
            return min(self.min_workers, self.workers)
        return self.workers

    def sized(self, workers: int) -> QueuedJob:
        """The job as a gang of ``workers`` (itself at its own size)."""
        return self if workers == self.workers else replace(self, workers=workers)


@dataclass(frozen=True)
class Quota:
    """A tenant's quota for one flavor. ``borrow_limit`` None means no limit on borrowing;
    ``lend_limit``, how much of the guarantee the rest of the cohort may borrow while the
    tenant leaves it idle (Kueue's lendingLimit), None for all of it."""

    flavor: str
    guaranteed: int
    borrow_limit: int | None = 0
    lend_limit: int | None = None


@dataclass(frozen=True)
class Tenant:
    """A tenant: fair-share weight, quotas, and usage by flavor (running work only).

    Flavors without a Quota are not limited. Tenants of one ``cohort`` lend each other their
    idle guarantee. ``user_use`` maps each user (a job's ``owner``) to the GPUs the user's
    running workers in this tenant hold: GPU milli / 1000 per worker, or
    ``ordering.CPU_WORKER_GPUS`` for a CPU-only worker (the measure a job's size counts in).
    ``user_gpu_limit``: the GPU milli one user may hold in the tenant at once (None: no limit;
    ``gpu_limits.py``). ``recent_use``: what the tenant's running work held in the recent past,
    by resource (``"gpu"`` in milli-GPU, ``"cpu"`` in millicores, ``"memory"`` in MiB), an
    average in which each moment weighs half as much every half-life (``ordering.recent_use``);
    fair share counts it beside what the tenant holds now (``Policy.recent_use_weight``).
    ``gpu_budget``: the milli-GPU-seconds its jobs may use in a period (None: no budget;
    ``budget.py``), of which ``gpu_budget_spent`` are used so far in this one, which ends at
    ``gpu_budget_renews``.
    """

    id: str
    weight: float = 1.0
    quotas: tuple[Quota, ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    cohort: str = ""
    user_use: Mapping[str, float] = field(default_factory=dict)
    user_gpu_limit: int | None = None
    recent_use: Mapping[str, float] = field(default_factory=dict)
    gpu_budget: float | None = None
    gpu_budget_spent: float = 0.0
    gpu_budget_renews: float | None = None


@dataclass(frozen=True)
class ShapeCount:
    """A task shape seen recently and how often; feeds the typical workload mix."""

    cpu_milli: int
    gpu_milli: int
    count: int
    gpu_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """Weights and knobs of the placement policy.

    ``scorers`` are (name, weight) pairs from ``jobs.placement.scoring.SCORERS``.
    ``resource_weights`` scale each resource's share in the dominant-resource fair share.
    """

    # Fragmentation growth first (FGD's 100 levels, 0.01 apart) and best fit only inside a
    # level: its weight keeps it below one level. The fragmentation scorer's cost is the trace
    # simulator's "mlsched" (``fit_policies.MlschedCost``), which left fewer GPUs idle than FGD
    # on every workload of the FGD paper's trace; only the tie-break inside a level differs (the
    # simulator takes the first node in its order, the scheduler the best fit).
    scorers: tuple[tuple[str, float], ...] = (("fragmentation", 1.0), ("best_fit", 0.005))
    # The fragmentation scorer also charges this share of how much worse the next typical
    # task would fare on the node (a one-step lookahead; 0 with the three below gives FGD)...
    lookahead_weight: float = 0.25
    # ...this share of the growth of GPU milli the node's free CPU can no longer serve...
    stranding_weight: float = 0.1
    # ...GPU milli taken x this x the model's pressure (demand only some models may serve,
    # over their share of the GPUs), so unrestricted work leaves scarce models free...
    gpu_model_weight: float = 1.0
    # ...and, for a GPU share, this share of the growth of free milli on its GPU that the
    # popular share sizes cannot fill.
    pairing_weight: float = 1.5
    resource_weights: Mapping[str, float] = field(
        default_factory=lambda: {"gpu": 1.0, "cpu": 0.25, "memory": 0.25}
    )
    # Priority points gained per hour of waiting, inside a tenant's queue.
    aging_priority_per_hour: float = 1.0
    # Priority points lost per doubling of a job's size (workers x GPUs x runtime limit, in
    # GPU-hours): short, small jobs go first, which is what cuts the mean wait. Aging bounds
    # the cost to large jobs: a job is passed only by smaller jobs submitted less than
    # 16 h x log2(size ratio) after it (at 1 point per hour of aging). A runtime limit is a
    # promise the agent enforces, so claiming a short one gains nothing. A job without a
    # limit counts as the largest size.
    size_priority_per_doubling: float = 16.0
    # Priority points a user's jobs lose, inside their tenant, per doubling of 1 + the GPUs the
    # user holds there (running, plus what the cycle gives): fair share between a team's
    # users, as Slurm's fair-share tree goes account -> user. The size term's weight: holding
    # twice the GPUs costs a user's next job what asking for twice the GPU-hours costs it.
    # Equal for all of one user's jobs, it leaves a one-user tenant's order as it is.
    user_share_priority_per_doubling: float = 16.0
    # Fair-share points forgiven per hour the tenant's head job has waited.
    aging_share_per_hour: float = 0.05
    # How much of a tenant's recent use (``Tenant.recent_use``) its fair share counts beside
    # what it holds now, as Slurm's decayed usage does: a team that held the GPUs all of
    # yesterday comes after one that did not, even once both hold none. 0: what it holds now
    # alone.
    recent_use_weight: float = 1.0
    # A job queued this long also comes ahead, with the highest tier, for free capacity only
    # (no preemption or reservation by it): it bounds the wait behind busier tiers. None keeps
    # tiers strict.
    tier_wait_limit_hours: float | None = 24.0
    preemption: bool = True
    # A GPU job may also evict preemptible work of its tier or lower of tenants holding more
    # GPUs for their weight than its own will with it, as far as they keep at least as many
    # (preemption.over_fair_share): fair share then holds on a full platform, not only in the
    # queue's order.
    fair_share_preemption: bool = False
    # Preemption searches are costly; bound how many jobs may try per cycle.
    max_preemption_attempts: int = 32
    max_victims_per_job: int = 64
    # Jobs of one tenant that may preempt per cycle (a rate limit on evictions).
    max_preemptions_per_tenant: int = 8
    backfill: bool = True
    # A cycle stops once this many jobs, in queue order, have had to wait; the rest wait as
    # ``beyond_queue_depth`` with no estimate (as Slurm's bf_max_job_test bounds its backfill
    # pass). It bounds a cycle on a very long queue, at a price: a job past it is not placed
    # even where it would fit, for as long as that many jobs ahead of it wait. Placements do
    # not count, nor jobs their user's or their batch's limit holds (decided at no cost). None
    # (the default) decides every job.
    queue_depth: int | None = None
    # Evicted work is expected gone this long after it is asked to stop (its grace period,
    # and as long again for its agent to report it; the live loader sets it from
    # MLSCHED_STOP_GRACE_S). What a cycle's victims hold beyond their preemptor's slots is
    # nobody's until then, and a reservation counts it as freed then.
    eviction_grace_s: float = 60.0
    # A running elastic gang below its whole gang restarts larger (``growth.py``: asked to
    # stop with its grace period for a checkpoint, then started again with the room that is
    # free and its own) once it has run this long, when no queued job waits for room where it
    # runs and it should end sooner for it. None: gangs keep the size they started with.
    grow_after_s: float | None = 600.0
    # A blocked job whose nodes never free up gets no reservation; the next blocked job may
    # try, a bounded number of times, since each try walks every expected end.
    max_reservation_attempts: int = 4
    # How many distinct candidate nodes a task's scorers compare.
    candidates_per_task: int = 8
    # After the first fitting node in a bucket, how many more nodes to look at.
    scan_depth: int = 4
    gang_candidate_nodes: int = 64
    workload_coverage: float = 0.95
    workload_max_classes: int = 16
    # Batch-inference shards: weight of preferring nodes not yet used by the same job. Kept
    # below the other scorers' differences so that shards fill gaps first and spread only
    # among equal choices; raise it to trade packing for resilience.
    spread_weight: float = 0.0001
    # Per-cluster penalty subtracted from a node's score (same scale as the scorer weights):
    # CLUSTER_COST_STEP outweighs everything else, 0.01 is about one fragmentation level. A
    # gang on several nodes takes the cheapest cluster among plans of its fewest nodes.
    cluster_costs: Mapping[str, float] = field(default_factory=dict)


# A cluster cost of this much outweighs any difference in how well nodes fit: the scorers'
# scores lie within 0-1, a GPU share's a little below 0 at worst.
CLUSTER_COST_STEP = 10.0


@dataclass(frozen=True)
class Elastic:
    """A running elastic training gang that started with fewer than its whole gang: ``job``
    is it as queued, at its whole size (its id the running job's), ``workers`` the size it
    runs with."""

    job: QueuedJob
    workers: int


@dataclass(frozen=True)
class Snapshot:
    """The whole input of ``place()``: no other input is read."""

    nodes: tuple[Node, ...] = ()
    running: tuple[RunningJob, ...] = ()
    queued: tuple[QueuedJob, ...] = ()
    tenants: tuple[Tenant, ...] = ()
    now: float = 0.0
    seed: int = 0
    policy: Policy = field(default_factory=Policy)
    recent_shapes: tuple[ShapeCount, ...] = ()
    # Running elastic gangs below their whole gang, that might restart larger (``growth.py``).
    elastic: tuple[Elastic, ...] = ()
    # Elastic gangs asked to stop to restart larger and still in their grace period, each with
    # the size it restarts with (``Elastic.workers`` here): the room is held for them
    # (``growth.hold``).
    regrowing: tuple[Elastic, ...] = ()


def allocation(node_id: str, takes: tuple[tuple[int, ...], ...], cpu: int, mem: int) -> Allocation:
    """An Allocation from GPU takes: (gpu index, milli), or (gpu index, milli, start) where the
    core keeps the node's ranges."""
    if not takes or len(takes[0]) == 2:
        return Allocation(node_id, takes, cpu, mem)  # type: ignore[arg-type]  # pairs here
    gpus = tuple((t[0], t[1]) for t in takes)
    return Allocation(node_id, gpus, cpu, mem, tuple(t[2] for t in takes))


def as_running(job: QueuedJob, slots: Iterable[tuple]) -> RunningJob:
    """A job placed on ``slots`` ((node, GPU takes, CPU, memory), ...) as running work."""
    allocations = tuple(allocation(n.id, takes, cpu, mem) for n, takes, cpu, mem in slots)
    return RunningJob(
        job.id,
        job.tenant,
        job.tier,
        job.preemptible,
        False,
        allocations,
        owner=job.owner,
        batch=job.batch,
        exclusive=job.exclusive,
    )

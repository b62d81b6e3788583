"""Outcomes and their explanations: reason codes, sentences for people, request checks."""

from __future__ import annotations

from collections.abc import Mapping

from jobs.placement.capacity import Capacity, Group, NodeState
from jobs.placement.decision import (
    PENDING,
    REASONS,
    RESERVED,
    Outcome,
    WorkerPlacement,
)
from jobs.placement.fit import Need, Slot
from jobs.placement.model import (
    FAMILIES,
    NO_ABLE_AGENT,
    ONLY_INTERRUPTIBLE,
    TRAINING,
    WHOLE_GPU,
    QueuedJob,
)
from jobs.placement.words import counted


def invalid(job: QueuedJob) -> str:
    """A reason code if the request itself is unacceptable, else ""."""
    if job.family not in FAMILIES or job.workers < 1 or job.gpus < 0:
        return "invalid_request"
    if job.min_workers is not None and not 1 <= job.min_workers <= job.workers:
        return "invalid_request"
    if not job.gpus and not 0 <= job.gpu_milli < WHOLE_GPU:
        return "invalid_request"
    if job.exclusive and job.gpu_milli and not job.gpus:
        return "invalid_request"  # a node to itself, and a share of one GPU of it
    if job.family == TRAINING and not job.gpus and job.gpu_milli:
        return "gpu_sharing_not_allowed"
    return ""


def missing(job: QueuedJob, capacity: Capacity) -> str:
    """Why no healthy node group matches the job at all."""
    if job.clusters == (NO_ABLE_AGENT,):
        return "agent_release"
    if job.clusters == (ONLY_INTERRUPTIBLE,):
        return "only_interruptible_clusters"
    if job.clusters and not set(job.clusters) & set(capacity.clusters):
        return "no_matching_cluster"
    present = [
        (t, shareable)
        for t, cluster, shareable in capacity.inventory
        if not job.clusters or cluster in job.clusters
    ]
    if job.worker_gpu_milli:
        present = [(t, s) for t, s in present if t and (not job.gpu_types or t in job.gpu_types)]
        if not present:
            return "no_such_gpu_type"
        if not job.gpus and not any(s for _, s in present):
            return "gpu_sharing_not_allowed"
    return "no_healthy_nodes" if present else "no_such_gpu_type"


def too_large(job: QueuedJob, groups: list[Group]) -> bool:
    """Whether the job can never fit, even on idle nodes: one worker exceeds every candidate
    node's capacity, or a gang every group's (``fit.find_gang`` keeps a gang in one group: one
    GPU type, cluster and sharing kind). A job that requires features counts only the nodes
    that offer them all; an exclusive one, the nodes it could take whole."""
    if job.features or job.exclusive:
        return not holds_without(job, groups, frozenset())
    if not any(g.could_hold(job) for g in groups):
        return True
    return is_gang(job) and not any(_holds_gang(job, g) for g in groups)


def is_gang(job: QueuedJob) -> bool:
    """Whether the job's workers must start together on the nodes of one group."""
    return job.family == TRAINING and job.workers > 1


def domains_too_small(job: QueuedJob, groups: list[Group]) -> bool:
    """Whether no domain of the gang's topology key (the nodes of one group sharing one value
    of it; a node without it is a domain alone) could hold every worker, even idle: the gang
    can never start so."""
    if not is_gang(job):
        return False
    prefix = job.topology + "="
    for group in groups:
        held: dict[str, int] = {}
        for bucket in group.by_full:
            for node in bucket:
                if not job.features <= node.features:
                    continue
                label = next((t for t in node.topology if t.startswith(prefix)), node.id)
                held[label] = held.get(label, 0) + _idle_holds(node, job)
        if any(count >= job.workers for count in held.values()):
            return False
    return True


def _holds_gang(job: QueuedJob, group: Group) -> bool:
    """Whether the group's nodes, all idle, could hold every worker of the gang."""
    nodes = sum(len(bucket) for bucket in group.by_full)
    # A cheap bound first: as many nodes, each as large as the group's largest.
    largest = _per_node(
        group.max_gpus, group.cap_cpu, group.cap_mem, job.gpus, job.cpu_milli, job.memory_mb
    )
    return nodes * largest >= job.workers and _holds(job, [group])


def holds_without(job: QueuedJob, groups: list[Group], avoid: frozenset[str]) -> bool:
    """Whether the groups' nodes other than ``avoid`` (and those without a feature it
    requires), all idle, could hold every worker of the job (a gang's in one group; an
    exclusive job's one a node)."""
    if is_gang(job):
        return any(_holds(job, [g], avoid) for g in groups)
    return _holds(job, groups, avoid)


def _holds(job: QueuedJob, groups: list[Group], avoid: frozenset[str] = frozenset()) -> bool:
    left = job.workers
    for group in groups:
        for bucket in group.by_full:
            for node in bucket:
                if node.id not in avoid and job.features <= node.features:
                    left -= _idle_holds(node, job)
                    if left <= 0:
                        return True
    return False


def _idle_holds(node: NodeState, job: QueuedJob) -> int:
    """How many workers of the job the node holds idle: an exclusive job's one, on a node of
    exactly its GPUs."""
    held = _per_node(
        len(node.gpus), node.cap_cpu, node.cap_mem, job.gpus, job.cpu_milli, job.memory_mb
    )
    if job.exclusive:
        return min(held, 1) if len(node.gpus) == job.gpus else 0
    return held


def _per_node(have_gpus: int, have_cpu: int, have_memory: int, gpus: int, cpu: int, memory: int):
    """How many workers of (gpus, cpu, memory) a node of this capacity holds."""
    fits = have_gpus // gpus if gpus else 1 << 30
    if cpu:
        fits = min(fits, have_cpu // cpu)
    if memory:
        fits = min(fits, have_memory // memory)
    return fits


def shortage(job: QueuedJob, need: Need, initial: Mapping[tuple, tuple]) -> str:
    """The capacity reason of a job that does not fit anywhere right now."""
    now = _short(
        job, need, [(g.full_total, g.milli_total, g.cpu_total, g.mem_total) for g in need.groups]
    )
    if not now:
        return "fragmented"
    if not _short(job, need, [initial[g.key] for g in need.groups]):
        return "behind_higher_priority"
    return now


def _short(job: QueuedJob, need: Need, totals: list[tuple]) -> str:
    n = job.workers
    if need.gpus and sum(t[0] for t in totals) < need.gpus * n:
        return "insufficient_gpus"
    if need.milli and sum(t[1] for t in totals) < need.milli * n:
        return "insufficient_gpus"
    if sum(t[2] for t in totals) < need.cpu * n:
        return "insufficient_cpu"
    if sum(t[3] for t in totals) < need.mem * n:
        return "insufficient_memory"
    return ""


def pending(job: QueuedJob, code: str, estimate: float | None = None) -> Outcome:
    """A pending outcome with its reason code and sentence."""
    return Outcome(job.id, PENDING, code, _sentence(job, code), estimated_start=estimate)


QUOTA_EXCEEDED = "quota_exceeded"
USER_GPU_LIMIT = "user_gpu_limit"
CLASS_GPU_LIMIT = "class_gpu_limit"
BATCH_SHARD_LIMIT = "batch_shard_limit"
GPU_BUDGET = "gpu_budget"
# Limits no capacity lifts, checked before anything else: a job they hold is decided at no
# cost, so it does not count toward the queue depth (Policy.queue_depth).
LIMITS = frozenset({USER_GPU_LIMIT, CLASS_GPU_LIMIT, BATCH_SHARD_LIMIT, GPU_BUDGET})


def over_quota(job: QueuedJob, why: str) -> Outcome:
    """A job its tenant's quota does not cover: ``why`` says what it lacks (``QuotaGate.
    shortfall``); the plain sentence where it lacks nothing now (a hold keeps it off)."""
    if not why:
        return pending(job, QUOTA_EXCEEDED)
    said = f"{REASONS[QUOTA_EXCEEDED].removesuffix('.')}: {why}."
    return Outcome(job.id, PENDING, QUOTA_EXCEEDED, f"{_request(job)}: {said}")


def over_gpu_limit(job: QueuedJob, code: str, why: str, estimate: float | None) -> Outcome:
    """A job that would take a scope past a limit on the GPUs it holds (``gpu_limits``:
    ``code`` says whose, ``why`` how far); ``estimate``, when enough of that scope's work
    should have ended (``GpuLimits.estimate``)."""
    return Outcome(job.id, PENDING, code, f"{_request(job)}: {why}", estimated_start=estimate)


def over_budget(job: QueuedJob, why: str, estimate: float | None) -> Outcome:
    """A job whose ask does not fit in its tenant's GPU-hour budget (``budget``): ``why`` says
    how far; ``estimate``, when the budget renews (None if no whole budget would hold it)."""
    return Outcome(job.id, PENDING, GPU_BUDGET, f"{_request(job)}: {why}", estimated_start=estimate)


def over_batch_limit(job: QueuedJob, why: str, estimate: float | None) -> Outcome:
    """A shard that would take its batch past its limit on shards running at once
    (``batch_limit``): ``why`` says how many run; ``estimate``, when enough of them will have
    ended (BatchLimits.estimate)."""
    return Outcome(
        job.id, PENDING, BATCH_SHARD_LIMIT, f"{_request(job)}: {why}", estimated_start=estimate
    )


def beyond_depth(job: QueuedJob) -> Outcome:
    """A job the cycle did not reach (``Policy.queue_depth``): said briefly, since a long queue
    has many."""
    return Outcome(job.id, PENDING, "beyond_queue_depth", _BEYOND)


_BEYOND = REASONS["beyond_queue_depth"]


def _sentence(job: QueuedJob, code: str) -> str:
    text = _GANG_TOO_LARGE if code == "worker_too_large" and is_gang(job) else REASONS[code]
    return f"{_request(job)}: {text}"


# True of every gang ``too_large`` refuses: a worker larger than any node fits no group either.
_GANG_TOO_LARGE = (
    "No cluster's healthy nodes of one GPU type can hold the whole gang, even idle; "
    "the job can never fit."
)


def _request(job: QueuedJob) -> str:
    if job.gpus:
        gpu = counted(job.gpus, "GPU")
    elif job.gpu_milli:
        gpu = f"{job.gpu_milli / WHOLE_GPU:.2f} of a GPU"
    else:
        gpu = "no GPU"
    types = "/".join(job.gpu_types) if job.gpu_types and job.worker_gpu_milli else "any type"
    # An elastic gang waits for its fewest workers (Cycle._decide).
    workers = counted(job.workers, "worker")
    if job.min_workers == job.workers:
        workers = f"at least {workers}"
    return f"{workers} x {gpu} ({types}), {job.cpu_milli}m CPU, {job.memory_mb} MiB"


def placed(
    job: QueuedJob,
    slots: list[Slot],
    status: str,
    borrowed: bool,
    victims: tuple[str, ...],
    causes: tuple[str, ...] = (),
) -> Outcome:
    """A placed (or preempting) outcome with one WorkerPlacement per worker, in rank order, and
    why each victim goes (``causes``, in the victims' order)."""
    workers = tuple(
        WorkerPlacement(
            rank=rank,
            cluster=node.cluster,
            node_id=node.id,
            gpu_type=node.gpu_type if takes else "",
            gpu_indices=tuple(t[0] for t in takes),
            gpu_milli=takes[0][1] if takes else 0,
            # An exclusive worker's slot holds its whole node; it is given what it asks for.
            cpu_milli=job.cpu_milli if job.exclusive else cpu,
            memory_mb=job.memory_mb if job.exclusive else mem,
            gpu_starts=tuple(t[2] for t in takes) if takes and len(takes[0]) > 2 else (),
        )
        for rank, (node, takes, cpu, mem) in enumerate(slots)
    )
    nodes = len({w.node_id for w in workers})
    clusters = ", ".join(sorted({w.cluster for w in workers}))
    message = f"{counted(len(workers), 'worker')} on {counted(nodes, 'node')} in {clusters}"
    if victims:
        have = "has" if len(victims) == 1 else "have"
        message += f" once {counted(len(victims), 'preempted job')} {have} stopped"
    if borrowed:
        message += ", on capacity borrowed from other tenants"
    return Outcome(
        job.id, status, "", message + ".", workers, borrowed, victims, victim_causes=causes
    )


def reserved(
    job: QueuedJob, node_ids: tuple[str, ...], start: float, reason: str = "head_of_line"
) -> Outcome:
    """The head-of-line job: nodes held for it from ``start`` (``reason``: what it waits for,
    if not only for running work to end)."""
    message = f"{_request(job)}: {REASONS[reason]} ({counted(len(node_ids), 'node')} held)"
    return Outcome(
        job.id, RESERVED, reason, message, reserved_nodes=node_ids, estimated_start=start
    )

"""Commit one batch of placements: the only code that turns decisions into reservations.

Everything the pure core decided is re-checked against the rows as they are under lock, because
the snapshot may be stale: another scheduler may have committed, an agent may have released, an
admin may have cordoned a node, planned a maintenance window or booking over it, or lowered a
quota. Capacity and windows here; quotas, users' GPU limits and batches' shard limits in
jobs.tenant_limits.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Max, Q

from clusters.maintenance import Span, next_window
from clusters.models import GPU_MILLI, Allocation, Node
from jobs import actions, bulk, dependencies, tenant_limits
from jobs.models import Attempt, Job, SchedulerShard
from jobs.placement import Outcome, WorkerPlacement
from jobs.states import State


@dataclass
class NodeState:
    """A locked node's free CPU and memory and the milli ranges taken on each GPU."""

    cpu_free: int
    memory_free: int
    gpu_count: int
    available: bool
    cluster_id: int
    name: str = ""
    window: Span | None = None  # its next maintenance window or booking not yet ended
    gpu_type: str = ""
    cluster_labels: dict[str, str] = field(default_factory=dict)
    interruptible: bool = False  # its cluster's nodes may be taken back at any time
    features: frozenset[str] = frozenset()  # what it offers that a job may require
    # Whether live work holds any of it, and whether that is an exclusive job's (which takes
    # the node to itself: nothing else goes there while it runs).
    occupied: bool = False
    sole: bool = False
    gpu_taken: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))

    def gap(self, gpu: int, milli: int, chosen: int | None = None) -> int | None:
        """Where `milli` goes on `gpu`, or None: at `chosen` (the core's choice) if that range
        is free, else at the start of the tightest free range that holds it (lowest first among
        equals). Tightest, so that a share keeps the GPU's larger holes whole for larger ones.
        The core's choice comes first: it keeps free what a preemptor takes once its victims
        have gone, which these rows cannot show."""
        if not 0 <= gpu < self.gpu_count:
            return None
        free = list(free_ranges(self.gpu_taken[gpu]))
        if chosen is not None and any(s <= chosen <= s + size - milli for s, size in free):
            return chosen
        fits = [(size, start) for start, size in free if size >= milli]
        return min(fits)[1] if fits else None


def free_ranges(taken: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The free (start, size) milli ranges of one GPU, lowest first, around the (start, milli)
    ranges `taken`."""
    start = 0
    for taken_start, taken_milli in sorted(taken):
        if taken_start > start:
            yield start, taken_start - start
        start = max(start, taken_start + taken_milli)
    if start < GPU_MILLI:
        yield start, GPU_MILLI - start


def largest_gap(taken: Iterable[tuple[int, int]]) -> int:
    """The most milli one share can get on a GPU: its largest free range, not its free total
    (a share is one contiguous range, so two 250 holes do not take a 500)."""
    return max((size for _, size in free_ranges(taken)), default=0)


def commit_batch(
    outcomes: list[Outcome],
    moment: datetime,
    shard: str = "default",
    budget: tenant_limits.BudgetCheck | None = None,
    decided: Mapping[int, float | None] | None = None,
) -> set[int]:
    """Commit what still fits of `outcomes` in one transaction; return the placed job ids.
    `budget`: the cycle's GPU-hour budgets, re-checked as its batches commit; `decided`: the
    runtime limits the jobs were placed with (the snapshot's), a job whose limit was raised
    since is left for the next cycle (actions.set_runtime_limit)."""
    node_ids = sorted({int(w.node_id) for o in outcomes for w in o.workers})
    with transaction.atomic():
        nodes = lock_nodes(node_ids, moment)
        job_ids = [int(o.job_id) for o in outcomes]
        tenants = tenant_limits.lock(job_ids)
        claimed = claim(job_ids, moment)
        limits = tenant_limits.read(tenants, claimed, budget)
        rows: dict[int, list[dict]] = {}
        for outcome in outcomes:
            job_id = int(outcome.job_id)
            if job_id not in claimed or not limits.allows(outcome):
                continue
            if raised(limits.jobs[job_id], decided, job_id):
                continue
            if not allowed_on(outcome, limits.jobs[job_id], nodes):
                continue
            if windowed(outcome, limits.jobs[job_id], nodes, moment):
                continue
            if (fitted := fit(outcome, nodes, limits.jobs[job_id].exclusive)) is not None:
                limits.charge(outcome)
                rows[job_id] = fitted
        if rows:
            write([o for o in outcomes if int(o.job_id) in rows], rows, moment, nodes)
            count_placements(shard, len(rows), moment)
    return set(rows)


def lock_nodes(node_ids: list[int], moment: datetime) -> dict[int, NodeState]:
    """Lock the nodes in id order (so concurrent schedulers cannot deadlock) and read them,
    with their next windows. A window's save locks the nodes it covers first (the admin's
    ``NodeWindowForm``): one saved since the snapshot is read here, or waits for this commit
    and counts the work it placed among the jobs it will stop. The nodes alone are locked,
    not their clusters, whose labels are read with them: a cluster's row is the agents' and
    the tenants' commits' to lock, in their own order."""
    locked = Node.objects.select_for_update(of=("self",)).filter(id__in=node_ids).order_by("id")
    nodes = {
        n["id"]: NodeState(
            cpu_free=n["cpu_milli"],
            memory_free=n["memory_mb"],
            gpu_count=n["gpu_count"],
            available=n["schedulable"] and n["healthy"],
            cluster_id=n["cluster_id"],
            name=n["name"],
            gpu_type=n["gpu_type"],
            cluster_labels=n["cluster__labels"],
            interruptible=n["cluster__interruptible"],
            features=frozenset(n["features"]),
        )
        for n in locked.values(
            "id",
            "cpu_milli",
            "memory_mb",
            "gpu_count",
            "schedulable",
            "healthy",
            "cluster_id",
            "name",
            "gpu_type",
            "cluster__labels",
            "cluster__interruptible",
            "features",
        )
    }
    windows = next_window(moment, ((i, node.cluster_id) for i, node in nodes.items()))
    for node_id, window in windows.items():
        nodes[node_id].window = window
    live = Allocation.objects.active().filter(node_id__in=node_ids)
    for a in live.values("node_id", "gpu_index", "gpu_milli_start", "gpu_milli", "cpu_milli",
                         "memory_mb", "attempt__job__exclusive"):  # fmt: skip
        node = nodes[a["node_id"]]
        node.occupied = True
        node.sole = node.sole or a["attempt__job__exclusive"]
        node.cpu_free -= a["cpu_milli"]
        node.memory_free -= a["memory_mb"]
        if a["gpu_index"] is not None:
            node.gpu_taken[a["gpu_index"]].append((a["gpu_milli_start"], a["gpu_milli"]))
    return nodes


def claim(job_ids: list[int], moment: datetime) -> set[int]:
    """Lock the jobs that are still queued, not held and past their retry backoff; skip those
    another transaction holds. A job another scheduler placed since the snapshot may have
    failed and been requeued for a retry meanwhile: its backoff holds, and so does its
    deadline (one it could no longer end by). A job held since the snapshot stays where it is.

    Of those, keep the ones that do not wait (dependencies.waits), asked once the locks are
    held: a job's dependencies change under its row's lock, so a change that committed while
    the locking statement ran is seen by the next statement (the locking one re-checks a row
    changed meanwhile against the row's own columns, not against other tables as they are
    now). A job given a dependency, or made a singleton, since the snapshot stays queued."""
    still_queued = (
        Job.objects.select_for_update(skip_locked=True)
        .filter(id__in=job_ids, state=State.QUEUED, held="")
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=moment))
        .exclude(Job.late_for_deadline(moment))
        .order_by("id")
    )
    locked = list(still_queued.values_list("id", flat=True))
    ready = Job.objects.filter(id__in=locked).exclude(dependencies.waits())
    return set(ready.values_list("id", flat=True))


def raised(job: tenant_limits.Claimed, decided: Mapping[int, float | None] | None, job_id: int):
    """Whether the job's runtime limit is longer now than the one it was placed with: where
    the core fitted it before another job's reservation, or backfilled it, it could outlast
    the room it was given (a shorter one only ends sooner). Windows are checked on the row's
    limit as they are now (`windowed`)."""
    if decided is None or (limit := decided.get(job_id)) is None:
        return False
    return job.max_runtime_s > limit


def allowed_on(outcome: Outcome, job: tenant_limits.Claimed, nodes) -> bool:
    """Whether every node the job's workers go to is one its row takes now: a GPU type it lists (a
    GPU worker's), a cluster its selector matches, a node it does not exclude (and among those it
    runs on alone, if it names them) that offers every feature it requires, and for a job that is
    not preemptible, a cluster whose nodes are not taken back at any time. Where it may run changed
    since the snapshot (actions.change_constraints, the admin's cluster) is decided again next
    cycle."""
    for worker in outcome.workers:
        node = nodes.get(int(worker.node_id))
        if node is None:
            continue  # the fit finds it gone
        if job.gpu_types and worker.gpu_indices and node.gpu_type not in job.gpu_types:
            return False
        if any(node.cluster_labels.get(k) != v for k, v in job.cluster_selector.items()):
            return False
        if node.name in job.exclude_nodes or not job.features <= node.features:
            return False
        if job.only_nodes and node.name not in job.only_nodes:
            return False
        if node.interruptible and not job.preemptible:
            return False
    return True


def windowed(outcome: Outcome, job: tenant_limits.Claimed, nodes, moment: datetime) -> bool:
    """Whether a window keeps the job off one of its nodes, as the core decides it
    (``fit.Need.shut``) on the windows as they are now: a maintenance window, or a booking for
    another tenant, that starts before the job's runtime limit would end it."""
    end = moment + timedelta(seconds=job.max_runtime_s)
    for worker in outcome.workers:
        window = nodes[int(worker.node_id)].window
        if window is None:
            continue
        # The window, and after a booking the next one, which its tenant's work keeps off.
        for starts, _, booked in (window[:3], *([window.then] if window.then else [])):
            if starts < end and (booked is None or str(booked) != job.tenant):
                return True
    return False


def fit(
    outcome: Outcome, nodes: dict[int, NodeState], exclusive: bool = False
) -> list[dict] | None:
    """Reserve every worker of the outcome on the locked nodes, or nothing at all; an
    ``exclusive`` job's each on a node of its own."""
    undo: list[tuple[NodeState, WorkerPlacement, list[tuple[int, int, int]], tuple]] = []
    rows: list[dict] = []
    for worker in outcome.workers:
        node = nodes.get(int(worker.node_id))
        flags = None if node is None else (node.occupied, node.sole)
        taken = take(node, worker, exclusive) if node is not None else None
        if taken is None:
            for held_node, held_worker, held, held_flags in undo:
                give_back(held_node, held_worker, held)
                held_node.occupied, held_node.sole = held_flags
            return None
        undo.append((node, worker, taken, flags))
        rows.extend(allocation_rows(worker, taken, outcome.borrowed))
    return rows


def take(
    node: NodeState, worker: WorkerPlacement, exclusive: bool = False
) -> list[tuple[int, int, int]] | None:
    """Take the worker's CPU, memory and GPU ranges on the node; None if they do not fit, if
    an exclusive job holds the node, or if the worker is an ``exclusive`` job's and anything
    runs there, or the node has other GPUs than the worker asks."""
    if not node.available or node.sole or node.cpu_free < worker.cpu_milli:
        return None
    if exclusive and (node.occupied or len(worker.gpu_indices) != node.gpu_count):
        return None
    if node.memory_free < worker.memory_mb:
        return None
    taken = []
    chosen = worker.gpu_starts or (None,) * len(worker.gpu_indices)
    for gpu, at in zip(worker.gpu_indices, chosen, strict=True):
        start = node.gap(gpu, worker.gpu_milli, at)
        if start is None:
            for gpu_taken, start_taken, milli in taken:
                node.gpu_taken[gpu_taken].remove((start_taken, milli))
            return None
        node.gpu_taken[gpu].append((start, worker.gpu_milli))
        taken.append((gpu, start, worker.gpu_milli))
    node.cpu_free -= worker.cpu_milli
    node.memory_free -= worker.memory_mb
    node.occupied = True
    node.sole = exclusive
    return taken


def give_back(node: NodeState, worker: WorkerPlacement, taken: list[tuple[int, int, int]]):
    node.cpu_free += worker.cpu_milli
    node.memory_free += worker.memory_mb
    for gpu, start, milli in taken:
        node.gpu_taken[gpu].remove((start, milli))


def allocation_rows(worker: WorkerPlacement, taken, borrowed: bool) -> list[dict]:
    """One Allocation row per GPU range; a CPU-only worker gets one. CPU and memory ride on
    slot 0."""
    ranges = taken or [(None, 0, 0)]
    return [
        {"worker": worker.rank, "slot": slot, "node_id": int(worker.node_id), "gpu_index": gpu,
         "gpu_milli_start": start, "gpu_milli": milli,
         "cpu_milli": worker.cpu_milli if slot == 0 else 0,
         "memory_mb": worker.memory_mb if slot == 0 else 0, "borrowed": borrowed}
        for slot, (gpu, start, milli) in enumerate(ranges)
    ]  # fmt: skip


def gpu_type_of(outcome: Outcome) -> str:
    """The GPU type an attempt runs on (its first worker's: a gang is on one), "" without GPUs."""
    first = outcome.workers[0]
    return first.gpu_type if first.gpu_indices else ""


def write(
    outcomes: list[Outcome],
    rows: dict[int, list[dict]],
    moment: datetime,
    nodes: dict[int, NodeState],
) -> None:
    """Insert the attempts and allocations and move the jobs to scheduled, in bulk."""
    job_ids = [int(o.job_id) for o in outcomes]
    bulk.insert(
        Attempt,
        [
            {"job_id": job_id, "number": n, "cluster_id": int(o.workers[0].cluster),
             "scheduled_at": moment, "gpu_type": gpu_type_of(o), "workers": len(o.workers)}
            for o, job_id, n in zip(outcomes, job_ids, next_numbers(job_ids), strict=True)
        ],
    )  # fmt: skip
    # A job has one live attempt (a unique index says so): the one just inserted.
    attempts = dict(
        Attempt.objects.filter(job_id__in=job_ids, outcome="").values_list("job_id", "id")
    )
    bulk.insert(
        Allocation,
        [
            {**row, "attempt_id": attempts[job_id], "created": moment}
            for job_id, job_rows in rows.items()
            for row in job_rows
        ],
    )
    actions.transition_claimed(
        job_ids,
        State.QUEUED,
        State.SCHEDULED,
        reasons={int(o.job_id): placed_reason(o, nodes) for o in outcomes},
        attempts=attempts,
        now=moment,
    )


def count_placements(shard: str, placed: int, moment: datetime) -> None:
    """Bump the shard's heartbeat, last in the batch's transaction."""
    SchedulerShard.bump(shard, last_commit_at=moment, placements=F("placements") + placed)


def next_numbers(job_ids: Iterable[int]) -> list[int]:
    job_ids = list(job_ids)
    last = dict(
        Attempt.objects.filter(job_id__in=job_ids)
        .values("job_id")
        .annotate(n=Max("number"))
        .values_list("job_id", "n")
    )
    return [last.get(job_id, 0) + 1 for job_id in job_ids]


# Nodes an event names before "and N more": a gang's node list fits the event's 300 characters.
NAMED_NODES = 6


def placed_reason(outcome: Outcome, nodes: dict[int, NodeState]) -> str:
    """The job's event as it is placed: its nodes by name, as users and the nodes list know
    them (the first NAMED_NODES of a larger gang's, and how many more)."""
    names = sorted({nodes[int(w.node_id)].name for w in outcome.workers})
    more = len(names) - NAMED_NODES
    said = ", ".join(names[:NAMED_NODES]) + (f" and {more} more" if more > 0 else "")
    borrowed = ", on borrowed quota" if outcome.borrowed else ""
    return f"placed on {said}{borrowed}"

"""Load: read the database into the pure placement core's Snapshot.

Three queries: nodes, live allocations (which give free capacity, running jobs and tenant usage
at once), queued jobs that may run; plus tenants with their quotas, the maintenance windows
not yet ended, and the jobs that wait for a dependency or as singletons, or out a retry's
backoff, which the core never sees. Units
become the core's: milli-CPU, MiB, milli-GPU, float seconds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q

from clusters.backends.base import spec_fields_lacking
from clusters.maintenance import Span, next_window
from clusters.models import GPU_MILLI, Allocation, Cluster, Node
from jobs import budgets, dependencies, quarantine, reasons, recent_use
from jobs import placement as p
from jobs.commit import free_ranges, largest_gap
from jobs.models import Attempt, Job
from jobs.states import State
from jobs.tenant_limits import core_tenant, in_milli
from quotas import tenant_secrets, tenant_volumes
from quotas.models import PriorityClass, RecentUse, Tenant, TenantSecret, image_registry

ALLOCATION_FIELDS = [
    "node_id", "gpu_index", "gpu_milli_start", "gpu_milli", "cpu_milli", "memory_mb", "borrowed",
    "node__gpu_type", "attempt__job_id", "attempt__job__tenant_id", "attempt__job__preemptible",
    "attempt__job__priority_class__value", "attempt__job__max_runtime_s",
    "attempt__scheduled_at", "attempt__started_at", "attempt__last_checkpoint_at",
    "attempt__stop_requested_at", "attempt_id", "worker", "attempt__job__cpu_milli",
    "attempt__job__gpus", "attempt__job__gpu_milli", "attempt__job__gpu_types",
    "attempt__job__owner_id", "attempt__job__priority_class__preempt_exempt_s",
    "attempt__job__parent_id", "attempt__job__shards", "attempt__job__exclusive",
]  # fmt: skip

QUEUED_FIELDS = [
    "id", "tenant_id", "family", "priority_class__value", "priority", "created", "workers",
    "cpu_milli", "memory_mb", "gpus", "gpu_milli", "gpu_types", "cluster_selector",
    "preemptible", "max_runtime_s", "pending_reason", "pending_message", "estimated_start",
    "priority_class__may_preempt", "priority_class__fair_share_preemption", "preempting_until",
    "eligible_at", "started_at", "owner_id", "parent_id", "shards", "max_running_shards",
    "retries_used", "min_workers", "secrets", "image", "topology", "volumes", "exclude_nodes",
    "features", "first_type_wait_s", "exclusive", "only_nodes",
    "priority_class__max_gpus_per_user", "priority_class__max_gpus",
]  # fmt: skip
# A priority class's fair-share preemption as the core reads it (None: as the platform).
FAIR_SHARE = {PriorityClass.FairShare.PLATFORM: None, PriorityClass.FairShare.ON: True,
              PriorityClass.FairShare.OFF: False}  # fmt: skip


class Provisions(NamedTuple):
    """What the tenants have that their jobs' run specs need, which decides where a job may
    run: the registries each has a pull credential for and the secrets it gives as files, by
    tenant id, and where its data volumes are (``tenant_volumes.places``)."""

    credentials: Mapping[int, set[str]]
    files: Mapping[int, set[str]]
    volumes: tenant_volumes.Places

    @classmethod
    def read(cls) -> Provisions:
        return cls(registry_credentials(), tenant_secrets.file_secrets(), tenant_volumes.places())


NO_PROVISIONS = Provisions({}, {}, {})


@dataclass
class Loaded:
    """The snapshot plus what the commit step needs to compare against."""

    snapshot: p.Snapshot
    # Every queued job's explanation as stored: (reason code, sentence, estimated start).
    pending: dict[int, tuple[str, str, object]] = field(default_factory=dict)
    # Jobs that wait for a dependency: {id: [(dependency, kind) not met yet, by dependency]};
    # a singleton job's earlier job of its group, as (job, "singleton").
    waiting: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    # Every queued job's room claim as read (preempting_until): an eviction is written only
    # for a preemptor whose claim is still this one (actions.preempt).
    claims: dict[int, object] = field(default_factory=dict)
    # Jobs waiting out their retry backoff or their begin, which the core never sees:
    # {id: (not_before, begin)}.
    backoff: dict[int, object] = field(default_factory=dict)
    # Every running job's live attempt as read: a preemption stops that attempt only, not one
    # that replaced it since (actions.preempt).
    attempts: dict[int, int] = field(default_factory=dict)
    # Queued jobs free to run, not started, whose eligibility is not recorded yet: the cycle
    # stamps them (actions.stamp_eligible).
    unstamped: list[int] = field(default_factory=list)
    # Each tenant's recent use as read (quotas.RecentUse): the cycle brings it up to date.
    recent: dict[int, RecentUse] = field(default_factory=dict)
    # Tenants with queued jobs whose image their allowed images no longer let through, left
    # out of the snapshot (``disallowed``): the cycle holds those jobs.
    disallowed: set[int] = field(default_factory=set)
    # Queued jobs the core is not to place, left out of the snapshot (``set_aside``): {id:
    # (reason code, sentence)}, which the cycle stores as they wait; those of them that are
    # eligible and not started, which it makes not eligible (actions.unstamp).
    aside: dict[int, tuple[str, str]] = field(default_factory=dict)
    stamped_aside: list[int] = field(default_factory=list)


def seconds(dt) -> float | None:
    return dt.timestamp() if dt is not None else None


def load(
    now: float, seed: int = 0, policy: p.Policy | None = None, extra: Sequence[dict] = ()
) -> Loaded:
    """Read everything one placement cycle looks at, as of one moment. `extra`: jobs not
    stored, as `row_of` gives them (a test-only submission's, jobs.trial), queued with the
    others; nothing else of the Loaded counts them."""
    if connection.in_atomic_block:
        return read(now, seed, policy, extra)
    # One REPEATABLE READ transaction: read in separate statements, a job whose attempt ends
    # in between would show both as running and as queued, its tenant's use counted twice.
    # SQLite's transactions (IMMEDIATE) hold every writer off until the reading is done.
    if connection.vendor != "postgresql":
        with transaction.atomic():
            return read(now, seed, policy, extra)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            # The dependency filter's index probes, one per queued job, lift the planner's cost
            # estimate past jit_above_cost: compiling the plan would cost more (0.25 s a query
            # on 100,000 queued jobs) than it saves.
            cursor.execute("SET LOCAL jit = off")
        return read(now, seed, policy, extra)


def read(
    now: float, seed: int = 0, policy: p.Policy | None = None, extra: Sequence[dict] = ()
) -> Loaded:
    rows = list(Allocation.objects.active().values(*ALLOCATION_FIELDS))
    queued = list(queued_jobs(now))
    every = list(Tenant.objects.prefetch_related("quotas").order_by("id"))
    refused = disallowed(queued, every)
    if refused:
        queued = [job for job in queued if job["id"] not in refused]
    held = HeldBack(every)
    aside = set_aside(queued, held)
    aside_rows = [job for job in queued if job["id"] in aside]
    if aside_rows:
        queued = [job for job in queued if job["id"] not in aside]
    failed = failed_nodes([job["id"] for job in queued if job["retries_used"]], now)
    waiting_pending, waiting = dependencies.waiting()
    # A job both waiting for a dependency and not to be placed yet (its begin, a backoff) is
    # explained by its dependency alone: by both, its reason would change every cycle.
    backing_off = [job for job in backoff_jobs(now) if job["id"] not in waiting]
    clusters = list(
        Cluster.objects.order_by("id").values(
            "id",
            "labels",
            "health",
            "placement_cost",
            "backend",
            "agent_spec_fields",
            "interruptible",
        )
    )
    provisions = Provisions.read()
    inventory = nodes(rows, clusters, now)
    running = running_jobs(rows, now, closing(inventory))
    recent = recent_use.stored()
    policy = policy or p.Policy(
        queue_depth=settings.MLSCHED_QUEUE_DEPTH,
        eviction_grace_s=2 * settings.MLSCHED_STOP_GRACE_S,
        cluster_costs=cluster_costs(clusters),
        fair_share_preemption=settings.MLSCHED_FAIR_SHARE_PREEMPTION,
        grow_after_s=settings.MLSCHED_ELASTIC_GROW_AFTER_S,
    )
    growing = policy.grow_after_s is not None
    named = ids_by_name(inventory)
    if gone := named_gone(queued, named):
        aside |= gone
        aside_rows += [job for job in queued if job["id"] in gone]
        queued = [job for job in queued if job["id"] not in gone]
    present = {node.gpu_type for node in inventory if node.gpu_type}
    elastic, regrowing = elastic_gangs(clusters, now, provisions, named) if growing else ((), ())
    # Nor does a running elastic gang the core may not place grow (more workers: a new
    # placement): a paused tenant's, an exclusive one of a tenant kept from taking nodes whole.
    elastic = tuple(
        gang for gang in elastic if held.why(int(gang.job.tenant), gang.job.exclusive) is None
    )
    offs: dict = {}  # the nodes each distinct pair of exclude and only lists keeps a job off
    snapshot = p.Snapshot(
        nodes=inventory,
        running=running,
        queued=tuple(
            to_queued(
                job, clusters, now, failed.get(job["id"], ()), provisions, named, present, offs
            )
            for job in [*queued, *extra]
        ),
        tenants=tenants(rows, recent, running, now, every),
        now=now,
        seed=seed,
        policy=policy,
        recent_shapes=running_shapes(rows),
        elastic=elastic,
        regrowing=regrowing,
    )
    pending = {
        job["id"]: (job["pending_reason"], job["pending_message"], job["estimated_start"])
        for job in queued + backing_off + aside_rows
    }
    claims = {job["id"]: job["preempting_until"] for job in queued}
    backoff = {job["id"]: (job["not_before"], job["begin"]) for job in backing_off}
    attempts = {row["attempt__job_id"]: row["attempt_id"] for row in rows}
    unstamped = [job["id"] for job in queued if not (job["eligible_at"] or job["started_at"])]
    return Loaded(
        snapshot, pending | waiting_pending, waiting, claims, backoff, attempts, unstamped,
        recent, set(refused.values()), aside,
        [job["id"] for job in aside_rows if job["eligible_at"] and not job["started_at"]],
    )  # fmt: skip


def disallowed(queued: list[dict], every: list[Tenant]) -> dict[int, int]:
    """The queued jobs whose image their tenant's allowed images do not let through, by id,
    with their tenant's id: patterns narrowed where nothing held its queued jobs (the shell, a
    data migration; the admin holds them as it saves). ``every``: the tenants, as the snapshot
    reads them (no query here); each image is matched once per tenant."""
    limited = {tenant.pk: tenant for tenant in every if tenant.allowed_images}
    if not limited:
        return {}
    refused: dict[tuple[int, str], bool] = {}
    out = {}
    for job in queued:
        tenant = limited.get(job["tenant_id"])
        if tenant is None:
            continue
        key = (tenant.pk, job["image"])
        if key not in refused:
            refused[key] = bool(tenant.image_refusal(job["image"]))
        if refused[key]:
            out[job["id"]] = tenant.pk
    return out


class HeldBack:
    """Whose work the core is not to place now, from the tenants as the snapshot reads them (no
    query here): a paused tenant's (``Tenant.placements_paused``), and the exclusive work of a
    tenant that may no longer take nodes whole (``Tenant.exclusive_allowed`` turned off after
    it queued: a submission is refused then)."""

    def __init__(self, every: list[Tenant]):
        self.pauses = {t.pk: t.placements_paused for t in every if t.placements_paused}
        self.shared = {t.pk for t in every if not t.exclusive_allowed}

    def why(self, tenant: int, exclusive: bool) -> tuple[str, str] | None:
        """Why a job of the tenant waits, (reason code, sentence); None: it is the core's."""
        if tenant in self.pauses:
            return reasons.PAUSED, reasons.paused_sentence(self.pauses[tenant])
        if exclusive and tenant in self.shared:
            return reasons.NOT_WHOLE, reasons.NOT_WHOLE_SENTENCE
        return None


def set_aside(queued: list[dict], held: HeldBack) -> dict[int, tuple[str, str]]:
    """The queued jobs the core is not to place, {id: (reason code, sentence)}: they wait,
    saying why."""
    if not (held.pauses or held.shared):
        return {}
    whys = ((job["id"], held.why(job["tenant_id"], job["exclusive"])) for job in queued)
    return {job_id: why for job_id, why in whys if why is not None}


def named_gone(queued: list[dict], named: Mapping[str, tuple[str, ...]]) -> dict:
    """The queued jobs whose `only_nodes` names none of the nodes the clusters have now
    (`named`: ids_by_name), {id: (reason code, sentence)}: set aside, they wait saying so
    rather than as jobs that would fit but for the nodes they exclude."""
    why = (reasons.NAMED_GONE, reasons.NAMED_GONE_SENTENCE)
    return {
        job["id"]: why
        for job in queued
        if job["only_nodes"] and not any(name in named for name in job["only_nodes"])
    }


def cluster_costs(clusters: list[dict]) -> dict[str, float]:
    """The core's per-cluster penalty for the clusters with a placement cost: a step of cost
    outweighs any difference in how well a node fits (the scorers' scores lie within 0-1)."""
    return {
        str(c["id"]): c["placement_cost"] * p.CLUSTER_COST_STEP
        for c in clusters
        if c["placement_cost"]
    }


def nodes(rows, clusters, now: float) -> tuple[p.Node, ...]:
    """Every node of every cluster with its free capacity and its next maintenance window; the
    core filters on health.

    A GPU's free milli is its largest free range, not its free total: the commit gives a share
    one contiguous range, so a 500 share sent to a GPU with two 250 holes would be skipped
    there, cycle after cycle, while another GPU sat idle. A shareable node also gives each
    GPU's free ranges, which the core keeps exactly (with the starts of the running shares).
    """
    cpu, memory = defaultdict(int), defaultdict(int)
    gpu_taken: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        cpu[row["node_id"]] += row["cpu_milli"]
        memory[row["node_id"]] += row["memory_mb"]
        if row["gpu_index"] is not None:
            taken = (row["gpu_milli_start"], row["gpu_milli"])
            gpu_taken[row["node_id"], row["gpu_index"]].append(taken)
    # Unhealthy, or never reported by an agent (unknown): nothing there would run the work.
    unhealthy = {c["id"] for c in clusters if c["health"] != Cluster.Health.HEALTHY}
    out = []
    inventory = list(Node.objects.order_by("id").values())
    specific = specificity(node["topology"] for node in inventory)
    moment = datetime.fromtimestamp(now, UTC)
    windows = next_window(moment, ((n["id"], n["cluster_id"]) for n in inventory))
    for node in inventory:
        nid = node["id"]
        window = windows.get(nid)
        taken = [gpu_taken.get((nid, i), ()) for i in range(node["gpu_count"])]
        shared = taken if node["gpu_shareable"] else []
        out.append(
            p.Node(
                id=str(nid),
                cluster=str(node["cluster_id"]),
                name=node["name"],
                gpu_type=node["gpu_type"],
                gpu_free_milli=tuple(largest_gap(gpu) for gpu in taken),
                gpu_free_ranges=tuple(tuple(free_ranges(gpu)) for gpu in shared),
                cpu_free_milli=node["cpu_milli"] - cpu[nid],
                memory_free_mb=node["memory_mb"] - memory[nid],
                gpu_shareable=node["gpu_shareable"],
                topology=tuple(
                    f"{k}={v}" for k, v in sorted(node["topology"].items(), key=specific)
                ),
                schedulable=node["schedulable"],
                healthy=node["healthy"] and node["cluster_id"] not in unhealthy,
                closes_at=window[0].timestamp() if window else None,
                opens_at=window[1].timestamp() if window else None,
                reserved_for=str(window[2]) if window and window[2] else "",
                after=after_booking(window),
                features=frozenset(node["features"]),
            )
        )
    return tuple(out)


def specificity(labels) -> Callable[[tuple[str, str]], tuple[int, str]]:
    """The order of a node's topology labels, most specific first, as the core reads them:
    the key with the most distinct values over all nodes first (more racks than zones, more
    NVLink domains than racks), then by name. Agents report them as a mapping, whose order
    the database does not keep."""
    values: dict[str, set[str]] = defaultdict(set)
    for topology in labels:
        for key, value in topology.items():
            values[key].add(value)
    return lambda item: (-len(values[item[0]]), item[0])


def after_booking(window: Span | None) -> tuple[float, float, str] | None:
    """The core's ``Node.after``: the window after a booking that its tenant's work keeps off."""
    if window is None or window.then is None:
        return None
    starts, ends, tenant = window.then
    return starts.timestamp(), ends.timestamp(), str(tenant) if tenant else ""


def closing(inventory: tuple[p.Node, ...]) -> dict[int, list[tuple[float, str]]]:
    """When each node with a window planned closes, and the tenant it is booked for ("":
    maintenance); then, after a booking, when the next window of another kind does."""
    return {
        int(n.id): [(n.closes_at, n.reserved_for), *([(n.after[0], n.after[2])] if n.after else [])]
        for n in inventory
        if n.closes_at is not None
    }


def running_jobs(
    rows, now: float, closes: dict[int, list[tuple[float, str]]]
) -> tuple[p.RunningJob, ...]:
    by_job: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        by_job[row["attempt__job_id"]].append(row)
    return tuple(to_running(job_id, rows, now, closes) for job_id, rows in sorted(by_job.items()))


def exempt_until(row: dict, started, now: float) -> float | None:
    """When the preemptible attempt's class's preemption exempt time ends, if it has not yet
    (None otherwise): the core sees it as not preemptible until then, so only its owners'
    reclaim of borrowed capacity may evict it."""
    exempt_s = row["attempt__job__priority_class__preempt_exempt_s"]
    until = started.timestamp() + (exempt_s or 0)
    return until if row["attempt__job__preemptible"] and now < until else None


def to_running(
    job_id: int, rows: list[dict], now: float, closes: dict[int, list[tuple[float, str]]]
) -> p.RunningJob:
    first = rows[0]
    per_node: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        per_node[row["node_id"]].append(row)
    started = first["attempt__started_at"] or first["attempt__scheduled_at"]
    expected_end = started.timestamp() + first["attempt__job__max_runtime_s"]
    # Expected back after the grace period, and as long again for the agent to see it go.
    grace = 2 * settings.MLSCHED_STOP_GRACE_S
    stop_asked = first["attempt__stop_requested_at"]
    if stop_asked is not None:
        expected_end = min(expected_end, stop_asked.timestamp() + grace)
    # Work on a node whose window starts first is stopped then (the janitor), unless the window
    # is booked for the job's tenant.
    tenant = str(first["attempt__job__tenant_id"])
    window = min(
        (when for n in per_node for when, booked in closes.get(n, ()) if booked != tenant),
        default=None,
    )
    if window is not None:
        expected_end = min(expected_end, max(window, now) + grace)
    exempt = exempt_until(first, started, now)
    return p.RunningJob(
        id=str(job_id),
        tenant=str(first["attempt__job__tenant_id"]),
        tier=first["attempt__job__priority_class__value"],
        preemptible=first["attempt__job__preemptible"] and exempt is None,
        borrowed=any(row["borrowed"] for row in rows),
        allocations=tuple(
            p.Allocation(
                node_id=str(node_id),
                gpus=tuple(
                    (r["gpu_index"], r["gpu_milli"])
                    for r in node_rows
                    if r["gpu_index"] is not None
                ),
                cpu_milli=sum(r["cpu_milli"] for r in node_rows),
                memory_mb=sum(r["memory_mb"] for r in node_rows),
                gpu_starts=tuple(
                    r["gpu_milli_start"] for r in node_rows if r["gpu_index"] is not None
                ),
            )
            for node_id, node_rows in sorted(per_node.items())
        ),
        expected_end=expected_end,
        last_checkpoint=seconds(first["attempt__last_checkpoint_at"]),
        started_at=started.timestamp(),
        stopping=stop_asked is not None,
        owner=str(first["attempt__job__owner_id"]),
        user_gpus=sum(map(p.worker_gpus, workers_milli(rows).values())),
        batch=Job.batch_key(
            job_id, first["attempt__job__parent_id"], first["attempt__job__shards"]
        ),
        exempt_until=exempt,
        exclusive=first["attempt__job__exclusive"],
    )


def running_shapes(rows) -> tuple[p.ShapeCount, ...]:
    """The shapes of the workers running now. With the queue they make the workload mix the
    fragmentation scorer learns: a short queue alone says little about what comes next."""
    workers = {(row["attempt_id"], row["worker"]): row for row in rows}
    counts: Counter[tuple] = Counter()
    for row in workers.values():
        gpu = row["attempt__job__gpus"] * GPU_MILLI or row["attempt__job__gpu_milli"]
        counts[row["attempt__job__cpu_milli"], gpu, tuple(row["attempt__job__gpu_types"])] += 1
    return tuple(
        p.ShapeCount(cpu, gpu, count, types) for (cpu, gpu, types), count in sorted(counts.items())
    )


def tenants(
    rows,
    recent: dict[int, RecentUse],
    running: tuple[p.RunningJob, ...] = (),
    now=None,
    every: list[Tenant] | None = None,
) -> tuple[p.Tenant, ...]:
    """Every tenant with its quotas, the use of its running work (`rows`) and its recent use
    (`recent`: jobs.recent_use.stored()); with `running`, its users' GPUs too (the quota
    status needs none: it reads no queue order); with `now`, what the budgeted ones used of
    their GPU-hour budget this month (one query more, when any has a budget). ``every``: the
    tenants with their quotas prefetched, where the caller has read them already."""
    usage: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        used = usage[row["attempt__job__tenant_id"]]
        used["cpu"] += row["cpu_milli"]
        used["memory"] += row["memory_mb"]
        if row["gpu_index"] is not None:
            used[p.gpu_flavor(row["node__gpu_type"])] += row["gpu_milli"]
    users = users_gpus(running)
    if every is None:
        every = list(Tenant.objects.prefetch_related("quotas").order_by("id"))
    moment = None if now is None else datetime.fromtimestamp(now, tz=UTC)
    spent: dict[int, float] = {}
    renewal = None
    if moment is not None:
        budgeted = [t.pk for t in every if t.gpu_hours_per_month is not None]
        spent, renewal = (
            budgets.spent_gpu_seconds(budgeted, moment),
            budgets.renews(moment).timestamp(),
        )
    return tuple(
        core_tenant(
            tenant,
            usage[tenant.pk],
            users.get(tenant.pk, {}),
            recent.get(tenant.pk),
            budget_spent=spent.get(tenant.pk, 0.0) if moment else None,
            renews=renewal,
        )  # fmt: skip
        for tenant in every
    )


def users_gpus(running: tuple[p.RunningJob, ...]) -> dict[int, dict[str, float]]:
    """Per tenant, the GPUs each user's running work holds, as the core counts them (GPU
    milli / 1000 per worker, a CPU-only worker as a fraction of a GPU): its jobs' user_gpus."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for job in running:
        users = out[int(job.tenant)]
        users[job.owner] = users.get(job.owner, 0.0) + (job.user_gpus or 0.0)
    return out


def workers_milli(rows) -> dict[tuple[int, int], int]:
    """The GPU milli each running worker (attempt, worker) holds, 0 for a CPU-only one."""
    milli: dict[tuple[int, int], int] = {}
    for row in rows:
        worker = (row["attempt_id"], row["worker"])
        milli[worker] = milli.get(worker, 0) + (
            row["gpu_milli"] if row["gpu_index"] is not None else 0
        )
    return milli


def elastic_gangs(
    clusters, now: float, provisions: Provisions, named: dict[str, tuple[str, ...]]
) -> tuple[tuple, tuple]:
    """The running elastic training gangs whose attempt started with fewer than their whole
    gang and is not asked to stop (the core may restart one larger: jobs.placement.growth),
    and those whose attempt is asked to stop to restart larger (the core holds their room):
    each as queued at its whole size, with the size it runs with, or restarts with. One
    query of the live attempts, then one of their jobs."""
    live = Attempt.objects.filter(
        outcome="", job__state=State.RUNNING, job__min_workers__isnull=False
    )
    smaller = Q(started_at__isnull=False, stop_requested_at__isnull=True,
                workers__lt=F("job__workers"))  # fmt: skip
    stopping = Q(stop_cause=Attempt.StopCause.GROW, restart_workers__isnull=False)
    rows = live.filter(smaller | stopping).values_list(
        "job_id", "workers", "stop_requested_at", "restart_workers"
    )
    sizes = {job: (asked is None, restart or workers) for job, workers, asked, restart in rows}
    if not sizes:
        return (), ()
    jobs = Job.objects.filter(pk__in=sizes).order_by("id").values(*QUEUED_FIELDS)
    gangs = [(sizes[job["id"]], to_queued(job, clusters, now, (), provisions, named))
             for job in jobs]  # fmt: skip
    return tuple(
        tuple(p.Elastic(job, workers) for (runs, workers), job in gangs if runs == running)
        for running in (True, False)
    )


def queued_jobs(now: float):
    """The queued jobs that may be placed now: not held, past their retry backoff, not
    waiting for a dependency, and no singleton job with an earlier job of its group still
    live (filtered here, in the query: the queue may hold 100,000 jobs)."""
    moment = datetime.fromtimestamp(now, tz=UTC)
    return (
        Job.objects.filter(state=State.QUEUED, held="")
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=moment))
        .exclude(Job.late_for_deadline(moment))  # nor could not end by its deadline
        .exclude(dependencies.waits())
        .order_by("id")
        .values(*QUEUED_FIELDS)
    )


def backoff_jobs(now: float):
    """The queued jobs, not held, that wait out a retry's backoff or their begin (`not_before`):
    the core never sees them, yet each says why it waits."""
    moment = datetime.fromtimestamp(now, tz=UTC)
    return (
        Job.objects.filter(state=State.QUEUED, held="", not_before__gt=moment)
        .order_by("id")
        .values("id", "not_before", "begin", "pending_reason", "pending_message", "estimated_start")
    )


def failed_nodes(job_ids: list[int], now: float) -> dict[int, tuple[str, ...]]:
    """The nodes where attempts of these jobs ended for a node's fault (``Attempt.node_fault``)
    within ``MLSCHED_QUARANTINE_WINDOW_S``, by job: the core keeps the jobs off them
    (``QueuedJob.avoid_nodes``). A fault older than that, or from before an admin put the node
    back in service, is forgotten, as quarantine forgets it (``quarantine.held_against``).
    Only jobs that used a retry can have any, so one indexed query over a few rows."""
    if not job_ids:
        return {}
    rows = (
        quarantine.held_against(datetime.fromtimestamp(now, UTC))
        .filter(attempt__job_id__in=job_ids)
        .values_list("attempt__job_id", "node_id")
        .distinct()
    )
    by_job: dict[int, list[str]] = defaultdict(list)
    for job_id, node_id in rows:
        by_job[job_id].append(str(node_id))
    return {job_id: tuple(sorted(nodes)) for job_id, nodes in by_job.items()}


def ids_by_name(inventory: Sequence[p.Node]) -> dict[str, tuple[str, ...]]:
    """Each node name's ids: a job's `exclude_nodes` names a node of every cluster that has
    one of that name."""
    named: dict[str, list[str]] = defaultdict(list)
    for node in inventory:
        named[node.name].append(node.id)
    return {name: tuple(ids) for name, ids in named.items()}


def row_of(job: Job) -> dict:
    """A job not stored (its priority class set) as queued_jobs reads a stored one, for
    to_queued."""
    return {name: reduce(getattr, name.split("__"), job) for name in QUEUED_FIELDS}


def types_taken(job: dict, now: float, present: Collection[str] = ()) -> tuple[str, ...]:
    """The GPU types the job takes now: its first alone while it waits for it
    (`first_type_wait_s`, from when it may run: a held job's wait starts at its release), then
    all it lists; all at once if no node has its first (`present`: the types some node has,
    none given: not known)."""
    types = tuple(job["gpu_types"])
    wait = job["first_type_wait_s"]
    if wait and len(types) > 1 and (not present or types[0] in present):
        since = job["eligible_at"] or job["created"]
        if since.timestamp() + wait > now:
            return types[:1]
    return types


def off_nodes(
    excluded: Sequence[str], only: Sequence[str], named: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The ids of the nodes a job keeps off (``QueuedJob.exclude_nodes``, which the core keeps
    it off always): those of the names it excludes, and, for a job that names the nodes it runs
    on alone, those of every other name. Worked out once per distinct pair of lists in a
    snapshot (`to_queued`'s `offs`), so the jobs of a sweep pinned to a few nodes of a large
    platform share one tuple, not a copy each of nearly every node's id."""
    off = set(excluded)
    if allowed := set(only):
        off.update(name for name in named if name not in allowed)
    return tuple(sorted(i for name in off for i in named.get(name, ())))


def to_queued(
    job: dict,
    clusters,
    now: float,
    avoid: tuple[str, ...] = (),
    provisions: Provisions = NO_PROVISIONS,
    named: dict[str, tuple[str, ...]] | None = None,
    present: Collection[str] = (),
    offs: dict | None = None,
) -> p.QueuedJob:
    """The job row as the core reads it; `avoid`: the ids of the nodes it failed on
    (failed_nodes); `named`: each node name's ids (ids_by_name), for `off_nodes`; `present`:
    the GPU types some node has (types_taken); `offs`: off_nodes' answers so far, shared by
    the jobs of one snapshot."""
    claim = job["preempting_until"]
    key = (tuple(job["exclude_nodes"]), tuple(job["only_nodes"]))
    offs = {} if offs is None else offs
    if key not in offs:
        offs[key] = off_nodes(*key, named or {})
    return p.QueuedJob(
        id=str(job["id"]),
        tenant=str(job["tenant_id"]),
        family=job["family"],
        tier=job["priority_class__value"],
        priority=job["priority"],
        submit_time=job["created"].timestamp(),
        workers=job["workers"],
        cpu_milli=job["cpu_milli"],
        memory_mb=job["memory_mb"],
        gpus=job["gpus"],
        gpu_milli=job["gpu_milli"],
        gpu_types=types_taken(job, now, present),
        preemptible=job["preemptible"],
        max_runtime=float(job["max_runtime_s"]),
        clusters=cluster_ids(job, clusters, provisions),
        may_preempt=job["priority_class__may_preempt"],
        fair_share_preemption=FAIR_SHARE[job["priority_class__fair_share_preemption"]],
        preempting=claim is not None and claim.timestamp() > now,
        owner=str(job["owner_id"]),
        batch=Job.batch_key(job["id"], job["parent_id"], job["shards"]),
        max_running_shards=job["max_running_shards"],
        avoid_nodes=avoid,
        exclude_nodes=offs[key],
        features=frozenset(job["features"]),
        min_workers=job["min_workers"],
        topology=job["topology"],
        class_user_gpu_limit=in_milli(job["priority_class__max_gpus_per_user"]),
        class_gpu_limit=in_milli(job["priority_class__max_gpus"]),
        exclusive=job["exclusive"],
    )


# A cluster id that never exists: a selector that matches nothing must not read as "any".
NO_CLUSTER = "none"


def cluster_ids(job: dict, clusters, provisions: Provisions = NO_PROVISIONS) -> tuple[str, ...]:
    """The clusters a job may run on (empty: any cluster): those whose labels match its
    selector, that have the data volumes it mounts, whose agents keep what the job needs of
    its run spec (its secrets, those given as files, its volumes, its team's registry
    credential: ``base.spec_fields_lacking``), and, for a job that is not preemptible, those
    whose nodes are not taken back at any time (``Cluster.interruptible``: ``p.ONLY_INTERRUPTIBLE``
    when those are all the selector matches); ``p.NO_ABLE_AGENT`` when the selector matches
    clusters with its volumes but none of their agents does."""
    selector, tenant, mounts = job["cluster_selector"], job["tenant_id"], job["volumes"]
    registries = provisions.credentials.get(tenant)
    pulls = bool(registries) and image_registry(job["image"]) in registries
    as_files = not provisions.files.get(tenant, set()).isdisjoint(job["secrets"])
    steady = not job["preemptible"] and any(c["interruptible"] for c in clusters)
    if not (selector or job["secrets"] or pulls or mounts or steady):
        return ()
    matching = [c for c in clusters if all(c["labels"].get(k) == v for k, v in selector.items())]
    if steady:
        selected, matching = matching, [c for c in matching if not c["interruptible"]]
        if selected and not matching:
            return (p.ONLY_INTERRUPTIBLE,)
    if mounts:
        places = provisions.volumes
        matching = [c for c in matching if tenant_volumes.on_cluster(places, tenant, mounts, c)]
    if job["secrets"] or pulls or mounts:
        able = [
            c for c in matching
            if not spec_fields_lacking(c["agent_spec_fields"], bool(job["secrets"]), pulls,
                                       c["backend"], as_files, bool(mounts))
        ]  # fmt: skip
        if matching and not able:
            return (p.NO_ABLE_AGENT,)
    else:
        able = matching
    if len(able) == len(clusters):
        return ()
    return tuple(str(c["id"]) for c in able) or (NO_CLUSTER,)


def registry_credentials() -> dict[int, set[str]]:
    """The registries each tenant has a pull credential for, by tenant id."""
    found: dict[int, set[str]] = defaultdict(set)
    rows = TenantSecret.objects.exclude(registry="").values_list("tenant_id", "registry")
    for tenant, registry in rows:
        found[tenant].add(registry)
    return found

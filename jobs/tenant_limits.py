"""Tenants as the core sees them, and the commit's re-check of the limits the core decides on
its snapshot besides capacity: quotas (guarantee, borrow limit, the cohort's pool), the GPUs one
user may hold in a tenant, the GPUs a priority class's work (and one user's of it) may hold, a
batch's shards running at once, an elastic gang's fewest workers, and a tenant's GPU-hour
budget (``BudgetCheck``).

The core decides them on the snapshot, but another scheduler (``MLSCHED_SINGLE_FLIGHT=0``) may
have placed work of the same tenants since, and an admin may have lowered a quota (a team its
batch's limit, or raised its gang's fewest workers). So a batch of placements' commit locks
every tenant of the cohorts it places work for (in id order, after the nodes and before the
jobs), then the priority classes that limit GPUs of the jobs it places (in id order), reads what
their live allocations hold, and asks the core's own ledgers (``quota.Ledger``,
``gpu_limits.GpuLimits``) and the limits as the job rows give them now,
placement by placement, charging what it commits. A placement past a limit is skipped: the job
stays queued, and the next cycle, reading the truth, explains it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from django.db.models import Q, Sum

from clusters.models import GPU_MILLI, Allocation
from jobs import placement as p
from jobs.models import Job
from jobs.placement.budget import Budgets
from jobs.placement.gpu_limits import GpuLimits
from jobs.placement.quota import Ledger
from quotas.models import PriorityClass, RecentUse, Tenant


def gpu_scale(flavor: str) -> int:
    """Quotas count whole GPUs; the core counts milli-GPU."""
    return GPU_MILLI if flavor.startswith("gpu:") else 1


def core_tenant(
    tenant: Tenant,
    usage: dict[str, int],
    user_use: dict[str, float] | None = None,
    recent: RecentUse | None = None,
    budget_spent: float | None = None,
    renews: float | None = None,
) -> p.Tenant:
    """The core's view of a tenant (its quotas prefetched): its quotas in the core's units,
    what its running work uses (`usage`, by flavor), its users' GPUs and its recent use; with
    `budget_spent` (GPU-seconds this month, jobs.budgets), its GPU-hour budget, which
    `renews` then."""
    limit = tenant.max_gpus_per_user
    hours = tenant.gpu_hours_per_month if budget_spent is not None else None
    quotas = tuple(
        p.Quota(
            flavor=q.flavor,
            guaranteed=q.guaranteed * gpu_scale(q.flavor),
            borrow_limit=q.borrow_limit * gpu_scale(q.flavor),
            lend_limit=None if q.lend_limit is None else q.lend_limit * gpu_scale(q.flavor),
        )
        for q in tenant.quotas.all()
    )
    return p.Tenant(
        id=str(tenant.pk),
        weight=tenant.fair_share_weight,
        quotas=quotas,
        usage=dict(usage),
        cohort=tenant.cohort,
        user_use=user_use or {},
        user_gpu_limit=None if limit is None else limit * GPU_MILLI,
        recent_use=recent.use if recent is not None else {},
        gpu_budget=None if hours is None else hours * 3600.0 * GPU_MILLI,
        gpu_budget_spent=(budget_spent or 0.0) * GPU_MILLI,
        gpu_budget_renews=renews,
    )


@dataclass(frozen=True)
class Claimed:
    """A job the commit places, as the limits see it (names as the core gives them)."""

    tenant: str
    owner: str
    batch: str | None
    max_running_shards: int | None
    max_runtime_s: int  # (the commit's window check, and commit.raised)
    # The fewest workers it may start with as its row says now: its min_workers, else its
    # whole gang. A queued gang made rigid since the snapshot (actions.set_min_workers) does
    # not start with the fewer workers the core gave it.
    fewest: int
    # What each worker asks for as its row says now, as a placed worker holds it: CPU, memory,
    # GPUs and milli of each. A request changed since the snapshot (actions.change_request)
    # does not start on what the core gave the old one.
    request: tuple[int, int, int, int]
    # Where it may run as its row says now (commit.allowed_on): changed since the snapshot
    # (actions.change_constraints), it does not start where the core put it.
    gpu_types: tuple[str, ...] = ()
    cluster_selector: dict[str, str] = field(default_factory=dict)
    exclude_nodes: tuple[str, ...] = ()
    features: frozenset[str] = frozenset()
    # Its priority class (its value, the core's tier) and the class's GPU limits as its row
    # says now, in GPU milli (gpu_limits.GpuLimits).
    tier: int = 0
    class_user_gpu_limit: int | None = None
    class_gpu_limit: int | None = None
    # Whether it may be stopped for others: only such a job runs on an interruptible cluster.
    preemptible: bool = True
    # Whether each worker takes a node to itself (commit.take): one nothing else runs on.
    exclusive: bool = False
    # The nodes it runs on alone, by name (empty: any), where it may run as exclude_nodes.
    only_nodes: tuple[str, ...] = ()


def held(worker: p.WorkerPlacement) -> tuple[int, int, int, int]:
    """What a placed worker holds, as ``Claimed.request`` says a request."""
    return (worker.cpu_milli, worker.memory_mb, len(worker.gpu_indices), worker.gpu_milli)


class BudgetCheck:
    """The tenants' GPU-hour budgets (``budget.Budgets``) as a cycle's snapshot counted them,
    for that cycle's commits, which bring them up to date with what other schedulers and the
    agents did since: work the live allocations of a budgeted tenant hold that the snapshot
    did not see running and the cycle did not place is charged at its whole ask, as the core
    charges a placement; work the snapshot saw running that holds no allocation any more has
    ended, and what it might still have used from the snapshot's moment to its expected end is
    given back. With no other scheduler and nothing ended it is the core's own count, never
    stricter: a commit stricter than its cycle would skip the same placement at every cycle."""

    def __init__(self, snapshot: p.Snapshot):
        self.budgets = Budgets(snapshot.tenants, snapshot.running, snapshot.now)
        self.known = {int(job.id) for job in snapshot.running}
        self.running = {int(job.id): job for job in snapshot.running}

    def add_others(self, locked: list[Tenant]) -> None:
        """Count the work placed for the locked budgeted tenants since the snapshot, and give
        back what the work of theirs that ended since would have used."""
        budgeted = [t.pk for t in locked if str(t.pk) in self.budgets.left]
        if not budgeted:
            return
        live = (
            Allocation.objects.active()
            .filter(attempt__job__tenant__in=budgeted, gpu_index__isnull=False)
            .values_list(
                "attempt__job_id", "attempt__job__tenant_id", "attempt__job__max_runtime_s"
            )
            .annotate(gpu=Sum("gpu_milli"))
            .order_by()
        )
        holding = set()
        for job_id, tenant, runtime_s, gpu in live:
            holding.add(job_id)
            if job_id not in self.known:
                self.known.add(job_id)
                self.budgets.place(str(tenant), gpu, runtime_s)
        ended = [
            job
            for job_id, job in self.running.items()
            if job_id not in holding and int(job.tenant) in budgeted
        ]
        for job in ended:
            del self.running[int(job.id)]
            if job.expected_end is not None:
                runs = self.budgets.in_period(job.tenant, job.expected_end - self.budgets.now)
                self.budgets.take(job.tenant, -job.gpu_milli * runs)

    def fits(self, job: Claimed, gpus: int) -> bool:
        return self.budgets.fits(job.tenant, gpus, job.max_runtime_s)

    def charge(self, job_id: int, job: Claimed, gpus: int) -> None:
        self.known.add(job_id)
        self.budgets.place(job.tenant, gpus, job.max_runtime_s)


class Limits:
    """The locked tenants' quotas, users' GPUs, the locked classes' GPUs (``classes``: each
    tier's by owner) and batches' running shards as their live allocations hold them now, and
    the tenants' GPU-hour budgets (``budget``), for one commit batch."""

    def __init__(
        self,
        jobs: dict[int, Claimed],
        tenants: list[p.Tenant],
        users: list[tuple[str, str, int]],
        shards: Counter[str],
        budget: BudgetCheck | None = None,
        classes: Collection[tuple[int, int, int]] = (),
        paused: Collection[str] = (),
        shared: Collection[str] = (),
    ):
        self.jobs = jobs
        self.paused = set(paused)  # tenants whose placements a platform admin paused
        self.shared = set(shared)  # tenants that may not take nodes whole
        self.ledger = Ledger(tenants)
        self.gpus = GpuLimits(tenants, ())
        for tenant, owner, gpu_milli in users:
            self.gpus.charge_user(tenant, owner, gpu_milli)
        for tier, owner_id, gpu_milli in classes:
            self.gpus.charge_class(tier, str(owner_id), gpu_milli)
        self.shards = shards  # batch -> its shards running (batches with a limit only)
        self.budget = budget

    def allows(self, outcome: p.Outcome) -> bool:
        """Whether the placement's tenant is not paused (nor, for an exclusive job, kept from
        taking nodes whole), and it keeps the tenant within its quotas and its GPU-hour budget,
        its user within the tenant's GPU limit, its class within its GPU limits and its batch
        within its shards' limit, with everything charged so far, and starts at least the fewest
        workers its job allows."""
        job = self.jobs[int(outcome.job_id)]
        used, gpus = demand(outcome)
        limit = job.max_running_shards
        return (
            job.tenant not in self.paused
            and not (job.exclusive and job.tenant in self.shared)
            and len(outcome.workers) >= job.fewest
            and all(held(worker) == job.request for worker in outcome.workers)
            and (job.batch is None or limit is None or self.shards[job.batch] < limit)
            and self.ledger.allows(job.tenant, used)
            and self.gpus.room(job, gpus)
            and (self.budget is None or self.budget.fits(job, gpus))
        )

    def charge(self, outcome: p.Outcome) -> None:
        """Count a placement the batch commits."""
        job = self.jobs[int(outcome.job_id)]
        used, gpus = demand(outcome)
        self.ledger.charge(job.tenant, used)
        self.gpus.charge(job, gpus)
        if job.batch is not None:
            self.shards[job.batch] += 1
        if self.budget is not None:
            self.budget.charge(int(outcome.job_id), job, gpus)


def lock(job_ids: Collection[int]) -> list[Tenant]:
    """Lock every tenant of the cohorts of the jobs' tenants, in id order, with their quotas,
    then the jobs' classes that limit GPUs: commits placing work for one cohort, or of one
    such class, take turns from here to their end. After the nodes
    (commit.lock_nodes) and before the job rows (commit.claim), as a change of dependencies
    locks its tenant before its job rows (dependencies.lock_change)."""
    tenants = Job.objects.filter(pk__in=job_ids).values("tenant_id")
    cohorts = Tenant.objects.filter(pk__in=tenants).values("cohort")
    locked = list(
        Tenant.objects.select_for_update(of=("self",), no_key=True)
        .filter(cohort__in=cohorts)
        .order_by("id")
        .prefetch_related("quotas")
    )
    # Then the classes limiting the GPUs their work holds: commits placing work of one take
    # turns too (a class's limit spans tenants, which lock apart).
    classes = Job.objects.filter(pk__in=job_ids).values("priority_class_id")
    list(
        PriorityClass.objects.select_for_update(no_key=True)
        .filter(GPU_LIMITED, pk__in=classes)
        .order_by("id")
        .values_list("pk", flat=True)
    )
    return locked


def read(
    locked: list[Tenant], job_ids: Collection[int], budget: BudgetCheck | None = None
) -> Limits:
    """The limits of the claimed jobs (their rows locked: their batch's limit and their fewest
    workers hold still) and what the live allocations of the locked tenants hold now; with
    ``budget``, the cycle's budgets and what other schedulers placed since its snapshot."""
    rows = Job.objects.filter(pk__in=job_ids).values_list(
        "pk", "tenant_id", "owner_id", "parent_id", "shards", "max_running_shards",
        "max_runtime_s", "min_workers", "workers", "cpu_milli", "memory_mb", "gpus", "gpu_milli",
        "gpu_types", "cluster_selector", "exclude_nodes", "features", "priority_class__value",
        "priority_class__max_gpus_per_user", "priority_class__max_gpus", "preemptible",
        "exclusive", "only_nodes",
    )  # fmt: skip
    jobs = {
        pk: Claimed(
            str(tenant),
            str(owner),
            Job.batch_key(pk, parent, shards),
            limit,
            runtime,
            least or workers,
            (cpu, memory, gpus or int(share > 0), GPU_MILLI if gpus else share),
            tuple(types),
            selector,
            tuple(excluded),
            frozenset(features),
            tier,
            in_milli(per_user),
            in_milli(whole),
            preemptible,
            exclusive,
            tuple(only),
        )
        for (pk, tenant, owner, parent, shards, limit, runtime, least, workers, cpu, memory,
             gpus, share, types, selector, excluded, features, tier, per_user, whole,
             preemptible, exclusive, only) in rows
    }  # fmt: skip
    # Only what a limit reads: the use of the tenants of cohorts someone has a quota in, and of
    # those limiting their users' GPUs. Without either, nothing is read.
    guarded = {tenant.cohort for tenant in locked if tenant.quotas.all()}
    counted = [t.pk for t in locked if t.cohort in guarded or t.max_gpus_per_user is not None]
    held = (
        Allocation.objects.active()
        .filter(attempt__job__tenant__in=counted)
        .values("attempt__job__tenant_id", "attempt__job__owner_id", "node__gpu_type")
        .annotate(
            cpu=Sum("cpu_milli"),
            memory=Sum("memory_mb"),
            gpu=Sum("gpu_milli", filter=Q(gpu_index__isnull=False), default=0),
        )
        if counted
        else []
    )
    usage: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    users = []
    for row in held:
        tenant = row["attempt__job__tenant_id"]
        usage[tenant]["cpu"] += row["cpu"]
        usage[tenant]["memory"] += row["memory"]
        if row["gpu"]:
            usage[tenant][p.gpu_flavor(row["node__gpu_type"])] += row["gpu"]
            users.append((str(tenant), str(row["attempt__job__owner_id"]), row["gpu"]))
    limited = {int(j.batch) for j in jobs.values() if j.batch and j.max_running_shards}
    tenants = [core_tenant(t, usage[t.pk]) for t in locked]
    if budget is not None:
        budget.add_others(locked)
    paused = [str(t.pk) for t in locked if t.placements_paused]
    shared = [str(t.pk) for t in locked if not t.exclusive_allowed]
    return Limits(
        jobs, tenants, users, running_shards(limited), budget, class_gpus(jobs), paused, shared
    )


# A priority class that limits the GPUs its work holds.
GPU_LIMITED = Q(max_gpus_per_user__isnull=False) | Q(max_gpus__isnull=False)


def in_milli(gpus: int | None) -> int | None:
    """A limit in whole GPUs (None: none) in the core's GPU milli."""
    return None if gpus is None else gpus * GPU_MILLI


def class_gpus(jobs: dict[int, Claimed]) -> list[tuple[int, int, int]]:
    """What the live allocations of the jobs' classes that limit GPUs hold: (tier, owner id,
    GPU milli); none read without such a class."""
    tiers = {j.tier for j in jobs.values() if j.class_user_gpu_limit or j.class_gpu_limit}
    if not tiers:
        return []
    return list(
        Allocation.objects.active()
        .filter(attempt__job__priority_class__value__in=tiers, gpu_index__isnull=False)
        .values_list("attempt__job__priority_class__value", "attempt__job__owner_id")
        .annotate(gpu=Sum("gpu_milli"))
        .order_by()
    )


def running_shards(batches: set[int]) -> Counter[str]:
    """How many shards of each batch run now (their allocations live: a shard being stopped
    counts until it has gone), by the core's name of the batch."""
    if not batches:
        return Counter()
    live = (
        Allocation.objects.active()
        .filter(Q(attempt__job_id__in=batches) | Q(attempt__job__parent_id__in=batches))
        .values_list("attempt__job_id", "attempt__job__parent_id")
        .distinct()
    )
    return Counter(str(parent or job) for job, parent in live)


def demand(outcome: p.Outcome) -> tuple[dict[str, int], int]:
    """What a placement takes, by flavor in the core's units, and its GPU milli."""
    used = {"cpu": 0, "memory": 0}
    gpus = 0
    for worker in outcome.workers:
        used["cpu"] += worker.cpu_milli
        used["memory"] += worker.memory_mb
        if worker.gpu_indices:
            milli = worker.gpu_milli * len(worker.gpu_indices)
            flavor = p.gpu_flavor(worker.gpu_type)
            used[flavor] = used.get(flavor, 0) + milli
            gpus += milli
    return used, gpus

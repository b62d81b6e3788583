"""Metrics in the Prometheus text format, computed from the database at scrape time.

GPU allocation per cluster and type, idle GPUs by how usable they are (whole GPUs, slivers of
shared GPUs, the largest block of whole GPUs on one node, and how much of them the current job
mix could not use), each cluster's nodes by state, jobs by state, queue wait (eligible to first
start, as the usage reports count it) per family and per tenant, what each tenant holds beside
its quotas' limits and what it held recently (fair share), each tenant's GPU-hour budget and
spend alert with what its month used and cost so far, jobs finished and the job success
rate (failures split into the user's code and the infrastructure), attempt outcomes, attempts
stopped to be requeued by who stopped them, the scheduler's preemption rate and wasted
GPU-seconds (all over the last day), the scheduler's cycle heartbeat, and each cluster agent's
heartbeat age.

The cluster, scheduler and agent figures are the same for every reader and the costly part
(the idle GPU figures load the scheduler's whole snapshot), so they are computed at most once
per MLSCHED_METRICS_CACHE_S, shared by every web process through Redis; the tenants' spend
(a usage report of the month) likewise at most once a minute (jobs.spend_metrics); the job and
attempt figures, narrowed per portal user, are computed for each request.
"""

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.core.cache import caches
from django.db.models import Count, F, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from clusters.models import GPU_MILLI, Allocation, Cluster, Node
from jobs import budgets, efficiency, events, nodes_api, snapshot, spend_metrics, usage_queries
from jobs.clock import database_now
from jobs.models import Attempt, Job, SchedulerShard
from jobs.placement.fragmentation import FragmentationTable
from jobs.placement.scoring import learn_workload
from jobs.states import State
from jobs.usage_queries import eligible_since, percentile_cont
from quotas.models import PriorityClass, Quota, RecentUse, Tenant
from quotas.usage import class_gpus_held, usage_by_tenant

WINDOW = timedelta(days=1)
PLATFORM_KEY = "mlsched-metrics-platform"


@dataclass
class Metric:
    """One metric family: what /metrics writes and the portal's overview page draws."""

    name: str
    kind: str
    help: str
    samples: list[tuple[dict, float]] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        """The label names its samples use, in order of first use (the table's columns)."""
        return list(dict.fromkeys(k for labels, _ in self.samples for k in labels))

    def rows(self) -> list[list[str]]:
        """Each sample as table cells: its label values, then the value (a whole number in
        full, a fraction to 6 significant digits)."""
        return [[str(labels.get(k, "")) for k in self.labels] + [shown(value)]
                for labels, value in self.samples]  # fmt: skip

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            text = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            sample = f"{self.name}{{{text}}}" if labels else self.name
            out.append(f"{sample} {exact(value)}")
        return out


def exact(value: float) -> str:
    """A sample's value as the text format reads it back unchanged: a whole number in full,
    else the shortest decimal that round-trips (Go's FormatFloat(v, 'g', -1, 64), as
    Prometheus' own clients write it), NaN, +Inf, -Inf. Six significant digits would turn a
    counter past a million into steps (1.23457e+06) and its rate into noise."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def shown(value: float) -> str:
    """A sample's value for the overview: a whole number in full, else 6 significant digits
    (without an exponent below a million)."""
    value = float(value)
    if not math.isfinite(value) or (value.is_integer() and abs(value) < 2**53):
        return exact(value)
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.1f}"


def escape(value) -> str:
    """A label value as the text format wants it: backslash, quote and newline escaped (a GPU
    type comes from an agent or the admin and could otherwise end the line)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def collect(now, tenants=None) -> list[Metric]:
    """Every metric. ``tenants`` narrows the tenant, job and attempt figures (a portal user's
    teams; None: every tenant); the cluster and scheduler figures are the whole platform's.
    A tenant's quota figures are given whether it has jobs or not (a new team's, a team whose
    jobs retention has deleted)."""
    if tenants is None:
        tenants, jobs, attempts_of = Tenant.objects.all(), Job.objects.all(), Attempt.objects.all()
    else:
        jobs = Job.objects.filter(tenant__in=tenants)
        attempts_of = Attempt.objects.filter(job__tenant__in=tenants)
    shared = platform(now)
    # The tenants read once for the per-tenant figures.
    teams = list(tenants.order_by("slug").values_list("pk", "slug", "gpu_hours_per_month"))
    return [
        *shared.clusters, *jobs_by_state(now, jobs), *queued_by_reason(now, jobs),
        *queue_wait(now, jobs), *tenant_quotas(teams), *gpu_budgets(now, teams),
        *tenant_spend(now, teams), *finished(now, jobs), *attempts(now, attempts_of),
        *shared.control,
    ]  # fmt: skip


class Platform(NamedTuple):
    """The figures every reader shares, as of ``at`` (ages are counted to ``at``)."""

    at: datetime
    clusters: list[Metric]  # GPUs and idle GPUs: first in the output
    control: list[Metric]  # scheduler and agents: last


def platform(now) -> Platform:
    """The shared figures, at most MLSCHED_METRICS_CACHE_S old (0: computed every time).

    Every /overview/ view and every scrape wants them; one snapshot load per period serves
    all of them, in every web process (the "shared" cache: Redis when there is one). Without
    Redis at hand they are computed here, as if nothing were cached."""
    period = settings.MLSCHED_METRICS_CACHE_S
    if period <= 0:
        return compute_platform(now)
    cached = None
    with events.best_effort("reading the shared metrics"):
        cached = caches["shared"].get(PLATFORM_KEY)
    # `now` is checked too, not only the cache's expiry: figures are never older than the
    # period as of the time asked for, whatever clock the cache keeps.
    if cached is not None and (now - cached.at).total_seconds() < period:
        return cached
    fresh = compute_platform(now)
    with events.best_effort("sharing the metrics"):
        caches["shared"].set(PLATFORM_KEY, fresh, timeout=period)
    return fresh


def compute_platform(now) -> Platform:
    # Heartbeats and cycles are stamped with the database's clock: ages are counted on it.
    clock = database_now()
    return Platform(
        now,
        [*gpus(now), *idle_gpus(now), *node_states(), *quarantined(), *classes()],
        [*scheduler(clock), *agents(clock)],
    )


def render() -> str:
    """All metrics, as one Prometheus text exposition."""
    return "\n".join(line for m in collect(timezone.now()) for line in m.lines()) + "\n"


def metric(name: str, kind: str, help_text: str, samples) -> list[Metric]:
    return [Metric(name, kind, help_text, list(samples))]


def gpus(now) -> list[Metric]:
    total = (
        Node.objects.filter(gpu_count__gt=0)
        .values("cluster__name", "gpu_type")
        .annotate(n=Sum("gpu_count"))
    )
    used = (
        Allocation.objects.active()
        .exclude(gpu_index=None)
        .values("node__cluster__name", "node__gpu_type")
        .annotate(milli=Sum("gpu_milli"))
    )
    allocated = {(u["node__cluster__name"], u["node__gpu_type"]): u["milli"] / 1000 for u in used}
    samples = []
    for row in total:
        key = (row["cluster__name"], row["gpu_type"])
        labels = {"cluster": key[0], "gpu_type": key[1]}
        samples.append(({**labels, "state": "total"}, row["n"]))
        samples.append(({**labels, "state": "allocated"}, allocated.get(key, 0)))
    return metric("mlsched_gpus", "gauge", "GPUs per cluster and type: total and allocated.",
                  samples)  # fmt: skip


def idle_gpus(now) -> list[Metric]:
    """Fragmentation as an operator sees it: eight idle GPUs spread over eight nodes cannot run
    one 8-GPU job, slivers of shared GPUs run only small shares, and some idle GPU the current
    job mix could not use at all (the FGD measure the fragmentation scorer keeps low; the mix
    learnt as the scheduler learns it, from the queue and the workers running now). Healthy,
    schedulable nodes of healthy clusters out of maintenance and bookings, read as the
    scheduler's snapshot reads them; the GPUs of nodes whose maintenance window has begun, and
    the idle GPUs of nodes whose booking has begun (only its team may use them), are counted
    apart."""
    loaded = snapshot.load(now.timestamp()).snapshot
    policy = loaded.policy
    workload = learn_workload(
        loaded.queued, loaded.recent_shapes, policy.workload_coverage, policy.workload_max_classes
    )
    table = FragmentationTable(workload)
    names = {str(pk): name for pk, name in Cluster.objects.values_list("id", "name")}
    whole: dict[tuple[str, str], float] = defaultdict(float)
    slivers: dict[tuple[str, str], float] = defaultdict(float)
    block: dict[tuple[str, str], float] = defaultdict(float)
    fragmented: dict[tuple[str, str], float] = defaultdict(float)
    maintenance: dict[tuple[str, str], float] = defaultdict(float)
    booked: dict[tuple[str, str], float] = defaultdict(float)
    for node in loaded.nodes:
        free = node.gpu_free_milli
        key = (names[node.cluster], node.gpu_type)
        in_window = node.closes_at is not None and node.closes_at <= loaded.now
        if free and in_window and not node.reserved_for:
            maintenance[key] += len(free)
            continue
        if not (free and node.healthy and node.schedulable):
            continue
        idle = sum(1 for f in free if f == 1000)
        if in_window:  # booked: idle for its team alone
            booked[key] += idle
            continue
        whole[key] += idle
        slivers[key] += sum(f for f in free if 0 < f < 1000) / 1000
        block[key] = max(block[key], idle)
        fragmented[key] += table.node(node.cpu_free_milli, free, node.gpu_type) / 1000
    return [
        *metric("mlsched_gpus_idle", "gauge",
                "Idle GPU capacity: whole GPUs, and of each partly used GPU its largest free "
                "range, the most one share can get there (slivers).",
                labelled(whole, kind="whole") + labelled(slivers, kind="sliver")),
        *metric("mlsched_gpus_largest_free_block", "gauge",
                "The most whole idle GPUs on one node: the largest worker that fits now.",
                labelled(block)),
        *metric("mlsched_gpus_fragmented", "gauge",
                "Idle GPUs the current job mix (queued and running workers) could not use.",
                labelled(fragmented)),
        *metric("mlsched_gpus_in_maintenance", "gauge",
                "GPUs of nodes whose maintenance window has begun: out of service until it ends.",
                labelled(maintenance)),
        *metric("mlsched_gpus_booked_idle", "gauge",
                "Whole idle GPUs of nodes whose booking has begun: only the team it is for "
                "may use them until it ends.",
                labelled(booked)),
    ]  # fmt: skip


def node_states() -> list[Metric]:
    """Each cluster's nodes by state, as the clusters page and `sinfo` count them (every state,
    0 included, so that an alert on down nodes has a series to read), for no team's view: a
    booking that has begun counts as booked."""
    names = Cluster.objects.values_list("name", flat=True)
    counts: dict[str, Counter] = {name: Counter() for name in names}
    for row in nodes_api.listed(Node.objects.all()):
        counts[row.node.cluster.name][row.state] += 1
    samples = [({"cluster": name, "state": state}, states[state])
               for name, states in sorted(counts.items())
               for state in nodes_api.STATES]  # fmt: skip
    return metric("mlsched_nodes", "gauge",
                  "Nodes by state (down, maintenance, quarantined, drained, draining, booked, "
                  "allocated, mixed, idle), as the clusters page counts them.",
                  samples)  # fmt: skip


def quarantined() -> list[Metric]:
    """Nodes the control plane cordoned for failing several jobs (jobs.quarantine), per
    cluster, 0 included: an operator's cue to look at them."""
    clusters = Cluster.objects.annotate(
        n=Count("nodes", filter=Q(nodes__quarantined_at__isnull=False))
    ).order_by("name")
    return metric("mlsched_nodes_quarantined", "gauge",
                  "Nodes cordoned by the control plane for failing several jobs.",
                  [({"cluster": c.name}, c.n) for c in clusters])  # fmt: skip


def classes() -> list[Metric]:
    """What each priority class's running work holds in GPUs, every team's together (no team
    named), and its GPU limits where set, which count it: two queries."""
    held, _ = class_gpus_held()
    ranks = PriorityClass.objects.order_by("-value").values_list(
        "pk", "name", "max_gpus", "max_gpus_per_user"
    )
    limits = []
    for _, name, whole, per_user in ranks:
        for kind, value in (("max_gpus", whole), ("max_gpus_per_user", per_user)):
            if value is not None:
                limits.append(({"class": name, "limit": kind}, value))
    return [
        *metric("mlsched_class_gpus", "gauge",
                "GPUs each priority class's running work holds, every team's together.",
                [({"class": name}, round(held.get(pk, 0.0), 3)) for pk, name, _, _ in ranks]),
        *metric("mlsched_class_gpu_limit", "gauge",
                "Each priority class's GPU limits where set: max_gpus (all its work), "
                "max_gpus_per_user (one user's).", limits),
    ]  # fmt: skip


def labelled(values: dict[tuple[str, str], float], **extra) -> list:
    """Samples keyed by (cluster, GPU type), as labels."""
    return [({"cluster": c, "gpu_type": t, **extra}, v) for (c, t), v in sorted(values.items())]


def jobs_by_state(now, jobs) -> list[Metric]:
    counts = jobs.order_by().values("state").annotate(n=Count("id"))
    return metric("mlsched_jobs", "gauge", "Jobs by state.",
                  [({"state": c["state"]}, c["n"]) for c in counts])  # fmt: skip


def queued_by_reason(now, jobs) -> list[Metric]:
    """Why the queued jobs wait, by the reason code the cycle stored ("" for none yet, held
    jobs as "held"): quota, a user's GPU limit, capacity, a dependency, a begin to come...; and
    the GPUs they ask for, whole and shares (the demand a cluster autoscaler or a capacity plan
    reads: what waits for capacity, `insufficient_gpus`, against what waits for its quota)."""
    asked = F("workers") * (F("gpus") * GPU_MILLI + F("gpu_milli"))
    counts = sorted(
        jobs.filter(state=State.QUEUED).order_by().values("pending_reason")
        .annotate(n=Count("id"), milli=Sum(asked)),
        key=lambda c: c["pending_reason"],
    )  # fmt: skip
    return [
        *metric("mlsched_jobs_queued_by_reason", "gauge", "Queued jobs by why they wait.",
                [({"reason": c["pending_reason"]}, c["n"]) for c in counts]),
        *metric("mlsched_gpus_queued_by_reason", "gauge",
                "GPUs the queued jobs ask for (every worker's, shares in fractions), by why "
                "they wait.",
                [({"reason": c["pending_reason"]}, (c["milli"] or 0) / GPU_MILLI)
                 for c in counts]),
    ]  # fmt: skip


LIMITS = ("guaranteed", "borrow_limit", "lend_limit")


def tenant_quotas(tenants: list[tuple[int, str, int | None]]) -> list[Metric]:
    """For each of ``tenants`` (pk, slug, budget): what its running work holds by flavor, its
    quotas' limits (a lend limit only where set), and the GPUs it held recently as fair share
    counts them (Kueue's cluster-queue usage and quota figures): three queries."""
    teams = {pk: slug for pk, slug, _ in tenants}  # in slug order
    held = usage_by_tenant(list(teams))
    limits = []
    for quota in Quota.objects.filter(tenant__in=teams).order_by("tenant__slug", "flavor"):
        for kind in LIMITS:
            if (value := getattr(quota, kind)) is not None:
                limits.append(({"tenant": teams[quota.tenant_id], "flavor": quota.flavor,
                                "limit": kind}, value))  # fmt: skip
    recent = RecentUse.objects.filter(tenant__in=teams).values_list("tenant_id", "use")
    return [
        *metric("mlsched_tenant_usage", "gauge",
                "What each tenant's running work holds, by flavor (GPUs, millicores, MiB).",
                [({"tenant": slug, "flavor": flavor}, amount)
                 for pk, slug in teams.items() for flavor, amount in sorted(held[pk].items())]),
        *metric("mlsched_tenant_quota", "gauge",
                "Each tenant's quota limits by flavor: guaranteed, borrow_limit, lend_limit.",
                limits),
        *metric("mlsched_tenant_recent_gpus", "gauge",
                "GPUs each tenant held recently, as fair share counts them beside what it holds.",
                [({"tenant": teams[pk]}, round(use.get("gpu", 0.0) / GPU_MILLI, 3))
                 for pk, use in sorted(recent, key=lambda r: teams[r[0]])]),
    ]  # fmt: skip


def gpu_budgets(now, tenants: list[tuple[int, str, int | None]]) -> list[Metric]:
    """The GPU-hour budget of each of ``tenants`` (pk, slug, budget) with one, and what its
    attempts used of it this month (jobs.budgets): the queries of the month's use, when a
    tenant has a budget."""
    teams = [team for team in tenants if team[2] is not None]
    spent = budgets.spent_gpu_seconds([pk for pk, _, _ in teams], now)
    return [
        *metric("mlsched_gpu_budget_hours", "gauge",
                "GPU-hours each budgeted tenant's jobs may use this calendar month (UTC).",
                [({"tenant": slug}, hours) for _, slug, hours in teams]),
        *metric("mlsched_gpu_budget_spent_hours", "gauge",
                "GPU-hours each budgeted tenant's attempts used this calendar month so far.",
                [({"tenant": slug}, round(spent.get(pk, 0.0) / 3600, 3))
                 for pk, slug, _ in teams]),
    ]  # fmt: skip


def tenant_spend(now, tenants: list[tuple[int, str, int | None]]) -> list[Metric]:
    """Of ``tenants`` (pk, slug, budget), each with a spend alert: what its usage cost this
    month so far and the alert, in the platform's currency (jobs.spend_metrics: at most a
    minute old, shared by every reader)."""
    month = spend_metrics.month_spend(now)
    slugs = {slug for _, slug, _ in tenants}
    shown = [row for row in month.tenants if row.tenant in slugs]
    return [
        *metric("mlsched_tenant_spend_month", "gauge",
                "What each tenant's usage cost this calendar month so far (UTC) at the rate "
                "card, as its spend alert counts it; tenants with a spend alert.",
                [({"tenant": r.tenant, "currency": month.currency}, float(r.spent))
                 for r in shown]),
        *metric("mlsched_tenant_spend_alert", "gauge",
                "Each tenant's spend alert a calendar month, in the platform's currency.",
                [({"tenant": r.tenant, "currency": month.currency}, float(r.alert))
                 for r in shown]),
    ]  # fmt: skip


def queue_wait(now, jobs) -> list[Metric]:
    started = jobs.filter(started_at__gte=now - WINDOW).values_list(
        "family", "tenant__slug", F("started_at") - eligible_since()
    )
    by_family: dict[str, list[float]] = defaultdict(list)
    by_tenant: dict[str, list[float]] = defaultdict(list)
    for family, tenant, wait in started:
        by_family[family].append(wait.total_seconds())
        by_tenant[tenant].append(wait.total_seconds())
    help_text = (
        "Eligible to run (not held, dependencies met, past a retry's backoff) to first start, "
        "jobs started in the last day (quantiles interpolated between the nearest waits)"
    )
    return [
        *metric("mlsched_queue_wait_seconds", "gauge", f"{help_text}, by family.",
                summary("family", by_family)),
        *metric("mlsched_queue_wait_seconds_by_tenant", "gauge", f"{help_text}, by tenant.",
                summary("tenant", by_tenant)),
    ]  # fmt: skip


def summary(label: str, groups: dict[str, list[float]]):
    """Each group's median, p95, p99 and mean. The quantiles are interpolated between the two
    nearest values (PostgreSQL's percentile_cont), as the usage reports compute their p95: the
    two agree on the same waits."""
    for key, values in sorted(groups.items()):
        for q in (0.5, 0.95, 0.99):
            yield {label: key, "quantile": q}, percentile_cont(values, q)
        yield {label: key, "quantile": "mean"}, statistics.fmean(values)


# How a failed job's last attempt ended says whose failure it was: its own code (an error exit,
# the runtime limit it asked for, GPUs it left idle past its team's limit) or the platform
# (retries of infrastructure failures used up).
USER_FAILURES = (Attempt.Outcome.USER_ERROR, Attempt.Outcome.TIMEOUT, Attempt.Outcome.GPU_IDLE)


def finished(now, jobs) -> list[Metric]:
    """Jobs finished in the last day by how, and the success rate: succeeded / (succeeded +
    failed). Canceled jobs are neither."""
    last = Attempt.objects.filter(job=OuterRef("pk")).order_by("-number").values("outcome")[:1]
    rows = (
        jobs.filter(finished_at__gte=now - WINDOW)
        .annotate(last_outcome=Subquery(last))
        .order_by()
        .values_list("state", "last_outcome")
    )
    counts = dict.fromkeys(("succeeded", "user_error", "infra_error", "canceled"), 0)
    for state, outcome in rows:
        if state == State.FAILED:
            counts["user_error" if outcome in USER_FAILURES else "infra_error"] += 1
        elif state in counts:
            counts[state] += 1
    ended = counts["succeeded"] + counts["user_error"] + counts["infra_error"]
    return [
        *metric("mlsched_jobs_finished", "gauge",
                "Jobs finished in the last day: succeeded, failed by their own code (error "
                "exit or runtime limit), failed by the infrastructure (retries used up), "
                "canceled.",
                [({"outcome": k}, n) for k, n in counts.items()]),
        *metric("mlsched_job_success_rate", "gauge",
                "Succeeded / (succeeded + failed), jobs finished in the last day.",
                # None ended: no sample, not a 0 % that an alert on the rate would fire on.
                [({}, counts["succeeded"] / ended)] if ended else []),
    ]  # fmt: skip


def attempts(now, attempts_of) -> list[Metric]:
    recent = attempts_of.filter(ended_at__gte=now - WINDOW)
    by_outcome: dict[str, int] = defaultdict(int)
    by_cause: dict[str, int] = defaultdict(int)  # of the preempted: who stopped them
    ended = recent.order_by().values_list("outcome", "stop_cause").annotate(n=Count("id"))
    for outcome, cause, n in ended:
        by_outcome[outcome] += n
        if outcome == Attempt.Outcome.PREEMPTED:
            by_cause[cause] += n
    started = attempts_of.filter(started_at__gte=now - WINDOW).count()
    preempted = by_cause.get(Attempt.StopCause.PREEMPTION, 0)
    sums = recent.aggregate(wasted=Sum("wasted_gpu_seconds"), **usage_queries.sizing_sums(Q()))
    wasted, asked, limits = sums["wasted"] or 0, sums["measured_s"] or 0, sums["succeeded_limit_s"]
    gpu_asked = sums["gpu_measured_s"]
    idle_since = now - timedelta(seconds=efficiency.IDLE_SAID_S)
    held_idle = attempts_of.filter(outcome="", gpu_idle_since__lte=idle_since).aggregate(
        gpus=Sum(F("workers") * F("job__gpus"))
    )["gpus"]
    return [
        *metric("mlsched_attempts_ended", "gauge", "Attempts ended in the last day, by outcome.",
                [({"outcome": o}, n) for o, n in sorted(by_outcome.items())]),
        *metric("mlsched_attempts_stopped", "gauge",
                "Attempts stopped to be requeued, ended in the last day, by who stopped them: "
                "the scheduler's preemptions, requeues, drains, maintenance windows and "
                "other teams' bookings.",
                [({"cause": c}, by_cause.get(c, 0)) for c in Attempt.StopCause.values]),
        *metric("mlsched_preemption_rate", "gauge",
                "Attempts the scheduler preempted for higher-priority work / attempts "
                "started, last day (requeues, drains and windows are not preemptions).",
                [({}, preempted / started if started else 0)]),
        *metric("mlsched_wasted_gpu_seconds", "gauge",
                "GPU-seconds reserved without useful work, attempts ended in the last day.",
                [({}, wasted)]),
        *metric("mlsched_cpu_efficiency", "gauge",
                "CPU time of the attempts ended in the last day whose use was measured, over "
                "the core-seconds they asked for (no sample: none measured).",
                # None measured: no sample, not a 0 % read as jobs that used nothing.
                [({}, (sums["busy_s"] or 0) / asked)] if asked else []),
        *metric("mlsched_memory_unused_gib_hours", "gauge",
                "Memory the measured attempts ended in the last day asked for beyond their "
                "largest worker's peak, times workers and run, in GiB-hours.",
                [({}, (sums["unused_mib_s"] or 0) / 1024 / 3600)]),
        *metric("mlsched_gpu_efficiency", "gauge",
                "GPU-seconds busy of the attempts ended in the last day whose GPU time was "
                "measured, over the GPU-seconds they asked for (no sample: none measured).",
                [({}, (sums["gpu_busy_s"] or 0) / gpu_asked)] if gpu_asked else []),
        *metric("mlsched_gpus_held_idle", "gauge",
                f"Whole GPUs held by running attempts whose GPUs have all read idle for "
                f"{efficiency.IDLE_SAID_S // 60} minutes or more.",
                [({}, held_idle or 0)]),
        *metric("mlsched_runtime_efficiency", "gauge",
                "Runs of the attempts that succeeded in the last day over their runtime limits "
                "(no sample: none succeeded).",
                [({}, (sums["succeeded_run_s"] or 0) / limits)] if limits else []),
    ]  # fmt: skip


def scheduler(now) -> list[Metric]:
    shards = list(SchedulerShard.objects.all())
    return [
        *metric("mlsched_scheduler_last_cycle_age_seconds", "gauge",
                "Seconds since the shard last ran a cycle.",
                [({"shard": s.name}, (now - s.last_cycle_at).total_seconds())
                 for s in shards if s.last_cycle_at]),
        *metric("mlsched_scheduler_placements_total", "counter", "Placements committed.",
                [({"shard": s.name}, s.placements) for s in shards]),
        *metric("mlsched_scheduler_cycle_seconds", "gauge", "The last cycle's duration.",
                [({"shard": s.name}, s.last_cycle_seconds) for s in shards]),
        *metric("mlsched_scheduler_decisions_per_second", "gauge",
                "Queued jobs decided per second in the last cycle.",
                [({"shard": s.name}, s.last_cycle_jobs / s.last_cycle_seconds)
                 for s in shards if s.last_cycle_seconds]),
    ]  # fmt: skip


def agents(now) -> list[Metric]:
    clusters = Cluster.objects.exclude(last_heartbeat=None).values_list("name", "last_heartbeat")
    return metric("mlsched_agent_heartbeat_age_seconds", "gauge",
                  "Seconds since each cluster's agent last reported.",
                  [({"cluster": name}, (now - beat).total_seconds())
                   for name, beat in clusters])  # fmt: skip

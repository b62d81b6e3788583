"""The usage reports' queries (jobs.reports), which the daily roll-up (jobs.rollup), the GPU
budgets (jobs.budgets) and /metrics (jobs.metrics) run too: the attempts of the tenants summed
by tenant and GPU type (and by a job's label or submitter, for a split) into TypeUsage's
figures, what was used and wasted and how well the measured attempts used what they asked
for, in one grouped query; the jobs finished, by state; and the queue waits of the jobs
started, eligible to first start, their 95th percentile PostgreSQL's percentile_cont, or on
SQLite read and interpolated the same way.
"""

import math
from dataclasses import dataclass
from datetime import UTC

from django.db import connection
from django.db.models import Aggregate, Avg, Count, F, FloatField, Func, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least, TruncDate, TruncDay

from jobs.models import Attempt, Job
from jobs.states import State

MIB_PER_GIB = 1024
OUTCOMES = (State.SUCCEEDED, State.FAILED, State.CANCELED)
# TypeUsage's figures, in hours: what was used and wasted, then how well the measured part of
# it used what it asked for.
FIGURES = ["gpu_hours", "cpu_core_hours", "wasted_gpu_hours", "preempted_gpu_hours",
           "cpu_core_hours_measured", "cpu_core_hours_busy", "memory_gib_hours_unused",
           "succeeded_run_hours", "succeeded_limit_hours", "gpu_hours_measured",
           "gpu_hours_busy"]  # fmt: skip
USED = 4  # the first FIGURES: what was used and wasted


@dataclass
class TypeUsage:
    """One tenant's attempts on one GPU type: "" runs no GPU, None lost its allocation rows."""

    gpu_type: str | None
    gpu_hours: float = 0.0
    cpu_core_hours: float = 0.0
    wasted_gpu_hours: float = 0.0
    preempted_gpu_hours: float = 0.0
    # Of attempts ended in the window whose use their agent measured (Attempt.cpu_seconds,
    # memory_peak_mb), over their whole runs: the core-hours they asked for, those they kept
    # busy, and the memory they asked for beyond their largest worker's peak (GiB-hours).
    cpu_core_hours_measured: float = 0.0
    cpu_core_hours_busy: float = 0.0
    memory_gib_hours_unused: float = 0.0
    # Of attempts that succeeded in the window: their runs and their runtime limits. Backfill
    # plans by limits: one far above the run wastes the gaps it could have filled.
    succeeded_run_hours: float = 0.0
    succeeded_limit_hours: float = 0.0
    # Of attempts ended in the window whose GPU time their agent measured, over their whole
    # runs: the GPU-hours they asked for, and those their GPUs were busy.
    gpu_hours_measured: float = 0.0
    gpu_hours_busy: float = 0.0

    def figures(self) -> list[float]:
        return [getattr(self, name) for name in FIGURES]

    @property
    def cpu_efficiency(self) -> float | None:
        """Of the measured core-hours asked for, the share kept busy."""
        if not self.cpu_core_hours_measured:
            return None
        return self.cpu_core_hours_busy / self.cpu_core_hours_measured

    @property
    def gpu_efficiency(self) -> float | None:
        """Of the measured GPU-hours asked for, the share busy."""
        if not self.gpu_hours_measured:
            return None
        return self.gpu_hours_busy / self.gpu_hours_measured

    @property
    def runtime_efficiency(self) -> float | None:
        """Of the runtime limits of the attempts that succeeded, the share they ran."""
        if not self.succeeded_limit_hours:
            return None
        return self.succeeded_run_hours / self.succeeded_limit_hours


class Seconds(Func):
    """A duration as seconds (a float)."""

    output_field = FloatField()
    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"

    def as_sqlite(self, compiler, connection, **extra):
        # SQLite keeps durations as whole microseconds.
        return self.as_sql(compiler, connection, template="(%(expressions)s / 1e6)", **extra)


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont: the value at ``fraction`` of the ordered values,
    interpolated between the two nearest."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)r) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def attempt_usage(ids, since, until, now) -> dict[int, list[TypeUsage]]:
    """GPU-hours, CPU core-hours and waste of the tenants' attempts, by tenant and GPU type:
    one grouped query over the attempts that ran in the window or ended in it."""
    found: dict[int, list[TypeUsage]] = {}
    for tenant, _, usage in attempt_rows(ids, since, until, now):
        found.setdefault(tenant, []).append(usage)
    for usages in found.values():
        usages.sort(key=type_order)
    return found


def split_usage(ids, since, until, now, by) -> dict[int, dict[object, list[TypeUsage]]]:
    """The same figures by tenant, by `by` (an expression of the attempt: a job's label, its
    submitter) and by GPU type within it, so each value's hours are priced by their type: one
    grouped query."""
    found: dict[int, dict[object, list[TypeUsage]]] = {}
    for tenant, value, usage in attempt_rows(ids, since, until, now, by):
        found.setdefault(tenant, {}).setdefault(value, []).append(usage)
    return found


def attempt_rows(ids, since, until, now, by=None):
    """(tenant id, value of `by` or None, TypeUsage of a GPU type) of the attempts that ran in
    the window or ended in it, grouped by tenant, GPU type and `by`."""
    start, end = clipped_run(since, until, now)
    # Clipped to the window; never negative (an attempt started after it or ended before).
    ran = Greatest(Seconds(end - start), Value(0.0))
    milli_gpus, milli_cpus = held_milli()
    started = Q(started_at__isnull=False)
    ended_in = Q(ended_at__gte=since, ended_at__lt=until)
    preempted = ended_in & Q(outcome=Attempt.Outcome.PREEMPTED)
    split = {"kind": by} if by is not None else {}
    rows = (
        Attempt.objects.filter(job__tenant_id__in=ids, scheduled_at__lt=until)
        .filter(Q(ended_at__gte=since) | Q(ended_at__isnull=True))
        .values("job__tenant_id", "gpu_type", **split)
        .annotate(
            gpu_s=Sum(ran * milli_gpus / 1000, filter=started),
            cpu_s=Sum(ran * milli_cpus / 1000, filter=started),
            wasted_s=Sum("wasted_gpu_seconds", filter=ended_in),
            preempted_s=Sum("wasted_gpu_seconds", filter=preempted),
            **sizing_sums(ended_in),
        )
        .order_by()
    )
    for row in rows:
        seconds = [row[k] or 0.0 for k in ("gpu_s", "cpu_s", "wasted_s", "preempted_s",
                                            "measured_s", "busy_s")]  # fmt: skip
        seconds.append((row["unused_mib_s"] or 0.0) / MIB_PER_GIB)
        seconds += [row[k] or 0.0 for k in ("succeeded_run_s", "succeeded_limit_s",
                                             "gpu_measured_s", "gpu_busy_s")]  # fmt: skip
        usage = TypeUsage(row["gpu_type"], *(s / 3600 for s in seconds))
        yield row["job__tenant_id"], row.get("kind"), usage


def clipped_run(since, until, now) -> tuple[Greatest, Least]:
    """Where an attempt's run starts and ends inside the window [since, until): from its
    start to its end, or to ``now`` while it runs."""
    return Greatest("started_at", Value(since)), Least(
        Coalesce("ended_at", Value(now)), Value(until)
    )


def held_milli() -> tuple:
    """An attempt's GPUs and CPU cores, in thousandths: its own workers (an elastic gang may
    have started with fewer than its job's) times each one's whole GPUs or share, and cores."""
    workers = F("workers")
    return workers * (F("job__gpus") * 1000 + F("job__gpu_milli")), workers * F("job__cpu_milli")


def daily_rows(ids, since, until, now):
    """The tenants' attempts' runs in [since, until) for a series per UTC day, in one grouped
    query: by tenant, GPU type, the day a run starts in the window (``first``) and the day it
    ends (``last``), the GPUs and cores those runs held, in thousandths (``milli_gpus``,
    ``milli_cores``), and their GPU-seconds and core-seconds from the first day's midnight to
    the start (``*_before``) and from the last day's to the end (``*_to_end``).
    jobs.daily_usage.spread lays each group out over its days. Seconds from a midnight, not
    from 1970, keep the float sums accurate to well under a second."""
    start, end = clipped_run(since, until, now)
    milli_gpus, milli_cpus = held_milli()
    before = Seconds(start - TruncDay(start, tzinfo=UTC))
    to_end = Seconds(end - TruncDay(end, tzinfo=UTC))
    return (
        Attempt.objects.filter(job__tenant_id__in=ids, started_at__lt=until)
        .filter(Q(ended_at__gt=since) | Q(ended_at__isnull=True))
        .alias(start=start, end=end)
        .filter(end__gt=F("start"))  # never started (null), or not running in the window
        .values("job__tenant_id", "gpu_type", first=TruncDate(start, tzinfo=UTC),
                last=TruncDate(end, tzinfo=UTC))
        .annotate(
            milli_gpus=Sum(milli_gpus), milli_cores=Sum(milli_cpus),
            gpu_before=Sum(before * milli_gpus / 1000), gpu_to_end=Sum(to_end * milli_gpus / 1000),
            cpu_before=Sum(before * milli_cpus / 1000), cpu_to_end=Sum(to_end * milli_cpus / 1000),
        )
        .order_by()
    )  # fmt: skip


def sizing_sums(ended_in: Q) -> dict[str, Sum]:
    """Right-sizing's sums over attempts (seconds; memory in MiB-seconds), of those that
    ``ended_in`` whose use was measured, over their whole runs from their first worker's
    start: the core-seconds asked for (``measured_s``), kept busy (``busy_s``) and the memory
    asked for beyond the largest worker's peak, times workers (``unused_mib_s``); and of those
    that succeeded, their runs (``succeeded_run_s``) and runtime limits (``succeeded_limit_s``);
    and of those whose GPU time was measured (whole GPUs only), the GPU-seconds asked for
    (``gpu_measured_s``) and busy (``gpu_busy_s``)."""
    measured = ended_in & Q(
        started_at__isnull=False, cpu_seconds__isnull=False, memory_peak_mb__isnull=False
    )
    succeeded = ended_in & Q(started_at__isnull=False, outcome=Attempt.Outcome.SUCCEEDED)
    gpu_measured = ended_in & Q(started_at__isnull=False, gpu_busy_seconds__isnull=False)
    whole = Greatest(Seconds(F("ended_at") - Coalesce("worker_ran_at", "started_at")), Value(0.0))
    unused_mb = Greatest(F("job__memory_mb") - F("memory_peak_mb"), Value(0)) * F("workers")
    cores = F("workers") * F("job__cpu_milli") / 1000
    return {
        "measured_s": Sum(whole * cores, filter=measured),
        "busy_s": Sum("cpu_seconds", filter=measured),
        "unused_mib_s": Sum(unused_mb * whole, filter=measured),
        "succeeded_run_s": Sum(whole, filter=succeeded),
        "succeeded_limit_s": Sum("job__max_runtime_s", filter=succeeded),
        "gpu_measured_s": Sum(whole * F("workers") * F("job__gpus"), filter=gpu_measured),
        "gpu_busy_s": Sum("gpu_busy_seconds", filter=gpu_measured),
    }


def type_order(usage: TypeUsage) -> tuple:
    """Named GPU types first, then no GPU, then unknown."""
    return (usage.gpu_type is None, usage.gpu_type == "", usage.gpu_type or "")


def finished_jobs(ids, since, until) -> dict[int, dict[str, int]]:
    """Jobs finished in the window, by tenant and state."""
    rows = (
        Job.objects.filter(tenant_id__in=ids, finished_at__gte=since, finished_at__lt=until)
        .values_list("tenant_id", "state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    found: dict[int, dict[str, int]] = {}
    for tenant, state, n in rows:
        found.setdefault(tenant, dict.fromkeys(OUTCOMES, 0))[state] = n
    return found


def eligible_since() -> Coalesce:
    """Where a started job's queue wait begins: when it became eligible to run, or its
    submission for a job started before eligibility was recorded (jobs/migrations/0023)."""
    return Coalesce("eligible_at", "created")


def queue_wait() -> Func:
    """A started job's queue wait, eligible to first start, in seconds."""
    return Seconds(F("started_at") - eligible_since())


def started_jobs(ids, since, until):
    """Jobs started in the window, and their queue wait (eligible to first start), in seconds."""
    started = Job.objects.filter(tenant_id__in=ids, started_at__gte=since, started_at__lt=until)
    return started, queue_wait()


def started_waits(ids, since, until):
    """(tenant id, wait in seconds) of each job started in the window."""
    started, wait = started_jobs(ids, since, until)
    return started.annotate(wait=wait).values_list("tenant_id", "wait")


def queue_waits(ids, since, until) -> dict[int, tuple[int, float, float]]:
    """Jobs started in the window, by tenant: how many, and their mean and 95th percentile
    wait from eligible to first start, in seconds."""
    started, wait = started_jobs(ids, since, until)
    if connection.vendor != "postgresql":
        return waits_in_python(started_waits(ids, since, until))
    rows = (
        started.values("tenant_id")
        .annotate(n=Count("pk"), mean=Avg(wait), p95=Percentile(wait, 0.95))
        .order_by()
    )
    return {row["tenant_id"]: (row["n"], row["mean"], row["p95"]) for row in rows}


def waits_in_python(rows) -> dict[int, tuple[int, float, float]]:
    """queue_waits where the database has no percentile_cont (SQLite): the waits read, the
    same figures computed here."""
    by_tenant: dict[int, list[float]] = {}
    for tenant, seconds in rows:
        by_tenant.setdefault(tenant, []).append(seconds)
    return {tenant: (len(w), sum(w) / len(w), percentile_cont(w, 0.95))
            for tenant, w in by_tenant.items()}  # fmt: skip


def percentile_cont(values: list[float], fraction: float) -> float:
    """As PostgreSQL's percentile_cont: the value at position fraction x (n - 1) of the sorted
    values, interpolated linearly between its two neighbours."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

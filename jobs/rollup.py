"""The daily usage roll-up: each tenant's usage per UTC day, written once the day has settled.

Retention deletes finished jobs after MLSCHED_JOB_RETENTION_DAYS; the roll-up keeps what they
used (``UsageDay``, ``GpuTypeUsageDay``), so a report reaches back a year whatever retention
keeps, and reads one row per tenant, day and GPU type instead of every attempt.

A day is rolled up once it ended ``SETTLE`` ago: by then most reports that change it (a late
start, a lost attempt's late success, an agent back from a silence) have come in. The one that
rewrites the past later than that, a lost attempt's success reported after its day was rolled
up, amends the day's rows (``amend_waste``, ``amend_start``); every other write is timed now,
on a day not rolled up yet. The figures are
those of ``jobs.reports`` over the day, computed by the same queries (``jobs.usage_queries``),
plus the started jobs' queue waits counted in buckets a quarter of a doubling wide, from which
a 95th percentile over several days is read (within a bucket's width, 19 %). A day rolled up
before queue waits ran from eligibility (jobs/migrations/0023) keeps its waits from submission:
it is not rolled again.

Retention runs it first (``jobs.retention.prune``) and deletes no job that finished after the
last day rolled up.
"""

import math
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction
from django.db.models import F, Max, Min, Sum

from jobs import reports, usage_queries
from jobs.models import Attempt, GpuTypeUsageDay, Job, UsageDay
from quotas.models import Tenant

SETTLE = timedelta(days=1)
PER_DOUBLING = 4  # wait buckets per doubling


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def settled_end(now: datetime) -> datetime:
    """The end of the last day settled at ``now``: every day before it can be rolled up."""
    return midnight((now - SETTLE).astimezone(UTC).date())


def rolled_through() -> date | None:
    """The last day rolled up, if any."""
    return UsageDay.objects.aggregate(last=Max("day"))["last"]


def rolled_days() -> tuple[date, date] | None:
    """The first and the last day rolled up, if any. A report reads the days before the first
    from the jobs: the roll-up began at the oldest job left then, and retention may have
    deleted older ones."""
    days = UsageDay.objects.aggregate(first=Min("day"), last=Max("day"))
    return (days["first"], days["last"]) if days["last"] else None


def roll_up(now: datetime) -> int:
    """Roll up every settled day not rolled up yet, from the day after the last one (the first
    time: the day of the oldest job). One transaction per day, and one for each quiet stretch
    (days nothing ran in, started or finished: their rows are zeros, written together). Returns
    the days rolled up. The caller keeps two from running at once (retention runs under its
    own advisory lock); two that did would collide on a (tenant, day) row, and the second would
    roll back."""
    last_settled = settled_end(now).date() - timedelta(days=1)
    last = rolled_through()
    if last:
        first = last + timedelta(days=1)
    else:
        oldest = Job.objects.aggregate(created=Min("created"))["created"]
        if oldest is None:
            return 0
        first = oldest.astimezone(UTC).date()
    tenants = list(Tenant.objects.values_list("pk", flat=True))
    day, end = first, last_settled + timedelta(days=1)
    while day < end:
        with transaction.atomic():
            busy = roll_day(tenants, day, now)
        day += timedelta(days=1)
        if not busy and day < end:
            # Nothing ran into the next days from this one: they are quiet up to the first
            # day something was placed, started or finished.
            quiet_until = min(next_busy_day(day) or end, end)
            if quiet_until > day:
                with transaction.atomic():
                    roll_quiet_days(tenants, day, quiet_until)
                day = quiet_until
    return (end - first).days if first < end else 0


def next_busy_day(day: date) -> date | None:
    """The first day from ``day`` on when an attempt was placed, or a job started or finished;
    None if none has since. Only after a quiet day: an attempt placed before it had ended by
    then."""
    since = midnight(day)
    firsts = [
        Attempt.objects.filter(scheduled_at__gte=since).aggregate(at=Min("scheduled_at"))["at"],
        Job.objects.filter(started_at__gte=since).aggregate(at=Min("started_at"))["at"],
        Job.objects.filter(finished_at__gte=since).aggregate(at=Min("finished_at"))["at"],
    ]
    found = [at for at in firsts if at is not None]
    return min(found).astimezone(UTC).date() if found else None


def roll_quiet_days(tenants: list[int], first: date, end: date) -> None:
    """Write the rows of the quiet days from ``first`` to before ``end``: zeros for each
    tenant, no GPU types; each day locked as roll_day locks it."""
    days = [first + timedelta(days=n) for n in range((end - first).days)]
    take_days(first, end)
    UsageDay.objects.bulk_create(
        (
            UsageDay(tenant_id=tenant, day=day, wait_buckets={})
            for day in days
            for tenant in tenants
        ),
        batch_size=2000,
    )


def roll_day(tenants: list[int], day: date, now: datetime) -> bool:
    """Write one day's rows: one per tenant (zeros included), one per tenant and GPU type.
    Whether the day was busy: an attempt ran in it, or a job started or finished."""
    take_day(day)
    since, until = midnight(day), midnight(day + timedelta(days=1))
    finished = usage_queries.finished_jobs(tenants, since, until)
    waits: dict[int, list[float]] = {}
    for tenant, seconds in usage_queries.started_waits(tenants, since, until):
        waits.setdefault(tenant, []).append(seconds)
    days = []
    for tenant in tenants:
        jobs = finished.get(tenant, dict.fromkeys(usage_queries.OUTCOMES, 0))
        succeeded, failed, canceled = (jobs[outcome] for outcome in usage_queries.OUTCOMES)
        started = waits.get(tenant, [])
        days.append(UsageDay(
            tenant_id=tenant, day=day, jobs_succeeded=succeeded, jobs_failed=failed,
            jobs_canceled=canceled, jobs_started=len(started), wait_seconds=sum(started),
            wait_buckets=count_buckets(started),
        ))  # fmt: skip
    UsageDay.objects.bulk_create(days)
    types = GpuTypeUsageDay.objects.bulk_create(
        GpuTypeUsageDay(
            tenant_id=tenant, day=day, gpu_type=u.gpu_type, gpu_seconds=u.gpu_hours * 3600,
            cpu_core_seconds=u.cpu_core_hours * 3600,
            wasted_gpu_seconds=u.wasted_gpu_hours * 3600,
            preempted_gpu_seconds=u.preempted_gpu_hours * 3600,
            cpu_core_seconds_measured=u.cpu_core_hours_measured * 3600,
            cpu_core_seconds_busy=u.cpu_core_hours_busy * 3600,
            memory_mib_seconds_unused=u.memory_gib_hours_unused * 3600 * usage_queries.MIB_PER_GIB,
            succeeded_run_seconds=u.succeeded_run_hours * 3600,
            succeeded_limit_seconds=u.succeeded_limit_hours * 3600,
            gpu_seconds_measured=u.gpu_hours_measured * 3600,
            gpu_seconds_busy=u.gpu_hours_busy * 3600,
        )
        for tenant, usages in usage_queries.attempt_usage(tenants, since, until, now).items()
        for u in usages
    )  # fmt: skip
    return bool(finished or waits or types)


DAY_LOCK = 0x6D6C_7275  # advisory lock space: one key per day, while it is written or amended


def take_day(day: date) -> None:
    """Take the day's lock until the transaction ends: a day is rolled up and amended one at a
    time, so an amendment made while the day is written waits and then finds its rows. SQLite
    has one writer at a time."""
    take_days(day, day + timedelta(days=1))


def take_days(first: date, end: date) -> None:
    """take_day for each day from ``first`` to before ``end``, in one statement, in the days'
    order (generate_series counts up)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, d) FROM generate_series(%s, %s) AS d",
                [DAY_LOCK, first.toordinal(), end.toordinal() - 1],
            )


def rolled(tenant_id: int, at: datetime) -> date | None:
    """The day of ``at`` if its rows are written (locked until the caller's transaction ends),
    else None: the report reads that day from the jobs, which hold the change already."""
    day = at.astimezone(UTC).date()
    take_day(day)
    return day if UsageDay.objects.filter(tenant_id=tenant_id, day=day).exists() else None


def amend_waste(tenant_id: int, gpu_type: str, ended_at: datetime, change: float) -> None:
    """An attempt that ended on a rolled-up day was judged again (a lost attempt whose success
    came in later: its run was not wasted): its waste changed by ``change`` GPU-seconds."""
    if change and (day := rolled(tenant_id, ended_at)):
        GpuTypeUsageDay.objects.filter(tenant_id=tenant_id, day=day, gpu_type=gpu_type).update(
            wasted_gpu_seconds=F("wasted_gpu_seconds") + change
        )


def amend_start(tenant_id: int, started_at: datetime, eligible_at: datetime) -> None:
    """A job's first start, on a rolled-up day, was recorded later: count it and its wait,
    from ``eligible_at`` (usage_queries.eligible_since, as the day's own waits)."""
    if day := rolled(tenant_id, started_at):
        row = UsageDay.objects.select_for_update().get(tenant_id=tenant_id, day=day)
        wait = (started_at - eligible_at).total_seconds()
        row.jobs_started += 1
        row.wait_seconds += wait
        add_buckets(row.wait_buckets, count_buckets([wait]))
        row.save(update_fields=["jobs_started", "wait_seconds", "wait_buckets"])


# Queue waits in buckets.


def bucket(seconds: float) -> int:
    """A wait's bucket: 0 under a second, then b >= 1 holds [2^((b-1)/4), 2^(b/4)) seconds."""
    return 0 if seconds < 1 else 1 + math.floor(PER_DOUBLING * math.log2(seconds))


def count_buckets(waits: list[float]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for seconds in waits:
        key = str(bucket(seconds))  # JSON keys are strings
        counts[key] = counts.get(key, 0) + 1
    return counts


def add_buckets(into: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        into[key] = into.get(key, 0) + n


def bucket_percentile(counts: dict[str, int], fraction: float) -> float | None:
    """The value at ``fraction`` of the counted waits, as percentile_cont gives it: at position
    fraction x (n - 1), interpolated between the waits ranked either side of it, each read
    inside its bucket as if the bucket's waits were spread evenly over it (on a log scale: the
    buckets are). Two neighbours may lie buckets apart (one long wait among short ones): each
    is within its bucket's width, and so is the value between them."""
    total = sum(counts.values())
    if not total:
        return None
    position = fraction * (total - 1)
    low = math.floor(position)
    below, above = ranked_wait(counts, low), ranked_wait(counts, min(low + 1, total - 1))
    return below + (above - below) * (position - low)


def ranked_wait(counts: dict[str, int], rank: int) -> float:
    """The wait of this rank (0: the shortest), read inside its bucket."""
    seen = 0
    for b, n in sorted((int(key), n) for key, n in counts.items()):
        if rank < seen + n:
            share = (rank - seen + 0.5) / n
            if b == 0:
                return share
            low = 2 ** ((b - 1) / PER_DOUBLING)
            return low * 2 ** (share / PER_DOUBLING)
        seen += n
    raise AssertionError("unreachable: rank < total")


# Reading rolled-up days back.


def read(tenants: list[int], first: date, end: date) -> "reports.Part":
    """The tenants' rolled-up usage over the days [first, end), as a report part."""
    part = reports.Part()
    days = UsageDay.objects.filter(tenant_id__in=tenants, day__gte=first, day__lt=end)
    for row in days.order_by():
        finished = (row.jobs_succeeded, row.jobs_failed, row.jobs_canceled)
        part.add_jobs(row.tenant_id, dict(zip(usage_queries.OUTCOMES, finished, strict=True)))
        part.add_waits(row.tenant_id, row.jobs_started, row.wait_seconds, row.wait_buckets)
    read_usage(part, tenants, first, end)
    return part


def read_usage(part: "reports.Part", tenants: list[int], first: date, end: date) -> None:
    """Add the tenants' rolled-up usage by GPU type over the days [first, end) to `part`: one
    query (a report prices a stretch of its window from it)."""
    types = (
        GpuTypeUsageDay.objects.filter(tenant_id__in=tenants, day__gte=first, day__lt=end)
        .values("tenant_id", "gpu_type")
        .annotate(
            gpu=Sum("gpu_seconds"), cpu=Sum("cpu_core_seconds"),
            wasted=Sum("wasted_gpu_seconds"), preempted=Sum("preempted_gpu_seconds"),
            measured=Sum("cpu_core_seconds_measured"), busy=Sum("cpu_core_seconds_busy"),
            unused=Sum("memory_mib_seconds_unused"), ran=Sum("succeeded_run_seconds"),
            limits=Sum("succeeded_limit_seconds"), gpu_measured=Sum("gpu_seconds_measured"),
            gpu_busy=Sum("gpu_seconds_busy"),
        )
        .order_by()
    )  # fmt: skip
    for row in types:
        seconds = [row[k] for k in ("gpu", "cpu", "wasted", "preempted", "measured", "busy")]
        seconds += [row["unused"] / usage_queries.MIB_PER_GIB, row["ran"], row["limits"],
                    row["gpu_measured"], row["gpu_busy"]]  # fmt: skip
        usage = usage_queries.TypeUsage(row["gpu_type"], *(s / 3600 for s in seconds))
        part.add_usage(row["tenant_id"], usage)


def read_days(tenants: list[int], first: date, end: date):
    """The tenants' rolled-up GPU-seconds and CPU core-seconds per day and GPU type over the
    days [first, end), for a series per day: (tenant id, day, GPU type, GPU-seconds,
    core-seconds), in one query."""
    return (
        GpuTypeUsageDay.objects.filter(tenant_id__in=tenants, day__gte=first, day__lt=end)
        .values_list("tenant_id", "day", "gpu_type")
        .annotate(gpu=Sum("gpu_seconds"), cpu=Sum("cpu_core_seconds"))
        .order_by()
    )

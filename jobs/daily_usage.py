"""Usage over time: each tenant's GPU-hours and CPU core-hours per UTC day over a window
[since, until), by GPU type: the usage report's figures (jobs.reports) day by day, so a team
sees its trend and the days add up to the report's totals over the same window.

The same request as the report's (``since``, ``until``, ``tenant``, read by reports.window and
reports.pick_tenants, so the same checks and the same refusals), and the same split of the
window: the whole days the daily roll-up has written are read from its rows, one row per
tenant, day and GPU type; the rest (a partial first or last day, the days not rolled up yet)
from the attempts, each run clipped to the window and split at the midnights it crosses, in
one grouped query per stretch (usage_queries.daily_rows; ``spread`` lays its groups out over
their days). A few queries whatever the window's length: the clock, the tenants, how far the
roll-up has gone, its days, and the attempts of at most two stretches.

Served as GET /api/v1/usage/daily/ (jobs.usage_api), drawn on the usage page as stacked bars
(``drawn``, jobs.usage_chart), downloaded as /usage-daily.csv and printed by CLI
``usage --daily``.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from jobs import report_rows, reports, rollup, usage_chart
from jobs.clock import database_now
from jobs.usage_queries import daily_rows, type_order

ONE_DAY = timedelta(days=1)
DAY_S = 86_400
# The CSV's columns (its window's after them, as the other usage CSVs).
COLUMNS = ["day", "tenant", "gpu_type", "gpu_hours", "cpu_core_hours"]


@dataclass
class TypeHours:
    """A tenant's use of one GPU type on one day: "" runs no GPU, None lost its records."""

    gpu_type: str | None
    gpu_hours: float = 0.0
    cpu_core_hours: float = 0.0


@dataclass
class DailyUsage:
    since: datetime
    until: datetime
    now: datetime  # the database's time: running attempts count up to min(now, until)
    pruned_before: datetime | None  # finished jobs ended before it may have been deleted
    rolled_up: tuple[date, date] | None  # the days [first, end) read from the roll-up
    tenants: list  # the tenants asked for (quotas.Tenant), by name
    # By day, tenant id and GPU type: what was used. Days and tenants without use are absent.
    used: dict[date, dict[int, dict[str | None, TypeHours]]] = field(default_factory=dict)

    @property
    def days(self) -> list[date]:
        """Every day the window touches: the first and last partial where since or until is
        not a midnight."""
        last = (self.until - timedelta(microseconds=1)).date()
        return [self.since.date() + n * ONE_DAY for n in range((last - self.since.date()).days + 1)]

    @property
    def incomplete(self) -> bool:
        return reports.read_before_pruned(self)

    def add(self, day: date, tenant: int, gpu_type: str | None, gpu_s: float, cpu_s: float):
        types = self.used.setdefault(day, {}).setdefault(tenant, {})
        hours = types.setdefault(gpu_type, TypeHours(gpu_type))
        hours.gpu_hours += gpu_s / 3600
        hours.cpu_core_hours += cpu_s / 3600

    def of(self, day: date, tenant, gpu_type: str | None) -> TypeHours:
        """A tenant's use of a GPU type on a day (zeros: none)."""
        found = self.used.get(day, {}).get(tenant.pk, {}).get(gpu_type)
        return found or TypeHours(gpu_type)

    def by_type(self, day: date, tenant) -> list[TypeHours]:
        """A tenant's use on a day, a row per GPU type (named types first)."""
        return sorted(self.used.get(day, {}).get(tenant.pk, {}).values(), key=type_order)

    def total(self, day: date, tenant) -> TypeHours:
        """A tenant's use on a day, its GPU types summed, as GPU type "all"."""
        rows = self.by_type(day, tenant)
        return TypeHours("all", sum(r.gpu_hours for r in rows), sum(r.cpu_core_hours for r in rows))

    def rows(self) -> list[list[str]]:
        """As table cells (the CSV, the CLI's lines): per day and tenant a row of GPU type
        "all", zeros included, then a row for each GPU type it used."""
        return [[f"{day:%Y-%m-%d}", t.slug, report_rows.type_label(u.gpu_type),
                 f"{u.gpu_hours:.2f}", f"{u.cpu_core_hours:.2f}"]
                for day in self.days for t in self.tenants
                for u in [self.total(day, t), *self.by_type(day, t)]]  # fmt: skip

    def as_json(self) -> dict:
        return {
            **report_rows.window_json(self),
            "tenants": [{"tenant": t.slug, "name": t.name} for t in self.tenants],
            "days": [{"day": day, "tenants": [self.tenant_json(day, t) for t in self.tenants]}
                     for day in self.days],
        }  # fmt: skip

    def tenant_json(self, day: date, tenant) -> dict:
        total = self.total(day, tenant)
        return {"tenant": tenant.slug, **hours_json(total),
                "by_gpu_type": [{"gpu_type": u.gpu_type, **hours_json(u)}
                                for u in self.by_type(day, tenant)]}  # fmt: skip


def hours_json(u: TypeHours) -> dict[str, float | None]:
    return {"gpu_hours": report_rows.rounded(u.gpu_hours),
            "cpu_core_hours": report_rows.rounded(u.cpu_core_hours)}  # fmt: skip


# Reading it.


def requested(params, tenants) -> DailyUsage:
    """The series a request's parameters ask for: ``since``, ``until`` and ``tenant``, read as
    the usage report reads them (reports.requested); BadParameter names the first wrong."""
    now = database_now()
    since, until = reports.window(params.get("since"), params.get("until"), now)
    return daily(reports.pick_tenants(tenants, params.get("tenant")), since, until, now)


def daily(tenants: list, since: datetime, until: datetime, now: datetime) -> DailyUsage:
    """The tenants' use per day over [since, until), attempts still running counted up to
    ``now``: the whole days the roll-up has written from it, the rest from the attempts."""
    ids = [t.pk for t in tenants]
    span = reports.rolled_span(since, until)
    found = DailyUsage(since, until, now, reports.pruned_before(now), span, tenants)
    if span:
        for tenant, day, gpu_type, gpu_s, cpu_s in rollup.read_days(ids, *span):
            found.add(day, tenant, gpu_type, gpu_s, cpu_s)
    for start, end in reports.live_pieces(since, until, span):
        for row in daily_rows(ids, start, end, now):
            gpus = spread(row["first"], row["last"], row["milli_gpus"] / 1000,
                          row["gpu_before"], row["gpu_to_end"])  # fmt: skip
            cores = spread(row["first"], row["last"], row["milli_cores"] / 1000,
                           row["cpu_before"], row["cpu_to_end"])  # fmt: skip
            for (day, gpu_s), (_, cpu_s) in zip(gpus, cores, strict=True):
                # Runs that end at a midnight use nothing of the day they end on.
                if gpu_s or cpu_s:
                    found.add(day, row["job__tenant_id"], row["gpu_type"], gpu_s, cpu_s)
    return found


def spread(first: date, last: date, held: float, before: float, to_end: float) -> Iterator:
    """A group of runs that start on day `first` and end on day `last` (usage_queries
    .daily_rows) laid out over its days, as (day, seconds of what they held): `held` (their
    GPUs, or cores, summed) the whole of each day, less what they held `before` their start
    on the first day, and only up `to_end` on the last (to_end - before when they are one)."""
    if first == last:
        yield first, to_end - before
        return
    yield first, held * DAY_S - before
    for n in range(1, (last - first).days):
        yield first + n * ONE_DAY, held * DAY_S
    yield last, to_end


# Drawing it.


def drawn(series: DailyUsage) -> dict:
    """The usage page's chart of GPU-hours per day: stacked by team, or by GPU type when one
    team is shown; the legend, and the same figures as a table (a row per day)."""
    days = series.days
    if len(series.tenants) == 1:
        (tenant,) = series.tenants
        types = sorted({u.gpu_type for d in days for u in series.by_type(d, tenant)},
                       key=lambda kind: type_order(TypeHours(kind)))  # fmt: skip
        named = [
            (report_rows.type_label(kind), [series.of(d, tenant, kind).gpu_hours for d in days])
            for kind in types
        ]
        by, other = "GPU type", "other types"
    else:
        named = [(t.slug, [series.total(d, t).gpu_hours for d in days]) for t in series.tenants]
        by, other = "team", "other teams"
    named = [(name, values) for name, values in named if any(values)]  # work without GPUs
    chart = usage_chart.stacked([f"{d:%Y-%m-%d}" for d in days], named, other)
    table = [[f"{d:%Y-%m-%d}", *(f"{values[n]:.2f}" for _, values in chart.series),
              f"{sum(values[n] for _, values in chart.series):.2f}"]
             for n, d in enumerate(days)]  # fmt: skip
    return {"chart": chart, "by": by, "table": table}

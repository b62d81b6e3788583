"""Usage reports (showback, chargeback): what each tenant used over a window [since, until).

Per tenant and GPU type, from the attempts:

- GPU-hours used: each attempt's run (``started_at`` to ``ended_at``, or to now while it runs)
  clipped to the window, times its GPUs: workers x whole GPUs, or workers x gpu_milli / 1000
  for a share, its workers being those it started with (``Attempt.workers``: an elastic gang
  may start with fewer than its job asks). Before its start (placed, workers not all running)
  the attempt held its GPUs without using them: that time is in its waste, not here, so a
  placed attempt that never started used nothing.
- CPU core-hours: the same run times workers x cpu_milli / 1000.
- GPU-hours wasted (``Attempt.wasted_gpu_seconds``) of attempts ended in the window, and the
  part of it of preempted attempts. An attempt's waste is known once it ends: it counts whole
  in the window of its end.
- Right-sizing (Slurm's seff, summed), of attempts ended in the window whose use their agent
  measured, over their whole runs, counted in the window of their end as waste is: the
  core-hours they asked for, those they kept busy (their CPU time), the share busy (CPU
  efficiency), and the memory they asked for beyond their largest worker's peak, in GiB-hours
  (request minus peak, times workers, times the run); and of the attempts that succeeded in
  the window, their runs and their runtime limits (runtime efficiency: the share of the limits
  they ran); of the attempts ended in the window whose GPU time was measured, the GPU-hours
  they asked for over their whole runs and those busy (GPU efficiency).

Per tenant, from the jobs: jobs finished in the window by state, and the queue wait of jobs
started in the window: how many, mean, 95th percentile. A job's queue wait runs from when it
became eligible to run (``Job.eligible_at``: not held, its dependencies met, past its retry
backoff; Slurm's EligibleTime) to its first start, so the time its team held it or chained it
behind other jobs is not the queue's; a job started with no eligibility recorded (from before
it was) waits from its submission (``eligible_since``).

The GPU type of an attempt is the one the commit recorded on it (``Attempt.gpu_type``, its
first worker's; "" for CPU-only work): it outlives the allocation rows, which are deleted after
MLSCHED_LOG_RETENTION_DAYS. An attempt placed before it was recorded, whose rows had gone by
then, counts under an unknown type (None). Finished jobs, with their attempts, are deleted
after MLSCHED_JOB_RETENTION_DAYS: nothing from before is counted (``Report.pruned_before``).

Costs (chargeback in money, jobs/costs.py): each row's GPU-hours at its GPU type's price and
CPU core-hours at the core-hour's, from the rate card (quotas.Rate) in force on the days they
were used: the window cut at each midnight inside it from which a price changes, each
stretch's hours priced at its prices and a row's cost the sum of its stretches'; a tenant's
total the sum of its rows', in the platform's currency (MLSCHED_CURRENCY); the flavors used
where no rate was in force cost nothing and are named (``unpriced``). A split's values are
priced by the GPU types of their hours, stretch by stretch too.

Five queries whatever the number of jobs: the tenants, the attempts (one grouped aggregate),
the finished jobs, the started jobs and the rate card; one more for a split by a label's values
(``by_label``, from the attempts over the whole window: the roll-up keeps no labels), and one
for each split by what every job has (``SPLITS``: the users who submitted the jobs,
``by_user``, Slurm's sreport user top; their priority classes, ``by_class``, as sreport splits
by QOS; read the same way). A price changing inside the window costs more: each stretch's
hours by GPU type and its splits are read again (the figures stay the whole window's).
The 95th percentile is PostgreSQL's percentile_cont; on SQLite (the embedded mode) the started
jobs' waits are read and interpolated the same way.

The queries, and TypeUsage, the figures they give, are jobs/usage_queries.py's; a tenant's
figures and how they are written out (cells, JSON), jobs/report_rows.py's; here the request is
read, the window split between the roll-up's whole days and the jobs, and the report laid out
as a table and as JSON.
"""

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db.models import F

from clusters.models import LABEL_KEY
from jobs import rollup
from jobs.clock import database_now
from jobs.costs import Cost, RateCard, Stretch, Tables, row_costs, total, written
from jobs.models import LabelValue
from jobs.report_rows import (
    TenantUsage,
    cost_json,
    hours,
    sizing,
    summed,
    tenant_json,
    type_label,
    window_json,
)
from jobs.serializers import flag
from jobs.usage_queries import (
    OUTCOMES,
    TypeUsage,
    attempt_usage,
    finished_jobs,
    queue_waits,
    split_usage,
    started_waits,
    type_order,
)

DEFAULT_DAYS = 30
ONE_DAY = timedelta(days=1)
MAX_DAYS = 366
# ISO 8601 allows more (2025W091, 20250301): the API takes this one form. Years from 1000.
DATE = re.compile(r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}")

# The table's columns: the CSV's header, and the portal's headings (the page writes the
# currency into each cost: no column of its own).
USED_COLUMNS = ["gpu_hours", "cpu_core_hours", "wasted_gpu_hours", "preempted_gpu_hours"]
COST_COLUMNS = ["cost", "wasted_cost", "currency"]
SIZING_COLUMNS = ["cpu_core_hours_measured", "cpu_core_hours_busy", "cpu_efficiency",
                  "memory_gib_hours_unused", "succeeded_run_hours", "succeeded_limit_hours",
                  "runtime_efficiency", "gpu_hours_measured", "gpu_hours_busy",
                  "gpu_efficiency"]  # fmt: skip
COLUMNS = ["tenant", "gpu_type", *USED_COLUMNS, *COST_COLUMNS, "jobs_succeeded", "jobs_failed",
           "jobs_canceled", "jobs_started", "mean_wait_s", "p95_wait_s",
           *SIZING_COLUMNS]  # fmt: skip
HEADINGS = ["Team", "GPU type", "GPU-hours", "CPU core-hours", "Wasted GPU-hours",
            "of which preempted", "Cost", "Wasted cost", "Succeeded", "Failed", "Canceled",
            "Started", "Mean wait (s)", "p95 wait (s)", "Measured core-hours", "Busy core-hours",
            "CPU efficiency", "Unused memory GiB-hours", "Succeeded: run hours",
            "of limit hours", "Runtime efficiency", "Measured GPU-hours", "Busy GPU-hours",
            "GPU efficiency"]  # fmt: skip
# The split by a label as a CSV file's columns: a row per tenant and value ("labelled" false:
# its jobs without the label), and every figure.
LABEL_COLUMNS = ["tenant", "label", "value", "labelled", *USED_COLUMNS, *COST_COLUMNS,
                 *SIZING_COLUMNS]  # fmt: skip
# The splits by what every job has (`?by_<name>=1`): what each reads of an attempt's job, and
# the heading of its column on the usage page.
SPLITS = {"user": (F("job__owner__username"), "User"),
          "class": (F("job__priority_class__name"), "Priority class")}  # fmt: skip


# The tables of a report's usage its rows are priced from (jobs.costs), beside SPLITS' (by
# their names): its rows by GPU type, and its split by a label's values.
BY_TYPE, BY_LABEL = "gpu_type", "label"


def split_columns(name: str) -> list[str]:
    """A split's CSV columns, as the split by label's: a row per tenant and value."""
    return ["tenant", name, *USED_COLUMNS, *COST_COLUMNS, *SIZING_COLUMNS]


USER_COLUMNS = split_columns("user")


class BadParameter(ValueError):
    """A report parameter the caller got wrong: which one, and why."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.field, self.message = name, message


# 1. What is asked: the window and the tenants.


def requested(params, tenants) -> "Report":
    """The report a request's parameters ask for: ``since`` and ``until`` (YYYY-MM-DD, midnight
    UTC; until defaults to now, since to 30 days before until), ``tenant`` (a slug; every
    one of ``tenants`` without it), ``by_label`` (a label key: each tenant's usage split by
    its jobs' values of that label too) and, for each of SPLITS, ``by_<name>`` (1: split by
    the users who submitted its jobs, or their priority classes, too). BadParameter names the
    first one wrong."""
    now = database_now()
    since, until = window(params.get("since"), params.get("until"), now)
    key = label_key(params.get("by_label"))
    splits = tuple(name for name in SPLITS if split_asked(params, name))
    return usage(pick_tenants(tenants, params.get("tenant")), since, until, now, key, splits)


def split_asked(params, name: str) -> bool:
    """Whether `by_<name>` asks for the split by it."""
    text = params.get(f"by_{name}")
    try:
        return flag(text) if text else False
    except ValueError as bad:
        raise BadParameter(f"by_{name}", str(bad)) from None


def label_key(text: str | None) -> str | None:
    if text and not re.fullmatch(LABEL_KEY, text):
        raise BadParameter("by_label", "A label key: printable characters, no spaces.")
    return text or None


def window(since: str | None, until: str | None, now: datetime) -> tuple[datetime, datetime]:
    """[since, until) from the caller's dates, at most MAX_DAYS long."""
    start = day("since", since) if since else None
    end = day("until", until) if until else now
    start = start or end - timedelta(days=DEFAULT_DAYS)
    if end <= start:
        raise BadParameter("until", f"Must be after since ({start:%Y-%m-%d %H:%M} UTC).")
    if end - start > timedelta(days=MAX_DAYS):
        raise BadParameter("until", f"At most {MAX_DAYS} days after since.")
    return start, end


def day(name: str, text: str) -> datetime:
    """A YYYY-MM-DD date as its midnight, UTC."""
    try:
        parsed = date.fromisoformat(text) if DATE.fullmatch(text) else None
    except ValueError:  # 2025-02-30
        parsed = None
    if parsed is None:
        raise BadParameter(name, "A date: YYYY-MM-DD.")
    return datetime.combine(parsed, time(), tzinfo=UTC)


def pick_tenants(tenants, slug: str | None) -> list:
    """The tenants to report on, by name: all of ``tenants``, or the one ``slug`` names. A
    slug outside them is refused as an unknown one is: the answer does not tell another
    tenant's slug from a made-up one."""
    if slug:
        tenants = tenants.filter(slug=slug)
    found = list(tenants.order_by("name"))
    if slug and not found:
        raise BadParameter("tenant", "None of your tenants has this slug.")
    return found


# 2. The figures.


@dataclass
class Report:
    since: datetime
    until: datetime
    now: datetime  # the database's time: running attempts count up to min(now, until)
    pruned_before: datetime | None  # finished jobs ended before it may have been deleted
    tenants: list[TenantUsage]
    rolled_up: tuple[date, date] | None = None  # the days [first, end) read from the roll-up
    label: str | None = None  # the label key each tenant's by_label splits its usage by
    splits: tuple[str, ...] = ()  # of SPLITS, those each tenant's by_split splits its usage by
    currency: str = ""  # of the costs (MLSCHED_CURRENCY)
    unpriced: list[str] = field(default_factory=list)  # the flavors used that have no rate
    priced: bool = False  # whether the rate card has any rate (the page links to it)

    def total_cost(self) -> Cost:
        """Its tenants' costs summed."""
        return total(t.total_cost() for t in self.tenants)

    @property
    def split_incomplete(self) -> bool:
        """Whether a split (by label, by user), read from the attempts over the whole window
        (the roll-up keeps neither), reaches back before what retention keeps."""
        return self.pruned_before is not None and self.since < self.pruned_before

    @property
    def incomplete(self) -> bool:
        return read_before_pruned(self)

    def rows(self, shown: bool = False) -> list[list[str]]:
        """The report as table cells (the CSV, in COLUMNS' order): per tenant a row of GPU
        type "all" with its totals and its jobs' figures, then a row for each GPU type.
        `shown`: as the portal's table draws them, each cost with its currency."""
        money = self.shown if shown else self.money
        out = []
        for t in self.tenants:
            waits = [t.mean_wait_s, t.p95_wait_s]
            jobs = [*(str(t.finished[s]) for s in OUTCOMES), str(t.started),
                    *("" if w is None else f"{w:.0f}" for w in waits)]  # fmt: skip
            out.append([t.slug, "all", *hours(t.total()), *money(t.total_cost()), *jobs,
                        *sizing(t.total())])  # fmt: skip
            out += [[t.slug, type_label(u.gpu_type), *hours(u), *money(t.costs[u.gpu_type]),
                     *[""] * len(jobs), *sizing(u)] for u in t.by_type]  # fmt: skip
        return out

    def shown_rows(self) -> list[list[str]]:
        """The portal's table: rows(shown=True)."""
        return self.rows(shown=True)

    def total_shown(self) -> list[str]:
        """The report's total cost and wasted cost as the portal writes them."""
        return self.shown(self.total_cost())

    def money(self, cost: Cost) -> list[str]:
        """A row's costs as CSV cells: figures, and the currency."""
        return [f"{cost.used:.2f}", f"{cost.wasted:.2f}", self.currency]

    def shown(self, cost: Cost) -> list[str]:
        """A row's costs as the portal writes them: "1,234.50 USD"."""
        return [written(cost.used, self.currency), written(cost.wasted, self.currency)]

    def label_rows(self) -> list[list[str]]:
        """The split by label as table cells: per tenant a row for each value of the label
        ("(none)": its jobs without it)."""
        return [[t.slug, "(none)" if u.gpu_type is None else u.gpu_type, *hours(u),
                 *self.shown(cost)] for t in self.tenants for u, cost in t.labelled()]  # fmt: skip

    def split_rows(self, name: str) -> list[list[str]]:
        """A split of SPLITS as table cells: per tenant a row for each value (a user)."""
        return [[t.slug, u.gpu_type or "", *hours(u), *self.shown(cost)]
                for t in self.tenants for u, cost in t.split_of(name)]  # fmt: skip

    def split_cells(self, name: str) -> list[list[str]]:
        """A split of SPLITS as split_columns' cells, every figure."""
        return [[t.slug, u.gpu_type or "", *hours(u), *self.money(cost), *sizing(u)]
                for t in self.tenants for u, cost in t.split_of(name)]  # fmt: skip

    def label_split(self) -> list[list[str]]:
        """The split by label as LABEL_COLUMNS' cells, every figure."""
        return [[t.slug, self.label or "", u.gpu_type or "", "false" if u.gpu_type is None
                 else "true", *hours(u), *self.money(cost), *sizing(u)]
                for t in self.tenants for u, cost in t.labelled()]  # fmt: skip

    def as_json(self) -> dict:
        return {
            # Whole days read from the daily roll-up: their 95th percentile wait is read from
            # counts in buckets (within 19 %).
            **window_json(self),
            "currency": self.currency,
            **cost_json(self.total_cost()),
            "unpriced": self.unpriced,
            "tenants": [tenant_json(t, self.label, self.splits) for t in self.tenants],
            **({"by_label": self.label, "by_label_incomplete": self.split_incomplete}
               if self.label else {}),
            **{f"by_{name}_incomplete": self.split_incomplete for name in self.splits},
        }  # fmt: skip


def read_before_pruned(report) -> bool:
    """Whether a part of a report's window (a Report's, a daily series') read from the jobs
    reaches back before what retention keeps (the rolled-up days outlive it)."""
    live = live_pieces(report.since, report.until, report.rolled_up)
    return report.pruned_before is not None and any(s < report.pruned_before for s, _ in live)


def usage(
    tenants: list,
    since: datetime,
    until: datetime,
    now: datetime,
    label: str | None = None,
    splits: tuple[str, ...] = (),
) -> Report:
    """The tenants' usage over [since, until), attempts still running counted up to ``now``:
    the whole days the daily roll-up has written read from it, the rest from the jobs. With a
    `label` key, each tenant's usage split by its jobs' values of it too, and by each of
    `splits` (SPLITS: the users who submitted them, their classes), each from the attempts
    over the whole window (the roll-up keeps none of them). Every row priced at the rate card
    in force on the days its hours were used (jobs.costs)."""
    ids = [t.pk for t in tenants]
    span = rolled_span(since, until)
    live = live_pieces(since, until, span)
    parts = [rollup.read(ids, *span)] if span else []
    # The window read from the jobs alone keeps its exact percentile.
    parts += [live_part(ids, start, end, now, exact=not span) for start, end in live]
    whole = Part.merge(parts)
    card = RateCard.read()
    split = split_tables(ids, since, until, now, label, splits)

    def read(start: datetime, end: datetime) -> Tables:
        return stretch_tables(ids, start, end, now, span, label, splits)

    stretches = card.stretches(since, until, {BY_TYPE: by_type_table(whole), **split}, read)
    found = [tenant_usage(t, whole, split, stretches) for t in tenants]
    # Read once every row is priced: the flavors the rows used where no rate was in force.
    return Report(since, until, now, pruned_before(now), found, span, label, splits,
                  card.currency, card.unpriced, card.priced)  # fmt: skip


def tenant_usage(t, whole: "Part", split: Tables, stretches: list[Stretch]) -> TenantUsage:
    """One tenant's figures of the report's, each row priced stretch by stretch."""
    waits = whole.waits.get(t.pk, Waits())
    by_type = sorted(whole.usage.get(t.pk, {}).values(), key=type_order)
    values = {name: rows.get(t.pk, {}) for name, rows in split.items()}
    costs = {name: row_costs(stretches, name, t.pk, found) for name, found in values.items()}
    labelled, label_costs = values.pop(BY_LABEL, {}), costs.pop(BY_LABEL, {})
    return TenantUsage(
        t.slug, t.name, by_type, by_label=value_rows(labelled),
        by_split={name: value_rows(found) for name, found in values.items()},
        finished=whole.finished.get(t.pk, dict.fromkeys(OUTCOMES, 0)), started=waits.started,
        mean_wait_s=waits.mean(), p95_wait_s=waits.p95(),
        costs=row_costs(stretches, BY_TYPE, t.pk, [u.gpu_type for u in by_type]),
        label_costs=label_costs, split_costs=costs,
    )  # fmt: skip


def value_rows(values: dict) -> list[TypeUsage]:
    """A tenant's split (split_usage's: by value, its hours by GPU type) as a row per value,
    its GPU types summed."""
    return sorted((summed(value, usages) for value, usages in values.items()), key=type_order)


def rolled_span(since: datetime, until: datetime) -> tuple[date, date] | None:
    """The whole days [first, end) of the window that the roll-up has written, if any."""
    days = rollup.rolled_days()
    if days is None:
        return None
    return whole_days(since, until, (days[0], days[1] + ONE_DAY))


def whole_days(since: datetime, until: datetime, days) -> tuple[date, date] | None:
    """Of the days [first, end) `days` (None: none), those lying whole inside [since, until)."""
    if days is None:
        return None
    first = since.date() if since == rollup.midnight(since.date()) else since.date() + ONE_DAY
    first, end = max(first, days[0]), min(days[1], until.date())
    return (first, end) if first < end else None


def live_pieces(since, until, span) -> list[tuple[datetime, datetime]]:
    """The window less the rolled-up days: what is read from the jobs."""
    if span is None:
        return [(since, until)]
    first, end = rollup.midnight(span[0]), rollup.midnight(span[1])
    return [(start, stop) for start, stop in ((since, first), (end, until)) if start < stop]


def live_part(ids, since, until, now, *, exact: bool) -> "Part":
    """The tenants' usage over [since, until) from their attempts and jobs; the queue waits'
    95th percentile computed (``exact``) or the waits counted in the roll-up's buckets."""
    part = Part(finished=finished_jobs(ids, since, until))
    for tenant, usages in attempt_usage(ids, since, until, now).items():
        part.usage[tenant] = {u.gpu_type: u for u in usages}
    if exact:
        for tenant, (started, mean, p95) in queue_waits(ids, since, until).items():
            part.waits[tenant] = Waits(started, started * mean, exact_p95=p95)
        return part
    waits: dict[int, list[float]] = {}
    for tenant, seconds in started_waits(ids, since, until):
        waits.setdefault(tenant, []).append(seconds)
    for tenant, w in waits.items():
        part.add_waits(tenant, len(w), sum(w), rollup.count_buckets(w))
    return part


@dataclass
class Waits:
    """Queue waits of the jobs started: how many, their sum, and their 95th percentile, exact
    (from one query) or read from the roll-up's buckets."""

    started: int = 0
    seconds: float = 0.0
    buckets: dict[str, int] = field(default_factory=dict)
    exact_p95: float | None = None

    def mean(self) -> float | None:
        return self.seconds / self.started if self.started else None

    def p95(self) -> float | None:
        if self.exact_p95 is not None:
            return self.exact_p95
        return rollup.bucket_percentile(self.buckets, 0.95)


@dataclass
class Part:
    """A report's figures over part of its window, by tenant: from the jobs, or rolled up."""

    usage: dict[int, dict[str | None, TypeUsage]] = field(default_factory=dict)
    finished: dict[int, dict[str, int]] = field(default_factory=dict)
    waits: dict[int, Waits] = field(default_factory=dict)

    def add_usage(self, tenant: int, more: TypeUsage) -> None:
        types = self.usage.setdefault(tenant, {})
        had = types.get(more.gpu_type)
        if had is None:
            types[more.gpu_type] = more
            return
        summed = (a + b for a, b in zip(had.figures(), more.figures(), strict=True))
        types[more.gpu_type] = TypeUsage(more.gpu_type, *summed)

    def add_jobs(self, tenant: int, counts: dict[str, int]) -> None:
        into = self.finished.setdefault(tenant, dict.fromkeys(OUTCOMES, 0))
        for state, n in counts.items():
            into[state] += n

    def add_waits(self, tenant: int, started: int, seconds: float, buckets: dict) -> None:
        into = self.waits.setdefault(tenant, Waits())
        into.started += started
        into.seconds += seconds
        rollup.add_buckets(into.buckets, buckets)

    @classmethod
    def merge(cls, parts: list["Part"]) -> "Part":
        """One part: itself; several: summed (their waits must be in buckets)."""
        if len(parts) == 1:
            return parts[0]
        whole = cls()
        for part in parts:
            for tenant, types in part.usage.items():
                for usage in types.values():
                    whole.add_usage(tenant, usage)
            for tenant, counts in part.finished.items():
                whole.add_jobs(tenant, counts)
            for tenant, w in part.waits.items():
                whole.add_waits(tenant, w.started, w.seconds, w.buckets)
        return whole


def pruned_before(now: datetime) -> datetime | None:
    days = int(settings.MLSCHED_JOB_RETENTION_DAYS)
    return now - timedelta(days=days) if days else None


# 3. What the rows cost: the tables of usage priced (jobs.costs), by GPU type and by split.


def by_type_table(part: "Part") -> Tables:
    """A part's usage as the table of the rows by GPU type: by tenant, each GPU type's."""
    return {
        tenant: {kind: [u] for kind, u in types.items()} for tenant, types in part.usage.items()
    }


def split_tables(ids, since, until, now, label: str | None, splits: tuple[str, ...]) -> Tables:
    """The splits asked over [since, until), by tenant, value and GPU type: by the label's
    values (BY_LABEL) and by each of `splits`; one query each, from the attempts."""
    found = {}
    if label:
        found[BY_LABEL] = split_usage(ids, since, until, now, LabelValue(label, "job__labels"))
    for name in splits:
        found[name] = split_usage(ids, since, until, now, SPLITS[name][0])
    return found


def stretch_tables(ids, since, until, now, span, label, splits) -> Tables:
    """A stretch [since, until) of a report's window (cut at midnights) as its rows are priced:
    the hours by GPU type read as the report reads its window, the days of `span` inside it
    from the roll-up and the rest from the attempts; and the splits asked."""
    part = Part()
    days = whole_days(since, until, span)
    if days:
        rollup.read_usage(part, ids, *days)
    for start, end in live_pieces(since, until, days):
        for tenant, usages in attempt_usage(ids, start, end, now).items():
            for usage in usages:
                part.add_usage(tenant, usage)
    return {BY_TYPE: by_type_table(part), **split_tables(ids, since, until, now, label, splits)}

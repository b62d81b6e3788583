"""A tenant's figures in a usage report (jobs.reports), and how a report is written out: its
rows as table cells (the CSVs, the portal's tables) and as the API's JSON, every figure
rounded as the rest of the API rounds them and every cost a string of two decimals."""

from dataclasses import dataclass, field

from jobs.costs import Cost, total
from jobs.usage_queries import FIGURES, OUTCOMES, USED, TypeUsage


@dataclass
class TenantUsage:
    slug: str
    name: str
    by_type: list[TypeUsage] = field(default_factory=list)
    # Split by the values of a label (Report.label): each TypeUsage's gpu_type is a value, None
    # for the jobs without the label.
    by_label: list[TypeUsage] = field(default_factory=list)
    # Split by what every job has (Report.splits): by name of SPLITS, each gpu_type a value
    # of it (a username, a class's name).
    by_split: dict[str, list[TypeUsage]] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    started: int = 0
    mean_wait_s: float | None = None
    p95_wait_s: float | None = None
    # What each row cost at the rate card: by GPU type, by value of the label, by value of
    # each split.
    costs: dict[str | None, Cost] = field(default_factory=dict)
    label_costs: dict[str | None, Cost] = field(default_factory=dict)
    split_costs: dict[str, dict[str | None, Cost]] = field(default_factory=dict)

    def total(self) -> TypeUsage:
        """Its GPU types summed, as GPU type "all"."""
        return summed("all", self.by_type)

    def total_cost(self) -> Cost:
        """Its GPU types' costs summed."""
        return total(self.costs.values())

    def labelled(self) -> list[tuple[TypeUsage, Cost]]:
        """The split by label's rows, each with its cost."""
        return [(u, self.label_costs[u.gpu_type]) for u in self.by_label]

    def split_of(self, name: str) -> list[tuple[TypeUsage, Cost]]:
        """A split of SPLITS' rows, each with its cost (none where it was not asked)."""
        costs = self.split_costs.get(name, {})
        return [(u, costs[u.gpu_type]) for u in self.by_split.get(name, ())]


def summed(kind, usages: list[TypeUsage]) -> TypeUsage:
    """The figures of `usages` summed, as one row of `kind`."""
    return TypeUsage(kind, *map(sum, zip(*(u.figures() for u in usages), strict=True)))


def hours(usage: TypeUsage) -> list[str]:
    """What was used and wasted, as table cells."""
    return [f"{value:.2f}" for value in usage.figures()[:USED]]


def sizing(usage: TypeUsage) -> list[str]:
    """How well the work used what it asked for, as table cells."""
    return [f"{usage.cpu_core_hours_measured:.2f}", f"{usage.cpu_core_hours_busy:.2f}",
            share(usage.cpu_efficiency), f"{usage.memory_gib_hours_unused:.2f}",
            f"{usage.succeeded_run_hours:.2f}", f"{usage.succeeded_limit_hours:.2f}",
            share(usage.runtime_efficiency), f"{usage.gpu_hours_measured:.2f}",
            f"{usage.gpu_hours_busy:.2f}", share(usage.gpu_efficiency)]  # fmt: skip


def share(fraction: float | None) -> str:
    return "" if fraction is None else f"{fraction:.2f}"


def type_label(gpu_type: str | None) -> str:
    return {None: "unknown", "": "none"}.get(gpu_type, gpu_type)


def tenant_json(t: TenantUsage, label: str | None = None, splits: tuple[str, ...] = ()) -> dict:
    split = {"by_label": [row_json("value", u, cost) for u, cost in t.labelled()]}
    return {
        "tenant": t.slug,
        "name": t.name,
        **figures_json(t.total()),
        **cost_json(t.total_cost()),
        "jobs_finished": t.finished,
        "queue_wait": {
            "jobs_started": t.started,
            "mean_s": rounded(t.mean_wait_s),
            "p95_s": rounded(t.p95_wait_s),
        },
        "by_gpu_type": [row_json("gpu_type", u, t.costs[u.gpu_type]) for u in t.by_type],
        **(split if label else {}),
        **{
            f"by_{name}": [row_json(name, u, cost) for u, cost in t.split_of(name)]
            for name in splits
        },
    }


def row_json(key: str, usage: TypeUsage, cost: Cost) -> dict:
    """A row of a tenant's tables: its GPU type or value under `key`, its figures and costs."""
    return {key: usage.gpu_type, **figures_json(usage), **cost_json(cost)}


def cost_json(cost: Cost) -> dict[str, str]:
    """Costs as strings of two decimals, as DRF writes a decimal: no float's rounding."""
    return {"cost": f"{cost.used:.2f}", "wasted_cost": f"{cost.wasted:.2f}"}


def figures_json(usage: TypeUsage) -> dict[str, float | None]:
    figures = dict(zip(FIGURES, map(rounded, usage.figures()), strict=True))
    return figures | {
        "cpu_efficiency": rounded(usage.cpu_efficiency),
        "runtime_efficiency": rounded(usage.runtime_efficiency),
        "gpu_efficiency": rounded(usage.gpu_efficiency),
    }


def window_json(report) -> dict:
    """A report's window as its JSON gives it (a Report's, a daily series'): the window, to when
    running attempts were counted, what retention may have deleted, and the whole days read
    from the daily roll-up, [first, end)."""
    rolled = report.rolled_up and dict(zip(("first", "end"), report.rolled_up, strict=True))
    return {"since": report.since, "until": report.until,
            "counted_to": min(report.now, report.until), "pruned_before": report.pruned_before,
            "incomplete": report.incomplete, "rolled_up": rolled or None}  # fmt: skip


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)

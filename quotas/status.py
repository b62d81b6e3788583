"""What a team's quotas allow now, for its members: per flavor the guarantee, the borrow limit,
what the team uses, what it borrows, and how much more it may start, as the scheduler's own
quota ledger (jobs.placement.quota.Ledger) judges it from the same snapshot of running work;
with how many of its jobs are queued, and how many of them wait for quota, its GPU-hour
budget with what this month used of it, its spend alert with what this month's usage cost at
the rate card (as the usage report prices it) and what the month may cost by its end if its
running jobs run to their runtime limits (jobs.forecast), and its fair share as the last
cycle's line has it.

A flavor that nobody in the team's cohort has a quota on is not limited: it is listed while the
team uses it, with no limit.
"""

from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q
from django.utils import timezone

from clusters.models import Allocation
from jobs import budgets, forecast, recent_use, snapshot, standing
from jobs.models import Job
from jobs.placement.quota import Ledger
from jobs.states import State
from jobs.tenant_limits import gpu_scale
from quotas.models import Tenant


@dataclass(frozen=True)
class Flavor:
    """One flavor of a team's quota, in its unit (GPUs, millicores, MiB). Without a quota of
    its own on a flavor its cohort guarantees to others, the team's guarantee is 0 and its
    `borrow_limit` None: it borrows up to the cohort's idle guarantee. Where nobody in the
    cohort has a quota on the flavor, `guaranteed`, `borrow_limit` and `may_start` are None:
    nothing limits it. `borrowed` is what the team uses above its guarantee; `lend_limit`, how
    much of its guarantee the cohort may borrow while the team leaves it idle, None for all of
    it (or no quota)."""

    flavor: str
    unit: str
    guaranteed: float | None
    borrow_limit: float | None
    lend_limit: float | None
    in_use: float
    borrowed: float
    may_start: float | None


@dataclass(frozen=True)
class TeamQuotas:
    slug: str
    name: str
    cohort: str
    fair_share_weight: float
    flavors: list[Flavor]
    queued_jobs: int
    max_queued_jobs: int | None  # None: no limit
    max_gpus_per_user: int | None  # GPUs one user may hold in it at once; None: no limit
    gpu_idle_limit_min: int | None  # a job whose GPUs read idle this long is stopped; None: never
    gpu_hours_per_month: int | None  # its GPU-hour budget a calendar month; None: none
    gpu_hours_spent: float | None  # of it, what this month used so far; None: no budget
    gpu_budget_renews: datetime | None  # when the next month's budget begins; None: no budget
    # Its spend alert a calendar month, in the platform's currency (only an alert: nothing is
    # held), what this month's usage cost so far at the rate card, and that with what its
    # running jobs may still cost by the month's end at the prices in force on the days still
    # to run (jobs.forecast, an upper bound); None: no alert.
    spend_alert_per_month: Decimal | None
    cost_this_month: Decimal | None
    cost_forecast_this_month: Decimal | None
    recent_gpus: float  # GPUs it held recently, as fair share counts them (jobs.recent_use)
    your_gpus: float | None  # GPUs the reader's running jobs hold in it (None: no reader)
    waiting_for_quota: int
    allowed_images: list[str]  # the image patterns its jobs may run; []: any image
    # Why a platform admin paused its placements ("": they are not): none of its queued jobs
    # starts meanwhile.
    placements_paused: str = ""
    exclusive_allowed: bool = True  # whether its jobs may take nodes whole
    # Its fair share and turn among the teams waiting as the last placement cycle's line
    # recorded them (GET /api/v1/queue/'s fair_share); None: no job of it waited then.
    fair_share: dict | None = None

    def as_json(self) -> dict:
        """Its fields, money as strings of two decimals, as DRF writes a decimal."""
        money = ("spend_alert_per_month", "cost_this_month", "cost_forecast_this_month")
        return asdict(self) | {name: None if (amount := getattr(self, name)) is None
                               else f"{amount:.2f}" for name in money}  # fmt: skip


def unit(flavor: str) -> str:
    return {"cpu": "millicores", "memory": "MiB"}.get(flavor, "GPUs")


# The portal's units for people: cores, not millicores; GiB, not MiB.
PEOPLES_UNITS = {"cpu": ("cores", 1000), "memory": ("GiB", 1024)}


def for_people(flavor: Flavor) -> Flavor:
    """The flavor's figures in the portal's units (cores, GiB; GPUs as they are)."""
    if flavor.flavor not in PEOPLES_UNITS:
        return flavor
    unit, per = PEOPLES_UNITS[flavor.flavor]
    scaled = {name: None if value is None else value / per
              for name in ("guaranteed", "borrow_limit", "lend_limit", "in_use", "borrowed",
                           "may_start")
              for value in [getattr(flavor, name)]}  # fmt: skip
    return replace(flavor, unit=unit, **scaled)


def in_units(flavor: str, amount: int | None) -> float | None:
    """The ledger's amount in the flavor's unit: the core counts milli-GPUs."""
    return None if amount is None else amount / gpu_scale(flavor)


def of(teams: list[Tenant], reader=None) -> list[TeamQuotas]:
    """The quota status of `teams` (tenants the caller may read), in their order, with the GPUs
    the `reader`'s running jobs hold in each (what a per-user limit counts). The ledger needs
    the running work of every tenant in their cohorts, whose idle guarantee they may borrow,
    and their recent use: five queries whatever the number of teams, and those of the month's
    GPU use when one of them has a GPU-hour budget (jobs.budgets: two or three), and those of
    its usage report when one has a spend alert (jobs.budgets.spent_money) with two for its
    forecast (jobs.forecast: its live attempts, the card)."""
    cohorts = {team.cohort for team in teams}
    active = Allocation.objects.active().filter(attempt__job__tenant__cohort__in=cohorts)
    rows = list(active.values(*snapshot.ALLOCATION_FIELDS))
    known = snapshot.tenants(rows, recent_use.stored())
    yours = readers_gpus(rows, reader)
    ledger = Ledger(known)
    now = timezone.now()
    spent = budgets.spent_gpu_seconds(
        [team.pk for team in teams if team.gpu_hours_per_month is not None], now
    )
    cost = budgets.spent_money([t for t in teams if t.spend_alert_per_month is not None], now)
    forecast_cost = forecast.month_forecast(cost, now)
    recent = {t.id: t.recent_use.get("gpu", 0.0) / snapshot.GPU_MILLI for t in known}
    line = standing.Line.read()
    turns = line.turns if line is not None else {}
    # Each tenant's flavors, read off the ledger's keys once (not once per team).
    named: dict[str, set[str]] = defaultdict(set)
    for tenant, flavor in [*ledger.quota, *(k for k, amount in ledger.usage.items() if amount)]:
        named[tenant].add(flavor)
    queued = dict(
        (row["tenant_id"], row)
        for row in Job.objects.filter(tenant__in=[t.pk for t in teams], state=State.QUEUED)
        .values("tenant_id")
        .annotate(n=Count("pk"), quota=Count("pk", filter=Q(pending_reason="quota_exceeded")))
        .order_by()
    )
    return [
        TeamQuotas(
            slug=team.slug, name=team.name, cohort=team.cohort,
            fair_share_weight=team.fair_share_weight,
            flavors=flavors(ledger, str(team.pk), named[str(team.pk)]),
            queued_jobs=queued.get(team.pk, {}).get("n", 0),
            max_queued_jobs=team.max_queued_jobs,
            max_gpus_per_user=team.max_gpus_per_user,
            gpu_idle_limit_min=team.gpu_idle_limit_min,
            gpu_hours_per_month=team.gpu_hours_per_month,
            gpu_hours_spent=None if team.gpu_hours_per_month is None
            else round(spent.get(team.pk, 0.0) / 3600, 2),
            gpu_budget_renews=None if team.gpu_hours_per_month is None else budgets.renews(now),
            spend_alert_per_month=team.spend_alert_per_month,
            cost_this_month=cost.get(team.pk),
            cost_forecast_this_month=forecast_cost.get(team.pk),
            recent_gpus=round(recent.get(str(team.pk), 0.0), 2),
            your_gpus=None if reader is None else yours.get(team.pk, 0.0),
            waiting_for_quota=queued.get(team.pk, {}).get("quota", 0),
            allowed_images=team.image_patterns(),
            placements_paused=team.placements_paused,
            exclusive_allowed=team.exclusive_allowed,
            fair_share=standing.turn_json(turns.get(team.pk), team.name),
        )
        for team in teams
    ]  # fmt: skip


def readers_gpus(rows: list[dict], reader) -> dict[int, float]:
    """The GPUs the reader's running jobs hold, by tenant id, from the allocation rows."""
    milli: dict[int, int] = defaultdict(int)
    owner = None if reader is None else reader.pk
    for row in rows:
        if row["attempt__job__owner_id"] == owner and row["gpu_index"] is not None:
            milli[row["attempt__job__tenant_id"]] += row["gpu_milli"]
    return {tenant: amount / snapshot.GPU_MILLI for tenant, amount in milli.items()}


def flavors(ledger: Ledger, tenant: str, named: set[str]) -> list[Flavor]:
    """The tenant's flavors (`named`): those its cohort has quotas on, then others it uses, by
    name."""
    limited = {flavor for flavor in named if (tenant, flavor) in ledger.quota}
    out = []
    for flavor in sorted(limited) + sorted(named - limited):
        quota = ledger.quota.get((tenant, flavor))
        in_use = ledger.usage.get((tenant, flavor), 0)
        guaranteed = quota.guaranteed if quota else None
        out.append(Flavor(
            flavor=flavor, unit=unit(flavor),
            guaranteed=in_units(flavor, guaranteed),
            borrow_limit=in_units(flavor, quota.borrow_limit) if quota else None,
            lend_limit=in_units(flavor, quota.lend_limit) if quota else None,
            in_use=in_units(flavor, in_use),
            borrowed=in_units(flavor, max(in_use - (guaranteed or 0), 0)) if quota else 0.0,
            may_start=in_units(flavor, ledger.headroom(tenant, flavor)),
        ))  # fmt: skip
    return out

"""Budget alerts, as cloud budgets alert: once a tenant's month has reached 80 % and then 100 %
of its GPU-hour budget (`Tenant.gpu_hours_per_month`) or of its spend alert
(`Tenant.spend_alert_per_month`, money), its webhook is told (jobs.notify), and its owners with
an email address emailed where the platform sends email (MLSCHED_SMTP_URL), once per kind,
threshold and month. What counts of GPU-hours is what the month's attempts used, as the
scheduler counts it (`budgets.spent_gpu_seconds`), not what running jobs may still use: a
threshold is told once its hours are spent, never on a reservation. What counts of money is
what the month's usage costs at the rates in force on the days it was used, as the usage
report prices it (`budgets.spent_money`): a price raised mid-month prices the days from its
day on, not the month's earlier ones. A spend alert only alerts: the scheduler holds no work
on it.

`check` runs once a minute (beat sends `jobs.tasks.alert_budgets`; the embedded mode runs it in
a thread of the server). It reads the tenants that have a budget or a spend alert and someone
to tell, a URL or an owner to email (most deployments have none: one query, and nothing more),
and counts the month's use, or prices it, only of those with a threshold of that kind left to
tell. A threshold reached is claimed by inserting its BudgetAlert row: of two checkers racing,
the unique constraint lets one insert it, and only that one queues the notification, after its
commit. Both thresholds of a kind reached at once: both are claimed, the higher told. A budget
raised later in the month tells no threshold again that month.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from functools import partial
from typing import TypedDict
from urllib.parse import urlencode

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from jobs import budgets, notify
from jobs.costs import exact
from jobs.models import BudgetAlert
from quotas.models import Tenant

log = logging.getLogger(__name__)

PERCENTS = (80, 100)  # the thresholds, ascending
GPU_HOURS, SPEND = BudgetAlert.Kind.GPU_HOURS, BudgetAlert.Kind.SPEND


class BudgetThreshold(TypedDict):
    event: str  # "budget.threshold"
    tenant: str  # its slug
    month: str  # "2026-12", UTC
    percent: int  # the threshold reached: 80 or 100
    budget_gpu_hours: int  # the month's budget
    spent_gpu_hours: float  # what the month's attempts had used
    url: str | None  # the tenant on the portal's quota page; None without MLSCHED_PUBLIC_URL


class SpendThreshold(TypedDict):
    event: str  # "tenant.spend"
    tenant: str  # its slug
    month: str  # "2026-12", UTC
    percent: int  # the threshold reached: 80 or 100
    budget: str  # the month's spend alert, to the cent: "1000.00"
    spent: str  # what the month's usage had cost at the rate card: "812.40"
    currency: str  # of both (MLSCHED_CURRENCY)
    url: str | None  # the tenant's usage page for the month; None without MLSCHED_PUBLIC_URL


@dataclass(frozen=True)
class Reached:
    """The thresholds of one kind a tenant's month has reached and not told, ascending."""

    tenant_id: int
    month: date  # its first day
    percents: list[int]
    budget: int | Decimal  # GPU-hours, or money
    spent: float | Decimal
    kind: str = GPU_HOURS

    def figures(self) -> dict:
        """Its row's figures, those of its kind."""
        if self.kind == SPEND:
            return {"budget_spend": self.budget, "spent_spend": self.spent}
        return {"budget_gpu_hours": self.budget, "spent_gpu_hours": round(self.spent, 2)}


def check(now: datetime | None = None) -> int:
    """Claim the thresholds tenants with a budget or a spend alert and someone to tell have
    reached this month and not told, and queue their notifications after the commit; how many
    notifications it claimed."""
    now = now or timezone.now()
    return sum(claim(reached, now) for reached in untold(now))


def untold(now: datetime) -> list[Reached]:
    """The thresholds the month of `now` has reached and not told, of each tenant with a budget
    or a spend alert and someone to tell (a URL, an owner to email); its use is counted (or
    priced) only for a tenant with a threshold of that kind left to tell."""
    watched = list(
        Tenant.objects.filter(
            Q(gpu_hours_per_month__isnull=False) | Q(spend_alert_per_month__isnull=False)
        )
        .filter(~Q(notify_url="") | notify.owners_mailed())
        .only("slug", "name", "gpu_hours_per_month", "spend_alert_per_month")
        .distinct()
    )
    if not watched:
        return []  # most deployments: this one query a minute
    month = budgets.month_start(now).date()
    told = set(
        BudgetAlert.objects.filter(tenant_id__in=[t.pk for t in watched], month=month)
        .values_list("tenant_id", "kind", "percent")
    )  # fmt: skip

    def left(tenant: Tenant, kind: str) -> bool:
        return any((tenant.pk, kind, p) not in told for p in PERCENTS)

    hours = {t.pk: t.gpu_hours_per_month for t in watched
             if t.gpu_hours_per_month is not None and left(t, GPU_HOURS)}  # fmt: skip
    alerted = [t for t in watched if t.spend_alert_per_month is not None and left(t, SPEND)]
    seconds = budgets.spent_gpu_seconds(list(hours), now)
    used = {pk: spent / 3600 for pk, spent in seconds.items()}
    money = {t.pk: t.spend_alert_per_month for t in alerted}
    cost = budgets.spent_money(alerted, now)
    return [*thresholds_left(GPU_HOURS, hours, used, month, told),
            *thresholds_left(SPEND, money, cost, month, told)]  # fmt: skip


def thresholds_left(
    kind: str, budgeted: Mapping, spent: Mapping, month: date, told: set
) -> list[Reached]:
    """The thresholds of `kind` each tenant of `budgeted` ({id: budget}) has reached with what
    it `spent` ({id: amount}; none: nothing) and not `told` ((id, kind, percent))."""
    found = []
    for pk, budget in budgeted.items():
        amount = spent.get(pk, 0)
        percents = [p for p in thresholds(amount, budget) if (pk, kind, p) not in told]
        if percents:
            found.append(Reached(pk, month, percents, budget, amount, kind))
    return found


def thresholds(spent: float | Decimal, budget: float | Decimal) -> list[int]:
    """The thresholds `spent` reaches of a `budget` (GPU-hours, or money), compared as the
    decimals they print as. Nothing used reaches none, so a budget of 0 tells nothing until
    something has run, and usage without a price (no rate card) never reaches a spend alert."""
    used, limit = exact(spent), exact(budget)
    return [p for p in PERCENTS if used > 0 and used * 100 >= limit * p]


def claim(reached: Reached, now: datetime) -> int:
    """Insert the rows of the thresholds reached, in one transaction, and queue the notification
    of the highest this checker inserted once it commits. A row another checker inserted first
    is its own to tell. 1 if it queued one, else 0."""
    with transaction.atomic():
        won = [row.pk for p in reached.percents if (row := insert(reached, p, now))]
        if won:
            transaction.on_commit(partial(send, won))
    return 1 if won else 0


def insert(reached: Reached, percent: int, now: datetime) -> BudgetAlert | None:
    try:
        with transaction.atomic():  # a savepoint: a conflict leaves the claim's transaction whole
            return BudgetAlert.objects.create(
                tenant_id=reached.tenant_id, month=reached.month, kind=reached.kind,
                percent=percent, sent_at=now, **reached.figures(),
            )  # fmt: skip
    except IntegrityError:
        return None  # claimed by another checker (or the tenant deleted since)


def send(claimed: list[int]) -> None:
    """Queue the notification of the highest threshold claimed (`claimed`: their rows, ascending).
    One that cannot be queued (the broker is down) gives its claims back: the next check tells
    it."""
    from jobs import tasks  # the tasks import this module

    try:
        notify.queue(tasks.notify_budget, claimed[-1])
    except Exception:
        log.exception("budget alert %d was not queued; the next check tells it", claimed[-1])
        BudgetAlert.objects.filter(pk__in=claimed).delete()


def notification(alert_id: int) -> notify.Notification | None:
    """The notification of the threshold BudgetAlert `alert_id` claimed; None when there is
    nothing to send: the row deleted since, or nobody to tell now (its tenant's URL removed
    since, no owner with an address)."""
    alert = BudgetAlert.objects.select_related("tenant").filter(pk=alert_id).first()
    if alert is None:
        return None
    owners = notify.owners_of(alert.tenant)
    if not (alert.tenant.notify_url or owners):
        return None
    document = spend_document(alert) if alert.kind == SPEND else hours_document(alert)
    delivery = f"{document['event']}:{alert.tenant.slug}:{document['month']}:{alert.percent}"
    return notify.Notification(alert.tenant, delivery, document, owners)


def hours_document(alert: BudgetAlert) -> BudgetThreshold:
    tenant = alert.tenant
    assert alert.budget_gpu_hours is not None and alert.spent_gpu_hours is not None  # its kind's
    return BudgetThreshold(
        event="budget.threshold", tenant=tenant.slug, month=f"{alert.month:%Y-%m}",
        percent=alert.percent, budget_gpu_hours=alert.budget_gpu_hours,
        spent_gpu_hours=alert.spent_gpu_hours,
        url=notify.portal_url(f"{reverse('quotas')}#team-{tenant.slug}"),
    )  # fmt: skip


def spend_document(alert: BudgetAlert) -> SpendThreshold:
    """A spend alert's document, its link the tenant's usage report of the alert's month."""
    tenant, first = alert.tenant, datetime.combine(alert.month, time(), tzinfo=UTC)
    window = {"since": f"{first:%Y-%m-%d}", "until": f"{budgets.renews(first):%Y-%m-%d}",
              "tenant": tenant.slug}  # fmt: skip
    return SpendThreshold(
        event="tenant.spend", tenant=tenant.slug, month=f"{alert.month:%Y-%m}",
        percent=alert.percent, budget=f"{alert.budget_spend:.2f}",
        spent=f"{alert.spent_spend:.2f}", currency=settings.MLSCHED_CURRENCY,
        url=notify.portal_url(f"{reverse('usage')}?{urlencode(window)}"),
    )  # fmt: skip

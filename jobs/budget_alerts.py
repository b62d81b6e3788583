"""GPU-hour budget alerts, as cloud budgets alert: once a budgeted tenant's attempts have used
80 % and then 100 % of its month's GPU-hours (`Tenant.gpu_hours_per_month`), its webhook is
told (jobs.notify), and its owners with an email address emailed where the platform sends email
(MLSCHED_SMTP_URL), once per threshold and month. What counts is what the month's attempts
used, as the scheduler counts it (`budgets.spent_gpu_seconds`), not what running jobs may still
use: a threshold is told once its hours are spent, never on a reservation.

`check` runs once a minute (beat sends `jobs.tasks.alert_budgets`; the embedded mode runs it in
a thread of the server). It reads the tenants that have a budget and someone to tell, a URL or
an owner to email (most deployments have none: one query, and nothing more) and counts the
month's use of those with a threshold left to tell. A threshold reached is claimed by inserting
its BudgetAlert row: of two checkers racing, the unique constraint lets one insert it, and only
that one queues the notification, after its commit. Both thresholds reached at once: both are
claimed, the higher told. A budget raised later in the month tells no threshold again that
month.
"""

import logging
from dataclasses import dataclass
from datetime import date, datetime
from functools import partial
from typing import TypedDict

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from jobs import budgets, notify
from jobs.models import BudgetAlert
from quotas.models import Tenant

log = logging.getLogger(__name__)

PERCENTS = (80, 100)  # the thresholds, ascending


class BudgetThreshold(TypedDict):
    event: str  # "budget.threshold"
    tenant: str  # its slug
    month: str  # "2026-12", UTC
    percent: int  # the threshold reached: 80 or 100
    budget_gpu_hours: int  # the month's budget
    spent_gpu_hours: float  # what the month's attempts had used
    url: str | None  # the tenant on the portal's quota page; None without MLSCHED_PUBLIC_URL


@dataclass(frozen=True)
class Reached:
    """The thresholds a tenant's month has reached and not told, ascending."""

    tenant_id: int
    month: date  # its first day
    percents: list[int]
    budget: int  # GPU-hours
    spent: float  # GPU-hours


def check(now: datetime | None = None) -> int:
    """Claim the thresholds budgeted tenants with someone to tell have reached this month and
    not told, and queue their notifications after the commit; how many notifications it claimed."""
    now = now or timezone.now()
    return sum(claim(reached, now) for reached in untold(now))


def untold(now: datetime) -> list[Reached]:
    """The thresholds the month of `now` has reached and not told, of each tenant with a budget
    and someone to tell (a URL, an owner to email); its use is counted only for a tenant with a
    threshold left to tell."""
    watched = dict(
        Tenant.objects.filter(gpu_hours_per_month__isnull=False)
        .filter(~Q(notify_url="") | notify.owners_mailed())
        .values_list("pk", "gpu_hours_per_month")
        .distinct()
    )
    if not watched:
        return []  # most deployments: this one query a minute
    month = budgets.month_start(now).date()
    told = set(
        BudgetAlert.objects.filter(tenant_id__in=watched, month=month).values_list(
            "tenant_id", "percent"
        )
    )
    left = [pk for pk in watched if any((pk, p) not in told for p in PERCENTS)]
    spent = budgets.spent_gpu_seconds(left, now)
    found = []
    for pk in left:
        hours = spent.get(pk, 0.0) / 3600
        percents = [p for p in thresholds(hours, watched[pk]) if (pk, p) not in told]
        if percents:
            found.append(Reached(pk, month, percents, watched[pk], hours))
    return found


def thresholds(spent: float, budget: int) -> list[int]:
    """The thresholds `spent` GPU-hours have reached of a `budget` of GPU-hours. Nothing used
    reaches none, so a budget of 0 tells nothing until something has run."""
    return [p for p in PERCENTS if spent > 0 and spent * 100 >= budget * p]


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
                tenant_id=reached.tenant_id, month=reached.month, percent=percent,
                budget_gpu_hours=reached.budget, spent_gpu_hours=round(reached.spent, 2),
                sent_at=now,
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
    tenant, month = alert.tenant, f"{alert.month:%Y-%m}"
    document = BudgetThreshold(
        event="budget.threshold", tenant=tenant.slug, month=month, percent=alert.percent,
        budget_gpu_hours=alert.budget_gpu_hours, spent_gpu_hours=alert.spent_gpu_hours,
        url=notify.portal_url(f"{reverse('quotas')}#team-{tenant.slug}"),
    )  # fmt: skip
    delivery = f"budget.threshold:{tenant.slug}:{month}:{alert.percent}"
    return notify.Notification(tenant, delivery, document, owners)

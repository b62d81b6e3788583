"""Tenants' GPU-hour budgets (`Tenant.gpu_hours_per_month`, Slurm's GrpTRESMins), on the
control plane's side: the period, a calendar month in UTC, and what each budgeted tenant's
attempts used of GPUs in it so far, as the usage report counts GPU-hours (each attempt's run
clipped to the month, times its GPUs; a running one up to now): the whole days the daily
roll-up has written from it, the rest from the attempts. The core decides what fits
(`jobs.placement.budget`).

Tenants' spend alerts (`Tenant.spend_alert_per_month`) count the same month in money: what its
usage costs at the rates in force on the days it was used, exactly as the usage report prices
it (its report for the month, jobs.reports and jobs.costs). Nothing is held on them
(jobs.budget_alerts tells)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Sum

from jobs import reports
from jobs.models import GpuTypeUsageDay


def month_start(moment: datetime) -> datetime:
    """The first moment of the moment's month, in UTC."""
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def renews(moment: datetime) -> datetime:
    """When the month of ``moment`` ends and a new budget begins."""
    start = month_start(moment)
    return (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )


def spent_gpu_seconds(tenant_ids: list[int], now: datetime) -> dict[int, float]:
    """GPU-seconds each tenant's attempts used this month up to ``now``: the month's rolled-up
    days summed, and one grouped query over the attempts of the rest (the days since the last
    rolled up: a day or two once retention runs daily); none for no tenant."""
    if not tenant_ids:
        return {}
    start = month_start(now)
    span = reports.rolled_span(start, now)
    spent: dict[int, float] = defaultdict(float)
    if span:
        days = GpuTypeUsageDay.objects.filter(
            tenant_id__in=tenant_ids, day__gte=span[0], day__lt=span[1]
        )
        for tenant, seconds in (
            days.values_list("tenant_id").annotate(Sum("gpu_seconds")).order_by()
        ):
            spent[tenant] += seconds
    for since, until in reports.live_pieces(start, now, span):
        for tenant, usages in reports.attempt_usage(tenant_ids, since, until, now).items():
            spent[tenant] += sum(u.gpu_hours for u in usages) * 3600
    return dict(spent)


def spent_money(tenants: list, now: datetime) -> dict[int, Decimal]:
    """What each tenant's usage this month up to ``now`` costs at the rates in force on the days
    it was used: the total cost of its usage report of the month (the sum of its rows' costs,
    in MLSCHED_CURRENCY; 0 without a card), by tenant id: a price raised from a day of the
    month prices the days from it alone. The report's queries (five or so, one of them the
    card; more where a price changes within the month); none for no tenant."""
    if not tenants:
        return {}
    report = reports.usage(tenants, month_start(now), now, now)
    return {t.pk: usage.total_cost().used for t, usage in zip(tenants, report.tenants, strict=True)}

"""Tenants' GPU-hour budgets (`Tenant.gpu_hours_per_month`, Slurm's GrpTRESMins), on the
control plane's side: the period, a calendar month in UTC, and what each budgeted tenant's
attempts used of GPUs in it so far, as the usage report counts GPU-hours (each attempt's run
clipped to the month, times its GPUs; a running one up to now). The core decides what fits
(`jobs.placement.budget`)."""

from __future__ import annotations

from datetime import UTC, datetime

from jobs import reports


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
    """GPU-seconds each tenant's attempts used this month up to ``now``: one grouped query
    over the month's attempts of these tenants (none for no tenant)."""
    if not tenant_ids:
        return {}
    used = reports.attempt_usage(tenant_ids, month_start(now), now, now)
    return {tenant: sum(u.gpu_hours for u in usages) * 3600 for tenant, usages in used.items()}

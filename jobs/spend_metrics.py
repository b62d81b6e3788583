"""This month's spend of every tenant with a spend alert, as /metrics gives it
(`mlsched_tenant_spend_month`, `mlsched_tenant_spend_alert`, built by jobs.metrics): what its
usage cost so far, exactly as its alert counts it (`budgets.spent_money`, the usage report of
the month, priced at the rates in force on the days it was used), beside the alert.

Pricing a month of usage reads a usage report (five queries or so, more where a price changes
within the month): too much for every scrape and every overview page. So it is computed at
most once a minute (PERIOD_S), whatever the scrape rate, for every tenant with an alert at
once, and shared by every web process through the "shared" cache (Redis), as the platform-wide
figures are (jobs.metrics.platform); each reader is given its own tenants' part of it. Without
Redis at hand it is computed at each read. An alert set or removed shows within the minute.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.cache import caches

from jobs import budgets, events
from quotas.models import Tenant

KEY = "mlsched-metrics-spend"
PERIOD_S = 60


@dataclass(frozen=True)
class Spent:
    """A tenant's month: its slug, what its usage cost so far, and its spend alert."""

    tenant: str
    spent: Decimal
    alert: Decimal


@dataclass(frozen=True)
class MonthSpend:
    """Every tenant with a spend alert's month as of `at`, by slug, in `currency`."""

    at: datetime
    currency: str
    tenants: tuple[Spent, ...]


def month_spend(now: datetime) -> MonthSpend:
    """The month's spend, at most PERIOD_S old as of `now`: the one a web process shared, or
    computed (and shared) afresh; computed at each read where MLSCHED_METRICS_CACHE_S is 0,
    as every other figure then is."""
    if settings.MLSCHED_METRICS_CACHE_S <= 0:
        return compute(now)
    cached = None
    with events.best_effort("reading the shared spend"):
        cached = caches["shared"].get(KEY)
    # `now` is checked too, not only the cache's expiry, as the platform figures are; and its
    # month: the last seconds of the month before are not this month's spend.
    if (
        isinstance(cached, MonthSpend)
        and (now - cached.at).total_seconds() < PERIOD_S
        and budgets.month_start(cached.at) == budgets.month_start(now)
    ):
        return cached
    fresh = compute(now)
    with events.best_effort("sharing the spend"):
        caches["shared"].set(KEY, fresh, timeout=PERIOD_S)
    return fresh


def compute(now: datetime) -> MonthSpend:
    """Every tenant with a spend alert's month up to `now`: one query for the tenants, and the
    month's usage report when one has an alert."""
    alerted = list(
        Tenant.objects.filter(spend_alert_per_month__isnull=False)
        .order_by("slug")
        .only("slug", "name", "spend_alert_per_month")
    )
    spent = budgets.spent_money(alerted, now)
    rows = tuple(Spent(t.slug, spent[t.pk], t.spend_alert_per_month) for t in alerted)
    return MonthSpend(now, settings.MLSCHED_CURRENCY, rows)

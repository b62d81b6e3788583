"""What a team's month may cost (its spend forecast, beside its spend alert): what its usage
cost this month so far, as the alert counts it (`budgets.spent_money`), plus what its running
jobs may still cost up to their runtime limits, each counted only up to the month's end, as
the GPU-hour budget counts running work (jobs.placement.budget: a running job's GPUs to its
expected end, what runs past the month's end the next month's).

An upper bound, as a finance reader wants one: each live attempt (running, or placed and not
started yet) counts its GPUs (its workers x whole GPUs, or x gpu_milli / 1000) and cores
(workers x cpu_milli / 1000) from now until its runtime limit ends (`started_at` +
`max_runtime_s`; one not started yet, its whole limit from now, since its hours count from its
start) or the month ends, whichever comes first; one asked to stop, until its stop grace has
passed twice, as the scheduler's snapshot expects it back. Every job has a runtime limit
(`Job.max_runtime_s` is required), so none is left out, nor counted to the month's end for
want of one; one past its limit and not yet stopped adds nothing. What ends sooner (done,
failed, preempted, stopped by a maintenance window or a booking) costs less; a job not yet
placed adds nothing.

Priced as the month's cost is, at the prices in force on the days the hours will be used
(`RateCard`): what is still to run is cut at each midnight (UTC) before the month's end from
which a price of the card changes, as a usage report's window is, and each stretch's hours
priced at its prices: each attempt's GPU-hours at its GPU type's price (`Attempt.gpu_type`),
its core-hours at the core-hour's, a tenant's hours of each GPU type in a stretch summed and
rounded to the cent, as a usage report's row is in each of its stretches. A price change
scheduled later this month applies to the hours after its midnight; one from the next month on
changes nothing (those hours are the next month's).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings

from jobs import budgets
from jobs.costs import ZERO, RateCard, Tables, row_costs, total
from jobs.models import Attempt
from jobs.usage_queries import TypeUsage

HOUR_S = 3600.0
# The table of what is still to run, as jobs.costs prices a usage report's: rows by GPU type.
AHEAD = "ahead"


@dataclass(frozen=True)
class Live:
    """A live attempt as the forecast counts it: its tenant (id), GPU type ("" none, None not
    recorded), its workers' GPUs and cores together in thousandths, and when it ends at the
    latest."""

    tenant: int
    gpu_type: str | None
    gpu_milli: int
    cpu_milli: int
    ends: datetime


def month_forecast(spent: dict[int, Decimal], now: datetime) -> dict[int, Decimal]:
    """Each tenant of `spent` ({id: what its month cost so far, as `budgets.spent_money` gives
    it at `now`}) with what its running jobs may still cost by the month's end added: two
    queries whatever the price changes this month (the live attempts with their jobs, the
    card), none for no tenant, the card's none without live attempts."""
    still = still_to_cost(live(list(spent), now), now, budgets.renews(now))
    return {pk: amount + still.get(pk, ZERO) for pk, amount in spent.items()}


def live(tenant_ids: list[int], now: datetime) -> list[Live]:
    """The tenants' live attempts, with their jobs: one query, whatever their number."""
    if not tenant_ids:
        return []
    rows = Attempt.objects.filter(job__tenant_id__in=tenant_ids, outcome="").values_list(
        "job__tenant_id", "gpu_type", "workers", "job__gpus", "job__gpu_milli",
        "job__cpu_milli", "job__max_runtime_s", "started_at", "stop_requested_at",
    )  # fmt: skip
    return [
        Live(tenant, gpu_type, workers * (gpus * 1000 + gpu_milli), workers * cpu_milli,
             ends(started or now, limit, stop))
        for tenant, gpu_type, workers, gpus, gpu_milli, cpu_milli, limit, started, stop in rows
    ]  # fmt: skip


def ends(start: datetime, limit_s: int, stop_asked: datetime | None) -> datetime:
    """When an attempt started at `start` ends at the latest: its runtime limit's end, or,
    asked to stop, its stop grace twice after (back after the grace, and as long again for its
    agent to see it go, as jobs.snapshot expects it)."""
    end = start + timedelta(seconds=limit_s)
    if stop_asked is None:
        return end
    return min(end, stop_asked + timedelta(seconds=2 * settings.MLSCHED_STOP_GRACE_S))


def still_to_cost(attempts: list[Live], now: datetime, month_end: datetime) -> dict[int, Decimal]:
    """What each tenant's live attempts may still cost from `now` to their ends, `month_end` at
    most, each stretch between the card's price changes at its prices and rounded as a usage
    report's row is (jobs.costs); a tenant without any has none. The card read only when there
    is something to price; a price change reads nothing more (each stretch's hours are counted
    from the attempts already read)."""
    if not attempts:
        return {}

    def ahead(since: datetime, until: datetime) -> Tables:
        return {AHEAD: hours_ahead(attempts, since, until)}

    stretches = RateCard.read().stretches(now, month_end, ahead(now, month_end), ahead)
    tenants = {attempt.tenant for attempt in attempts}
    return {t: total(row_costs(stretches, AHEAD, t, ()).values()).used for t in tenants}


def hours_ahead(attempts: Iterable[Live], since: datetime, until: datetime) -> dict[int, dict]:
    """The GPU-hours and core-hours the attempts may use over [since, until), each up to its
    end, by tenant and GPU type (so each is priced by its type), as jobs.costs prices a
    table's rows: {tenant: {GPU type: [its hours]}}."""
    ahead: dict[int, dict[str | None, TypeUsage]] = {}
    for attempt in attempts:
        hours = max((min(attempt.ends, until) - since).total_seconds(), 0.0) / HOUR_S
        types = ahead.setdefault(attempt.tenant, {})
        had = types.get(attempt.gpu_type, TypeUsage(attempt.gpu_type))
        types[attempt.gpu_type] = TypeUsage(
            attempt.gpu_type,
            gpu_hours=had.gpu_hours + hours * attempt.gpu_milli / 1000,
            cpu_core_hours=had.cpu_core_hours + hours * attempt.cpu_milli / 1000,
        )
    return {tenant: {kind: [usage] for kind, usage in types.items()}
            for tenant, types in ahead.items()}  # fmt: skip

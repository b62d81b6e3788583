"""Each tenant's recent use (quotas.RecentUse), which fair share counts beside what it holds
now: the cycle brings it up to date from what the tenants' running work holds (the snapshot's
`Tenant.usage`), once a minute at most, as an average in which each moment weighs half as much
every half-life (jobs.placement.ordering.recent_use).

Between two updates what a tenant holds is taken as what it held at the later one: a minute's
step in an average over a half-life of hours. Two schedulers never both count one interval: a
row is updated only if it still runs to the moment it was read at.
"""

from datetime import UTC, datetime

from django.conf import settings
from django.db import IntegrityError, transaction

from jobs import placement as p
from jobs.placement.ordering import recent_use
from quotas.models import RecentUse

STEP_S = 60.0


def half_life_s() -> float:
    return settings.MLSCHED_FAIR_SHARE_HALF_LIFE_H * 3600.0


def stored() -> dict[int, RecentUse]:
    """Each tenant's recent use as stored, by tenant id (none while it is switched off): the
    snapshot reads it once a cycle, for the core and for `update`."""
    if not half_life_s():
        return {}
    return {row.pk: row for row in RecentUse.objects.all()}


def update(tenants: tuple[p.Tenant, ...], rows: dict[int, RecentUse], now: float) -> int:
    """Bring the tenants' recent use up to `now`, those last brought up to date STEP_S ago or
    more (`rows`: `stored()`, as the snapshot read it); a tenant seen for the first time
    starts from nothing at `now`. How many rows it
    wrote. A row brought up to date STEP_S or more ahead of `now` (the clock stepped back)
    goes on from `now`, its use as it is: else it would stand still until the clock caught
    up."""
    half_life = half_life_s()
    if not half_life:
        return 0
    moment = datetime.fromtimestamp(now, tz=UTC)
    written, new = 0, []
    for tenant in tenants:
        row = rows.get(int(tenant.id))
        if row is None:
            new.append(RecentUse(tenant_id=int(tenant.id), use={}, at=moment))
            continue
        seconds = now - row.at.timestamp()
        if abs(seconds) >= STEP_S:  # recent_use() counts no time before `at`
            use = recent_use(row.use, tenant, seconds, half_life)
            written += RecentUse.objects.filter(pk=row.pk, at=row.at).update(use=use, at=moment)
    try:
        with transaction.atomic():
            RecentUse.objects.bulk_create(new, ignore_conflicts=True)
    except IntegrityError:  # a tenant deleted since the snapshot: the rest are seen next time
        return written
    return written + len(new)

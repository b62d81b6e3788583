"""Quota ledger: guaranteed amounts, borrowing inside a cohort, and the borrowed flag.

A tenant may use its guaranteed amount of a flavor freely. Above it, it borrows: only up to its
borrow limit, and only out of guarantee the rest of its cohort leaves idle (the cohort's total
use stays within the sum of the guarantees), as in Kueue. A tenant without a quota on a flavor
its cohort guarantees to others has a guarantee of 0 and no borrow limit: all it uses of that
flavor is borrowed, reclaimable by the owners. Flavors nobody in the cohort guarantees are not
limited.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from jobs.placement.model import Quota, Tenant


class Ledger:
    """Per-tenant, per-flavor usage for one cycle, charged as the cycle places jobs."""

    def __init__(self, tenants: Iterable[Tenant]):
        self.quota: dict[tuple[str, str], Quota] = {}
        self.usage: dict[tuple[str, str], int] = {}
        self.cohort: dict[str, str] = {}
        self.cohort_total: dict[tuple[str, str], int] = {}
        self.cohort_used: dict[tuple[str, str], int] = {}
        # Bumped on every charge: answers cached under an older version are stale.
        self.version = 0
        tenants = list(tenants)
        guarded: dict[str, set[str]] = {}  # cohort -> flavors someone in it has a quota on
        for tenant in tenants:
            guarded.setdefault(tenant.cohort, set()).update(q.flavor for q in tenant.quotas)
        for tenant in tenants:
            self.cohort[tenant.id] = tenant.cohort
            for flavor, amount in tenant.usage.items():
                self.usage[(tenant.id, flavor)] = amount
            own = {q.flavor: q for q in tenant.quotas}
            for flavor in guarded[tenant.cohort]:
                q = own.get(flavor) or Quota(flavor, 0, None)
                self.quota[(tenant.id, flavor)] = q
                pool = (tenant.cohort, flavor)
                self.cohort_total[pool] = self.cohort_total.get(pool, 0) + q.guaranteed
                used = self.cohort_used.get(pool, 0) + tenant.usage.get(flavor, 0)
                self.cohort_used[pool] = used

    def allows(self, tenant: str, demand: Mapping[str, int]) -> bool:
        """Whether the tenant may take ``demand`` more, borrowing if it has to."""
        for flavor, amount in demand.items():
            q = self.quota.get((tenant, flavor))
            if q is None or not amount:
                continue
            after = self.usage.get((tenant, flavor), 0) + amount
            if after <= q.guaranteed:
                continue
            if q.borrow_limit is not None and after > q.guaranteed + q.borrow_limit:
                return False
            pool = (self.cohort.get(tenant, ""), flavor)
            if self.cohort_used.get(pool, 0) + amount > self.cohort_total.get(pool, 0):
                return False
        return True

    def within_guarantee(self, tenant: str, demand: Mapping[str, int]) -> bool:
        """Whether ``demand`` more keeps the tenant inside its guarantee on every quota."""
        for flavor, amount in demand.items():
            q = self.quota.get((tenant, flavor))
            if q is not None and self.usage.get((tenant, flavor), 0) + amount > q.guaranteed:
                return False
        return True

    def borrowed_in(self, tenant: str, flavors: Iterable[str]) -> bool:
        """Whether the tenant now uses more than its guarantee of any of ``flavors``."""
        for flavor in flavors:
            q = self.quota.get((tenant, flavor))
            if q is not None and self.usage.get((tenant, flavor), 0) > q.guaranteed:
                return True
        return False

    def charge(self, tenant: str, demand: Mapping[str, int], sign: int = 1) -> None:
        """Add (or with ``sign=-1`` give back) usage."""
        self.version += 1
        cohort = self.cohort.get(tenant, "")
        for flavor, amount in demand.items():
            key = (tenant, flavor)
            self.usage[key] = self.usage.get(key, 0) + sign * amount
            if key in self.quota:
                pool = (cohort, flavor)
                self.cohort_used[pool] = self.cohort_used.get(pool, 0) + sign * amount

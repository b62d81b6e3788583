"""Quota ledger: guaranteed amounts, borrowing inside a cohort, and the borrowed flag.

A tenant may use its guaranteed amount of a flavor freely. Above it, it borrows: only up to its
borrow limit, and only out of guarantee the rest of its cohort leaves idle (the cohort's total
use stays within the sum of the guarantees), as in Kueue. A tenant without a quota on a flavor
its cohort guarantees to others has a guarantee of 0 and no borrow limit: all it uses of that
flavor is borrowed, reclaimable by the owners. Flavors nobody in the cohort guarantees are not
limited.

A lend limit (Kueue's lendingLimit) lends only that much of a guarantee: the rest is the
tenant's alone (``private``), idle or not, so its work starts there at once, with no borrower to
reclaim it from. The cohort's pool is then the guarantees' lendable parts, and a tenant's use
counts against the pool only beyond its private part: the pool's use is the sum of
``max(0, use - private)``. Without lend limits every private part is 0 and the pool is the
guarantees' sum, its use the tenants' use.

A job its tenant's quota cannot cover yet *holds* the tenant's room on the flavors it lacks for
the rest of the cycle: the tenant's later jobs take none of it, or a stream of small jobs would
take every bit of quota freed before the large job ahead of them could use it. As in backfill, a
later job may still go if its runtime limit ends before the held job could start (``free_at``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from jobs.placement.capacity import NodeState
from jobs.placement.model import QueuedJob, Quota, RunningJob, Tenant, gpu_flavor


class Ledger:
    """Per-tenant, per-flavor usage for one cycle, charged as the cycle places jobs."""

    def __init__(self, tenants: Iterable[Tenant]):
        self.quota: dict[tuple[str, str], Quota] = {}
        self.usage: dict[tuple[str, str], int] = {}
        self.cohort: dict[str, str] = {}
        # (tenant, flavor) -> the part of its guarantee it does not lend.
        self.private: dict[tuple[str, str], int] = {}
        self.cohort_total: dict[tuple[str, str], int] = {}
        self.cohort_used: dict[tuple[str, str], int] = {}
        # (tenant, flavor) -> time before which the tenant's later jobs must end to use it.
        self.held: dict[tuple[str, str], float] = {}
        # (tenant, flavor) -> what of its usage is work asked to stop: charged until it has gone
        # (its tenant may not start more on it), but no longer over a guarantee to reclaim.
        self.going: dict[tuple[str, str], int] = {}
        self.cohort_going: dict[tuple[str, str], int] = {}
        # Bumped on every charge and hold: answers cached under an older version are stale.
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
                key, pool = (tenant.id, flavor), (tenant.cohort, flavor)
                self.quota[key] = q
                if q.lend_limit is not None and q.lend_limit < q.guaranteed:
                    self.private[key] = q.guaranteed - q.lend_limit
                lent = q.guaranteed - self.private.get(key, 0)
                self.cohort_total[pool] = self.cohort_total.get(pool, 0) + lent
                used = self.cohort_used.get(pool, 0) + self.pooled(key, self.usage.get(key, 0))
                self.cohort_used[pool] = used

    def pooled(self, key: tuple[str, str], used: int) -> int:
        """What ``used`` of a tenant's flavor takes of its cohort's pool: what is beyond the
        part of its guarantee it does not lend."""
        return max(used - self.private.get(key, 0), 0) if self.private else used

    def allows(
        self,
        tenant: str,
        demand: Mapping[str, int],
        ends: float = math.inf,
        gone: bool = False,
        less: Mapping[str, int] | None = None,
    ) -> bool:
        """Whether the tenant may take ``demand`` more, borrowing if it has to, for a job that
        ends by ``ends``: a flavor held for an earlier job of the tenant only until then.

        With ``gone``, as it will be once the work asked to stop (its own and its cohort's)
        has gone; ``less``: usage of the tenant's to count as given back (a question, not a
        charge: caches keyed on ``version`` stay valid)."""
        for flavor, amount in demand.items():
            q = self.quota.get((tenant, flavor))
            if q is None or not amount:
                continue
            if self.held and ends > self.held.get((tenant, flavor), math.inf):
                return False
            key = (tenant, flavor)
            pool = (self.cohort.get(tenant, ""), flavor)
            used, pool_used = self.usage.get(key, 0), self.cohort_used.get(pool, 0)
            if gone:
                used -= self.going.get(key, 0)
                pool_used -= self.cohort_going.get(pool, 0)
            # The pool without the tenant's own share of it, which ``after`` replaces.
            pool_used -= self.pooled(key, used)
            if less:
                used -= less.get(flavor, 0)
            after = used + amount
            if after <= q.guaranteed:
                continue
            if q.borrow_limit is not None and after > q.guaranteed + q.borrow_limit:
                return False
            if pool_used + self.pooled(key, after) > self.cohort_total.get(pool, 0):
                return False
        return True

    def refused(self, tenant: str, demand: Mapping[str, int]) -> list[str]:
        """The flavors of ``demand`` the tenant's quota cannot cover now (holds aside)."""
        # A job ending at once passes every hold.
        return [f for f, n in demand.items() if not self.allows(tenant, {f: n}, -math.inf)]

    def attainable(self, tenant: str, flavor: str, amount: int) -> bool:
        """Whether the tenant could ever hold ``amount`` of ``flavor`` (with nothing else)."""
        q = self.quota[(tenant, flavor)]
        if q.borrow_limit is not None and amount > q.guaranteed + q.borrow_limit:
            return False
        pool = self.cohort_total[(self.cohort[tenant], flavor)]
        return amount <= self.private.get((tenant, flavor), 0) + pool

    def headroom(self, tenant: str, flavor: str) -> int | None:
        """How much more of ``flavor`` the tenant may take now (the most ``allows`` grants,
        holds aside); None if nothing in its cohort limits the flavor. The rest of its
        guarantee counts whole even where borrowers use it: a job of the tenant reclaims it."""
        q = self.quota.get((tenant, flavor))
        if q is None:
            return None
        key, pool = (tenant, flavor), (self.cohort[tenant], flavor)
        used = self.usage.get(key, 0)
        # The most ``allows`` lets its use reach through the pool, less what it uses.
        others = self.cohort_used.get(pool, 0) - self.pooled(key, used)
        borrowable = self.private.get(key, 0) + self.cohort_total.get(pool, 0) - others - used
        if q.borrow_limit is not None:
            borrowable = min(borrowable, q.guaranteed + q.borrow_limit - used)
        return max(q.guaranteed - used, borrowable, 0)

    def hold(self, tenant: str, flavor: str, until: float) -> None:
        """Keep the tenant's room on ``flavor`` for a job it cannot fit yet: its later jobs in
        the cycle take none unless they end by ``until``. The first hold of a flavor stays."""
        if (tenant, flavor) not in self.held:
            self.held[(tenant, flavor)] = until
            self.version += 1

    def free_at(
        self, tenant: str, flavor: str, amount: int, ends: Iterable[tuple[float, int]], now: float
    ) -> float:
        """A lower bound on when the tenant's own limit (guarantee plus borrow limit) lets it
        take ``amount`` more of ``flavor``, from the (end, amount) of its use whose end is known.
        Use of unknown end may end at once; if the ends do not account for the use, now."""
        q = self.quota[(tenant, flavor)]
        if q.borrow_limit is None:
            return now  # only the cohort limits it: no bound from the tenant's own use
        used = self.usage.get((tenant, flavor), 0)
        ends = sorted(ends)
        freed = used - sum(a for _, a in ends)  # of unknown end
        excess = used + amount - q.guaranteed - q.borrow_limit
        if freed < 0 or freed >= excess:
            return now
        for end, part in ends:
            freed += part
            if freed >= excess:
                return max(end, now)
        return now

    def within_guarantee(self, tenant: str, demand: Mapping[str, int]) -> bool:
        """Whether ``demand`` more keeps the tenant inside its guarantee on every quota."""
        for flavor, amount in demand.items():
            q = self.quota.get((tenant, flavor))
            if q is not None and self.usage.get((tenant, flavor), 0) + amount > q.guaranteed:
                return False
        return True

    def borrowed_in(
        self, tenant: str, flavors: Iterable[str], less: Mapping[str, int] | None = None
    ) -> bool:
        """Whether the tenant uses more than its guarantee of any of ``flavors``, without its
        usage ``less`` (its own work a job evicts to start)."""
        for flavor in flavors:
            q = self.quota.get((tenant, flavor))
            used = self.usage.get((tenant, flavor), 0) - (less or {}).get(flavor, 0)
            if q is not None and used > q.guaranteed:
                return True
        return False

    def charge(self, tenant: str, demand: Mapping[str, int], sign: int = 1) -> None:
        """Add (or with ``sign=-1`` give back) usage."""
        self.version += 1
        self._add(self.usage, self.cohort_used, tenant, demand, sign)

    def leave(self, tenant: str, demand: Mapping[str, int], sign: int = 1) -> None:
        """Mark usage as work asked to stop (it stays charged until it has gone); with
        ``sign=-1``, usage that comes once it has gone (the job that evicted it, uncharged)."""
        self._add(self.going, self.cohort_going, tenant, demand, sign)

    def _add(self, by_tenant: dict, by_pool: dict, tenant: str, demand, sign: int) -> None:
        """Add ``demand`` to a per-(tenant, flavor) table and, for flavors under quota, to
        its per-(cohort, flavor) total: the amount itself, or where the tenant keeps part of
        its guarantee, the change in its share of the pool."""
        cohort = self.cohort.get(tenant, "")
        for flavor, amount in demand.items():
            key, pool = (tenant, flavor), (cohort, flavor)
            kept = key in self.private
            before = self._pool_shares(key) if kept else (0, 0)
            by_tenant[key] = by_tenant.get(key, 0) + sign * amount
            if kept:
                used, going = self._pool_shares(key)
                self.cohort_used[pool] = self.cohort_used.get(pool, 0) + used - before[0]
                self.cohort_going[pool] = self.cohort_going.get(pool, 0) + going - before[1]
            elif key in self.quota:
                by_pool[pool] = by_pool.get(pool, 0) + sign * amount

    def _pool_shares(self, key: tuple[str, str]) -> tuple[int, int]:
        """The tenant's share of its cohort's pool, and the part of it work asked to stop
        holds: the share less what the share would be once that work has gone."""
        used = self.usage.get(key, 0)
        share = self.pooled(key, used)
        return share, share - self.pooled(key, used - self.going.get(key, 0))

    def staying(self, tenant: str, flavor: str) -> int:
        """The tenant's usage of ``flavor`` less work asked to stop."""
        key = (tenant, flavor)
        return self.usage.get(key, 0) - self.going.get(key, 0)


def flavors_held(job: RunningJob, nodes: Mapping[str, NodeState]) -> dict[str, int]:
    """The quota flavors a running job holds, its GPUs by their nodes' types."""
    used: dict[str, int] = {}
    for a in job.allocations:
        node = nodes.get(a.node_id)
        gpu_type = node.gpu_type if node is not None else ""
        parts = {"cpu": a.cpu_milli, "memory": a.memory_mb}
        if gpu_type and a.gpus:
            parts[gpu_flavor(gpu_type)] = sum(m for _, m in a.gpus)
        for flavor, amount in parts.items():
            used[flavor] = used.get(flavor, 0) + amount
    return used


def charged(job: QueuedJob, slots: Iterable[tuple]) -> dict[str, int]:
    """The quota flavors a job's placement on ``slots`` ((node, GPU takes, CPU, memory), a
    worker each) charges its tenant: the GPUs taken, by their nodes' types, and the CPU and
    memory it asks for per worker (an exclusive worker's slot holds all its node has free,
    its allocation what it asks)."""
    used = {"cpu": 0, "memory": 0}
    for node, takes, _, _ in slots:
        used["cpu"] += job.cpu_milli
        used["memory"] += job.memory_mb
        if takes:
            flavor = gpu_flavor(node.gpu_type)
            used[flavor] = used.get(flavor, 0) + sum(t[1] for t in takes)
    return used

"""Queue order: strict tiers; inside a tier, tenants whose next job fits their guarantee before
tenants whose next job would borrow, then weighted dominant-resource fair share; inside a tenant,
effective priority, then submit time, then id (a total order).

Owners before borrowers is Kueue's rule, and what ends a reclaim loop: a borrower evicted for an
owner's job is requeued with its old submit time, and with both tenants back at no use, fair
share and aging alone would put the borrower first again, to start on the same borrowed
guarantee and be evicted again next cycle. The order inside a tenant is untouched.

A job's effective priority is its priority, plus points for the hours it has waited (aging),
minus points for its size in GPU-hours (shortest and smallest first). Inside a tier aging lowers
a tenant's effective share by how long its head job has waited, and raises a job's priority
inside its tenant, so nothing waits forever behind a busier neighbour or behind a stream of
smaller jobs. Tiers are strict until a job has waited ``Policy.tier_wait_limit_hours``: then it
comes once more, ahead of its tier, with the highest tier, so nothing waits forever behind a
busier tier either. There it takes capacity that is free, but neither evicts by that tier nor
reserves nodes (``ahead_of_tier``); if it still waits, it comes again at its own place with the
rights of its own tier. Waiting long never drains nodes for a job ahead of its turn.

A job that has evicted work for itself (``preempting``) comes first of all, until it starts, as
Kubernetes keeps a preemptor's nominated node for it: the room its victims leave, and the nodes
they leave, are its own. Otherwise a class above it would take (or reserve) that room and the
preemptor would evict a second job for the room it already paid for. It is decided there
only, with its own tier's rights (deciding it again further down could not do better, and the
quota it holds for itself there would stand in its own way). A preemptible preemptor keeps no
claim against a queued class above it that may preempt: that class would evict it as soon as
it started, so, as Kubernetes lets a higher priority take a nominated node, it comes right
after the lowest such tier (still before the classes between, which may not evict it).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping

from jobs.placement.model import Policy, QueuedJob, Tenant

HOUR = 3600.0
# Sizes are counted from 1 GPU-minute up to about 2^20 GPU-hours (the size of a job without a
# limit); a CPU-only worker counts as an eighth of a GPU.
MIN_SIZE_HOURS = 1 / 60
MAX_SIZE_DOUBLINGS = 26.0
CPU_WORKER_GPUS = 0.125


class QueueOrder:
    """Yields queued jobs one at a time; ``charge`` feeds placements back into fair share."""

    def __init__(
        self,
        queued: Iterable[QueuedJob],
        tenants: Iterable[Tenant],
        totals: Mapping[str, float],
        policy: Policy,
        now: float,
        borrows: Callable[[QueuedJob], bool] | None = None,
    ):
        self.policy = policy
        self.now = now
        # Read for every job of every cycle.
        self._aging = policy.aging_priority_per_hour
        self._per_doubling = policy.size_priority_per_doubling
        self._share_aging = policy.aging_share_per_hour
        # Whether a job would borrow, asked when its tenant's turn is keyed (None: nobody does).
        self.borrows = borrows
        self.weights = {t.id: t.weight for t in tenants}
        self.used: dict[str, dict[str, float]] = {t.id: _usage(t) for t in tenants}
        self.totals = {k: max(v, 1.0) for k, v in totals.items()}
        self._shares: dict[str, float] = {}  # until the tenant is charged again
        self.tiers: dict[int, dict[str, list[QueuedJob]]] = {}
        queued = list(queued)
        top = max((job.tier for job in queued), default=0)
        starved = _starved(queued, top, policy.tier_wait_limit_hours, now)
        # A preempting job is decided first of all; a preemptible one right after the lowest
        # tier above it with a job that may preempt (which could evict it), if any.
        evicting = sorted({job.tier for job in queued if job.may_preempt})
        self.preempting: list[QueuedJob] = []
        self._after_tier: dict[int, list[QueuedJob]] = {}
        for job in queued:
            if job.preempting:
                above = bisect.bisect_right(evicting, job.tier)
                if job.preemptible and above < len(evicting):
                    self._after_tier.setdefault(evicting[above], []).append(job)
                else:
                    self.preempting.append(job)
        self._claims = {job.id for job in queued if job.preempting}
        for job in queued:
            self.tiers.setdefault(job.tier, {}).setdefault(job.tenant, []).append(job)
            if job.id in starved:
                self.tiers.setdefault(top, {}).setdefault(job.tenant, []).append(job)
        # Whether the job last yielded comes ahead of its own tier (it comes again there).
        self.ahead_of_tier = False
        for tenants_queues in self.tiers.values():
            for queue in tenants_queues.values():
                queue.sort(key=self._job_key)

    def _job_key(self, job: QueuedJob) -> tuple:
        wait = max(self.now - job.submit_time, 0.0) / HOUR
        return (
            -(job.priority + self._aging * wait - self._per_doubling * size_doublings(job)),
            job.submit_time,
            job.id,
        )

    def share(self, tenant: str) -> float:
        """The tenant's weighted dominant share (GPU weighted heaviest by default)."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = self._share(tenant)
        return share

    def _share(self, tenant: str) -> float:
        used = self.used.get(tenant)
        dominant = 0.0
        if used:
            weights = self.policy.resource_weights
            for resource, total in self.totals.items():
                value = weights.get(resource, 0.0) * used.get(resource, 0.0) / total
                if value > dominant:
                    dominant = value
        return dominant / max(self.weights.get(tenant, 1.0), 1e-9)

    def _tenant_key(self, tenant: str, head: QueuedJob) -> tuple:
        wait = max(self.now - head.submit_time, 0.0) / HOUR
        borrows = self.borrows is not None and self.borrows(head)
        share = self._shares.get(tenant)
        if share is None:
            share = self.share(tenant)
        return (borrows, share - self._share_aging * wait, tenant)

    def _claimants(self, jobs: list[QueuedJob]) -> Iterator[QueuedJob]:
        self.ahead_of_tier = False
        yield from sorted(jobs, key=lambda job: (-job.tier, self._job_key(job)))

    def __iter__(self) -> Iterator[QueuedJob]:
        yield from self._claimants(self.preempting)
        for tier in sorted(self.tiers, reverse=True):
            queues = self.tiers[tier]
            heap = [(self._tenant_key(t, q[0]), t, 0) for t, q in queues.items()]
            heapq.heapify(heap)
            while heap:
                _, tenant, pos = heapq.heappop(heap)
                queue = queues[tenant]
                # The tier's last tenant needs no more keys: the rest of its queue, in order.
                last = pos + 1 if heap else len(queue)
                for job in queue[pos:last]:
                    if job.id not in self._claims:  # decided first of all
                        self.ahead_of_tier = job.tier != tier
                        yield job
                if last < len(queue):
                    key = self._tenant_key(tenant, queue[last])
                    heapq.heappush(heap, (key, tenant, last))
            yield from self._claimants(self._after_tier.get(tier, []))

    def charge(self, tenant: str, amounts: Mapping[str, float], sign: int = 1) -> None:
        """Count resources the cycle gave to (or took from) a tenant."""
        self._shares.pop(tenant, None)
        used = self.used.setdefault(tenant, {})
        for resource, amount in amounts.items():
            used[resource] = used.get(resource, 0.0) + sign * amount


def size_doublings(job: QueuedJob) -> float:
    """How many times the job's size (GPU-hours by its runtime limit) doubles 1 GPU-minute."""
    return _doublings(job.workers, job.worker_gpu_milli, job.max_runtime)


# Keyed by the request, so a job that waits through many cycles is sized once.
@functools.lru_cache(maxsize=1 << 16)
def _doublings(workers: int, gpu_milli: int, max_runtime: float | None) -> float:
    if max_runtime is None:
        return MAX_SIZE_DOUBLINGS
    gpus = gpu_milli / 1000 or CPU_WORKER_GPUS
    hours = workers * gpus * max_runtime / HOUR
    return min(math.log2(max(hours, MIN_SIZE_HOURS) / MIN_SIZE_HOURS), MAX_SIZE_DOUBLINGS)


def _starved(queued: list[QueuedJob], top: int, limit_hours: float | None, now: float) -> set[str]:
    """Jobs below the ``top`` tier that have waited ``limit_hours`` or more."""
    if limit_hours is None:
        return set()
    since = now - limit_hours * HOUR
    return {job.id for job in queued if job.tier < top and job.submit_time <= since}


def _usage(tenant: Tenant) -> dict[str, float]:
    used = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for flavor, amount in tenant.usage.items():
        resource = "gpu" if flavor.startswith("gpu:") else flavor
        used[resource] = used.get(resource, 0.0) + amount
    return used

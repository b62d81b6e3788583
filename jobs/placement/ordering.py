"""Queue order: strict tiers; inside a tier, tenants whose next job fits their guarantee before
tenants whose next job would borrow, then weighted dominant-resource fair share; inside a tenant,
effective priority, then submit time, then id (a total order).

Owners before borrowers is Kueue's rule, and what ends a reclaim loop: a borrower evicted for an
owner's job is requeued with its old submit time, and with both tenants back at no use, fair
share and aging alone would put the borrower first again, to start on the same borrowed
guarantee and be evicted again next cycle. The order inside a tenant is untouched.

A job's effective priority is its priority, plus points for the hours it has waited (aging),
minus points for its size in GPU-hours (shortest and smallest first), minus points for the GPUs
its owner holds in the tenant (fair share between a team's users, as Slurm's fair-share tree
goes account -> user): one user's 500 jobs queued ahead of a teammate's few take turns with
them as the cycle places them, instead of taking the whole team's share until they drain. That
last term is the same for all of one owner's jobs, so each owner's jobs keep their order, and a
tenant whose queued jobs come from one owner keeps the order it had without it; a tenant's next
job is the best of its owners' next jobs. Inside a tier aging lowers
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
from typing import NamedTuple

from jobs.placement.model import Policy, QueuedJob, RunningJob, Tenant

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
        self._per_user_doubling = policy.user_share_priority_per_doubling
        self._share_aging = policy.aging_share_per_hour
        # Whether a job would borrow, asked when its tenant's turn is keyed (None: nobody does).
        self.borrows = borrows
        self.weights = {t.id: t.weight for t in tenants}
        # What each tenant holds, plus its recent use as much as the policy counts it.
        recent = policy.recent_use_weight
        self.used: dict[str, dict[str, float]] = {t.id: _usage(t, recent) for t in tenants}
        self.totals = {k: max(v, 1.0) for k, v in totals.items()}
        self._shares: dict[str, float] = {}  # until the tenant is charged again
        # GPUs each user holds in each tenant; the penalties they cost, until charged again;
        # and how many times a tenant's users were given GPUs back (an eviction: every owner
        # key of its queues may have dropped).
        self.user_use: dict[str, dict[str, float]] = {t.id: dict(t.user_use) for t in tenants}
        self._penalties: dict[tuple[str, str], float] = {}
        self.user_refunds: dict[str, int] = {}
        lists: dict[int, dict[str, list[QueuedJob]]] = {}
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
            lists.setdefault(job.tier, {}).setdefault(job.tenant, []).append(job)
            if job.id in starved:
                lists.setdefault(top, {}).setdefault(job.tenant, []).append(job)
        # Whether the job last yielded comes ahead of its own tier (it comes again there).
        self.ahead_of_tier = False
        self.tiers: dict[int, dict[str, TenantQueue]] = {}
        for tier, tenants_lists in lists.items():
            self.tiers[tier] = queues = {}
            for tenant, jobs in tenants_lists.items():
                jobs.sort(key=self._job_key)
                queues[tenant] = TenantQueue(self, tenant, jobs)

    def _job_key(self, job: QueuedJob) -> tuple:
        wait = max(self.now - job.submit_time, 0.0) / HOUR
        return (
            -(job.priority + self._aging * wait - self._per_doubling * size_doublings(job)),
            job.submit_time,
            job.id,
        )

    def user_penalty(self, tenant: str, owner: str) -> float:
        """Priority points the owner's jobs lose inside the tenant for the GPUs it holds."""
        penalty = self._penalties.get((tenant, owner))
        if penalty is None:
            use = self.user_use.get(tenant, {}).get(owner, 0.0)
            penalty = self._penalties[tenant, owner] = owner_points(self.policy, use)
        return penalty

    def share(self, tenant: str) -> float:
        """The tenant's weighted dominant share (GPU weighted heaviest by default)."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = self._share(tenant)
        return share

    def _share(self, tenant: str) -> float:
        used = self.used.get(tenant)
        share = dominant(used, self.totals, self.policy.resource_weights)[0] if used else 0.0
        return share / max(self.weights.get(tenant, 1.0), 1e-9)

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
            heap = [(self._tenant_key(t, q.head()), t) for t, q in queues.items()]
            heapq.heapify(heap)
            while heap:
                _, tenant = heapq.heappop(heap)
                queue = queues[tenant]
                # The tier's last tenant needs no more tenant keys: the rest of its queue.
                while queue.left:
                    job = queue.pop()
                    if job.id not in self._claims:  # decided first of all
                        self.ahead_of_tier = job.tier != tier
                        yield job
                    if heap and queue.left:
                        heapq.heappush(heap, (self._tenant_key(tenant, queue.head()), tenant))
                        break
            yield from self._claimants(self._after_tier.get(tier, []))

    def charge(
        self,
        tenant: str,
        amounts: Mapping[str, float],
        sign: int = 1,
        owner: str = "",
        gpus: float = 0.0,
    ) -> None:
        """Count resources the cycle gave to (or took from) a tenant, and the ``gpus`` (as
        ``Tenant.user_use`` counts them) to (from) its user ``owner``."""
        self._shares.pop(tenant, None)
        used = self.used.setdefault(tenant, {})
        for resource, amount in amounts.items():
            used[resource] = used.get(resource, 0.0) + sign * amount
        if gpus:
            users = self.user_use.setdefault(tenant, {})
            users[owner] = users.get(owner, 0.0) + sign * gpus
            self._penalties.pop((tenant, owner), None)
            if sign * gpus < 0:
                self.user_refunds[tenant] = self.user_refunds.get(tenant, 0) + 1


class TenantQueue:
    """A tenant's queued jobs of one tier, best first, taken one at a time.

    With one owner (or no user share), the jobs in order and a position. With several, the
    jobs of each owner in order with a position each, and a heap of the owners' next jobs
    keyed with their owner's penalty at the time. A placement only raises a penalty, so an
    owner at the top whose penalty changed since is keyed again and pushed back; an eviction
    lowers one, so the heap is built again.
    """

    __slots__ = (
        "_order",
        "_tenant",
        "_jobs",
        "_pos",
        "_lists",
        "_at",
        "_heap",
        "_built_at",
        "_out",
        "left",
    )

    def __init__(self, order: QueueOrder, tenant: str, jobs: list[QueuedJob]):
        """``jobs`` sorted by ``QueueOrder._job_key``."""
        self._order = order
        self._tenant = tenant
        self._jobs = jobs
        self._pos = 0
        self.left = len(jobs)
        # Each owner's jobs with their keys, in order (only if there are several owners).
        lists: dict[str, list[tuple[tuple, QueuedJob]]] = {}
        if order._per_user_doubling and len({job.owner for job in jobs}) > 1:
            for job in jobs:
                lists.setdefault(job.owner, []).append((order._job_key(job), job))
        self._lists = lists or None
        self._at = dict.fromkeys(lists, 0)
        self._heap: list[tuple] = []
        self._built_at = -1  # the tenant's user refunds when the heap was built
        self._out: str | None = None  # the owner just taken from, not in the heap

    def head(self) -> QueuedJob:
        """The next job (the queue is not empty)."""
        if self._lists is None:
            return self._jobs[self._pos]
        owner = self._best()
        return self._lists[owner][self._at[owner]][1]

    def pop(self) -> QueuedJob:
        """Take the next job (the queue is not empty)."""
        self.left -= 1
        if self._lists is None:
            self._pos += 1
            return self._jobs[self._pos - 1]
        owner = self._best()
        heapq.heappop(self._heap)
        at = self._at[owner] = self._at[owner] + 1
        if at < len(self._lists[owner]):
            self._out = owner  # keyed again when next asked, at its use then
        return self._lists[owner][at - 1][1]

    def _best(self) -> str:
        lists = self._lists
        assert lists is not None
        order, tenant, heap = self._order, self._tenant, self._heap
        refunds = order.user_refunds.get(tenant, 0)
        if refunds != self._built_at:
            self._built_at, self._out = refunds, None
            heap = self._heap = [self._key(o) for o, j in lists.items() if self._at[o] < len(j)]
            heapq.heapify(heap)
        elif self._out is not None:
            heapq.heappush(heap, self._key(self._out))
            self._out = None
        # Keys only rose since the heap was built: a top keyed at its penalty now is the best.
        while order.user_penalty(tenant, heap[0][3]) != heap[0][4]:
            heapq.heapreplace(heap, self._key(heap[0][3]))
        return heap[0][3]

    def _key(self, owner: str) -> tuple:
        assert self._lists is not None
        (priority, submit, job_id), _ = self._lists[owner][self._at[owner]]
        penalty = self._order.user_penalty(self._tenant, owner)
        return (priority + penalty, submit, job_id, owner, penalty)


class Points(NamedTuple):
    """A job's effective priority inside its tenant's queue, term by term (Slurm's sprio):
    ``priority + waited - size - owner``, as ``QueueOrder`` orders a tenant's jobs by it."""

    priority: float
    waited: float  # gained for the hours it has waited
    size: float  # lost for its GPU-hours at its runtime limit
    owner: float  # lost for the GPUs its owner holds in the tenant (0: not counted)

    @property
    def total(self) -> float:
        return self.priority + self.waited - self.size - self.owner


def points(job: QueuedJob, policy: Policy, now: float, owner_gpus: float | None) -> Points:
    """The job's points at ``now``; ``owner_gpus``: the GPUs its owner holds in the tenant,
    None where the order does not count them (its tenant's jobs of its tier have one owner).
    The order reads the same terms inline (``QueueOrder._job_key``, ``user_penalty``): it keys
    every queued job every cycle."""
    wait = max(now - job.submit_time, 0.0) / HOUR
    return Points(
        job.priority,
        policy.aging_priority_per_hour * wait,
        policy.size_priority_per_doubling * size_doublings(job),
        0.0 if owner_gpus is None else owner_points(policy, owner_gpus),
    )


def dominant(
    used: Mapping[str, float], totals: Mapping[str, float], weights: Mapping[str, float]
) -> tuple[float, str]:
    """The largest of ``used``'s fractions of the ``totals``, each times its resource's weight,
    and its resource ("" when it uses nothing)."""
    largest, name = 0.0, ""
    for resource, total in totals.items():
        value = weights.get(resource, 0.0) * used.get(resource, 0.0) / total
        if value > largest:
            largest, name = value, resource
    return largest, name


class TeamShare(NamedTuple):
    """A tenant's fair share as the queue order keys its turn (``QueueOrder.share``), and what
    it is made of (Slurm's sshare): ``share`` is ``resource_weight x (held + recent) /
    weight``, where ``held`` is the fraction of the platform's ``resource`` (its dominant one;
    "" for none) its running work holds, ``recent`` the fraction its recent use counts for
    (``Policy.recent_use_weight`` times its recent average) and ``weight`` its fair-share
    weight. Inside a tier the tenant with the lowest share less ``Policy.aging_share_per_hour``
    per hour its next job has waited goes next."""

    share: float
    resource: str
    held: float
    recent: float
    resource_weight: float
    weight: float


def team_share(tenant: Tenant, totals: Mapping[str, float], policy: Policy) -> TeamShare:
    """The tenant's share of the platform's ``totals`` (``Decision.totals``) as a cycle with
    it begins."""
    totals = {k: max(v, 1.0) for k, v in totals.items()}
    weights = policy.resource_weights
    largest, resource = dominant(_usage(tenant, policy.recent_use_weight), totals, weights)
    weight = max(tenant.weight, 1e-9)
    if not resource:
        return TeamShare(0.0, "", 0.0, 0.0, 0.0, tenant.weight)
    held = _usage(tenant).get(resource, 0.0) / totals[resource]
    recent = policy.recent_use_weight * tenant.recent_use.get(resource, 0.0) / totals[resource]
    return TeamShare(largest / weight, resource, held, recent, weights[resource], tenant.weight)


def owner_points(policy: Policy, gpus: float) -> float:
    """Priority points a user's jobs lose inside a tenant for the ``gpus`` the user holds."""
    return policy.user_share_priority_per_doubling * math.log2(1.0 + max(gpus, 0.0))


def gpu_hours(job: QueuedJob) -> float | None:
    """The job's size as the order counts it: GPU-hours at its runtime limit (a CPU-only
    worker as a fraction of a GPU); None without a limit."""
    if job.max_runtime is None:
        return None
    return _hours(job.workers, job.worker_gpu_milli, job.max_runtime)


def size_doublings(job: QueuedJob) -> float:
    """How many times the job's size (GPU-hours by its runtime limit) doubles 1 GPU-minute."""
    return _doublings(job.workers, job.worker_gpu_milli, job.max_runtime)


# Keyed by the request, so a job that waits through many cycles is sized once.
@functools.lru_cache(maxsize=1 << 16)
def _doublings(workers: int, gpu_milli: int, max_runtime: float | None) -> float:
    if max_runtime is None:
        return MAX_SIZE_DOUBLINGS
    hours = _hours(workers, gpu_milli, max_runtime)
    return min(math.log2(max(hours, MIN_SIZE_HOURS) / MIN_SIZE_HOURS), MAX_SIZE_DOUBLINGS)


def _hours(workers: int, gpu_milli: int, max_runtime: float) -> float:
    return workers * worker_gpus(gpu_milli) * max_runtime / HOUR


def worker_gpus(gpu_milli: int) -> float:
    """The GPUs a worker holding ``gpu_milli`` counts as: a CPU-only worker as a fraction."""
    return gpu_milli / 1000 or CPU_WORKER_GPUS


def resources_of(used: Mapping[str, int]) -> dict[str, float]:
    """Quota flavors (``cpu``, ``memory``, ``gpu:<type>``) as the resources fair share counts:
    every GPU type as ``gpu``."""
    out = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for flavor, amount in used.items():
        out["gpu" if flavor.startswith("gpu:") else flavor] += amount
    return out


def running_gpus(job: RunningJob) -> float:
    """The GPUs running work counts as in its user's share: as the snapshot counted them, or
    one worker per allocation (a placement of this cycle)."""
    if job.user_gpus is not None:
        return job.user_gpus
    return sum(worker_gpus(sum(m for _, m in a.gpus)) for a in job.allocations)


def _starved(queued: list[QueuedJob], top: int, limit_hours: float | None, now: float) -> set[str]:
    """Jobs below the ``top`` tier that have waited ``limit_hours`` or more."""
    if limit_hours is None:
        return set()
    since = now - limit_hours * HOUR
    return {job.id for job in queued if job.tier < top and job.submit_time <= since}


def _usage(tenant: Tenant, recent: float = 0.0) -> dict[str, float]:
    """What the tenant's running work holds by resource, plus ``recent`` times its recent use."""
    used = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for flavor, amount in tenant.usage.items():
        resource = "gpu" if flavor.startswith("gpu:") else flavor
        used[resource] = used.get(resource, 0.0) + amount
    if recent:
        for resource, average in tenant.recent_use.items():
            used[resource] = used.get(resource, 0.0) + recent * average
    return used


def recent_use(
    before: Mapping[str, float], tenant: Tenant, seconds: float, half_life: float
) -> dict[str, float]:
    """The tenant's recent use ``seconds`` after it was ``before``, its running work having held
    what it holds now (``Tenant.usage``) in between: an average in which each moment weighs
    half as much every ``half_life`` seconds (an exponentially weighted moving average)."""
    kept = 0.5 ** (max(seconds, 0.0) / half_life)
    now = _usage(tenant)
    return {
        resource: before.get(resource, 0.0) * kept + now.get(resource, 0.0) * (1.0 - kept)
        for resource in sorted(set(before) | set(now))
    }

"""Hard caps on the GPUs held at once, beside the soft fair share (``ordering``), as Slurm's
limits are: a tenant's on one of its users (the tenant's MaxTRESPerUser), and a priority
class's, on one user's work of that class across their tenants (the QOS's MaxTRESPerUser) and
on all of that class's work together (the QOS's GrpTRES). Fair share lets one user's long queue
take turns with a teammate's few; the tenant's limit keeps any one user from holding more than
a set part of the team's GPUs, even while nobody else asks; a class's limits keep a high class
from being the way one user, or everyone, takes the platform ahead of the rest.

GPUs are held by running work, work in its grace period included (it holds them until it has
gone, as the quota ledger counts it), plus what the cycle gives. A job that would take a scope
past its limit waits, as ``user_gpu_limit`` (its tenant's) or ``class_gpu_limit`` (its
class's): it neither evicts work nor reserves nodes for it, since no capacity would let it
start. Its estimated start is when enough of what holds the scope should have ended, as far
as the expected ends say (running work by its runtime limit, work asked to stop after its
grace, what the cycle places by its own limit), as a batch's limit estimates it.

A job that evicted work for itself (``preempting``, decided before the queue) holds what it
asks from then on, placed or not: later jobs of its scopes must not take the room its victims
are leaving for it, or it would then wait for a limit and the eviction would be for nothing.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate
from typing import Protocol

from jobs.placement.explain import CLASS_GPU_LIMIT, USER_GPU_LIMIT
from jobs.placement.model import WHOLE_GPU, QueuedJob, RunningJob, Tenant
from jobs.placement.quota_gate import end_of

# A scope's key: ("user", tenant, owner), ("class user", tier, owner) or ("class", tier); its
# kind first.
Scope = tuple[str, str | int, str]
# The reason code of a job past a limit, by its scope's kind.
CODES = {"user": USER_GPU_LIMIT, "class user": CLASS_GPU_LIMIT, "class": CLASS_GPU_LIMIT}


class Limited(Protocol):
    """A job as the limits read it: a queued job, or a job a commit places
    (``tenant_limits.Claimed``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def tier(self) -> int: ...
    @property
    def class_user_gpu_limit(self) -> int | None: ...
    @property
    def class_gpu_limit(self) -> int | None: ...


class GpuLimits:
    """The GPU milli each scope holds, charged as the cycle places, and when each part of it
    is expected to end (``math.inf``: not known)."""

    def __init__(self, tenants: Iterable[Tenant], running: Iterable[RunningJob], now: float = 0.0):
        self.now = now
        self.user_limits = {t.id: t.user_gpu_limit for t in tenants if t.user_gpu_limit is not None}
        self.held: dict[Scope, int] = {}
        self.ends: dict[Scope, list[tuple[float, int]]] = {}
        # Per scope, its ends in order with the most freed by each (``_freeing``), until it
        # is charged again: a long queue past one limit asks the same question many times.
        self._freed: dict[Scope, tuple[list[float], list[int]]] = {}
        for job in running:
            self.charge(job, job.gpu_milli, held_until(job))

    def limits(self, job: Limited) -> list[tuple[Scope, int]]:
        """The limits over the job, each with its scope (its tenant's first), in GPU milli."""
        found: list[tuple[Scope, int]] = []
        if (limit := self.user_limits.get(job.tenant)) is not None:
            found.append((("user", job.tenant, job.owner), limit))
        if job.class_user_gpu_limit is not None:
            found.append((("class user", job.tier, job.owner), job.class_user_gpu_limit))
        if job.class_gpu_limit is not None:
            found.append((("class", job.tier, ""), job.class_gpu_limit))
        return found

    def refusal(self, job: QueuedJob) -> tuple[str, str]:
        """(reason code, why, for people) of the first limit the job would take past; ("",
        "") if none would. A preemptor it lets through holds its ask at once (the cycle does
        not charge it again when it places it)."""
        asks = job.workers * job.worker_gpu_milli
        if not asks:
            return "", ""
        limits = self.limits(job)
        for (kind, *_), limit in limits:
            if asks > limit:
                return CODES[kind], f"It asks for {_gpus(asks)} GPUs; {NEVER[kind](limit)}"
        for scope, limit in limits:
            if self.held.get(scope, 0) + asks > limit:
                return CODES[scope[0]], HELD[scope[0]](self.held[scope], limit)
        if job.preempting:  # its claim, until it starts
            self.charge(job, asks, end_of(job, self.now))
        return "", ""

    def estimate(self, job: QueuedJob) -> float | None:
        """When enough of what each limit's scope holds should have ended for the job to
        start under all of them; None if that is not known (an end not known, or the job
        asks for more than a limit allows at all)."""
        asks = job.workers * job.worker_gpu_milli
        start = self.now
        for scope, limit in self.limits(job):
            must_free = self.held.get(scope, 0) + asks - limit
            if must_free <= 0:
                continue
            if asks > limit:
                return None
            ends, freed = self._freeing(scope)
            at = bisect_left(freed, must_free)
            if at == len(ends) or ends[at] == math.inf:
                return None
            start = max(start, ends[at])
        return start

    def room(self, job: Limited, asks: int) -> bool:
        """Whether the job may take ``asks`` GPU milli more under every limit over it."""
        return all(self.held.get(scope, 0) + asks <= limit for scope, limit in self.limits(job))

    def charge(self, job: Limited | RunningJob, gpu_milli: int, end: float = math.inf) -> None:
        """Count GPUs the cycle gave to the job until ``end`` (taken back with a negative
        ``gpu_milli`` and the same end)."""
        self.charge_user(job.tenant, job.owner, gpu_milli, end)
        self.charge_class(job.tier, job.owner, gpu_milli, end)

    def charge_user(self, tenant: str, owner: str, gpu_milli: int, end: float = math.inf) -> None:
        """Count GPUs a user holds in a tenant (only in tenants with a limit)."""
        if gpu_milli and tenant in self.user_limits:
            self._add(("user", tenant, owner), gpu_milli, end)

    def charge_class(self, tier: int, owner: str, gpu_milli: int, end: float = math.inf) -> None:
        """Count GPUs a user holds at a class (its tier), and the class."""
        if gpu_milli:
            self._add(("class user", tier, owner), gpu_milli, end)
            self._add(("class", tier, ""), gpu_milli, end)

    def _add(self, scope: Scope, gpu_milli: int, end: float) -> None:
        self.held[scope] = self.held.get(scope, 0) + gpu_milli
        self.ends.setdefault(scope, []).append((end, gpu_milli))
        self._freed.pop(scope, None)

    def _freeing(self, scope: Scope) -> tuple[list[float], list[int]]:
        """The scope's ends in order, each with the most GPU milli freed by then: ``bisect``
        finds the first end by which enough has gone. A take-back (negative) cancels its
        charge at the same end; the running most keeps the list in order if one does not."""
        if scope not in self._freed:
            by_end: dict[float, int] = {}
            for end, gpu_milli in self.ends.get(scope, ()):
                by_end[end] = by_end.get(end, 0) + gpu_milli
            ends = sorted(by_end)
            freed = list(accumulate(accumulate(by_end[e] for e in ends), max))
            self._freed[scope] = (ends, freed)
        return self._freed[scope]


def held_until(job: RunningJob) -> float:
    """When the running job's GPUs are expected back (``math.inf``: not known)."""
    return math.inf if job.expected_end is None else job.expected_end


def _gpus(milli: int) -> str:
    return f"{milli / WHOLE_GPU:g}"


# What a limit says of a job asking for more than it allows at all, by its scope's kind...
NEVER = {
    "user": lambda limit: (
        f"one user may hold at most {_gpus(limit)} in the tenant: it cannot start while "
        "that limit stands."
    ),
    "class user": lambda limit: (
        f"one user may hold at most {_gpus(limit)} at its priority class: it cannot start "
        "at that class while that limit stands."
    ),
    "class": lambda limit: (
        f"its priority class's jobs may hold at most {_gpus(limit)} at once: it cannot start "
        "at that class while that limit stands."
    ),
}
# ...and of one that would take what is held past it.
HELD = {
    "user": lambda held, limit: (
        f"Its submitter holds {_gpus(held)} of the {_gpus(limit)} GPUs one user may hold in "
        "the tenant; it starts once enough of their work ends."
    ),
    "class user": lambda held, limit: (
        f"Its submitter holds {_gpus(held)} of the {_gpus(limit)} GPUs one user may hold at "
        "its priority class; it starts once enough of their work at that class ends."
    ),
    "class": lambda held, limit: (
        f"Its priority class's jobs hold {_gpus(held)} of the {_gpus(limit)} GPUs they may "
        "hold at once; it starts once enough of them end."
    ),
}

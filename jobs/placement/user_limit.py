"""A tenant's limit on the GPUs one of its users may hold in it at once (Slurm's
MaxTRESPerUser): a hard cap beside the soft fair share between a team's users (``ordering``).
Fair share lets one user's long queue take turns with a teammate's few; the limit keeps any
one user from holding more than a set part of the team's GPUs, even while nobody else asks.

A user holds the GPUs of their running work in the tenant, work in its grace period included
(it holds them until it has gone, as the quota ledger counts it), plus what the cycle gives
them. A job that would take its user past the limit waits as ``user_gpu_limit``: it neither
evicts work nor reserves nodes for it, since no capacity would let it start.

A job that evicted work for itself (``preempting``, decided before the queue) holds what it
asks from then on, placed or not: its user's later jobs must not take the room its victims
are leaving for it, or it would then wait for the limit and the eviction would be for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobs.placement.model import WHOLE_GPU, QueuedJob, RunningJob, Tenant


class UserLimits:
    """The GPU milli each user holds in each tenant with a limit, charged as the cycle places."""

    def __init__(self, tenants: Iterable[Tenant], running: Iterable[RunningJob]):
        self.limits = {t.id: t.user_gpu_limit for t in tenants if t.user_gpu_limit is not None}
        self.held: dict[tuple[str, str], int] = {}
        if self.limits:
            for job in running:
                if job.tenant in self.limits:
                    self.charge(job.tenant, job.owner, job.gpu_milli)

    def refusal(self, job: QueuedJob) -> str:
        """Why the job would take its user past the tenant's limit, for people; "" if it
        would not (or the tenant sets none). A preemptor it lets through holds its ask at
        once (the cycle does not charge it again when it places it)."""
        limit = self.limits.get(job.tenant)
        asks = job.workers * job.worker_gpu_milli
        if limit is None or not asks:
            return ""
        if asks > limit:
            return (
                f"It asks for {_gpus(asks)} GPUs; one user may hold at most {_gpus(limit)} in "
                "the tenant: it cannot start while that limit stands."
            )
        user = (job.tenant, job.owner)
        if self.room(job.tenant, job.owner, asks):
            if job.preempting:  # its claim, until it starts
                self.held[user] = self.held.get(user, 0) + asks
            return ""
        return (
            f"Its submitter holds {_gpus(self.held[user])} of the {_gpus(limit)} GPUs one user "
            "may hold in the tenant; it starts once enough of their work ends."
        )

    def room(self, tenant: str, owner: str, asks: int) -> bool:
        """Whether the user may take ``asks`` GPU milli more in the tenant."""
        limit = self.limits.get(tenant)
        return limit is None or self.held.get((tenant, owner), 0) + asks <= limit

    def charge(self, tenant: str, owner: str, gpu_milli: int) -> None:
        """Count GPUs the cycle gave to the user (only in tenants with a limit)."""
        if gpu_milli and tenant in self.limits:
            self.held[tenant, owner] = self.held.get((tenant, owner), 0) + gpu_milli


def _gpus(milli: int) -> str:
    return f"{milli / WHOLE_GPU:g}"

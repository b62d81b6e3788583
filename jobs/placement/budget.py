"""A tenant's GPU-hour budget for each period (Slurm's GrpTRESMins): what its jobs may use of
GPUs over a calendar month, beside the quota on what they may hold at once.

As Slurm counts it, a budget covers what the tenant's jobs may possibly use: what they used so
far in the period (``Tenant.gpu_budget_spent``), what its running jobs may still use up to
their runtime limits (their GPU milli to their ``expected_end``), and what a job asks for
(its GPUs for its whole runtime limit). A job whose ask does not fit in what is left waits as
``gpu_budget`` until the period renews (``Tenant.gpu_budget_renews``) or the budget is
raised; one that asks for more than the whole budget can never start while it stands. Jobs
without GPUs are not counted. Like the limit on a user's GPUs it neither evicts work nor
reserves nodes: no capacity would let it start. A job whose runtime limit is unknown asks
nothing beyond a budget not yet spent.

The cycle charges what it places (a preemptor from its decision, as ``user_limit`` does); the
commit counts it again with what other schedulers placed since (``jobs.tenant_limits``).
"""

from __future__ import annotations

from collections.abc import Iterable

from jobs.placement.model import WHOLE_GPU, QueuedJob, RunningJob, Tenant

HOUR = 3600.0


class Budgets:
    """Each budgeted tenant's milli-GPU-seconds left in the period, charged as the cycle
    places."""

    def __init__(self, tenants: Iterable[Tenant], running: Iterable[RunningJob], now: float):
        self.tenants = {t.id: t for t in tenants if t.gpu_budget is not None}
        self.left = {
            t.id: t.gpu_budget - t.gpu_budget_spent
            for t in self.tenants.values()
            if t.gpu_budget is not None
        }
        if self.left:
            for job in running:
                if job.expected_end is not None:
                    self.take(job.tenant, job.gpu_milli * max(0.0, job.expected_end - now))

    def refusal(self, job: QueuedJob) -> str:
        """Why the job's ask does not fit in its tenant's budget, for people; "" if it does
        (or the tenant has none). A preemptor it lets through is charged at once."""
        left = self.left.get(job.tenant)
        gpu_milli = job.workers * job.worker_gpu_milli
        if left is None or not gpu_milli:
            return ""
        asks = self.asks(job)
        whole = self.tenants[job.tenant].gpu_budget or 0.0
        if asks > whole:
            return (
                f"It may use {_hours(asks)} GPU-hours ({_gpus(gpu_milli)} GPUs for its runtime "
                f"limit), more than its team's whole budget of {_hours(whole)} a period: it "
                "cannot start while that budget stands."
            )
        if self.fits(job.tenant, gpu_milli, asks):
            if job.preempting:  # its claim, until it starts
                self.take(job.tenant, asks)
            return ""
        return (
            f"Its team has {_hours(max(left, 0.0))} of its {_hours(whole)} GPU-hours left this "
            f"period beside what its running jobs may still use, and it may use "
            f"{_hours(asks)} ({_gpus(gpu_milli)} GPUs for its runtime limit): it starts when "
            "the budget renews, or sooner if it is raised."
        )

    def fits(self, tenant: str, gpu_milli: int, asks: float) -> bool:
        """Whether work of ``gpu_milli`` that may use ``asks`` milli-GPU-seconds fits in what
        the tenant has left (always without a budget, or without GPUs); one whose runtime is
        unknown (asks nothing) fits in a budget not yet spent."""
        left = self.left.get(tenant)
        return left is None or not gpu_milli or (asks or 1.0) <= left

    def estimate(self, job: QueuedJob) -> float | None:
        """When the job's tenant's budget renews, if its ask fits in a whole budget."""
        tenant = self.tenants[job.tenant]
        fits = self.asks(job) <= (tenant.gpu_budget or 0.0)
        return tenant.gpu_budget_renews if fits else None

    def charge(self, job: QueuedJob) -> None:
        """Count what the cycle placed."""
        self.take(job.tenant, self.asks(job))

    def take(self, tenant: str, milli_seconds: float) -> None:
        """Count milli-GPU-seconds the tenant's work may use (only in tenants with a budget)."""
        if tenant in self.left:
            self.left[tenant] -= milli_seconds

    @staticmethod
    def asks(job: QueuedJob) -> float:
        """The milli-GPU-seconds the job may use: its GPUs for its whole runtime limit."""
        return job.workers * job.worker_gpu_milli * (job.max_runtime or 0.0)


def _hours(milli_seconds: float) -> str:
    return f"{milli_seconds / WHOLE_GPU / HOUR:,.1f}"


def _gpus(milli: int) -> str:
    return f"{milli / WHOLE_GPU:g}"

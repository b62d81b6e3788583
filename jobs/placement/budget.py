"""A tenant's GPU-hour budget for each period (Slurm's GrpTRESMins): what its jobs may use of
GPUs over a calendar month, beside the quota on what they may hold at once.

As Slurm counts it, a budget covers what the tenant's jobs may possibly use: what they used so
far in the period (``Tenant.gpu_budget_spent``), what its running jobs may still use up to
their runtime limits (their GPU milli to their ``expected_end``), and what a job asks for
(its GPUs for its whole runtime limit). Each period counts only its own time, as what was
used is counted: a running job's use past the period's end (``Tenant.gpu_budget_renews``)
and the part of a job's ask that would fall after it count against the next period, whose
cycles see that job running. A job whose ask does not fit in what is left waits as
``gpu_budget`` until the period renews or the budget is raised; one that asks for more than
the whole budget can never start while it stands. Jobs without GPUs are not counted. Like the
limit on a user's GPUs it neither evicts work nor reserves nodes: no capacity would let it
start. A job whose runtime limit is unknown asks nothing beyond a budget not yet spent.

The cycle charges what it places (a preemptor from its decision, as ``gpu_limits`` does); the
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
        self.now = now
        self.tenants = {t.id: t for t in tenants if t.gpu_budget is not None}
        self.left = {
            t.id: t.gpu_budget - t.gpu_budget_spent
            for t in self.tenants.values()
            if t.gpu_budget is not None
        }
        if self.left:
            for job in running:
                if job.expected_end is not None:
                    runs = self.in_period(job.tenant, job.expected_end - now)
                    self.take(job.tenant, job.gpu_milli * runs)

    def refusal(self, job: QueuedJob) -> str:
        """Why the job's ask does not fit in its tenant's budget, for people; "" if it does
        (or the tenant has none). A preemptor it lets through is charged at once."""
        left = self.left.get(job.tenant)
        gpu_milli = job.workers * job.worker_gpu_milli
        if left is None or not gpu_milli:
            return ""
        whole = self.tenants[job.tenant].gpu_budget or 0.0
        if self.whole_ask(job) > whole:
            return (
                f"It may use {_hours(self.whole_ask(job))} GPU-hours ({_gpus(gpu_milli)} GPUs "
                f"for its runtime limit), more than its team's whole budget of {_hours(whole)} "
                "a period: it cannot start while that budget stands."
            )
        runtime = job.max_runtime or 0.0
        if self.fits(job.tenant, gpu_milli, runtime):
            if job.preempting:  # its claim, until it starts
                self.charge(job)
            return ""
        asks = gpu_milli * self.in_period(job.tenant, runtime)
        return (
            f"Its team has {_hours(max(left, 0.0))} of its {_hours(whole)} GPU-hours left this "
            f"period beside what its running jobs may still use, and it may use "
            f"{_hours(asks)} of them ({_gpus(gpu_milli)} GPUs for its runtime limit, to the "
            "period's end at most): it starts when the budget renews, or sooner if it is raised."
        )

    def fits(self, tenant: str, gpu_milli: int, runtime: float) -> bool:
        """Whether work of ``gpu_milli`` that may run ``runtime`` seconds from now fits in what
        the tenant has left of this period (always without a budget, or without GPUs); one
        whose runtime is unknown (0) fits in a budget not yet spent."""
        left = self.left.get(tenant)
        if left is None or not gpu_milli:
            return True
        return (gpu_milli * self.in_period(tenant, runtime) or 1.0) <= left

    def estimate(self, job: QueuedJob) -> float | None:
        """When the job's tenant's budget renews, if its ask fits in a whole budget."""
        tenant = self.tenants[job.tenant]
        fits = self.whole_ask(job) <= (tenant.gpu_budget or 0.0)
        return tenant.gpu_budget_renews if fits else None

    def charge(self, job: QueuedJob) -> None:
        """Count what the cycle placed, of this period."""
        self.place(job.tenant, job.workers * job.worker_gpu_milli, job.max_runtime or 0.0)

    def place(self, tenant: str, gpu_milli: int, runtime: float) -> None:
        """Count work of ``gpu_milli`` placed now to run at most ``runtime`` seconds."""
        self.take(tenant, gpu_milli * self.in_period(tenant, runtime))

    def take(self, tenant: str, milli_seconds: float) -> None:
        """Count milli-GPU-seconds the tenant's work may use (only in tenants with a budget)."""
        if tenant in self.left:
            self.left[tenant] -= milli_seconds

    def in_period(self, tenant: str, seconds: float) -> float:
        """Of ``seconds`` from now, those before the tenant's period ends (none in the past)."""
        renews = self.tenants[tenant].gpu_budget_renews if tenant in self.tenants else None
        if renews is not None:
            seconds = min(seconds, renews - self.now)
        return max(0.0, seconds)

    @staticmethod
    def whole_ask(job: QueuedJob) -> float:
        """The milli-GPU-seconds the job may use: its GPUs for its whole runtime limit."""
        return job.workers * job.worker_gpu_milli * (job.max_runtime or 0.0)


def _hours(milli_seconds: float) -> str:
    return f"{milli_seconds / WHOLE_GPU / HOUR:,.1f}"


def _gpus(milli: int) -> str:
    return f"{milli / WHOLE_GPU:g}"

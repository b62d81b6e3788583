"""A batch's limit on how many of its shards run at once (Slurm's array throttle,
``--array=0-999%10``): a team's batch whose shards share a model server or a database says how
many of them that can take, whatever the cluster has free.

A batch has as many shards running as it has running jobs, work in its grace period included
(a shard being stopped still holds its connections until it has gone, as the quota ledger
counts it), plus what the cycle places. A shard that would take its batch past its limit waits
as ``batch_shard_limit``: it neither evicts work nor reserves nodes for it, since no capacity
would let it start before one of its batch's shards ends.

A shard that evicted work for itself (``preempting``, decided before the queue) counts from its
decision on, placed or not: its batch's later shards must not take its turn, or it would then
wait for the limit and the eviction would be for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobs.placement.model import QueuedJob, RunningJob


class BatchLimits:
    """The shards each batch with a limit runs, counted as the cycle places, and when each is
    expected to end (None: not known)."""

    def __init__(self, queued: Iterable[QueuedJob], running: Iterable[RunningJob], now: float):
        self.now = now
        # Only the batches a queued shard limits: the others' shards are never counted.
        self.running: dict[str, int] = {
            j.batch: 0 for j in queued if j.batch is not None and j.max_running_shards is not None
        }
        self.ends: dict[str, list[float | None]] = {batch: [] for batch in self.running}
        if self.running:
            for job in running:
                if job.batch is not None and job.batch in self.running:
                    self.running[job.batch] += 1
                    self.ends[job.batch].append(job.expected_end)

    def refusal(self, job: QueuedJob) -> str:
        """Why the shard would take its batch past its limit, for people; "" if it would not
        (or it is no shard of a batch with a limit). Counts nothing: the cycle charges a
        placement (``charge``), and a preemptor it lets through from its decision on."""
        limit = job.max_running_shards
        if job.batch is None or limit is None:
            return ""
        running = self.running.get(job.batch, 0)
        if running < limit:
            return ""
        ends = "one of them ends" if running == limit else f"{running - limit + 1} of them end"
        return (
            f"{running} of its batch's shards run, at most {limit} may run at once: it starts "
            f"when {ends}."
        )

    def estimate(self, job: QueuedJob) -> float | None:
        """When enough of the shard's batch will have ended for it to start, as far as their
        expected ends say (running work by its runtime limit, work asked to stop after its
        grace); None if some of those ends are not known."""
        limit, batch = job.max_running_shards, job.batch
        if batch is None or limit is None or batch not in self.running:
            return None
        ends = [end for end in self.ends[batch] if end is not None]
        if len(ends) < len(self.ends[batch]):
            return None
        must_end = self.running[batch] - limit + 1
        return max(sorted(ends)[must_end - 1], self.now) if must_end > 0 else self.now

    def charge(self, job: QueuedJob) -> None:
        """Count a shard the cycle placed (or a preemptor it let through), expected to end by
        its runtime limit."""
        batch = job.batch
        if batch is not None and batch in self.running:
            self.running[batch] += 1
            runtime = job.max_runtime
            self.ends[batch].append(None if runtime is None else self.now + runtime)

"""The cycle's quota gate: which of a job's node groups its tenant's quota lets it use, and the
room held for a job the quota blocks (``quota.py`` keeps the ledger itself).

A long queue asks the same question many times; answers are kept while the ledger is unchanged
(its ``version``) and, once some tenant's room is held, per end time of the asking job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from jobs.placement.capacity import Group
from jobs.placement.fit import Slot
from jobs.placement.model import TRAINING, WHOLE_GPU, QueuedJob, gpu_flavor
from jobs.placement.quota import Ledger

# (tenant, flavor) -> (end, amount of the flavor) of the tenant's work whose end is known.
KnownEnds = Callable[[str, str], list[tuple[float, int]]]


def demand(job: QueuedJob, gpu_type: str, workers: int) -> dict[str, int]:
    """Quota flavors ``workers`` workers of the job use on a node of ``gpu_type``."""
    out = {"cpu": job.cpu_milli * workers, "memory": job.memory_mb * workers}
    if job.worker_gpu_milli and gpu_type:
        out[gpu_flavor(gpu_type)] = job.worker_gpu_milli * workers
    return out


def amount_said(flavor: str, amount: int | None) -> str:
    """An amount of a quota flavor as people read it: GPUs (the ledger counts thousandths),
    cores (millicores), MiB."""
    amount = amount or 0
    if flavor.startswith("gpu:"):
        gpus = amount / WHOLE_GPU
        return f"{gpus:g} GPU{'' if gpus == 1 else 's'}"
    if flavor == "cpu":
        cores = amount / 1000
        return f"{cores:g} core{'' if cores == 1 else 's'}"
    return f"{amount} MiB"


def flavor_first(flavor: str) -> tuple[int, str]:
    """GPUs, then CPU, then memory: the order a job's shortfall is said in."""
    return (0 if flavor.startswith("gpu:") else 1 if flavor == "cpu" else 2, flavor)


def end_of(job: QueuedJob, now: float) -> float:
    """When the job ends at the latest if it starts now."""
    return now + job.max_runtime if job.max_runtime is not None else float("inf")


class QuotaGate:
    """Quota questions of one cycle, answered from its ledger."""

    def __init__(self, ledger: Ledger, now: float):
        self.ledger = ledger
        self.now = now
        self._types: dict[int, tuple[str, ...]] = {}
        self._allowed: dict[tuple, list[Group]] = {}
        self._answers: dict[tuple, list[Group]] = {}
        self._shortfalls: dict[tuple, str] = {}

    def end_key(self, job: QueuedJob) -> float | None:
        """The job's end where quota answers depend on it (some tenant's room is held)."""
        return end_of(job, self.now) if self.ledger.held else None

    def allowed(self, job: QueuedJob, groups: list[Group], workers: int | None = None):
        """The groups whose GPU type the tenant's quota allows ``workers`` workers of the job
        on (``groups`` itself when it allows all of them).

        A gang needs all its workers' quota in one GPU type; a shard needs one worker's (the
        rest is checked shard by shard, ``one_more``).
        """
        if workers is None:
            if job.family == TRAINING or job.workers == 1:
                workers = job.workers
            elif self.allowed(job, groups, job.workers) is groups:
                return groups  # every shard fits any type's quota (asked again for the shards)
            else:
                workers = 1
        shape = (job.cpu_milli, job.memory_mb, job.worker_gpu_milli, workers)
        key = (job.tenant, shape, id(groups), self.ledger.version, self.end_key(job))
        allowed = self._answers.get(key)
        if allowed is None:
            allowed = self._answers[key] = self._allowed_groups(job, groups, workers)
        return allowed

    def _allowed_groups(self, job: QueuedJob, groups: list[Group], workers: int) -> list[Group]:
        types = self.types_of(groups)
        end = end_of(job, self.now)
        ok = tuple(t for t in types if self.ledger.allows(job.tenant, demand(job, t, workers), end))
        if ok == types:
            return groups
        # Equal inputs give the same list object, so the failure memo can key on its id.
        key = (id(groups), ok)
        allowed = self._allowed.get(key)
        if allowed is None:
            allowed = self._allowed[key] = [g for g in groups if g.gpu_type in ok]
        return allowed

    def allowed_if(
        self,
        job: QueuedJob,
        groups: list[Group],
        gone: bool = False,
        less: Mapping[str, int] | None = None,
    ) -> bool:
        """Whether the quota would allow the job (a gang whole, a shard alone) on some GPU type
        of ``groups``: once the work asked to stop has gone (``gone``), or without the
        tenant's usage ``less``. A question: nothing is charged, nothing cached."""
        workers = job.workers if job.family == TRAINING else 1
        end = end_of(job, self.now)
        return any(
            self.ledger.allows(job.tenant, demand(job, t, workers), end, gone, less)
            for t in self.types_of(groups)
        )

    def types_of(self, groups: list[Group]) -> tuple[str, ...]:
        types = self._types.get(id(groups))
        if types is None:
            types = self._types[id(groups)] = tuple(sorted({g.gpu_type for g in groups}))
        return types

    def borrows(self, job: QueuedJob, groups: list[Group]) -> bool:
        """Whether the whole job would borrow on every GPU type of ``groups``, at what its
        tenant holds now (the cycle's start plus what the cycle gave it)."""
        types = self.types_of(groups) or ("",)
        return not any(
            self.ledger.within_guarantee(job.tenant, demand(job, t, job.workers)) for t in types
        )

    def shortfall(self, job: QueuedJob, groups: list[Group]) -> str:
        """What of the job its tenant's quota does not cover now, per GPU type of ``groups``:
        "a100: it may start 0 GPUs more, the job asks 8 GPUs" (a gang whole, a shard alone),
        the flavors it lacks joined; "" when it covers the job (a hold for an earlier job keeps
        it off). Kept while the ledger is unchanged, per tenant and shape."""
        workers = job.workers if job.family == TRAINING else 1
        shape = (job.cpu_milli, job.memory_mb, job.worker_gpu_milli, workers)
        key = (job.tenant, shape, id(groups), self.ledger.version)
        if (known := self._shortfalls.get(key)) is not None:
            return known
        said = []
        # The GPU types whose nodes could hold a worker: the quota of another is beside the
        # point (an 8-GPU worker and 1-GPU nodes).
        holding = sorted({g.gpu_type for g in groups if g.could_hold(job)})
        for gpu_type in holding or self.types_of(groups) or ("",):
            wanted = demand(job, gpu_type, workers)
            lacking = [
                f"it may start {amount_said(flavor, self.ledger.headroom(job.tenant, flavor))} "
                f"more, the job asks {amount_said(flavor, wanted[flavor])}"
                for flavor in sorted(self.ledger.refused(job.tenant, wanted), key=flavor_first)
            ]
            if lacking:
                said.append(f"{gpu_type or 'no GPU'}: {'; '.join(lacking)}")
        self._shortfalls[key] = "; ".join(said)
        return self._shortfalls[key]

    def hold_for(self, job: QueuedJob, groups: list[Group], known_ends: KnownEnds) -> None:
        """Hold for the job its tenant's room on each flavor it lacks: later jobs of the tenant
        take none, unless they end before the job could start (as far as the tenant's own
        limit says), so a stream of small jobs cannot keep a large one waiting for ever."""
        ledger, tenant = self.ledger, job.tenant
        for gpu_type in self.types_of(groups):
            wanted = demand(job, gpu_type, job.workers)
            for flavor in ledger.refused(tenant, wanted):
                if (tenant, flavor) not in ledger.held and ledger.attainable(
                    tenant, flavor, wanted[flavor]
                ):
                    ends = known_ends(tenant, flavor)
                    until = ledger.free_at(tenant, flavor, wanted[flavor], ends, self.now)
                    ledger.hold(tenant, flavor, until)

    def one_more(self, job: QueuedJob, group: Group, slots: list[Slot]) -> bool:
        """Whether the tenant's quota allows one more worker of the job in ``group`` besides
        the workers already in ``slots`` (the first one was checked by ``allowed``)."""
        if len(slots) == 0:
            return True
        wanted = demand(job, group.gpu_type, 1)
        for node, _, _, _ in slots:
            for flavor, amount in demand(job, node.gpu_type, 1).items():
                wanted[flavor] = wanted.get(flavor, 0) + amount
        return self.ledger.allows(job.tenant, wanted, end_of(job, self.now))

"""The pure placement core: ``place(snapshot) -> Decision``.

No Django, no I/O, no clock: time, seed and policy weights travel in the ``Snapshot``. The
live scheduler, the trace simulator and the benchmarks all call this same function. See
README.md next to this file for the contract, the reason codes and the policy order.
"""

from jobs.placement.decision import (
    PENDING,
    PLACED,
    PREEMPTS,
    REASONS,
    RESERVED,
    Decision,
    Grow,
    Outcome,
    WorkerPlacement,
)
from jobs.placement.engine import place
from jobs.placement.model import (
    BATCH_INFERENCE,
    CLUSTER_COST_STEP,
    EVALUATION,
    FAMILIES,
    NO_ABLE_AGENT,
    ONLY_INTERRUPTIBLE,
    TRAINING,
    Allocation,
    Elastic,
    Node,
    Policy,
    QueuedJob,
    Quota,
    RunningJob,
    ShapeCount,
    Snapshot,
    Tenant,
    gpu_flavor,
)
from jobs.placement.ordering import worker_gpus

__all__ = [
    "BATCH_INFERENCE",
    "CLUSTER_COST_STEP",
    "EVALUATION",
    "FAMILIES",
    "NO_ABLE_AGENT",
    "ONLY_INTERRUPTIBLE",
    "PENDING",
    "PLACED",
    "PREEMPTS",
    "REASONS",
    "RESERVED",
    "TRAINING",
    "Allocation",
    "Decision",
    "Elastic",
    "Grow",
    "Node",
    "Outcome",
    "Policy",
    "QueuedJob",
    "Quota",
    "RunningJob",
    "ShapeCount",
    "Snapshot",
    "Tenant",
    "WorkerPlacement",
    "gpu_flavor",
    "place",
    "worker_gpus",
]

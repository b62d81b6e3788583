"""The decision: one outcome per queued job, plus the cycle's preemptions and reservation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PLACED = "placed"
PREEMPTS = "preempts"
RESERVED = "reserved"
PENDING = "pending"
STATUSES = (PLACED, PREEMPTS, RESERVED, PENDING)

# Reason codes of pending (and reserved) jobs: a code for machines, a meaning for people.
REASONS = {
    "quota_exceeded": "The tenant's guarantee plus what it may borrow does not cover the job.",
    "user_gpu_limit": "Its submitter would hold more GPUs than one user may in the tenant.",
    "class_gpu_limit": "It would take its priority class past the GPUs its jobs, or one "
    "user's jobs of it, may hold at once.",
    "gpu_budget": "What it may use of GPUs does not fit in what its tenant's GPU-hour budget "
    "has left this period.",
    "batch_shard_limit": "As many of its batch's shards run as the batch lets run at once.",
    "only_interruptible_clusters": "It is not preemptible, and the only clusters that would "
    "take it are interruptible (spot): their nodes may be taken back at any time.",
    "no_matching_cluster": "No cluster matches the job's cluster selector and has every data "
    "volume it mounts.",
    "agent_release": "The agents of the clusters it may run on are of a release that would "
    "start it without its secrets, its data volumes or its team's registry credential: it "
    "waits for one to be upgraded.",
    "no_such_gpu_type": "No node in the selected clusters has an acceptable GPU type.",
    "gpu_sharing_not_allowed": "A GPU share was asked for training or on a non-shareable type.",
    "no_healthy_nodes": "Every node that could take the job is unhealthy or cordoned.",
    "worker_too_large": "One worker is larger than any node that could take it; the job can "
    "never fit.",
    "topology_too_small": "No domain of the topology it asks for (the nodes sharing one rack, "
    "say) could ever hold its gang (an elastic one's fewest workers).",
    "topology": "It would fit, but not on nodes that share one domain of the topology it asks "
    "for: it waits for room in one.",
    "insufficient_gpus": "Not enough free GPUs of an acceptable type right now.",
    "insufficient_cpu": "Not enough free CPU on the nodes that could take the job.",
    "insufficient_memory": "Not enough free memory on the nodes that could take the job.",
    "fragmented": "Enough free GPUs in total, but no node set can hold the workers.",
    "waiting_for_reservation": "It would fit, but only on nodes held for a job ahead of it.",
    "maintenance": "It would fit, but only on nodes in a maintenance window, or whose window "
    "starts before its runtime limit would end it.",
    "booked": "It would fit, but only on nodes booked for another team, from before its "
    "runtime limit would end it.",
    "avoiding_failed_nodes": "It would fit, but only on nodes where an earlier attempt of it "
    "failed for the infrastructure: it waits for others.",
    "excluded_nodes": (
        "It would fit, but only on nodes it excludes, or not among those it names to run on: "
        "it waits for the others."
    ),
    "lacking_features": "It would fit, but only on nodes without a feature it requires: it "
    "waits for nodes that have them all.",
    "no_node_with_features": "No node that could take it offers every feature it requires.",
    "nodes_in_use": "It would fit, but only beside other work: it takes nodes to itself "
    "(exclusive), and waits for nodes with its GPUs and nothing else running.",
    "no_node_to_itself": "It takes nodes to itself (exclusive), and no node that could take it "
    "has exactly the GPUs one worker asks for (none, for CPU-only work) with room for it: it "
    "can never fit so.",
    "waiting_for_preemption": "Jobs asked to stop are in their grace period; it fits once they go.",
    "behind_higher_priority": "Capacity free at the start of the cycle went to jobs ahead.",
    "head_of_line": "The first job of its node pool that cannot fit: nodes are held for it "
    "until they free up.",
    "waiting_for_exempt_work": "The first job of its node pool that cannot fit: nodes are held "
    "for it, and lower-priority work there is preempted for it once its class's preemption "
    "exempt time ends.",
    "beyond_queue_depth": "Too far back in the queue to be considered in this cycle.",
    "invalid_request": "The request is malformed (no workers, bad GPU share, unknown family).",
}


@dataclass(frozen=True)
class WorkerPlacement:
    """Where one worker (gang rank or shard) goes. ``gpu_milli`` is per GPU listed;
    ``gpu_starts`` where each GPU's milli range starts, on a node whose ranges the snapshot
    gave (else empty)."""

    rank: int
    cluster: str
    node_id: str
    gpu_type: str
    gpu_indices: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mb: int
    gpu_starts: tuple[int, ...] = ()


# Why a victim may be evicted: for a job of a higher tier (or of its own tenant's quota), for a
# guarantee its tenant borrowed and the job's tenant claims back, or for fair share.
PRIORITY, QUOTA, FAIR_SHARE = "priority", "quota", "fair_share"


@dataclass(frozen=True)
class Outcome:
    """What the cycle decided for one queued job.

    ``placed``: ``workers`` says where. ``preempts``: ``victims`` must be evicted first and
    ``workers`` is where the job will go once they are gone; ``victim_causes`` says, victim by
    victim, why each may go (``PRIORITY``, ``QUOTA``, ``FAIR_SHARE``). ``reserved``:
    ``reserved_nodes`` are held for the job from ``estimated_start``. ``pending``: ``reason``
    and ``message`` say why, ``estimated_start`` estimates when enough GPUs of an acceptable
    type will be free (from running work's expected ends; None if that never happens).
    """

    job_id: str
    status: str
    reason: str = ""
    message: str = ""
    workers: tuple[WorkerPlacement, ...] = ()
    borrowed: bool = False
    victims: tuple[str, ...] = ()
    reserved_nodes: tuple[str, ...] = ()
    estimated_start: float | None = None
    victim_causes: tuple[str, ...] = ()

    def for_job(self, job_id: str) -> Outcome:
        """The same outcome for another job. A long queue repeats one answer thousands of
        times a cycle; a copy of the fields is several times cheaper than a frozen
        dataclass's ``__init__``."""
        copy = object.__new__(Outcome)
        copy.__dict__.update(self.__dict__, job_id=job_id)
        return copy

    @property
    def cluster(self) -> str | None:
        """The cluster if all workers are in one, else None."""
        clusters = {w.cluster for w in self.workers}
        return clusters.pop() if len(clusters) == 1 else None


@dataclass(frozen=True)
class Grow:
    """A running elastic gang to restart larger: asked to stop with its grace period for a
    checkpoint, it comes back first of the queue (its claim on the room) and starts with
    ``workers``, up from ``running``. ``sooner_s``: how much sooner it should end so, from
    its runtime limit read as its fewest workers' (None: it has no limit)."""

    job_id: str
    workers: int
    running: int
    sooner_s: float | None = None


@dataclass(frozen=True)
class Decision:
    """Outcomes in the order jobs were considered, the victims of this cycle, the running
    elastic gangs to restart larger, and the platform's totals by resource that fair share
    divides each tenant's use by (``ordering.team_share``)."""

    outcomes: tuple[Outcome, ...]
    preempted: tuple[str, ...] = ()
    grown: tuple[Grow, ...] = ()
    totals: Mapping[str, float] = field(default_factory=dict)

    def by_job(self) -> dict[str, Outcome]:
        """Outcomes keyed by job id."""
        return {o.job_id: o for o in self.outcomes}

"""Table-driven placement cases: each states the cluster, the queue, and what each job gets.

``want`` maps a job id to ``"placed"``, ``"placed@N"`` (on N distinct nodes), ``"reserved"``,
``"preempts"`` or ``"pending:<reason>"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from jobs.placement import BATCH_INFERENCE, Policy, QueuedJob, place
from tests.placement.builders import (
    NOW,
    cpu_nodes,
    gpu_tenant,
    j_batch,
    j_eval,
    j_training,
    n1_t4_shared_nodes,
    n4_a100_nodes,
    n8_a100_nodes,
    snapshot,
    with_free,
)


@dataclass
class Case:
    name: str
    nodes: tuple
    queued: tuple
    want: dict[str, str]
    tenants: tuple = ()
    policy: Policy = field(default_factory=Policy)


def half_free_n8_a100_nodes(count: int) -> tuple:
    return tuple(with_free(n, (0, 0, 0, 0, 1000, 1000, 1000, 1000)) for n in n8_a100_nodes(count))


def busy_n8_a100_nodes(count: int, **kw) -> tuple:
    return tuple(with_free(n, (0,) * 8) for n in n8_a100_nodes(count, **kw))


HOUR = 3600.0

CASES = [
    Case(
        "a gang of two 8-GPU workers takes two whole nodes",
        n8_a100_nodes(4),
        (j_training("g", workers=2, gpus=8),),
        {"g": "placed@2"},
    ),
    Case(
        "a gang that fits on one node goes on one node",
        n8_a100_nodes(2),
        (j_training("g", workers=2, gpus=4),),
        {"g": "placed@1"},
    ),
    Case(
        "a gang larger than the free GPUs waits for GPUs",
        n8_a100_nodes(2) + busy_n8_a100_nodes(1),
        (j_training("g", workers=3, gpus=8),),
        {"g": "pending:insufficient_gpus"},
    ),
    Case(
        "enough free GPUs split over nodes is fragmentation",
        half_free_n8_a100_nodes(2),
        (j_training("g", workers=1, gpus=8),),
        {"g": "pending:fragmented"},
    ),
    Case(
        "a gang never spans clusters",
        n8_a100_nodes(1, cluster="c1") + n8_a100_nodes(1, cluster="c2"),
        (j_training("g", workers=2, gpus=8),),
        {"g": "pending:worker_too_large"},
    ),
    Case(
        "a gang one cluster could hold when idle waits as fragmented, never spanning two",
        n8_a100_nodes(1, cluster="c1")
        + busy_n8_a100_nodes(1, cluster="c1")
        + n8_a100_nodes(1, cluster="c2"),
        (j_training("g", workers=2, gpus=8),),
        {"g": "pending:fragmented"},
    ),
    Case(
        "an unknown GPU type is explained",
        n8_a100_nodes(1),
        (j_training("g", gpus=1, gpu_types=("h100",)),),
        {"g": "pending:no_such_gpu_type"},
    ),
    Case(
        "training never gets a GPU share",
        n8_a100_nodes(1),
        (j_training("g", gpus=0, gpu_milli=500),),
        {"g": "pending:gpu_sharing_not_allowed"},
    ),
    Case(
        "a GPU share needs a shareable GPU type",
        n8_a100_nodes(1),
        (j_eval("e", gpu_milli=250),),
        {"e": "pending:gpu_sharing_not_allowed"},
    ),
    Case(
        "batch shards cross clusters when one cluster is full",
        n1_t4_shared_nodes(1, cluster="c1") + n1_t4_shared_nodes(1, cluster="c2"),
        (j_batch("b", shards=2, gpus=1),),
        {"b": "placed@2"},
    ),
    Case(
        "batch shards are all or nothing",
        n1_t4_shared_nodes(2),
        (j_batch("b", shards=3, gpus=1),),
        {"b": "pending:insufficient_gpus"},
    ),
    Case(
        "shares of one GPU pack together",
        n1_t4_shared_nodes(1),
        (j_eval("e1", gpu_milli=500), j_eval("e2", gpu_milli=500), j_eval("e3", gpu_milli=500)),
        {"e1": "placed", "e2": "placed", "e3": "pending:behind_higher_priority"},
    ),
    Case(
        "over the guarantee with no borrowing is over quota",
        n8_a100_nodes(4),
        (j_training("g", workers=2, gpus=8),),
        {"g": "pending:quota_exceeded"},
        tenants=(gpu_tenant("alpha", "a100", 8, borrow=0), gpu_tenant("beta", "a100", 8)),
    ),
    Case(
        "idle guarantee of the cohort can be borrowed",
        n8_a100_nodes(4),
        (j_training("g", workers=2, gpus=8),),
        {"g": "placed@2"},
        tenants=(gpu_tenant("alpha", "a100", 8, borrow=8), gpu_tenant("beta", "a100", 8)),
    ),
    Case(
        "guarantee the cohort uses cannot be borrowed",
        n8_a100_nodes(4),
        (j_training("g", workers=2, gpus=8),),
        {"g": "pending:quota_exceeded"},
        tenants=(
            gpu_tenant("alpha", "a100", 8, borrow=8),
            gpu_tenant("beta", "a100", 8, used_gpus=8),
        ),
    ),
    Case(
        "a higher tier goes first even when submitted later",
        n8_a100_nodes(1),
        (j_training("low", tier=0, submit_time=NOW - 100), j_training("high", tier=5)),
        {"high": "placed", "low": "pending:behind_higher_priority"},
    ),
    Case(
        "a lower-tier job queued past the tier wait limit goes before a newer higher-tier one",
        n8_a100_nodes(1),
        (j_training("low", tier=0, submit_time=NOW - 25 * HOUR), j_training("high", tier=5)),
        {"low": "placed", "high": "pending:behind_higher_priority"},
    ),
    Case(
        "without a tier wait limit tiers stay strict however long a job waits",
        n8_a100_nodes(1),
        (j_training("low", tier=0, submit_time=NOW - 250 * HOUR), j_training("high", tier=5)),
        {"high": "placed", "low": "pending:behind_higher_priority"},
        policy=Policy(tier_wait_limit_hours=None),
    ),
    Case(
        "a shorter job goes before an older, longer one of the same priority",
        n8_a100_nodes(1),
        (
            j_training("long", max_runtime=24 * HOUR, submit_time=NOW - 600),
            j_training("short", max_runtime=HOUR),
        ),
        {"short": "placed", "long": "reserved"},
    ),
    Case(
        "a longer job that has waited long enough goes before a newer, shorter one",
        n8_a100_nodes(1),
        (
            j_training("long", max_runtime=24 * HOUR, submit_time=NOW - 80 * HOUR),
            j_training("short", max_runtime=HOUR),
        ),
        {"long": "placed", "short": "reserved"},
    ),
    Case(
        "a job without a runtime limit counts as the largest",
        n8_a100_nodes(1),
        (
            j_training("unlimited", submit_time=NOW - 600),
            j_training("limited", max_runtime=1000 * HOUR),
        ),
        {"limited": "placed", "unlimited": "reserved"},
    ),
    Case(
        "unhealthy nodes take nothing",
        n8_a100_nodes(2, healthy=False),
        (j_training("g", gpus=1),),
        {"g": "pending:no_healthy_nodes"},
    ),
    Case(
        "a worker larger than every node can never fit",
        n4_a100_nodes(4),
        (j_training("g", gpus=8),),
        {"g": "pending:worker_too_large"},
    ),
    Case(
        "a cluster selector that matches nothing",
        n8_a100_nodes(1),
        (j_training("g", gpus=1, clusters=("mars",)),),
        {"g": "pending:no_matching_cluster"},
    ),
    Case(
        "a job without workers is invalid",
        n8_a100_nodes(1),
        (j_training("g", workers=0),),
        {"g": "pending:invalid_request"},
    ),
    Case(
        "CPU-only work runs on CPU nodes",
        cpu_nodes(1),
        (QueuedJob("c", "alpha", cpu_milli=4000, memory_mb=100),),
        {"c": "placed"},
    ),
    Case(
        "CPU-only work waits for CPU",
        cpu_nodes(1),
        (QueuedJob("c", "alpha", BATCH_INFERENCE, workers=2, cpu_milli=6000, memory_mb=100),),
        {"c": "pending:insufficient_cpu"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_it_places_as_the_table_says(case: Case):
    decision = place(snapshot(case.nodes, case.queued, tenants=case.tenants, policy=case.policy))
    got = {o.job_id: _describe(o, case.want[o.job_id]) for o in decision.outcomes}
    assert got == case.want


def _describe(outcome, wanted: str) -> str:
    if outcome.status == "pending":
        return f"pending:{outcome.reason}"
    if "@" in wanted:
        return f"{outcome.status}@{len({w.node_id for w in outcome.workers})}"
    return outcome.status

"""An owner reclaiming its guarantee: from whom, and for what."""

import dataclasses

from jobs.placement import Allocation, Quota, RunningJob, Tenant, gpu_flavor, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, snapshot

A100 = gpu_flavor("a100")


def test_an_owner_reclaims_its_guaranteed_cpu_from_a_borrower_filling_a_gpu_node():
    (node,) = n8_a100_nodes(1)
    node = dataclasses.replace(node, cpu_free_milli=node.cpu_free_milli - 60_000)
    # beta's CPU-only work holds 60 of the node's 64 cores, 28 of them on alpha's guarantee.
    crunch = RunningJob(
        id="crunch", tenant="beta", started_at=NOW - 3600,
        allocations=(Allocation(node.id, (), 60_000, 0),),
    )  # fmt: skip
    tenants = (
        Tenant("alpha", quotas=(Quota("cpu", 32_000, 0), Quota(A100, 8000, 0))),
        Tenant("beta", quotas=(Quota("cpu", 32_000, None),), usage={"cpu": 60_000}),
    )
    job = j_training("mine", gpus=8, tenant="alpha")

    decision = place(snapshot((node,), (job,), running=(crunch,), tenants=tenants))

    assert decision.by_job()["mine"].victims == ("crunch",)

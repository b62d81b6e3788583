"""A job its tenant's quota does not cover says what it lacks, per GPU type it may use: how
much more its tenant may start now against what the job asks (a gang whole, a shard alone)."""

import dataclasses

from jobs.placement import Quota, Tenant, place
from tests.placement.builders import (
    cpu_nodes,
    gpu_tenant,
    j_batch,
    j_training,
    n8_a100_nodes,
    n8_h100_nodes,
    nodes,
    snapshot,
)


def waiting(decision, job_id: str):
    outcome = decision.by_job()[job_id]
    assert (outcome.status, outcome.reason) == ("pending", "quota_exceeded")
    return outcome.message


def test_a_gang_over_its_tenants_gpu_quota_says_what_it_may_start_and_what_it_asks():
    # 10 held of a guarantee of 8 and a borrow limit of 4, an idle team lending plenty.
    team = gpu_tenant("team", "a100", 8, borrow=4, used_gpus=10)
    idle = gpu_tenant("idle", "a100", 16)
    gang = j_training("gang", workers=2, gpus=8, tenant="team")

    decision = place(snapshot(n8_a100_nodes(4), (gang,), tenants=(team, idle)))

    assert waiting(decision, "gang") == (
        "2 workers x 8 GPUs (any type), 8000m CPU, 8000 MiB: The tenant's guarantee "
        "plus what it may borrow does not cover the job: a100: it may start 2 GPUs more, the "
        "job asks 16 GPUs."
    )


def test_each_gpu_type_it_may_use_is_said():
    team = gpu_tenant("team", "a100", 0, borrow=0)
    team = dataclasses.replace(team, quotas=(*team.quotas, Quota("gpu:h100", 4000, 0)))
    job = j_training("big", gpus=8, tenant="team")

    decision = place(snapshot((*n8_a100_nodes(1), *n8_h100_nodes(1)), (job,), tenants=(team,)))

    assert waiting(decision, "big").endswith(
        "a100: it may start 0 GPUs more, the job asks 8 GPUs; "
        "h100: it may start 4 GPUs more, the job asks 8 GPUs."
    )


def test_a_shard_says_what_one_shard_lacks():
    team = gpu_tenant("team", "a100", 2, borrow=0, used_gpus=2)
    batch = j_batch("batch", shards=4, gpus=1, tenant="team")

    decision = place(snapshot(n8_a100_nodes(1), (batch,), tenants=(team,)))

    assert "a100: it may start 0 GPUs more, the job asks 1 GPU." in waiting(decision, "batch")


def test_a_cpu_job_says_its_cores():
    team = Tenant(id="team", quotas=(Quota("cpu", 4000, 0),), usage={"cpu": 3000})
    job = j_batch("cpu-job", gpus=0, cpu_milli=2000, tenant="team")

    decision = place(snapshot(cpu_nodes(1), (job,), tenants=(team,)))

    assert waiting(decision, "cpu-job").endswith(
        "no GPU: it may start 1 core more, the job asks 2 cores."
    )


def test_a_gpu_type_whose_nodes_could_not_hold_a_worker_is_left_out():
    # 1-GPU t4 nodes could never hold an 8-GPU worker: their quota is beside the point.
    team = gpu_tenant("team", "a100", 0, borrow=0)
    team = dataclasses.replace(team, quotas=(*team.quotas, Quota("gpu:t4", 0, 0)))
    job = j_training("big", gpus=8, tenant="team")

    decision = place(snapshot((*n8_a100_nodes(1), *nodes(8, 1, "t4")), (job,), tenants=(team,)))

    assert waiting(decision, "big").endswith(
        "does not cover the job: a100: it may start 0 GPUs more, the job asks 8 GPUs."
    )

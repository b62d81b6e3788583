"""A job that evicted work for itself keeps its owner's room under the tenant's per-user GPU
limit while its victims leave: the owner's later jobs take none of it, or the eviction would
have been for nothing (the preemptor would then wait as ``user_gpu_limit``)."""

from jobs.placement import Tenant, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot


def test_a_preemptors_owner_starts_nothing_else_past_the_limit_while_its_victims_leave():
    first, second = n8_a100_nodes(2)
    first, victim = running_on(
        first, "victim", 8, tenant="beta", preemptible=True, stopping=True,
        expected_end=NOW + 60,
    )  # fmt: skip
    preemptor = j_training("preemptor", gpus=8, tier=5, owner="ann", preempting=True)
    later = j_training("later", gpus=4, owner="ann")
    tenants = (Tenant("alpha", user_gpu_limit=8000), Tenant("beta"))

    decision = place(snapshot((first, second), (preemptor, later), (victim,), tenants=tenants))

    assert decision.by_job()["later"].reason == "user_gpu_limit"

"""Fair-share preemption (Policy.fair_share_preemption): on a full platform, a GPU job of a
tenant under its fair share evicts preemptible work of its tier or lower from a tenant over
it, only as far as that tenant keeps at least as many GPUs for its weight, so two tenants never
evict each other in turn."""

import dataclasses

from jobs.placement import Policy, Tenant, place
from tests.placement.builders import j_training, n8_a100_nodes, running_on, snapshot

FAIR = Policy(fair_share_preemption=True)


def full(tenant: str = "alpha", count: int = 2, gpus: int = 8, **kw):
    """``count`` 8-GPU nodes, each running one job of ``tenant`` on ``gpus`` of its GPUs."""
    nodes, running = [], []
    for i, node in enumerate(n8_a100_nodes(count)):
        kw.setdefault("preemptible", True)
        node, job = running_on(node, f"{tenant}-{i}", gpus, tenant=tenant, **kw)
        nodes.append(node)
        running.append(job)
    return nodes, running


def tenants(*weights: tuple[str, float], usage: dict[str, int]) -> tuple[Tenant, ...]:
    return tuple(
        Tenant(id=name, weight=weight, usage={"gpu:a100": usage.get(name, 0) * 1000})
        for name, weight in weights
    )


def test_a_tenant_under_its_share_evicts_one_over_it_when_the_policy_has_it():
    nodes, running = full()
    queue = (j_training("beta-job", gpus=8, tenant="beta"),)
    teams = tenants(("alpha", 1.0), ("beta", 1.0), usage={"alpha": 16})

    off = place(snapshot(nodes, queue, running=running, tenants=teams))
    assert off.by_job()["beta-job"].status == "pending" and off.preempted == ()
    on = place(snapshot(nodes, queue, running=running, tenants=teams, policy=FAIR))
    assert on.by_job()["beta-job"].status == "preempts"
    assert len(on.preempted) == 1 and on.preempted[0].startswith("alpha")
    assert on.by_job()["beta-job"].victim_causes == ("fair_share",)


def test_once_even_the_evicted_tenant_cannot_take_its_gpus_back():
    (a, b) = n8_a100_nodes(2)
    a, alphas = running_on(a, "alpha-0", 8, tenant="alpha", preemptible=True)
    b, betas = running_on(b, "beta-0", 8, tenant="beta", preemptible=True)
    queue = (j_training("alpha-again", gpus=8, tenant="alpha"),)
    teams = tenants(("alpha", 1.0), ("beta", 1.0), usage={"alpha": 8, "beta": 8})

    decision = place(snapshot((a, b), queue, running=(alphas, betas), tenants=teams, policy=FAIR))
    assert decision.preempted == ()


def test_it_evicts_no_more_than_keeps_the_victims_tenant_at_the_share_for_its_weight():
    # alpha (weight 3) holds 16 GPUs in two jobs of 8. beta's 4-GPU job leaves beta at 4 for a
    # weight of 1; alpha may drop to 12 (4 a weight) but not to 8: one of its jobs is too much.
    nodes, running = full()
    queue = (j_training("beta-job", gpus=4, tenant="beta"),)
    teams = tenants(("alpha", 3.0), ("beta", 1.0), usage={"alpha": 16})
    decision = place(snapshot(nodes, queue, running=running, tenants=teams, policy=FAIR))
    assert decision.preempted == ()
    # alpha in four jobs of 4: losing one keeps it at 12.
    nodes, running = [], []
    for i, node in enumerate(n8_a100_nodes(2)):
        for k in range(2):
            node, job = running_on(node, f"alpha-{i}{k}", 4, tenant="alpha", preemptible=True)
            running.append(job)
        nodes.append(node)
    decision = place(snapshot(nodes, queue, running=running, tenants=teams, policy=FAIR))
    assert len(decision.preempted) == 1 and decision.by_job()["beta-job"].status == "preempts"


def test_work_of_a_higher_tier_or_not_preemptible_is_not_evicted_for_fair_share():
    queue = (j_training("beta-job", gpus=8, tenant="beta", tier=1),)
    teams = tenants(("alpha", 1.0), ("beta", 1.0), usage={"alpha": 16})
    for kw in ({"tier": 2}, {"preemptible": False}):
        nodes, running = full(**kw)
        decision = place(snapshot(nodes, queue, running=running, tenants=teams, policy=FAIR))
        assert decision.preempted == (), kw


def test_a_cpu_only_job_evicts_nobody_for_fair_share():
    nodes, running = full(gpus=8)
    # The nodes' cores taken too, so that the CPU job does not fit.
    nodes = [dataclasses.replace(n, cpu_free_milli=0) for n in nodes]
    queue = (j_training("beta-cpu", gpus=0, tenant="beta", cpu_milli=1000),)
    teams = tenants(("alpha", 1.0), ("beta", 1.0), usage={"alpha": 16})

    decision = place(snapshot(nodes, queue, running=running, tenants=teams, policy=FAIR))
    assert decision.preempted == ()


def test_a_class_with_it_on_or_off_overrides_the_platforms_setting():
    nodes, running = full()
    teams = tenants(("alpha", 1.0), ("beta", 1.0), usage={"alpha": 16})

    def decided(on: bool, policy: Policy):
        queue = (j_training("beta-job", gpus=8, tenant="beta", fair_share_preemption=on),)
        return place(snapshot(nodes, queue, running=running, tenants=teams, policy=policy))

    on_in_class = decided(True, Policy())
    off_in_class = decided(False, FAIR)

    assert on_in_class.by_job()["beta-job"].status == "preempts"
    assert on_in_class.by_job()["beta-job"].victim_causes == ("fair_share",)
    assert off_in_class.by_job()["beta-job"].status == "pending"
    assert off_in_class.preempted == ()

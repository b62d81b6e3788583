"""Who is evicted for whom: reclaim read from the quota ledger, victims chosen node by node."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.placement import Policy, Tenant, gpu_flavor, place, preemption
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_batch,
    j_training,
    n8_a100_nodes,
    n8_h100_nodes,
    running_on,
    snapshot,
)

A100 = gpu_flavor("a100")


def one_gpu_jobs(nodes):
    """Every node filled with tier-0 preemptible 1-GPU jobs ``<node>-<gpu>``; each node holds
    cheap and costly ones alike (the cheapest of all are one per node)."""
    filled, running = [], []
    for n, node in enumerate(nodes):
        for g in range(8):
            started = NOW - 60 * (1 + g * len(nodes) + n)
            node, job = running_on(node, f"{node.id}-{g}", 1, preemptible=True, started_at=started)
            running.append(job)
        filled.append(node)
    return filled, running


# -- reclaim: who borrows is read from the ledger, not the flag set at placement -------------


def test_a_tenant_back_inside_its_guarantee_keeps_work_flagged_borrowed():
    a, b = n8_a100_nodes(2)
    # B was over its guarantee when x3 was placed; its other work has ended since.
    a, x3 = running_on(a, "x3", 4, tenant="B", borrowed=True, started_at=NOW - 600)
    b, c1 = running_on(b, "c1", 8, tenant="C", borrowed=True, started_at=NOW - 7200)
    tenants = (
        gpu_tenant("A", "a100", 8),
        gpu_tenant("B", "a100", 8, used_gpus=4),
        Tenant("C", usage={A100: 8000}),  # no quota: all it uses is borrowed
    )
    job = j_training("a-job", gpus=8, tenant="A")

    decision = place(snapshot((a, b), (job,), running=(x3, c1), tenants=tenants))

    assert decision.preempted == ("c1",)


def test_a_job_whose_tenant_has_no_guarantee_reclaims_nothing():
    (a,) = n8_a100_nodes(1)
    a, lent = running_on(a, "lent", 8, tenant="B", borrowed=True, tier=100)
    tenants = (
        gpu_tenant("A", "a100", 8, cohort="ml"),
        Tenant("B", cohort="ml", usage={A100: 8000}),
        Tenant("Z"),
    )
    job = j_training("z-job", gpus=8, tenant="Z", may_preempt=False)

    decision = place(snapshot((a,), (job,), running=(lent,), tenants=tenants))

    assert decision.preempted == ()


def test_an_owner_does_not_reclaim_from_another_cohort():
    (a,) = n8_a100_nodes(1)
    a, lent = running_on(a, "lent", 8, tenant="B", borrowed=True)
    tenants = (
        gpu_tenant("A", "a100", 8, cohort="ml"),
        gpu_tenant("B", "a100", 0, borrow=None, cohort="vision", used_gpus=8),
        gpu_tenant("V", "a100", 8, cohort="vision"),
    )
    job = j_training("mine", gpus=8, tenant="A")

    decision = place(snapshot((a,), (job,), running=(lent,), tenants=tenants))

    assert decision.preempted == ()


def test_an_owner_reclaims_from_a_tenant_over_its_guarantee_though_not_flagged_borrowed():
    (a,) = n8_a100_nodes(1)
    a, over = running_on(a, "over", 8, tenant="B", borrowed=False)
    tenants = (gpu_tenant("A", "a100", 8), gpu_tenant("B", "a100", 0, borrow=8, used_gpus=8))
    job = j_training("mine", gpus=8, tenant="A")

    decision = place(snapshot((a,), (job,), running=(over,), tenants=tenants))

    assert decision.preempted == ("over",)


def test_a_job_that_would_take_its_tenant_past_its_guarantee_does_not_reclaim():
    a, b = n8_a100_nodes(2)
    a, own = running_on(a, "own", 4, tenant="A")
    b, lent = running_on(b, "lent", 8, tenant="B", borrowed=True)
    tenants = (
        gpu_tenant("A", "a100", 8, borrow=8, used_gpus=4),
        Tenant("B", usage={A100: 8000}),
    )
    job = j_training("mine", gpus=8, tenant="A")  # 4 + 8 > 8

    decision = place(snapshot((a, b), (job,), running=(own, lent), tenants=tenants))

    assert decision.preempted == ()


def test_the_tenant_most_over_its_guarantee_gives_back_first():
    a, b = n8_a100_nodes(2)
    a, little = running_on(a, "little", 8, tenant="B", started_at=NOW - 60)
    b, much = running_on(b, "much", 8, tenant="C", started_at=NOW - 7200)
    tenants = (
        gpu_tenant("A", "a100", 8),
        gpu_tenant("B", "a100", 4, borrow=None, used_gpus=8),  # 4 over
        gpu_tenant("C", "a100", 0, borrow=None, used_gpus=8),  # 8 over
    )
    job = j_training("mine", gpus=8, tenant="A")

    decision = place(snapshot((a, b), (job,), running=(little, much), tenants=tenants))

    assert decision.preempted == ("much",)  # though it loses more work


def test_a_tenant_gives_back_work_only_while_it_is_over_its_guarantee():
    (a,) = n8_a100_nodes(1)
    a, b1 = running_on(a, "b1", 4, tenant="B", borrowed=True)
    a, b2 = running_on(a, "b2", 4, tenant="B", borrowed=True)
    # B is 4 GPUs over: once one job is gone it is inside its guarantee.
    tenants = (gpu_tenant("A", "a100", 8), gpu_tenant("B", "a100", 4, borrow=None, used_gpus=8))
    job = j_training("mine", gpus=8, tenant="A")

    decision = place(snapshot((a,), (job,), running=(b1, b2), tenants=tenants))

    assert decision.preempted == ()


def test_a_higher_tier_still_evicts_lower_tier_work_inside_its_guarantee():
    (a,) = n8_a100_nodes(1)
    a, low = running_on(a, "low", 8, tenant="B", preemptible=True, tier=0)
    tenants = (gpu_tenant("A", "a100", 8), gpu_tenant("B", "a100", 8, used_gpus=8))
    job = j_training("hi", gpus=8, tenant="A", tier=5)

    decision = place(snapshot((a,), (job,), running=(low,), tenants=tenants))

    assert decision.preempted == ("low",)


# -- choosing victims node by node -------------------------------------------------------------


def test_a_whole_node_job_preempts_one_gpu_jobs_spread_over_many_nodes():
    nodes, running = one_gpu_jobs(n8_a100_nodes(20))
    job = j_training("hi", gpus=8, tenant="hi", tier=100)

    decision = place(snapshot(nodes, (job,), running=running))

    hi = decision.by_job()["hi"]
    assert hi.status == "preempts"
    assert len(hi.victims) == 8
    assert {v.rsplit("-", 1)[0] for v in hi.victims} == {hi.workers[0].node_id}


def test_it_preempts_on_the_node_whose_victims_lose_least_work_in_total():
    a, b = n8_a100_nodes(2)
    running = []
    for g in range(8):
        # a holds the seven cheapest jobs and a costly one, yet loses less in total (37 < 80).
        a, ja = running_on(a, f"a{g}", 1, preemptible=True, started_at=NOW - (30 if g == 7 else 1))
        b, jb = running_on(b, f"b{g}", 1, preemptible=True, started_at=NOW - 10)
        running += [ja, jb]
    job = j_training("hi", gpus=8, tier=1)

    decision = place(snapshot((a, b), (job,), running=running))

    assert decision.preempted == tuple(f"a{g}" for g in range(8))


@pytest.mark.parametrize(("limit", "preempted"), [(8, 8), (7, 0)])
def test_max_victims_per_job_bounds_the_victims_chosen_not_the_candidates(limit, preempted):
    nodes, running = one_gpu_jobs(n8_a100_nodes(20))
    job = j_training("hi", gpus=8, tenant="hi", tier=100)

    policy = Policy(max_victims_per_job=limit)
    decision = place(snapshot(nodes, (job,), running=running, policy=policy))

    assert len(decision.preempted) == preempted


def test_a_gang_preempts_whole_nodes_of_small_jobs_in_one_group():
    nodes, running = one_gpu_jobs(n8_a100_nodes(6) + n8_h100_nodes(6))
    job = j_training("gang", workers=2, gpus=8, tier=1)

    decision = place(snapshot(nodes, (job,), running=running))

    gang = decision.by_job()["gang"]
    assert gang.status == "preempts"
    assert len(gang.victims) == 16
    used = {w.node_id for w in gang.workers}
    assert {v.rsplit("-", 1)[0] for v in gang.victims} == used
    assert len({w.gpu_type for w in gang.workers}) == 1


def test_shards_take_several_steps_on_one_node():
    nodes, running = one_gpu_jobs(n8_a100_nodes(1))
    job = j_batch("shards", shards=5, gpus=1, tier=1)

    decision = place(snapshot(nodes, (job,), running=running))

    assert decision.by_job()["shards"].status == "preempts"
    assert len(decision.preempted) == 5


def test_a_gang_victim_on_two_nodes_is_one_victim():
    a, b = n8_a100_nodes(2)
    a, part_a = running_on(a, "gang", 8, preemptible=True)
    b, part_b = running_on(b, "gang", 8, preemptible=True)
    gang = dataclasses.replace(part_a, allocations=part_a.allocations + part_b.allocations)
    queue = (j_training("hi", gpus=8, tier=1), j_training("next", gpus=8, tier=1))

    decision = place(snapshot((a, b), queue, running=(gang,)))

    assert decision.preempted == ("gang",)
    # The gang's other node is the next job's once the gang has gone: it holds it until then.
    assert [o.status for o in decision.outcomes] == ["preempts", "reserved"]


# -- cost of a blocked queue --------------------------------------------------------------------


def test_jobs_that_wait_for_stopping_work_do_not_scan_the_running_work(monkeypatch):
    (a,) = n8_a100_nodes(1)
    a, leaving = running_on(a, "leaving", 8, preemptible=True, stopping=True, expected_end=NOW)
    others, running = one_gpu_jobs(n8_a100_nodes(4))
    # Distinct shapes, so that no wait is answered from an earlier equal request.
    queue = tuple(j_training(f"q{i}", gpus=8, cpu_milli=1000 + i, tier=1) for i in range(20))
    scans = []
    real = preemption.eligible
    monkeypatch.setattr(preemption, "eligible", lambda *a, **k: scans.append(1) or real(*a, **k))

    no_backfill = Policy(backfill=False)
    snap = snapshot((a, *others), queue, running=(leaving, *running), policy=no_backfill)
    decision = place(snap)

    assert {o.reason for o in decision.outcomes} == {"waiting_for_preemption"}
    assert (decision.preempted, scans) == ((), [])

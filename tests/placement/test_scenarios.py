"""Placement behaviours that need more than a status to state: where, who, when."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.placement import Policy, Tenant, gpu_flavor, place
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_batch,
    j_eval,
    j_training,
    n4_t4_shared_nodes,
    n8_a100_nodes,
    n8_h100_nodes,
    running_on,
    snapshot,
    with_free,
)


def test_it_reserves_the_earliest_freed_nodes_and_backfills_only_work_that_ends_first():
    a, b = n8_a100_nodes(2)
    a, r1 = running_on(a, "r1", 4, expected_end=NOW + 1000)
    b, r2 = running_on(b, "r2", 8, expected_end=NOW + 5000)
    queue = (
        j_training("big", gpus=8, tier=1),
        j_training("long", gpus=4, max_runtime=5000, submit_time=NOW - 20),
        j_training("short", gpus=4, max_runtime=500, submit_time=NOW - 10),
    )
    # In submit order: "long" is looked at first and must keep off the reserved node.
    fifo = Policy(size_priority_per_doubling=0.0)
    got = place(snapshot((a, b), queue, running=(r1, r2), policy=fifo)).by_job()
    assert got["big"].status == "reserved"
    assert got["big"].reserved_nodes == (a.id,)
    assert got["big"].estimated_start == NOW + 1000
    assert got["long"].reason == "waiting_for_reservation"
    assert got["long"].estimated_start == NOW + 1000
    assert got["short"].status == "placed"
    assert got["short"].workers[0].node_id == a.id


def test_it_gives_only_one_head_of_line_reservation():
    a, b = n8_a100_nodes(2)
    a, r1 = running_on(a, "r1", 8, expected_end=NOW + 1000)
    b, r2 = running_on(b, "r2", 8, expected_end=NOW + 2000)
    queue = (j_training("first", gpus=8, tier=1), j_training("second", gpus=8))
    got = place(snapshot((a, b), queue, running=(r1, r2))).by_job()
    assert got["first"].status == "reserved"
    assert got["second"].status == "pending"
    assert got["second"].estimated_start == NOW + 1000  # r1 frees 8 GPUs then


def test_it_preempts_the_victim_that_loses_least_work():
    a, b = n8_a100_nodes(2)
    a, fresh = running_on(a, "fresh", 8, preemptible=True, last_checkpoint=NOW - 60)
    b, stale = running_on(b, "stale", 8, preemptible=True, last_checkpoint=NOW - 3000)
    decision = place(snapshot((a, b), (j_training("hi", gpus=8, tier=5),), running=(fresh, stale)))
    hi = decision.by_job()["hi"]
    assert hi.status == "preempts"
    assert (hi.victims, hi.victim_causes) == (("fresh",), ("priority",))
    assert decision.preempted == ("fresh",)
    assert hi.workers[0].node_id == a.id


def test_it_never_preempts_same_tier_or_non_preemptible_work():
    a, b = n8_a100_nodes(2)
    a, same = running_on(a, "same", 8, preemptible=True, tier=5)
    b, pinned = running_on(b, "pinned", 8, preemptible=False)
    decision = place(snapshot((a, b), (j_training("hi", gpus=8, tier=5),), running=(same, pinned)))
    assert decision.by_job()["hi"].status == "pending"
    assert decision.preempted == ()


def test_it_does_not_preempt_when_the_job_would_still_not_fit():
    a, b = n8_a100_nodes(2)
    a, v1 = running_on(a, "v1", 8, preemptible=True)
    b, v2 = running_on(b, "v2", 8, preemptible=True)
    gang = j_training("hi", workers=3, gpus=8, tier=5)
    decision = place(snapshot((a, b), (gang,), running=(v1, v2)))
    assert decision.by_job()["hi"].status == "pending"
    assert decision.preempted == ()


def test_it_preempts_whole_gangs_and_only_as_many_as_needed():
    a, b, c = n8_a100_nodes(3)
    a, gang_a = running_on(a, "gang", 8, preemptible=True, last_checkpoint=NOW - 10)
    b, gang_b = running_on(b, "gang", 8, preemptible=True, last_checkpoint=NOW - 10)
    gang = dataclasses.replace(gang_a, allocations=gang_a.allocations + gang_b.allocations)
    c, single = running_on(c, "single", 8, preemptible=True, last_checkpoint=NOW - 5000)
    decision = place(
        snapshot((a, b, c), (j_training("hi", gpus=8, tier=5),), running=(gang, single))
    )
    # The gang lost less work per GPU, but evicting it frees 16 GPUs: it is still cheapest.
    assert decision.by_job()["hi"].victims == ("gang",)


@pytest.mark.parametrize("preemptible", [True, False])
def test_an_owner_reclaims_its_guarantee_from_a_borrower_preemptible_or_not(preemptible):
    a, b = n8_a100_nodes(2)
    a, own = running_on(a, "own", 8, tenant="alpha")
    b, lent = running_on(b, "lent", 8, tenant="alpha", preemptible=preemptible, borrowed=True)
    tenants = (
        gpu_tenant("alpha", "a100", 8, borrow=8, used_gpus=16),
        gpu_tenant("beta", "a100", 8, borrow=8),
    )
    job = j_training("mine", gpus=8, tenant="beta")
    decision = place(snapshot((a, b), (job,), running=(own, lent), tenants=tenants))
    assert decision.by_job()["mine"].victims == ("lent",)
    assert decision.by_job()["mine"].victim_causes == ("quota",)


def test_a_preemptor_whose_victim_is_in_its_grace_period_evicts_nobody_else():
    a, b = n8_a100_nodes(2)
    a, leaving = running_on(a, "leaving", 8, preemptible=True, stopping=True,
                            expected_end=NOW + 40)  # fmt: skip
    b, other = running_on(b, "other", 8, preemptible=True, last_checkpoint=NOW)
    decision = place(
        snapshot((a, b), (j_training("hi", gpus=8, tier=5),), running=(leaving, other))
    )
    hi = decision.by_job()["hi"]
    assert decision.preempted == ()
    assert (hi.status, hi.reserved_nodes, hi.estimated_start) == ("reserved", (a.id,), NOW + 40)


def test_without_a_reservation_it_waits_for_stopping_work_with_its_reason():
    a, b = n8_a100_nodes(2)
    a, leaving = running_on(a, "leaving", 8, preemptible=True, stopping=True,
                            expected_end=NOW + 40)  # fmt: skip
    b, other = running_on(b, "other", 8, preemptible=True)
    no_backfill = Policy(backfill=False)
    job = j_training("hi", gpus=8, tier=5)
    decision = place(snapshot((a, b), (job,), running=(leaving, other), policy=no_backfill))
    hi = decision.by_job()["hi"]
    assert (hi.status, hi.reason, hi.estimated_start) == ("pending", "waiting_for_preemption",
                                                          NOW + 40)  # fmt: skip
    assert decision.preempted == ()


def test_a_second_preemptor_does_not_count_on_what_the_first_waits_for():
    a, b = n8_a100_nodes(2)
    a, leaving = running_on(a, "leaving", 8, preemptible=True, stopping=True,
                            expected_end=NOW + 40)  # fmt: skip
    b, other = running_on(b, "other", 8, preemptible=True)
    queue = (j_training("first", gpus=8, tier=5), j_training("second", gpus=8, tier=5))
    got = place(snapshot((a, b), queue, running=(leaving, other))).by_job()
    assert (got["first"].status, got["first"].reserved_nodes) == ("reserved", (a.id,))
    assert got["second"].victims == ("other",)


def test_a_stopping_job_is_not_chosen_as_a_victim_again():
    (a,) = n8_a100_nodes(1)
    a, leaving = running_on(a, "leaving", 4, preemptible=True, stopping=True,
                            expected_end=NOW + 40)  # fmt: skip
    a, other = running_on(a, "other", 4, preemptible=True, last_checkpoint=NOW - 5000)
    # Only "other" could be evicted now; 8 GPUs need both, so nothing is evicted for it.
    decision = place(snapshot((a,), (j_training("hi", gpus=8, tier=5),), running=(leaving, other)))
    assert decision.preempted == ()


def test_it_flags_placements_on_borrowed_quota():
    tenants = (gpu_tenant("alpha", "a100", 8, borrow=8), gpu_tenant("beta", "a100", 8))
    queue = (j_training("inside", gpus=8), j_training("beyond", gpus=8, submit_time=NOW + 1))
    got = place(snapshot(n8_a100_nodes(2), queue, tenants=tenants)).by_job()
    assert (got["inside"].borrowed, got["beyond"].borrowed) == (False, True)


def test_a_tenant_without_quota_on_a_guaranteed_flavor_only_borrows_idle_guarantee():
    tenants = (gpu_tenant("alpha", "a100", 8), Tenant("beta"))
    queue = tuple(j_training(f"b{i}", gpus=8, tenant="beta", submit_time=NOW + i) for i in (1, 2))
    got = place(snapshot(n8_a100_nodes(2), queue, tenants=tenants)).by_job()
    assert (got["b1"].status, got["b1"].borrowed) == ("placed", True)
    assert (got["b2"].status, got["b2"].reason) == ("pending", "quota_exceeded")


def test_an_owner_reclaims_its_guarantee_from_a_tenant_without_quota():
    (a,) = n8_a100_nodes(1)
    a, squatter = running_on(a, "squatter", 8, tenant="beta", borrowed=True)
    tenants = (gpu_tenant("alpha", "a100", 8), Tenant("beta", usage={gpu_flavor("a100"): 8000}))
    job = j_training("mine", gpus=8, tenant="alpha")
    decision = place(snapshot((a,), (job,), running=(squatter,), tenants=tenants))
    assert decision.by_job()["mine"].victims == ("squatter",)


def test_a_flavor_nobody_in_the_cohort_guarantees_is_not_limited():
    tenants = (gpu_tenant("alpha", "h100", 8), Tenant("beta"))
    queue = tuple(j_training(f"b{i}", gpus=8, tenant="beta", submit_time=NOW + i) for i in (1, 2))
    got = place(snapshot(n8_a100_nodes(2), queue, tenants=tenants)).by_job()
    assert [(got[k].status, got[k].borrowed) for k in ("b1", "b2")] == [("placed", False)] * 2


def test_it_serves_the_tenant_with_the_smaller_weighted_share_first():
    queue = (
        j_training("alpha-job", gpus=8, tenant="alpha", submit_time=NOW - 100),
        j_training("beta-job", gpus=8, tenant="beta"),
    )
    busy = {gpu_flavor("a100"): 8000}
    tenants = (Tenant("alpha", usage=busy), Tenant("beta"))
    got = place(snapshot(n8_a100_nodes(2)[:1], queue, tenants=tenants)).by_job()
    assert got["beta-job"].status == "placed"
    half = {gpu_flavor("a100"): 4000}
    heavy = (Tenant("alpha", weight=4.0, usage=busy), Tenant("beta", usage=half))
    got = place(snapshot(n8_a100_nodes(2)[:1], queue, tenants=heavy)).by_job()
    assert got["alpha-job"].status == "placed"


def test_aging_lets_an_old_low_priority_job_overtake():
    old = j_training("old", gpus=8, priority=0, submit_time=NOW - 10 * 3600)
    new = j_training("new", gpus=8, priority=5, submit_time=NOW)
    got = place(snapshot(n8_a100_nodes(1), (new, old))).by_job()
    assert got["old"].status == "placed"
    no_aging = Policy(aging_priority_per_hour=0.0)
    got = place(snapshot(n8_a100_nodes(1), (new, old), policy=no_aging)).by_job()
    assert got["new"].status == "placed"


def test_evaluation_fills_a_partly_used_gpu():
    fresh, used = n4_t4_shared_nodes(2)
    used = with_free(used, (1000, 300, 1000, 1000))
    outcome = place(snapshot((fresh, used), (j_eval("e", gpu_milli=300),))).outcomes[0]
    assert (outcome.workers[0].node_id, outcome.workers[0].gpu_indices) == (used.id, (1,))
    assert outcome.workers[0].gpu_milli == 300


def test_the_fragmentation_scorer_avoids_leaving_a_useless_sliver():
    (node,) = n4_t4_shared_nodes(1)
    node = with_free(node, (1000, 400, 1000, 1000))
    # Typical shares take 300 or 400: a 300 on the 400 GPU would strand 100, while on a free
    # GPU it leaves 700 = 300 + 400, and the 400 share fills the 400 GPU exactly.
    queue = (j_eval("e", gpu_milli=300), j_eval("f", gpu_milli=400))
    got = place(snapshot((node,), queue)).by_job()
    assert got["e"].workers[0].gpu_indices == (0,)
    assert got["f"].workers[0].gpu_indices == (1,)
    packing_only = Policy(scorers=(("best_fit", 1.0),))
    got = place(snapshot((node,), queue, policy=packing_only)).by_job()
    assert got["e"].workers[0].gpu_indices == (1,)


def test_a_share_fills_the_room_its_size_leaves_unusable_anyway():
    (node,) = n4_t4_shared_nodes(1)
    node = with_free(node, (1000, 400, 1000, 1000))
    # Only 300s arrive: the 400 GPU can hold one and loses 100 whatever happens, so the share
    # goes there rather than opening a whole GPU (plain FGD would open one).
    queue = (j_eval("e", gpu_milli=300),)
    outcome = place(snapshot((node,), queue)).outcomes[0]
    assert outcome.workers[0].gpu_indices == (1,)
    fgd_only = Policy(stranding_weight=0.0, gpu_model_weight=0.0, pairing_weight=0.0)
    outcome = place(snapshot((node,), queue, policy=fgd_only)).outcomes[0]
    assert outcome.workers[0].gpu_indices == (0,)


def test_a_gang_prefers_nodes_sharing_a_topology_label():
    racks = n8_a100_nodes(2, topology=("rack=r1",), prefix="r1-") + n8_a100_nodes(
        2, topology=("rack=r2",), prefix="r2-"
    )
    nodes = (
        with_free(racks[0], (1000,) * 8),
        with_free(racks[1], (0,) * 8),
        racks[2],
        racks[3],
    )
    outcome = place(snapshot(nodes, (j_training("g", workers=2, gpus=8),))).outcomes[0]
    assert sorted(w.node_id for w in outcome.workers) == ["r2-0", "r2-1"]


def test_workers_of_a_gang_get_distinct_gpus():
    outcome = place(snapshot(n8_a100_nodes(1), (j_training("g", workers=4, gpus=2),))).outcomes[0]
    taken = [i for w in outcome.workers for i in w.gpu_indices]
    assert sorted(taken) == list(range(8))
    assert [w.rank for w in outcome.workers] == [0, 1, 2, 3]


def test_every_pending_job_has_a_sentence():
    free, busy = n8_a100_nodes(2)
    busy = with_free(busy, (0,) * 8)
    outcome = place(snapshot((free, busy), (j_training("g", workers=2),))).outcomes[0]
    assert outcome.reason == "insufficient_gpus"
    assert "2 workers x 8 GPUs" in outcome.message


def test_the_same_snapshot_gives_the_same_decision():
    queue = tuple(j_eval(f"e{i}", gpu_milli=100 * (1 + i % 5)) for i in range(40))
    snap = snapshot(n4_t4_shared_nodes(6), queue, seed=3)
    assert place(snap) == place(snap)


def test_fair_share_alternates_tenants_as_the_cycle_places_their_jobs():
    queue = [j_training(f"{t}{i}", gpus=2, tenant=t) for t in ("alpha", "beta") for i in range(3)]
    got = place(snapshot(n8_a100_nodes(1), queue)).by_job()
    placed = sorted(job for job, o in got.items() if o.status == "placed")
    assert placed == ["alpha0", "alpha1", "beta0", "beta1"]


def test_batch_shards_fill_gaps_first_and_spread_when_asked():
    queue = (j_batch("b", shards=4, gpus=1),)
    packed = place(snapshot(n4_t4_shared_nodes(4), queue)).outcomes[0]
    assert len({w.node_id for w in packed.workers}) == 1
    spread = Policy(spread_weight=1.0)
    outcome = place(snapshot(n4_t4_shared_nodes(4), queue, policy=spread)).outcomes[0]
    assert len({w.node_id for w in outcome.workers}) == 4


def test_cluster_costs_steer_work_to_the_cheaper_cluster():
    nodes = n8_a100_nodes(1, cluster="pricey") + n8_a100_nodes(1, cluster="cheap")
    policy = Policy(cluster_costs={"pricey": 1.0})
    outcome = place(snapshot(nodes, (j_training("g", gpus=1),), policy=policy)).outcomes[0]
    assert outcome.cluster == "cheap"


def test_a_job_gets_its_first_listed_gpu_type_when_both_are_free():
    nodes = n8_a100_nodes(1) + n8_h100_nodes(1)
    for types in (("h100", "a100"), ("a100", "h100")):
        outcome = place(snapshot(nodes, (j_training("g", gpus=8, gpu_types=types),))).outcomes[0]
        assert outcome.workers[0].gpu_type == types[0]


def test_preemptions_per_tenant_are_rate_limited():
    a, b = n8_a100_nodes(2)
    a, v1 = running_on(a, "v1", 8, preemptible=True)
    b, v2 = running_on(b, "v2", 8, preemptible=True)
    queue = (j_training("hi1", gpus=8, tier=5), j_training("hi2", gpus=8, tier=5))
    one = Policy(max_preemptions_per_tenant=1)
    decision = place(snapshot((a, b), queue, running=(v1, v2), policy=one))
    assert len(decision.preempted) == 1
    assert [o.status for o in decision.outcomes] == ["preempts", "pending"]

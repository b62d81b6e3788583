"""A job its own tenant's quota blocks evicts the tenant's own lower classes, if its class may
preempt and that makes it fit, quota and capacity together (Kueue's LowerPriority)."""

import dataclasses

from jobs.placement import place
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)


def alpha(gpus: int, used: int):
    """Tenant alpha: ``gpus`` A100s guaranteed, nothing to borrow, ``used`` held now."""
    return gpu_tenant("alpha", "a100", gpus, borrow=0, used_gpus=used)


def test_a_job_its_quota_blocks_evicts_its_tenants_lower_class_and_takes_its_room():
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 8, preemptible=True, last_checkpoint=NOW - 60)
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b), (urgent,), running=(low,), tenants=(alpha(8, 8),)))

    outcome = decision.by_job()["urgent"]
    assert outcome.status == "preempts"
    assert outcome.victims == ("low",)
    assert decision.preempted == ("low",)


def test_a_class_that_may_not_preempt_waits_for_its_quota_and_evicts_nobody():
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 8, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, may_preempt=False)

    decision = place(snapshot((a, b), (urgent,), running=(low,), tenants=(alpha(8, 8),)))

    assert decision.by_job()["urgent"].reason == "quota_exceeded"
    assert decision.preempted == ()


def test_work_that_is_not_preemptible_or_not_of_a_lower_tier_keeps_the_quota():
    a, b, c = n8_a100_nodes(3)
    a, fixed = running_on(a, "fixed", 8, tier=0, preemptible=False)
    b, peer = running_on(b, "peer", 8, tier=5, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(
        snapshot((a, b, c), (urgent,), running=(fixed, peer), tenants=(alpha(16, 16),))
    )

    assert decision.by_job()["urgent"].reason == "quota_exceeded"
    assert decision.preempted == ()


def test_another_tenants_work_is_never_evicted_for_a_tenants_own_quota():
    # beta's cheaper low-tier job on a busy cluster would make room, but alpha's quota is what
    # blocks the job: only alpha's own work gives quota back.
    a, b = n8_a100_nodes(2)
    a, mine = running_on(a, "mine", 8, preemptible=True, last_checkpoint=NOW - 3000)
    b, theirs = running_on(b, "theirs", 8, tenant="beta", preemptible=True, last_checkpoint=NOW)
    tenants = (alpha(8, 8), gpu_tenant("beta", "a100", 8, borrow=0, used_gpus=8))
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b), (urgent,), running=(mine, theirs), tenants=tenants))

    assert decision.by_job()["urgent"].victims == ("mine",)
    assert decision.preempted == ("mine",)


def test_the_fewest_victims_that_free_the_quota_go_lowest_tier_first_then_least_work_lost():
    (a,) = n8_a100_nodes(1)
    a, tier1 = running_on(a, "tier1", 4, tier=1, preemptible=True, last_checkpoint=NOW - 10)
    a, tier0_costly = running_on(a, "tier0-costly", 2, preemptible=True, last_checkpoint=NOW - 900)
    a, tier0_cheap = running_on(a, "tier0-cheap", 2, preemptible=True, last_checkpoint=NOW - 30)
    urgent = j_training("urgent", gpus=2, tier=5)

    decision = place(
        snapshot(
            (a,), (urgent,), running=(tier1, tier0_costly, tier0_cheap), tenants=(alpha(8, 8),)
        )
    )

    assert decision.by_job()["urgent"].victims == ("tier0-cheap",)


def test_quota_freed_on_the_wrong_nodes_takes_the_one_victim_that_frees_both():
    # alpha may hold 16 GPUs and holds them all. Its two cheap 4-GPU jobs would give back
    # enough quota for an 8-GPU gang, but they sit on nodes a non-preemptible job half fills;
    # only its costly 8-GPU job frees a whole node. That one alone is evicted.
    a, b, c = n8_a100_nodes(3)
    a, cheap_a = running_on(a, "cheap-a", 4, preemptible=True, last_checkpoint=NOW - 10)
    a, fixed_a = running_on(a, "fixed-a", 4, tenant="beta")
    b, cheap_b = running_on(b, "cheap-b", 4, preemptible=True, last_checkpoint=NOW - 10)
    b, fixed_b = running_on(b, "fixed-b", 4, tenant="beta")
    c, costly = running_on(c, "costly", 8, preemptible=True, last_checkpoint=NOW - 3000)
    urgent = j_training("urgent", gpus=8, tier=5)
    running = (cheap_a, fixed_a, cheap_b, fixed_b, costly)

    decision = place(snapshot((a, b, c), (urgent,), running=running, tenants=(alpha(16, 16),)))

    outcome = decision.by_job()["urgent"]
    assert outcome.victims == ("costly",)
    assert {w.node_id for w in outcome.workers} == {c.id}


def test_nothing_is_evicted_when_even_all_its_tenants_lower_work_would_not_free_the_quota():
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 4, preemptible=True)
    a, fixed = running_on(a, "fixed", 4, preemptible=False)
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b), (urgent,), running=(low, fixed), tenants=(alpha(8, 8),)))

    assert decision.by_job()["urgent"].reason == "quota_exceeded"
    assert decision.preempted == ()


def test_while_its_victims_are_in_their_grace_period_it_waits_and_evicts_no_more():
    # Next cycle: the first victim is stopping, a second low job still runs. The stopping one
    # gives the quota back once gone, so the job waits for it rather than evicting another.
    a, b = n8_a100_nodes(2)
    a, leaving = running_on(a, "leaving", 8, preemptible=True, stopping=True)
    b, other = running_on(b, "other", 8, preemptible=True, last_checkpoint=NOW)
    urgent = dataclasses.replace(j_training("urgent", gpus=8, tier=5), preempting=True)
    tenants = (alpha(16, 16),)

    decision = place(snapshot((a, b), (urgent,), running=(leaving, other), tenants=tenants))

    assert decision.by_job()["urgent"].reason == "waiting_for_preemption"
    assert decision.preempted == ()


def test_its_tenants_later_jobs_do_not_take_the_quota_its_victims_hold_until_they_go():
    # The victim holds 8 GPUs of quota until it has gone; the job needs 2 of them. Node b is
    # idle, yet a later job of the tenant may not start there on the other 6 in this cycle:
    # until the victim stops, the tenant would run 9 GPUs on a quota of 8.
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 8, preemptible=True)
    urgent = j_training("urgent", gpus=2, tier=5)
    later = j_training("later", gpus=1, tier=1, may_preempt=False)

    decision = place(snapshot((a, b), (urgent, later), running=(low,), tenants=(alpha(8, 8),)))

    assert decision.by_job()["urgent"].victims == ("low",)
    assert decision.by_job()["later"].reason == "quota_exceeded"

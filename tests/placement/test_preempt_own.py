"""A job its own tenant's quota blocks evicts the tenant's own lower classes, if its class may
preempt and that makes it fit, quota and capacity together (Kueue's LowerPriority)."""

import dataclasses

from jobs.placement import (
    Allocation,
    Policy,
    Quota,
    RunningJob,
    Tenant,
    gpu_flavor,
    own_quota,
    place,
)
from jobs.placement.quota import Ledger
from tests.placement.builders import (
    NOW,
    cpu_nodes,
    gpu_tenant,
    j_batch,
    j_training,
    n8_a100_nodes,
    n8_h100_nodes,
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


def test_a_batch_evicts_enough_of_its_tenants_work_for_every_shard():
    # One shard's quota comes back with the first victim; the other shards need the second.
    a, b = n8_a100_nodes(2)
    a, low1 = running_on(a, "low1", 2, preemptible=True, last_checkpoint=NOW - 10)
    a, low2 = running_on(a, "low2", 2, preemptible=True, last_checkpoint=NOW - 20)
    shards = j_batch("shards", shards=4, gpus=1, tier=5)

    decision = place(snapshot((a, b), (shards,), running=(low1, low2), tenants=(alpha(4, 4),)))

    assert decision.by_job()["shards"].victims == ("low1", "low2")


def test_quota_freed_on_a_gpu_type_without_room_does_not_end_the_search():
    # Evicting the cheap A100 job frees A100 quota, but beta fills that node; the costly H100
    # job frees both the quota and a whole node of the job's other type.
    (a,) = n8_a100_nodes(1)
    (h,) = n8_h100_nodes(1)
    a, low_a = running_on(a, "low-a", 2, preemptible=True, last_checkpoint=NOW - 10)
    a, fixed = running_on(a, "fixed", 6, tenant="beta")
    h, low_h = running_on(h, "low-h", 8, preemptible=True, last_checkpoint=NOW - 3000)
    tenant = Tenant(
        "alpha",
        quotas=(Quota(gpu_flavor("a100"), 8000, 0), Quota(gpu_flavor("h100"), 8000, 0)),
        usage={gpu_flavor("a100"): 2000, gpu_flavor("h100"): 8000},
    )
    urgent = j_training("urgent", gpus=8, tier=5, gpu_types=("a100", "h100"))

    decision = place(snapshot((a, h), (urgent,), running=(low_a, fixed, low_h), tenants=(tenant,)))

    assert decision.by_job()["urgent"].victims == ("low-h",)


def test_jobs_whose_quota_no_eviction_can_free_spend_none_of_the_cycles_preemption_tries():
    # alpha holds its 16 GPUs, half of it not preemptible: none of its 2x8 gangs can ever get
    # their quota by evicting. Then beta's job may still evict gamma's low work.
    a, b, c = n8_a100_nodes(3)
    a, fixed = running_on(a, "fixed", 8)
    b, low = running_on(b, "low", 8, preemptible=True)
    c, theirs = running_on(c, "theirs", 8, tenant="gamma", preemptible=True)
    gangs = [
        j_training(f"gang{i}", workers=2, gpus=8, tier=5, submit_time=NOW - 100 + i)
        for i in range(4)
    ]
    beta = j_training("beta", gpus=8, tier=3, tenant="beta")
    policy = Policy(max_preemption_attempts=2)

    decision = place(
        snapshot(
            (a, b, c),
            (*gangs, beta),
            running=(fixed, low, theirs),
            tenants=(alpha(16, 16),),
            policy=policy,
        )  # fmt: skip
    )

    assert decision.by_job()["beta"].victims == ("theirs",)


def test_once_its_tenants_lower_work_is_evicted_later_jobs_search_no_more(monkeypatch):
    (a,) = n8_a100_nodes(1)
    a, low = running_on(a, "low", 8, preemptible=True)
    first = j_training("first", gpus=8, tier=5, submit_time=NOW - 1000)
    later = [j_training(f"later{i}", gpus=1, cpu_milli=1000 + i, tier=5) for i in range(50)]
    searches = []
    real = own_quota._choose
    monkeypatch.setattr(own_quota, "_choose", lambda *a: searches.append(1) or real(*a))

    decision = place(snapshot((a,), (first, *later), running=(low,), tenants=(alpha(8, 8),)))

    assert decision.by_job()["first"].victims == ("low",)
    assert len(searches) == 1


def test_asking_whether_stopping_work_frees_the_quota_charges_nothing(monkeypatch):
    # A tenant with work in its grace period and a long blocked queue: each job's question is
    # answered without charging the ledger (a charge would void every cached answer).
    (a,) = n8_a100_nodes(1)
    a, fixed = running_on(a, "fixed", 8)
    nodes, running = [a], [fixed]
    for i in range(20):
        (node,) = cpu_nodes(1)
        nodes.append(node)
        held = (Allocation(node.id, (), 100, 100),)
        running.append(RunningJob(f"s{i}", "alpha", allocations=held, stopping=True))
    queue = [j_training(f"q{i}", gpus=1, tier=5, submit_time=NOW - i) for i in range(200)]
    charges = []
    real = Ledger.charge
    monkeypatch.setattr(Ledger, "charge", lambda *a, **k: charges.append(1) or real(*a, **k))

    decision = place(snapshot(nodes, queue, running=running, tenants=(alpha(8, 8),)))

    assert {o.reason for o in decision.outcomes} == {"quota_exceeded"}
    assert charges == []


def test_a_job_ahead_of_its_tier_for_waiting_evicts_its_tenants_work_at_its_own_place():
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 8, preemptible=True)
    top = j_training("top", gpus=8, tier=5, tenant="beta", gpu_types=("h100",))
    urgent = j_training("urgent", gpus=8, tier=3, submit_time=NOW - 30 * 3600)

    decision = place(
        snapshot(
            (a, b),
            (top, urgent),
            running=(low,),
            tenants=(alpha(8, 8),),
            policy=Policy(backfill=False),
        )  # fmt: skip
    )

    assert decision.by_job()["urgent"].victims == ("low",)


def test_it_waits_for_its_cohorts_stopping_work_rather_than_evict_its_own():
    # alpha may borrow beta's guarantee once beta's canceled work has gone: no need to evict.
    a, b, c = n8_a100_nodes(3)
    a, low = running_on(a, "low", 8, preemptible=True)
    b, going = running_on(b, "going", 8, tenant="beta", stopping=True, expected_end=NOW + 30)
    tenants = (
        gpu_tenant("alpha", "a100", 8, borrow=8, used_gpus=8, cohort="x"),
        gpu_tenant("beta", "a100", 8, borrow=0, used_gpus=8, cohort="x"),
    )
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b, c), (urgent,), running=(low, going), tenants=tenants))

    assert decision.preempted == ()
    assert decision.by_job()["urgent"].reason == "waiting_for_preemption"


def test_an_owner_reclaims_what_the_tenant_will_borrow_once_its_victims_have_gone():
    # alpha (8 guaranteed, may borrow 8) holds low and mid (borrowed); its urgent job evicts
    # low. Once low has gone alpha holds mid + urgent, 8 over its guarantee: beta reclaims mid.
    a, b, c = n8_a100_nodes(3)
    a, low = running_on(a, "low", 8, preemptible=True, last_checkpoint=NOW - 10)
    b, mid = running_on(b, "mid", 8, tier=1, borrowed=True)
    c, fixed = running_on(c, "fixed", 8, tenant="delta")
    tenants = (
        gpu_tenant("alpha", "a100", 8, borrow=8, used_gpus=16, cohort="x"),
        gpu_tenant("beta", "a100", 8, borrow=0, used_gpus=0, cohort="x"),
        gpu_tenant("gamma", "a100", 8, borrow=0, used_gpus=0, cohort="x"),
    )
    urgent = j_training("urgent", gpus=8, tier=5)
    theirs = j_training("theirs", gpus=8, tier=0, tenant="beta", may_preempt=False)

    decision = place(snapshot((a, b, c), (urgent, theirs), running=(low, mid, fixed),
                              tenants=tenants))  # fmt: skip

    assert decision.by_job()["urgent"].victims == ("low",)
    assert decision.preempted == ("low", "mid")


def test_a_job_that_evicts_its_tenants_work_runs_on_borrowed_quota_only_beyond_what_that_frees():
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 8, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b), (urgent,), running=(low,), tenants=(alpha(8, 8),)))

    outcome = decision.by_job()["urgent"]
    assert (outcome.status, outcome.borrowed) == ("preempts", False)


def test_a_job_that_may_preempt_says_its_tenants_lower_priority_work_may_not_be_preempted():
    a, b = n8_a100_nodes(2)
    a, fixed = running_on(a, "fixed", 8, tier=0, preemptible=False)
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b), (urgent,), running=(fixed,), tenants=(alpha(8, 8),)))

    outcome = decision.by_job()["urgent"]
    assert outcome.reason == "quota_exceeded"
    assert outcome.message.endswith(
        "a100: it may start 0 GPUs more, the job asks 8 GPUs; its tenant's work of a lower "
        "priority may not be preempted."
    )


def test_a_job_that_may_preempt_says_evicting_what_it_may_would_not_free_enough():
    # 16 guaranteed, all held; the gang asks 16, and only 8 of the 16 held may be evicted.
    a, b, c = n8_a100_nodes(3)
    a, fixed = running_on(a, "fixed", 8, tier=0, preemptible=False)
    b, low = running_on(b, "low", 8, tier=0, preemptible=True)
    urgent = j_training("urgent", gpus=8, workers=2, tier=5)

    decision = place(snapshot((a, b, c), (urgent,), running=(fixed, low), tenants=(alpha(16, 16),)))

    outcome = decision.by_job()["urgent"]
    assert (outcome.reason, decision.preempted) == ("quota_exceeded", ())
    assert outcome.message.endswith(
        "; evicting all of its tenant's preemptible work of a lower priority would not free enough."
    )


def test_a_job_whose_tenant_runs_nothing_of_a_lower_priority_says_nothing_of_eviction():
    a, b = n8_a100_nodes(2)
    a, peer = running_on(a, "peer", 8, tier=5, preemptible=False)
    urgent = j_training("urgent", gpus=8, tier=5)

    decision = place(snapshot((a, b), (urgent,), running=(peer,), tenants=(alpha(8, 8),)))

    assert decision.by_job()["urgent"].message.endswith("the job asks 8 GPUs.")


def test_a_job_that_may_not_preempt_says_nothing_of_eviction():
    a, b = n8_a100_nodes(2)
    a, low = running_on(a, "low", 8, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, may_preempt=False)

    decision = place(snapshot((a, b), (urgent,), running=(low,), tenants=(alpha(8, 8),)))

    assert "evict" not in decision.by_job()["urgent"].message

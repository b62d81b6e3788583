"""Work asked to stop holds its quota until it has gone, but is no longer reclaimed."""

from jobs.placement import place
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)


def test_a_victims_tenant_starts_nothing_on_its_quota_in_the_cycle_that_evicts_it():
    # beta may hold 8 GPUs and holds them with a low job on c1. A gang that may preempt needs
    # both c1 nodes and evicts it. Until it has stopped beta still runs 8 GPUs, so its job for
    # the idle node on c2 would take beta to 16.
    a, b = n8_a100_nodes(2, cluster="c1")
    (c,) = n8_a100_nodes(1, cluster="c2")
    a, low = running_on(a, "low", 8, tenant="beta", preemptible=True)
    gang = j_training("gang", workers=2, gpus=8, tier=5, tenant="alpha", clusters=("c1",))
    theirs = j_training("theirs", gpus=8, tenant="beta")
    tenants = (gpu_tenant("beta", "a100", 8, borrow=0, used_gpus=8),)

    decision = place(snapshot((a, b, c), (gang, theirs), running=(low,), tenants=tenants))

    assert decision.by_job()["gang"].victims == ("low",)
    assert decision.by_job()["theirs"].status == "pending"


def test_an_owner_reclaims_nothing_a_borrower_is_already_giving_back():
    # beta, guaranteed 8, runs 16: "going" was asked to stop for an earlier reclaim. Once it has
    # gone beta is within its guarantee, so alpha's job for c2 takes nothing of beta's more.
    a, b = n8_a100_nodes(2, cluster="c1")
    (c,) = n8_a100_nodes(1, cluster="c2")
    a, going = running_on(a, "going", 8, tenant="beta", preemptible=True, stopping=True)
    c, kept = running_on(c, "kept", 8, tenant="beta", preemptible=True, last_checkpoint=NOW)
    tenants = (
        gpu_tenant("alpha", "a100", 8, borrow=0, used_gpus=0),
        gpu_tenant("beta", "a100", 8, borrow=8, used_gpus=16),
    )
    mine = j_training("mine", gpus=8, tenant="alpha", clusters=("c2",), may_preempt=False)

    decision = place(snapshot((a, b, c), (mine,), running=(going, kept), tenants=tenants))

    assert decision.preempted == ()
    assert decision.by_job()["mine"].status == "pending"


def test_an_owner_still_reclaims_what_a_borrower_holds_beyond_its_stopping_work():
    a, b = n8_a100_nodes(2, cluster="c1")
    (c,) = n8_a100_nodes(1, cluster="c2")
    a, going = running_on(a, "going", 8, tenant="beta", preemptible=True, stopping=True)
    b, other = running_on(b, "other", 8, tenant="beta", preemptible=True)
    c, kept = running_on(c, "kept", 8, tenant="beta", preemptible=True, last_checkpoint=NOW)
    tenants = (
        gpu_tenant("alpha", "a100", 8, borrow=0, used_gpus=0),
        gpu_tenant("beta", "a100", 8, borrow=16, used_gpus=24),
    )
    mine = j_training("mine", gpus=8, tenant="alpha", clusters=("c2",), may_preempt=False)

    decision = place(snapshot((a, b, c), (mine,), running=(going, other, kept), tenants=tenants))

    assert decision.preempted == ("kept",)

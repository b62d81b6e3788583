"""A priority class that may not preempt: higher tier, yet it waits; its guarantee still counts."""

from jobs.placement import place
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)


def test_a_higher_tier_job_that_may_not_preempt_waits():
    (a,) = n8_a100_nodes(1)
    a, low = running_on(a, "low", 8, preemptible=True, last_checkpoint=NOW - 60)
    job = j_training("hi", gpus=8, tier=5, may_preempt=False)

    decision = place(snapshot((a,), (job,), running=(low,)))

    assert decision.by_job()["hi"].status != "preempts"
    assert decision.preempted == ()


def test_a_job_that_may_not_preempt_still_reclaims_its_guarantee_from_a_borrower():
    a, b = n8_a100_nodes(2)
    a, own = running_on(a, "own", 8, tenant="alpha")
    b, lent = running_on(b, "lent", 8, tenant="alpha", preemptible=True, borrowed=True)
    tenants = (
        gpu_tenant("alpha", "a100", 8, borrow=8, used_gpus=16),
        gpu_tenant("beta", "a100", 8, borrow=8),
    )
    job = j_training("mine", gpus=8, tenant="beta", may_preempt=False)

    decision = place(snapshot((a, b), (job,), running=(own, lent), tenants=tenants))

    assert decision.by_job()["mine"].victims == ("lent",)

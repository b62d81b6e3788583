"""Fair share with memory (Slurm's decayed usage): a tenant's recent use
(``Tenant.recent_use``, an average in which each moment weighs half as much every half-life)
counts beside what it holds now, ``Policy.recent_use_weight`` times."""

from __future__ import annotations

import pytest

from jobs.placement import Policy, Tenant, place
from jobs.placement.ordering import recent_use
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot

HOUR = 3600.0


def alpha_first_beta_later():
    """One 8-GPU job each; alpha's has waited longer, so it goes first on shares alone."""
    return (
        j_training("alpha-job", tenant="alpha", submit_time=NOW - HOUR),
        j_training("beta-job", tenant="beta", submit_time=NOW),
    )


def placed(nodes, queued, tenants, running=(), policy=None) -> set[str]:
    decision = place(snapshot(nodes, queued, running, tenants=tenants, policy=policy))
    return {o.job_id for o in decision.outcomes if o.status == "placed"}


@pytest.mark.parametrize(
    ("alpha_recent_gpus", "policy", "want"),
    [
        (0, Policy(), "alpha-job"),
        (16, Policy(), "beta-job"),
        (16, Policy(recent_use_weight=0.0), "alpha-job"),
    ],
    ids=[
        "with no recent use the longer wait goes first",
        "a tenant that held the GPUs recently comes after one that did not",
        "with no weight recent use is not counted",
    ],
)
def test_recent_use_orders_tenants_that_hold_nothing_now(alpha_recent_gpus, policy, want):
    tenants = (
        Tenant("alpha", recent_use={"gpu": alpha_recent_gpus * 1000.0}),
        Tenant("beta"),
    )

    assert placed(n8_a100_nodes(1), alpha_first_beta_later(), tenants, policy=policy) == {want}


@pytest.mark.parametrize(
    ("alpha_recent_gpus", "want"), [(0, "alpha-job"), (4, "beta-job")],
    ids=["holding less now goes first", "recent use adds to what a tenant holds now"],
)  # fmt: skip
def test_recent_use_adds_to_what_a_tenant_holds_now(alpha_recent_gpus, want):
    a, b, free = n8_a100_nodes(3)
    a, alphas = running_on(a, "alpha-running", 4, tenant="alpha")
    b, betas = running_on(b, "beta-running", 6, tenant="beta")
    tenants = (
        Tenant("alpha", usage={"gpu:A100": 4000}, recent_use={"gpu": alpha_recent_gpus * 1000.0}),
        Tenant("beta", usage={"gpu:A100": 6000}),
    )

    got = placed((a, b, free), alpha_first_beta_later(), tenants, running=(alphas, betas))

    assert got == {want}


@pytest.mark.parametrize(
    ("before", "holds", "seconds", "want"),
    [
        ({}, 8000, 0.0, {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}),
        ({}, 8000, HOUR, {"gpu": 4000.0, "cpu": 0.0, "memory": 0.0}),
        ({"gpu": 8000.0}, 0, HOUR, {"gpu": 4000.0, "cpu": 0.0, "memory": 0.0}),
        ({"gpu": 8000.0}, 0, 2 * HOUR, {"gpu": 2000.0, "cpu": 0.0, "memory": 0.0}),
        ({"gpu": 2000.0}, 2000, 5 * HOUR, {"gpu": 2000.0, "cpu": 0.0, "memory": 0.0}),
    ],
    ids=[
        "no time passed changes nothing",
        "after a half-life half of what it held counts",
        "what it held halves every half-life once it holds nothing",
        "and halves again",
        "holding as much as its average keeps it",
    ],
)
def test_recent_use_is_an_average_that_halves_its_past_every_half_life(
    before, holds, seconds, want
):
    tenant = Tenant("alpha", usage={"gpu:A100": holds} if holds else {})

    assert recent_use(before, tenant, seconds, half_life=HOUR) == pytest.approx(want)

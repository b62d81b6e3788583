"""Lend limits (Kueue's lendingLimit): a tenant lends its cohort only that much of its idle
guarantee; the rest is its own, so its work starts there at once, with nobody to evict."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.placement import Quota, Tenant, place
from jobs.placement.quota import Ledger
from tests.placement.builders import (
    gpu_tenant,
    j_batch,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)

FLAVOR = "gpu:a100"


def lending(tenant: Tenant, gpus: int | None) -> Tenant:
    """The tenant lending only ``gpus`` whole GPUs of its guarantee (None: all of it)."""
    (quota,) = tenant.quotas
    limit = None if gpus is None else gpus * 1000
    return dataclasses.replace(tenant, quotas=(dataclasses.replace(quota, lend_limit=limit),))


def test_a_borrower_takes_no_more_than_the_idle_owner_lends():
    owner = lending(gpu_tenant("owner", "a100", 8), 2)
    borrower = gpu_tenant("borrower", "a100", 0, borrow=None)
    ledger = Ledger([owner, borrower])

    assert ledger.allows("borrower", {FLAVOR: 2000})
    assert not ledger.allows("borrower", {FLAVOR: 2001})
    assert ledger.headroom("borrower", FLAVOR) == 2000
    assert ledger.headroom("owner", FLAVOR) == 8000


def test_without_a_lend_limit_the_whole_idle_guarantee_is_lent():
    owner = gpu_tenant("owner", "a100", 8)
    borrower = gpu_tenant("borrower", "a100", 0, borrow=None)

    assert Ledger([owner, borrower]).headroom("borrower", FLAVOR) == 8000


def test_what_the_owner_uses_of_its_own_part_lends_nothing_more_and_takes_nothing_lent():
    # Using 5 of 8, 6 of them its own: the 2 it lends are still free to borrow.
    owner = lending(gpu_tenant("owner", "a100", 8, used_gpus=5), 2)
    borrower = gpu_tenant("borrower", "a100", 0, borrow=None)
    assert Ledger([owner, borrower]).headroom("borrower", FLAVOR) == 2000
    # Using 7: one of the lent two is its own use.
    owner = lending(gpu_tenant("owner", "a100", 8, used_gpus=7), 2)
    assert Ledger([owner, borrower]).headroom("borrower", FLAVOR) == 1000


def test_an_owner_borrows_the_others_lent_parts_beside_all_of_its_own():
    owner = lending(gpu_tenant("owner", "a100", 8, borrow=None), 0)
    other = lending(gpu_tenant("other", "a100", 8), 3)
    ledger = Ledger([owner, other])

    assert ledger.headroom("owner", FLAVOR) == 11_000
    assert ledger.attainable("owner", FLAVOR, 11_000)
    assert not ledger.attainable("owner", FLAVOR, 11_001)


def test_the_cycle_keeps_a_borrowers_shards_off_the_part_an_owner_keeps():
    nodes = n8_a100_nodes(2)
    owner = lending(gpu_tenant("owner", "a100", 8), 0)
    borrower = gpu_tenant("borrower", "a100", 8, borrow=None)
    shards = tuple(j_batch(f"s{i}", tenant="borrower") for i in range(16))
    decision = place(snapshot(nodes, shards, tenants=(owner, borrower)))

    assert [o.status for o in decision.outcomes].count("placed") == 8
    assert {o.reason for o in decision.outcomes if o.status != "placed"} == {"quota_exceeded"}
    # Lending all of it, the owner's idle guarantee runs every shard.
    lends = lending(owner, None)
    decision = place(snapshot(nodes, shards, tenants=(lends, borrower)))
    assert [o.status for o in decision.outcomes].count("placed") == 16


def test_the_owner_starts_on_its_own_part_at_once_with_nobody_to_evict():
    a, b = n8_a100_nodes(2)
    b, theirs = running_on(b, "theirs", 8, tenant="borrower", preemptible=True)
    owner = lending(gpu_tenant("owner", "a100", 8), 0)
    borrower = gpu_tenant("borrower", "a100", 8, borrow=None, used_gpus=8)
    mine = j_training("mine", gpus=8, tenant="owner")
    more = j_training("more", gpus=8, tenant="borrower", submit_time=0.0)
    decision = place(snapshot((a, b), (more, mine), running=(theirs,), tenants=(owner, borrower)))

    placed = decision.by_job()
    assert placed["mine"].status == "placed" and placed["mine"].victims == ()
    assert placed["more"].status == "pending" and placed["more"].reason == "quota_exceeded"


def test_an_owner_reclaims_what_borrowers_hold_past_a_lend_limit_lowered_since():
    a, b = n8_a100_nodes(2)
    a, own = running_on(a, "own", 8, tenant="borrower")
    b, lent = running_on(b, "lent", 8, tenant="borrower", preemptible=True, borrowed=True)
    owner = lending(gpu_tenant("owner", "a100", 8), 0)
    borrower = gpu_tenant("borrower", "a100", 8, borrow=8, used_gpus=16)
    job = j_training("mine", gpus=8, tenant="owner")
    decision = place(snapshot((a, b), (job,), running=(own, lent), tenants=(owner, borrower)))

    assert decision.by_job()["mine"].victims == ("lent",)


amounts = st.integers(min_value=0, max_value=12)


@st.composite
def cohorts(draw) -> list[Tenant]:
    """Two to four tenants of one cohort, each with or without a quota lending some or all."""
    tenants = []
    for n in range(draw(st.integers(min_value=2, max_value=4))):
        quotas = ()
        if draw(st.booleans()):
            guaranteed = draw(amounts)
            lend = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=guaranteed)))
            quotas = (Quota(FLAVOR, guaranteed, draw(st.one_of(st.none(), amounts)), lend),)
        tenants.append(Tenant(id=f"t{n}", quotas=quotas, usage={FLAVOR: draw(amounts)}))
    return tenants


def pool_in_use(ledger: Ledger, tenants: list[Tenant], table: dict) -> int:
    """The cohort's pool in use, from its definition: each tenant's use past the part of its
    guarantee it keeps, the use taken from ``table``."""
    total = 0
    for tenant in tenants:
        (q,) = [ledger.quota[(tenant.id, FLAVOR)]]
        kept = 0 if q.lend_limit is None else q.guaranteed - q.lend_limit
        total += max(table.get((tenant.id, FLAVOR), 0) - kept, 0)
    return total


@settings(max_examples=300, derandomize=True)
@given(cohorts(), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6), st.booleans())))
def test_the_pool_kept_as_work_comes_and_goes_is_the_one_its_definition_gives(tenants, steps):
    """Charges and work asked to stop move the cohort's pool by each tenant's share of it
    only, as a ledger counted from scratch would have it."""
    if not any(t.quotas for t in tenants):
        return
    ledger = Ledger(tenants)
    for who, amount, stopping in steps:
        tenant = tenants[who % len(tenants)].id
        ledger.charge(tenant, {FLAVOR: amount})
        if stopping:
            ledger.leave(tenant, {FLAVOR: amount})
        staying = {k: ledger.usage.get(k, 0) - ledger.going.get(k, 0) for k in ledger.usage}
        used = pool_in_use(ledger, tenants, ledger.usage)
        assert ledger.cohort_used[("", FLAVOR)] == used
        going = used - pool_in_use(ledger, tenants, staying)
        assert ledger.cohort_going.get(("", FLAVOR), 0) == going


@settings(max_examples=300, derandomize=True)
@given(cohorts())
def test_headroom_is_the_most_the_ledger_allows_with_lend_limits(tenants):
    ledger = Ledger(tenants)
    if not any(t.quotas for t in tenants):
        return
    for tenant in tenants:
        room = ledger.headroom(tenant.id, FLAVOR)
        assert ledger.allows(tenant.id, {FLAVOR: room})
        assert not ledger.allows(tenant.id, {FLAVOR: room + 1})

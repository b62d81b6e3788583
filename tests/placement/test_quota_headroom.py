"""The quota ledger's headroom: how much more of a flavor a tenant may take now is exactly the
most its own admission check (`Ledger.allows`) grants, whatever its cohort holds."""

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.placement.model import Quota, Tenant
from jobs.placement.quota import Ledger

FLAVOR = "gpu:A100"
amounts = st.integers(min_value=0, max_value=40)


@st.composite
def cohorts(draw) -> list[Tenant]:
    """Two to four tenants of one cohort, each with or without a quota on the flavor (a
    borrow limit or none) and using some of it."""
    tenants = []
    for n in range(draw(st.integers(min_value=2, max_value=4))):
        quotas = ()
        if draw(st.booleans()):
            borrow = draw(st.one_of(st.none(), amounts))
            quotas = (Quota(FLAVOR, draw(amounts), borrow),)
        tenants.append(Tenant(id=f"t{n}", quotas=quotas, usage={FLAVOR: draw(amounts)}))
    return tenants


@settings(max_examples=300, derandomize=True)
@given(cohorts())
def test_it_is_the_most_the_ledger_allows(tenants):
    ledger = Ledger(tenants)
    for tenant in tenants:
        room = ledger.headroom(tenant.id, FLAVOR)
        if not any(t.quotas for t in tenants):
            assert room is None  # nobody guarantees the flavor: not limited
            continue
        assert ledger.allows(tenant.id, {FLAVOR: room})
        assert not ledger.allows(tenant.id, {FLAVOR: room + 1})


def test_it_counts_the_rest_of_the_guarantee_whole_while_borrowers_use_it():
    owner = Tenant(id="owner", quotas=(Quota(FLAVOR, 8, 0),), usage={FLAVOR: 2})
    borrower = Tenant(id="borrower", quotas=(Quota(FLAVOR, 0, None),), usage={FLAVOR: 6})
    ledger = Ledger([owner, borrower])

    assert ledger.headroom("owner", FLAVOR) == 6  # reclaimed from the borrower
    assert ledger.headroom("borrower", FLAVOR) == 0  # the cohort's guarantee is all in use


def test_a_borrow_limit_caps_what_the_idle_cohort_offers():
    small = Tenant(id="small", quotas=(Quota(FLAVOR, 2, 3),), usage={FLAVOR: 1})
    idle = Tenant(id="idle", quotas=(Quota(FLAVOR, 16, 0),))
    ledger = Ledger([small, idle])

    assert ledger.headroom("small", FLAVOR) == 4  # 2 + 3 - 1, though 17 lie idle

"""A tenant admin (staff owner) saves their tenant's members from a page drawn before a
platform admin changed the tenant's fields they cannot edit: the members are saved, and the
platform admin's change is kept. Only a change to what their form writes (the per-user GPU
limit) refuses their save."""

import pytest

from quotas.models import Membership
from tests.quotas import test_admin_concurrent_quota_edits as concurrent
from tests.quotas.admin_pages import staff_client
from tests.quotas.tenant_form import tenant_fields
from tests.quotas.test_admin_concurrent_quota_edits import drawn_on
from tests.security.test_admin_scope import GRANTED

pytestmark = pytest.mark.django_db

# Two superusers' clients and alpha's page, as in the concurrent edits' tests.
admins, tenant_page = concurrent.admins, concurrent.tenant_page


@pytest.fixture
def owner_admin(alice):
    """Alice, owner of alpha, as staff with the admin's model permissions: a tenant admin."""
    return staff_client(alice, GRANTED)


def members_form(tenant, drawn: str, new_member, max_gpus_per_user: str = "") -> dict:
    """The tenant page as a tenant admin sends it: its members, one added."""
    members = list(tenant.memberships.order_by("pk"))
    form = {
        "max_gpus_per_user": max_gpus_per_user, "drawn": drawn,
        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": str(len(members) + 1),
        "memberships-INITIAL_FORMS": str(len(members)),
    }  # fmt: skip
    for i, member in enumerate([*members, Membership(user=new_member, role="viewer")]):
        form |= {
            f"memberships-{i}-id": str(member.pk or ""), f"memberships-{i}-tenant": str(tenant.pk),
            f"memberships-{i}-user": str(member.user_id), f"memberships-{i}-role": member.role,
        }  # fmt: skip
    return form


def platform_form(tenant, drawn: str, **changes) -> dict:
    return {
        **tenant_fields(tenant, drawn=drawn, **changes),
        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip


def members_save_after(root, owner_admin, tenant, new_member, page: str, **change):
    """The tenant admin adds `new_member` from a page drawn before a platform admin (`root`)
    saved `change` to the tenant: the tenant admin's answer."""
    drawn = drawn_on(owner_admin, page, "drawn")
    changed = platform_form(tenant, drawn_on(root, page, "drawn"), **change)
    assert root.post(page, changed).status_code == 302
    return owner_admin.post(page, members_form(tenant, drawn, new_member))


def test_a_tenant_admins_members_save_goes_through_over_a_fair_share_change(
    admins, owner_admin, alpha, charlie, tenant_page
):
    answer = members_save_after(
        admins[0], owner_admin, alpha, charlie, tenant_page, fair_share_weight="2"
    )

    alpha.refresh_from_db()
    assert answer.status_code == 302
    assert alpha.memberships.filter(user=charlie, role="viewer").exists()
    assert alpha.fair_share_weight == 2


def test_a_tenant_admins_save_over_a_changed_per_user_limit_is_refused(
    admins, owner_admin, alpha, charlie, tenant_page
):
    answer = members_save_after(
        admins[0], owner_admin, alpha, charlie, tenant_page, max_gpus_per_user="4"
    )

    alpha.refresh_from_db()
    assert "This tenant was changed by someone else since the page was drawn" in answer.text
    assert alpha.max_gpus_per_user == 4

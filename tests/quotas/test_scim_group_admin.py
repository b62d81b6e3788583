"""SCIM's groups in the admin and the tenant admins they make: a group listed in
MLSCHED_AUTH_TENANT_ADMIN_GROUPS makes its members tenant admins as the identity provider pushes
it, and no longer once out of it; the admin's page of the groups (quotas.admin.ScimGroupAdmin),
read-only, is a platform admin's alone."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.test import Client

from quotas.models import Membership, ScimGroup
from quotas.sign_on import TENANT_ADMINS, tenant_admins
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.quotas.scim_provider import members

pytestmark = pytest.mark.django_db

User = get_user_model()
LIST = "/admin/quotas/scimgroup/"


def staff_state(username: str) -> tuple[bool, bool, set[str]]:
    """Whether the user is a superuser and staff, and their auth groups."""
    user = User.objects.get(username=username)
    return user.is_superuser, user.is_staff, set(user.groups.values_list("name", flat=True))


def test_a_tenant_admin_group_pushed_makes_its_members_tenant_admins_and_its_removal_unmakes_them(
    scim, settings
):
    settings.MLSCHED_AUTH_TENANT_ADMIN_GROUPS = "team-admins"
    TenantFactory(slug="research", owner_groups="research-leads")
    dana = scim.user("dana")
    scim.group("research-leads", dana)
    group = scim.group("team-admins")

    scim.patch(f"/Groups/{group['id']}",
               {"op": "add", "path": "members", "value": members(dana)})  # fmt: skip
    made = staff_state("dana")
    browser = Client()
    browser.force_login(User.objects.get(username="dana"))
    reached = browser.get("/admin/quotas/tenant/")
    scim.delete(f"/Groups/{group['id']}")

    assert made == (False, True, {TENANT_ADMINS, "tenant admins by sign-on"})
    assert reached.status_code == 200
    assert [t.slug for t in reached.context["cl"].result_list] == ["research"]
    assert staff_state("dana") == (False, False, set())
    assert browser.get("/admin/quotas/tenant/").status_code == 302  # to the admin's login
    assert list(
        LogEntry.objects.filter(user__username="system:scim", object_id=dana["id"])
        .filter(change_message__contains="tenant admin")
        .values_list("change_message", flat=True)
        .order_by("id")
    ) == [
        "Made a tenant admin by sign-on group team-admins",
        "No longer a tenant admin: no sign-on group makes them one",
    ]


@pytest.fixture
def pushed(scim):
    """Two groups as the identity provider pushed them: ml-team with dana and erin, auditors
    with nobody."""
    dana, erin = scim.user("dana"), scim.user("erin")
    return scim.group("ml-team", erin, dana), scim.group("auditors")


def test_a_platform_admin_lists_scims_groups_with_their_member_counts(pushed, platform_admin):
    page = platform_admin.get(LIST)

    listed = page.context["cl"].result_list
    assert page.status_code == 200
    assert [(g.display_name, g.member_count) for g in listed] == [("ml-team", 2), ("auditors", 0)]
    assert "ext-ml-team" in page.text and "ext-auditors" in page.text


def test_a_groups_page_lists_its_members_usernames(pushed, platform_admin):
    ml_team, _ = pushed

    page = platform_admin.get(f"{LIST}{ml_team['id']}/change/")

    assert page.status_code == 200
    assert "dana, erin" in page.text


def test_a_tenant_admin_is_refused_scims_groups(pushed, alpha):
    olga = UserFactory(username="olga", is_staff=True)
    olga.groups.add(tenant_admins())
    MembershipFactory(tenant=alpha, user=olga, role=Membership.Role.OWNER)
    browser = Client()
    browser.force_login(olga)
    ml_team, _ = pushed

    listed = browser.get(LIST)
    opened = browser.get(f"{LIST}{ml_team['id']}/change/")
    index = browser.get("/admin/")

    assert (listed.status_code, opened.status_code) == (403, 403)
    assert index.status_code == 200 and LIST not in index.text


def test_nothing_is_added_changed_or_deleted_there(pushed, platform_admin):
    ml_team, _ = pushed
    page = f"{LIST}{ml_team['id']}/"

    listed = platform_admin.get(LIST)
    added = platform_admin.post(f"{LIST}add/", {"display_name": "mine"})
    changed = platform_admin.post(f"{page}change/", {"display_name": "renamed"})
    deleted = platform_admin.post(f"{page}delete/", {"post": "yes"})
    bulk = platform_admin.post(
        LIST, {"action": "delete_selected", "_selected_action": [ml_team["id"]], "post": "yes"}
    )

    assert f"{LIST}add/" not in listed.text and 'value="delete_selected"' not in listed.text
    assert (added.status_code, changed.status_code, deleted.status_code) == (403, 403, 403)
    assert bulk.status_code == 200  # the list drawn again: the page has no actions
    assert sorted(ScimGroup.objects.values_list("display_name", flat=True)) == [
        "auditors", "ml-team"
    ]  # fmt: skip

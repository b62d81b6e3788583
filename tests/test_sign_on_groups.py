"""Team membership from the single sign-on proxy's groups: a team's owner, member and viewer
groups (a platform admin's) make its members as they log in through the proxy, and change or
remove them as their groups change; memberships given by hand stay (quotas/proxy_auth.py)."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client

from quotas.models import Membership, Tenant
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.quotas.test_notify_admin import change_page, tenant_form
from tests.test_proxy_auth import ME, proxy, signed, who  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

GROUPS = "X-Auth-Request-Groups"


@pytest.fixture
def groups(proxy):  # noqa: F811
    proxy.MLSCHED_AUTH_GROUPS_HEADER = GROUPS
    return proxy


@pytest.fixture
def teams(alpha, gamma):
    Tenant.objects.filter(pk=alpha.pk).update(
        member_groups="ml-alpha\nml-all", viewer_groups="auditors"
    )
    Tenant.objects.filter(pk=gamma.pk).update(viewer_groups="ml-all, auditors")
    return alpha, gamma


def roles(username="alice") -> dict[str, tuple[str, str]]:
    """The user's teams, each with their role and the group it comes from ("": by hand)."""
    held = Membership.objects.filter(user__username=username).select_related("tenant")
    return {m.tenant.slug: (m.role, m.from_group) for m in held}


def test_a_users_groups_make_them_a_member_or_viewer_of_the_teams_listing_them(groups, teams):
    who(signed("alice", **{GROUPS: "ml-all,other"}))
    who(signed("bob", **{GROUPS: "auditors"}))
    who(signed("carol", **{GROUPS: "nobody-lists-it"}))

    assert roles("alice") == {"alpha": ("member", "ml-all"), "gamma": ("viewer", "ml-all")}
    assert roles("bob") == {"alpha": ("viewer", "auditors"), "gamma": ("viewer", "auditors")}
    assert roles("carol") == {}


def test_an_owner_group_makes_its_users_the_teams_owners_before_a_member_group(
    groups, teams, alpha
):
    Tenant.objects.filter(pk=alpha.pk).update(owner_groups="ml-alpha-leads")
    lead = signed("alice", **{GROUPS: "ml-alpha,ml-alpha-leads"})
    member = signed("bob", **{GROUPS: "ml-alpha"})
    secret = f"/api/v1/tenants/{alpha.slug}/secrets/HF_TOKEN/"

    set_by_lead = lead.put(secret, {"value": "hf_x"}, content_type="application/json")
    set_by_member = member.put(secret, {"value": "hf_y"}, content_type="application/json")
    lead.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = "ml-alpha"
    who(lead)

    assert (set_by_lead.status_code, set_by_member.status_code) == (201, 403)
    assert roles("bob") == {"alpha": ("member", "ml-alpha")}
    assert roles("alice") == {"alpha": ("member", "ml-alpha")}  # no longer a lead


def test_a_member_from_groups_submits_and_sees_the_teams_jobs(groups, teams):
    browser = signed("alice", **{GROUPS: "ml-alpha"})

    me = browser.get(ME).json()

    assert {(t["slug"], t["role"]) for t in me["tenants"]} == {("alpha", "member")}


def test_memberships_follow_the_groups_as_they_change_within_a_session(groups, teams):
    browser = signed("alice", **{GROUPS: "ml-alpha"})
    who(browser)
    first = roles()

    browser.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = "auditors"
    who(browser)
    changed = roles()
    browser.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = ""
    who(browser)

    assert first == {"alpha": ("member", "ml-alpha")}
    assert changed == {"alpha": ("viewer", "auditors"), "gamma": ("viewer", "auditors")}
    assert roles() == {}


def test_a_membership_given_by_hand_stays_whatever_the_groups(groups, teams, alpha, gamma):
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice, role=Membership.Role.OWNER)

    who(signed("alice", **{GROUPS: "auditors"}))

    assert roles() == {"alpha": ("owner", ""), "gamma": ("viewer", "auditors")}


def test_without_the_groups_header_setting_groups_make_no_membership(proxy, teams):  # noqa: F811
    who(signed("alice", **{GROUPS: "ml-alpha"}))

    assert roles() == {}


def test_a_membership_from_a_group_changed_by_hand_is_the_admins_from_then_on(
    groups, teams, alpha, admin_client
):
    who(signed("alice", **{GROUPS: "ml-alpha"}))
    (row,) = Membership.objects.filter(user__username="alice")
    rows = {
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "1",
        "memberships-0-id": str(row.pk), "memberships-0-tenant": str(alpha.pk),
        "memberships-0-user": str(row.user_id), "memberships-0-role": "viewer",
    }  # fmt: skip

    saved = admin_client.post(change_page(alpha), {**tenant_form(alpha), **rows})
    who(signed("alice", **{GROUPS: "something-else"}))

    assert saved.status_code == 302
    assert roles() == {"alpha": ("viewer", "")}


def test_a_platform_admin_sets_a_teams_groups_and_a_tenant_admin_may_not(alpha, admin_client):
    owner = UserFactory(username="olga", is_staff=True)
    MembershipFactory(tenant=alpha, user=owner, role=Membership.Role.OWNER)
    owner.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_tenant", "change_tenant"])
    )
    tenant_admin = Client()
    tenant_admin.force_login(User.objects.get(pk=owner.pk))

    set_ = admin_client.post(change_page(alpha), tenant_form(alpha, owner_groups="ml-leads"))
    widened = tenant_admin.post(change_page(alpha), tenant_form(alpha, owner_groups="everyone"))

    alpha.refresh_from_db()
    assert set_.status_code == 302 and widened.status_code == 302
    assert alpha.owner_groups == "ml-leads"
    for field in ("owner_groups", "member_groups", "viewer_groups"):
        assert f'name="{field}"' not in tenant_admin.get(change_page(alpha)).text
        assert f'name="{field}"' in admin_client.get(change_page(alpha)).text


def test_a_teams_groups_are_listed_one_a_line_or_with_commas_as_the_proxy_sends_them():
    # Names as the proxy gives them (a path, spaces): a comma separates two, in the header too.
    tenant = TenantFactory(
        owner_groups="leads", member_groups="/org/ml team\n  ml-infra  ", viewer_groups="a, b"
    )

    assert tenant.group_role({"/org/ml team", "leads"}) == ("owner", "leads")
    assert tenant.group_role({"/org/ml team"}) == ("member", "/org/ml team")
    assert tenant.group_role({"ml-infra", "a"}) == ("member", "ml-infra")
    assert tenant.group_role({"b"}) == ("viewer", "b")
    assert tenant.group_role({"a, b", "c"}) is None


def test_an_admin_group_makes_its_users_platform_admins_while_they_are_in_it(groups, settings):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "platform-ops, sre"
    browser = signed("alice", **{GROUPS: "ml-alpha,sre"})

    made = browser.get("/admin/quotas/tenant/").status_code
    alice = User.objects.get(username="alice")
    browser.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = "ml-alpha"
    who(browser)
    dropped = browser.get("/admin/quotas/tenant/").status_code

    assert made == 200 and (alice.is_superuser, alice.is_staff) == (True, True)
    assert dropped == 302  # to the admin's login: no longer staff
    alice.refresh_from_db()
    assert (alice.is_superuser, alice.is_staff, alice.groups.exists()) == (False, False, False)
    assert [
        e.get_change_message()
        for e in LogEntry.objects.filter(object_id=str(alice.pk)).order_by("id")
    ] == [
        "Made a platform admin by sign-on group sre",
        "No longer a platform admin: no sign-on group makes them one",
    ]


def test_a_platform_admin_made_by_hand_stays_one_whatever_the_groups(groups, settings):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "sre"
    UserFactory(username="root", is_superuser=True, is_staff=True)

    who(signed("root", **{GROUPS: "sre"}))
    who(signed("root", **{GROUPS: "ml-alpha"}))

    root = User.objects.get(username="root")
    assert (root.is_superuser, root.is_staff, root.groups.exists()) == (True, True, False)


def test_a_tenant_admin_made_platform_admin_by_a_group_stays_staff_once_out_of_it(groups, settings):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "sre"
    UserFactory(username="olga", is_staff=True)
    browser = signed("olga", **{GROUPS: "sre"})
    who(browser)
    made = User.objects.get(username="olga").is_superuser

    browser.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = ""
    who(browser)

    olga = User.objects.get(username="olga")
    assert made is True
    assert (olga.is_superuser, olga.is_staff, olga.groups.exists()) == (False, True, False)

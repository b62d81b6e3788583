"""Tenant admins from sign-on groups (quotas/sign_on.py, `tenant_admin_by`): a user in one of
MLSCHED_AUTH_TENANT_ADMIN_GROUPS is staff and in the auth group "tenant admins" while they are
in it, and reaches the admin pages of the tenants they own (by a team's owner group, or by
hand); out of it they are what they were before. A tenant admin made by hand and a platform
admin are left alone."""

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.admin.options import InlineModelAdmin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from quotas.admin_scope import TENANT_ADMIN_PERMISSIONS
from quotas.models import Membership, Tenant
from quotas.sign_on import TENANT_ADMINS, tenant_admins
from tests.factories import MembershipFactory, UserFactory
from tests.faults.test_throttle_cache import in_a_fresh_process
from tests.oidc_provider import sign_on
from tests.quotas.test_notify_admin import change_page, tenant_form
from tests.test_oidc_sessions import due
from tests.test_proxy_auth import proxy, signed, who  # noqa: F401 (a fixture)
from tests.test_sign_on_groups import GROUPS, groups  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

User = get_user_model()
TENANTS = "/admin/quotas/tenant/"
HEADER = "HTTP_X_AUTH_REQUEST_GROUPS"  # the groups header, as the test client keeps it


@pytest.fixture
def leads(groups, settings, alpha, gamma):  # noqa: F811
    """Tenant admins are the groups team-admins' and sre's users; alpha's owners alpha-leads'."""
    settings.MLSCHED_AUTH_TENANT_ADMIN_GROUPS = "team-admins, sre"
    Tenant.objects.filter(pk=alpha.pk).update(owner_groups="alpha-leads")
    return alpha


def state(username: str = "olga") -> tuple[bool, bool, set[str]]:
    """Whether the user is a superuser and staff, and their auth groups."""
    user = User.objects.get(username=username)
    return user.is_superuser, user.is_staff, set(user.groups.values_list("name", flat=True))


def said(username: str = "olga") -> list[str]:
    """What the history says of the user's account, oldest first."""
    user = User.objects.get(username=username)
    entries = LogEntry.objects.filter(object_id=str(user.pk), content_type__model="user")
    return [entry.get_change_message() for entry in entries.order_by("id")]


def test_a_user_in_a_tenant_admin_group_reaches_the_admin_pages_of_the_tenants_they_own(
    leads, alpha, gamma
):
    browser = signed("olga", **{GROUPS: "alpha-leads,team-admins"})

    listed = browser.get(TENANTS)
    own = browser.get(change_page(alpha))
    other = browser.get(change_page(gamma))

    assert listed.status_code == 200
    assert [tenant.slug for tenant in listed.context["cl"].result_list] == ["alpha"]
    assert own.status_code == 200 and 'name="memberships-TOTAL_FORMS"' in own.text
    assert (other.status_code, other.url) == (302, "/admin/")  # "does not exist"
    assert state() == (False, True, {TENANT_ADMINS, "tenant admins by sign-on"})


def test_a_tenant_admin_from_a_group_manages_their_tenants_members(leads, alpha, bob):
    browser = signed("olga", **{GROUPS: "alpha-leads,team-admins"})
    who(browser)
    row = Membership.objects.get(tenant=alpha, user=bob)
    rows = {
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "1",
        "memberships-0-id": str(row.pk), "memberships-0-tenant": str(alpha.pk),
        "memberships-0-user": str(bob.pk), "memberships-0-role": "viewer",
    }  # fmt: skip

    saved = browser.post(change_page(alpha), {**tenant_form(alpha), **rows})

    assert saved.status_code == 302
    assert Membership.objects.get(pk=row.pk).role == Membership.Role.VIEWER


def test_out_of_the_group_at_a_later_request_they_are_no_longer_staff_and_the_admin_refuses_them(
    leads,
):
    browser = signed("olga", **{GROUPS: "alpha-leads,team-admins"})
    reached = browser.get(TENANTS).status_code

    browser.defaults[HEADER] = "alpha-leads"
    refused = browser.get(TENANTS)

    assert reached == 200
    assert refused.status_code == 302 and refused.url.startswith("/admin/login/")
    assert state() == (False, False, set())
    assert Membership.objects.get(user__username="olga").role == Membership.Role.OWNER


def test_one_who_was_staff_before_stays_staff_once_out_of_the_group(leads):
    UserFactory(username="olga", is_staff=True)
    browser = signed("olga", **{GROUPS: "team-admins"})
    who(browser)
    made = state()

    browser.defaults[HEADER] = ""
    who(browser)

    assert made[2] == {TENANT_ADMINS, "tenant admins by sign-on",
                       "tenant admins by sign-on, staff before"}  # fmt: skip
    assert state() == (False, True, set())


def test_one_given_the_tenant_admins_group_by_hand_keeps_it_once_out_of_the_sign_on_group(leads):
    UserFactory(username="olga").groups.add(tenant_admins())
    browser = signed("olga", **{GROUPS: "team-admins"})
    who(browser)
    made = state()

    browser.defaults[HEADER] = ""
    who(browser)

    assert made[:2] == (False, True)
    assert state() == (False, False, {TENANT_ADMINS})


def test_groups_that_say_nothing_unmake_the_tenant_admins_they_made_not_one_made_by_hand(
    leads, alpha
):
    olga = UserFactory(username="olga", is_staff=True)
    olga.groups.add(tenant_admins())
    MembershipFactory(tenant=alpha, user=olga, role=Membership.Role.OWNER)
    by_hand = signed("olga", **{GROUPS: "alpha-leads,team-admins"})
    by_group = signed("pia", **{GROUPS: "alpha-leads,team-admins"})
    who(by_hand)
    who(by_group)
    made = state("pia")

    by_hand.defaults[HEADER] = by_group.defaults[HEADER] = "alpha-leads"
    page, refused = by_hand.get(TENANTS), by_group.get(TENANTS)

    assert made == (False, True, {TENANT_ADMINS, "tenant admins by sign-on"})
    assert (page.status_code, refused.status_code) == (200, 302)
    assert state("olga") == (False, True, {TENANT_ADMINS})
    assert state("pia") == (False, False, set())
    assert said("olga") == []


def test_a_tenant_admin_group_leaves_a_platform_admin_as_they_are(leads):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    root = signed("root", **{GROUPS: "team-admins"})
    olga = signed("olga", **{GROUPS: "team-admins"})
    who(root)
    who(olga)

    root.defaults[HEADER] = ""
    who(root)

    assert state("olga")[:2] == (False, True)
    assert state("root") == (True, True, set())
    assert said("root") == []


def test_a_platform_admin_by_a_group_is_a_tenant_admin_once_out_of_it_but_in_a_tenant_admin_group(
    leads, settings
):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "platform-ops"
    browser = signed("olga", **{GROUPS: "platform-ops,team-admins"})
    who(browser)
    platform = state()

    browser.defaults[HEADER] = "team-admins"
    who(browser)
    tenant = state()
    browser.defaults[HEADER] = ""
    who(browser)

    assert platform == (True, True, {"platform admins by sign-on"})
    assert tenant == (False, True, {TENANT_ADMINS, "tenant admins by sign-on"})
    assert state() == (False, False, set())


def test_each_making_and_unmaking_is_in_the_history_as_the_users_own(leads):
    browser = signed("olga", **{GROUPS: "sre"})
    who(browser)
    browser.defaults[HEADER] = ""
    who(browser)

    olga = User.objects.get(username="olga")
    assert set(LogEntry.objects.values_list("user", flat=True)) == {olga.pk}
    assert said() == [
        "Made a tenant admin by sign-on group sre",
        "No longer a tenant admin: no sign-on group makes them one",
    ]


def test_an_openid_connect_login_makes_a_tenant_admin_and_the_sessions_check_unmakes_them(
    provider, settings
):
    settings.MLSCHED_AUTH_TENANT_ADMIN_GROUPS = "team-admins"
    provider.claims["groups"] = ["team-admins"]
    browser = Client()
    sign_on(browser)
    made = state("alice")

    provider.claims["groups"] = []
    due(browser)
    who(browser)

    assert made == (False, True, {TENANT_ADMINS, "tenant admins by sign-on"})
    assert state("alice") == (False, False, set())


def test_once_the_setting_is_gone_the_tenant_admins_it_made_are_no_longer_ones(leads, settings):
    browser = signed("olga", **{GROUPS: "team-admins"})
    who(browser)
    made = state()

    settings.MLSCHED_AUTH_TENANT_ADMIN_GROUPS = ""
    browser.defaults[HEADER] = "team-admins,ml-all"  # groups changed: followed again
    who(browser)

    assert made[:2] == (False, True)
    assert state() == (False, False, set())


def test_the_setting_is_read_from_the_environment():
    read = "import django; django.setup(); from django.conf import settings; " \
           "print(settings.MLSCHED_AUTH_TENANT_ADMIN_GROUPS)"  # fmt: skip

    unset = in_a_fresh_process(read)
    given = in_a_fresh_process(read, MLSCHED_AUTH_TENANT_ADMIN_GROUPS="team-admins, sre")

    assert (unset, given) == ("", "team-admins, sre")


def names(permissions) -> set[str]:
    return {f"{p.content_type.app_label}.{p.codename}" for p in permissions}


def test_the_tenant_admins_group_is_made_at_its_first_use_with_the_permissions_of_their_pages(
    leads,
):
    who(signed("olga", **{GROUPS: "team-admins"}))

    held = Group.objects.get(name=TENANT_ADMINS).permissions.select_related("content_type")
    assert names(held) == set(TENANT_ADMIN_PERMISSIONS)


def test_a_tenant_admins_group_a_platform_admin_changed_is_kept_as_it_is(leads):
    kept = Group.objects.create(name=TENANT_ADMINS)
    kept.permissions.add(Permission.objects.get(codename="view_job"))

    who(signed("olga", **{GROUPS: "team-admins"}))

    assert list(kept.permissions.values_list("codename", flat=True)) == ["view_job"]
    assert state()[2] == {TENANT_ADMINS, "tenant admins by sign-on"}


# The job's page is read-only whoever opens it; its change permission serves its "Object
# permissions" page, which asks for guardian's own permissions too: a platform admin's.
NOT_NEEDED = {"jobs.change_job"}
APPS = ["quotas", "jobs", "clusters"]


def allowed(page, request) -> set[str]:
    """The permissions of the page's model that a page (an admin, an inline) lets the
    request's user use, and those its bulk actions ask for."""
    opts, inline = page.opts, isinstance(page, InlineModelAdmin)
    asked = {
        "view": page.has_view_permission(request, None),
        "add": page.has_add_permission(request, *([None] if inline else [])),
        "change": page.has_change_permission(request, None),
        "delete": page.has_delete_permission(request, None) and (not inline or page.can_delete),
    }
    for action in [] if inline else page.actions or []:
        for needed in getattr(getattr(page, action), "allowed_permissions", ()):
            asked[needed] = getattr(page, f"has_{needed}_permission")(request)
    return {f"{opts.app_label}.{name}_{opts.model_name}" for name, yes in asked.items() if yes}


def test_the_permissions_are_those_the_admins_pages_let_a_tenant_admin_use(rf, alpha):
    owner = UserFactory(username="olga", is_staff=True)
    MembershipFactory(tenant=alpha, user=owner, role=Membership.Role.OWNER)
    owner.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    request = rf.get("/admin/")
    request.user = User.objects.get(pk=owner.pk)  # every permission, none cached

    used = set()
    for model_admin in admin.site._registry.values():
        if model_admin.opts.app_label in APPS:
            for page in [model_admin, *model_admin.get_inline_instances(request)]:
                used |= allowed(page, request)

    assert used - NOT_NEEDED == set(TENANT_ADMIN_PERMISSIONS)

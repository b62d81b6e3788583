"""SCIM's Groups as Okta and Entra ID push them (quotas/scim_groups.py): a team whose sign-on
groups name a group has its members, and platform admins follow MLSCHED_AUTH_ADMIN_GROUPS,
at once as the group changes; while SCIM is on a sign-on's groups change nothing."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.test import Client

from quotas.models import Membership, ScimGroup, Tenant
from tests.factories import MembershipFactory, TenantFactory
from tests.oidc_provider import sign_on, who
from tests.quotas.scim_provider import GROUP, members
from tests.test_oidc_sessions import due
from tests.test_proxy_auth import signed

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def research(db):
    """A team whose members are the group ml-team's, its viewers the group auditors'."""
    return TenantFactory(
        name="Research", slug="research", member_groups="ml-team", viewer_groups="auditors"
    )


def roles(username: str) -> dict[str, tuple[str, str]]:
    """The user's teams, each with their role and the group it comes from ("": by hand)."""
    held = Membership.objects.filter(user__username=username).select_related("tenant")
    return {m.tenant.slug: (m.role, m.from_group) for m in held}


def is_platform_admin(username: str) -> bool:
    user = User.objects.get(username=username)
    return user.is_superuser and user.is_staff


def test_a_group_pushed_makes_its_members_members_of_the_team_naming_it(scim, research):
    dana = scim.user("dana")
    scim.user("erin")

    made = scim.group("ml-team", dana)

    assert made["displayName"] == "ml-team" and made["members"][0]["value"] == dana["id"]
    assert made["members"][0]["display"] == "dana"
    assert roles("dana") == {"research": ("member", "ml-team")}
    assert roles("erin") == {}  # made, in no group


def test_a_group_deleted_takes_the_memberships_it_made_away(scim, research):
    dana = scim.user("dana")
    group = scim.group("ml-team", dana)

    deleted = scim.delete(f"/Groups/{group['id']}")

    assert deleted.status_code == 204
    assert roles("dana") == {}
    assert scim.get(f"/Groups/{group['id']}").status_code == 404


def test_okta_adds_members_and_removes_one_by_its_path(scim, research):
    dana, erin = scim.user("dana"), scim.user("erin")
    group = scim.group("ml-team")

    added = scim.patch(f"/Groups/{group['id']}",
                       {"op": "add", "path": "members", "value": members(dana, erin)})  # fmt: skip
    both = roles("dana"), roles("erin")
    removed = scim.patch(
        f"/Groups/{group['id']}", {"op": "remove", "path": f'members[value eq "{erin["id"]}"]'}
    )

    member = ("member", "ml-team")
    assert (added.status_code, removed.status_code) == (204, 204)
    assert both == ({"research": member}, {"research": member})
    assert (roles("dana"), roles("erin")) == ({"research": member}, {})


def test_entra_removes_members_by_a_value_list(scim, research):
    dana, erin = scim.user("dana"), scim.user("erin")
    group = scim.group("ml-team", dana, erin)

    removed = scim.patch(f"/Groups/{group['id']}",
                         {"op": "Remove", "path": "members", "value": members(dana)})  # fmt: skip

    assert removed.status_code == 204
    assert (roles("dana"), roles("erin")) == ({}, {"research": ("member", "ml-team")})


def test_a_replace_of_members_makes_them_those_listed(scim, research):
    dana, erin = scim.user("dana"), scim.user("erin")
    group = scim.group("ml-team", dana)

    scim.patch(f"/Groups/{group['id']}",
               {"op": "replace", "path": "members", "value": members(erin)})  # fmt: skip

    assert (roles("dana"), roles("erin")) == ({}, {"research": ("member", "ml-team")})
    assert [m["value"] for m in scim.get(f"/Groups/{group['id']}").json()["members"]] == [
        erin["id"]
    ]


def test_a_group_renamed_moves_its_members_to_the_teams_naming_its_new_name(scim, research):
    dana = scim.user("dana")
    group = scim.group("ml-team", dana)

    okta = {"op": "replace", "value": {"id": group["id"], "displayName": "auditors"}}
    renamed = scim.patch(f"/Groups/{group['id']}", okta)

    assert renamed.status_code == 204
    assert ScimGroup.objects.get().display_name == "auditors"
    assert roles("dana") == {"research": ("viewer", "auditors")}


def test_put_replaces_a_groups_name_and_members(scim, research):
    dana, erin = scim.user("dana"), scim.user("erin")
    group = scim.group("auditors", dana)

    body = {"schemas": [GROUP], "displayName": "ml-team", "members": members(erin)}
    replaced = scim.put(f"/Groups/{group['id']}", body)

    assert replaced.status_code == 200 and replaced.json()["displayName"] == "ml-team"
    assert (roles("dana"), roles("erin")) == ({}, {"research": ("member", "ml-team")})


def test_an_admin_group_makes_a_platform_admin_and_its_removal_unmakes_them(scim, settings):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "platform-ops"
    dana = scim.user("dana")
    group = scim.group("platform-ops")

    scim.patch(f"/Groups/{group['id']}",
               {"op": "add", "path": "members", "value": members(dana)})  # fmt: skip
    made = is_platform_admin("dana")
    scim.patch(f"/Groups/{group['id']}",
               {"op": "remove", "path": f'members[value eq "{dana["id"]}"]'})  # fmt: skip

    assert made and not is_platform_admin("dana")


def test_a_membership_given_by_hand_stays_whatever_the_groups(scim, research, gamma):
    dana = scim.user("dana")
    MembershipFactory(tenant=gamma, user=User.objects.get(pk=dana["id"]),
                      role=Membership.Role.OWNER)  # fmt: skip
    group = scim.group("ml-team", dana)

    scim.delete(f"/Groups/{group['id']}")

    assert roles("dana") == {"gamma": ("owner", "")}


def test_a_deleted_user_leaves_their_groups_and_the_teams_they_gave(scim, research):
    dana = scim.user("dana")
    group = scim.group("ml-team", dana)

    scim.delete(f"/Users/{dana['id']}")

    assert roles("dana") == {}
    assert scim.get(f"/Groups/{group['id']}").json()["members"] == []


def test_groups_are_found_by_display_name_and_listed_without_members_for_entra(scim):
    dana = scim.user("dana")
    group = scim.group("ml-team", dana)
    scim.group("auditors")

    found = scim.get("/Groups", filter='displayName eq "ML-Team"', excludedAttributes="members")
    read = scim.get(f"/Groups/{group['id']}", excludedAttributes="members")
    whole = scim.get(f"/Groups/{group['id']}")

    assert [g["id"] for g in found.json()["Resources"]] == [group["id"]]
    assert "members" not in found.json()["Resources"][0] and "members" not in read.json()
    assert read.json()["displayName"] == "ml-team" and read.json()["externalId"] == "ext-ml-team"
    assert whole.json()["members"] == group["members"]


def test_each_group_change_is_in_the_history_as_scims(scim, research):
    dana = scim.user("dana")
    group = scim.group("ml-team", dana)
    scim.patch(f"/Groups/{group['id']}", {"op": "replace", "path": "displayName", "value": "x"})
    scim.delete(f"/Groups/{group['id']}")

    said = list(
        LogEntry.objects.filter(user__username="system:scim")
        .exclude(change_message="SCIM: made", object_id=dana["id"])
        .order_by("pk")
        .values_list("object_repr", "change_message")
    )
    assert said == [
        ("ml-team", "SCIM: made"),
        ("dana", "SCIM: added to group ml-team"),
        ("dana in Research (member)", "Made member by sign-on group ml-team"),
        ("x", "SCIM: renamed from ml-team"),
        ("dana in Research (member)", "Removed: no sign-on group gives it"),
        ("x", "SCIM: deleted"),
        ("dana", "SCIM: removed from group x: the group deleted"),
    ]


def test_an_openid_connect_login_changes_no_membership_while_scim_is_on(scim, provider, research):
    alice = scim.user("alice")
    scim.group("auditors", alice)
    provider.claims["groups"] = ["ml-team"]
    browser = Client()

    sign_on(browser)

    assert who(browser) == "alice"
    assert roles("alice") == {"research": ("viewer", "auditors")}


def test_an_openid_connect_sessions_check_changes_no_membership_while_scim_is_on(
    scim, provider, research
):
    scim.user("alice")
    browser = Client()
    sign_on(browser)
    provider.refreshed = {"groups": ["ml-team"]}
    due(browser)

    assert who(browser) == "alice"
    assert provider.refreshes == 1 and roles("alice") == {}


def test_a_proxys_groups_header_changes_no_membership_while_scim_is_on(scim, settings, research):
    settings.MLSCHED_AUTH_USER_HEADER = "X-Auth-Request-User"
    settings.MLSCHED_AUTH_GROUPS_HEADER = "X-Auth-Request-Groups"
    scim.user("alice")

    browser = signed("alice", **{"X-Auth-Request-Groups": "ml-team"})

    assert browser.get("/api/v1/me/").json()["username"] == "alice"
    assert roles("alice") == {}
    assert Tenant.objects.get(slug="research").memberships.count() == 0

"""The portal's Teams page, and its API and CLI (quotas/memberships.py): every member sees their
teams' members, and a team's owners add, change and remove them there, without the admin; a
sign-on group's memberships and the last owner are never changed, and each change is in the
history."""

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from rest_framework.test import APIClient

from quotas.models import Membership
from tests.clusters.test_node_service_api import cli_of
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def portal(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def roles(tenant) -> dict[str, str]:
    return {m.user.username: m.role for m in Membership.objects.filter(tenant=tenant)}


def members(client, tenant, **fields):
    return client.post(f"/teams/{tenant.slug}/members/", fields)


def test_every_member_sees_the_teams_members_and_only_owners_get_the_forms(alpha, alice):
    bob = UserFactory(username="bob")
    MembershipFactory(tenant=alpha, user=bob, role="viewer")
    MembershipFactory(tenant=alpha, user=UserFactory(username="dave"), role="member",
                      from_group="ml-alpha")  # fmt: skip

    owners, viewers = portal(alice).get("/teams/").text, portal(bob).get("/teams/").text

    for page in (owners, viewers):
        assert "alice" in page and "sign-on group ml-alpha" in page
    assert 'id="add-alpha"' in owners and 'id="add-alpha"' not in viewers
    assert owners.count('value="remove"') == 2  # alice's and bob's, not dave's (a group's)


def test_an_owner_adds_changes_and_removes_members_each_change_in_the_history(alpha, alice):
    UserFactory(username="bob")
    owner = portal(alice)

    added = members(owner, alpha, action="add", username="bob", role="viewer")
    changed = members(owner, alpha, action="role", username="bob", role="member")
    between = roles(alpha)
    removed = members(owner, alpha, action="remove", username="bob")

    assert [a.status_code for a in (added, changed, removed)] == [302, 302, 302]
    assert between == {"alice": "owner", "bob": "member"}
    assert roles(alpha) == {"alice": "owner"}
    said = [(e.user.username, e.action_flag, e.get_change_message())
            for e in LogEntry.objects.order_by("id")]  # fmt: skip
    assert said == [
        ("alice", 1, "Added on the portal's Teams page, as viewer"),
        ("alice", 2, "Made member (was viewer) on the portal's Teams page"),
        ("alice", 3, "Removed on the portal's Teams page"),
    ]


def test_a_member_who_is_no_owner_changes_nothing(alpha, alice, gamma):
    bob = UserFactory(username="bob")
    MembershipFactory(tenant=alpha, user=bob, role="member")
    UserFactory(username="carol")

    answer = members(portal(bob), alpha, action="add", username="carol", role="owner")
    elsewhere = members(portal(alice), gamma, action="add", username="carol", role="owner")

    assert (answer.status_code, elsewhere.status_code) == (403, 404)
    assert roles(alpha) == {"alice": "owner", "bob": "member"}


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"action": "add", "username": "nobody", "role": "member"}, "No user is named &#x27;"),
        ({"action": "add", "username": "alice", "role": "member"}, "alice is a member already."),
        ({"action": "add", "username": "bob", "role": "boss"}, "One of owner, member, viewer."),
        ({"action": "remove", "username": "alice"}, "alice is the team&#x27;s last owner"),
        ({"action": "role", "username": "alice", "role": "viewer"}, "last owner"),
        ({"action": "remove", "username": "dave"}, "a member by the sign-on group ml-alpha"),
        ({"action": "mutiny"}, "Add, change a role or remove."),
    ],
    ids=["unknown user", "twice", "unknown role", "last owner removed", "last owner demoted",
         "a group's", "unknown action"],
)  # fmt: skip
def test_a_change_it_cannot_make_is_a_400_saying_why_and_changes_nothing(
    alpha, alice, fields, said
):
    UserFactory(username="bob")
    MembershipFactory(tenant=alpha, user=UserFactory(username="dave"), role="member",
                      from_group="ml-alpha")  # fmt: skip

    answer = members(portal(alice), alpha, **fields)

    assert answer.status_code == 400
    assert said in answer.text
    assert roles(alpha) == {"alice": "owner", "dave": "member"}
    assert not LogEntry.objects.exists()


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_lists_the_members_and_owners_change_them_as_on_the_page(alpha, alice):
    bob = UserFactory(username="bob")
    url = f"/api/v1/tenants/{alpha.slug}/members/"

    added = api(alice).post(url, {"username": "bob", "role": "viewer"}, format="json")
    listed = api(bob).get(url).json()
    by_bob = api(bob).patch(f"{url}bob/", {"role": "owner"}, format="json")
    changed = api(alice).patch(f"{url}bob/", {"role": "member"}, format="json")
    last = api(alice).delete(f"{url}alice/")
    removed = api(alice).delete(f"{url}bob/")
    gone = api(alice).delete(f"{url}bob/")

    assert (added.status_code, added.json()) == (
        201, {"username": "bob", "role": "viewer", "from_group": ""}
    )  # fmt: skip
    assert [(m["username"], m["role"], m["from_group"]) for m in listed["members"]] == [
        ("alice", "owner", ""), ("bob", "viewer", "")
    ]  # fmt: skip
    assert by_bob.status_code == 403
    assert (changed.status_code, changed.json()["role"]) == (200, "member")
    assert last.status_code == 400 and "last owner" in last.json()["username"][0]
    assert (removed.status_code, gone.status_code) == (204, 404)
    assert roles(alpha) == {"alice": "owner"}


def test_the_api_answers_404_for_a_team_the_caller_is_not_in(alpha, gamma, alice):
    assert api(alice).get(f"/api/v1/tenants/{gamma.slug}/members/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_adds_changes_and_removes_members(live_server, alpha, alice):
    UserFactory(username="bob")
    cli = cli_of(live_server, alice)

    added = cli("member-add", "alpha", "bob", "--role", "viewer")
    changed = cli("member-set", "alpha", "bob", "member")
    listed = cli("members", "alpha")
    removed = cli("member-remove", "alpha", "bob")
    refused = cli("member-remove", "alpha", "alice")

    assert added.stdout == "bob added to alpha as viewer\n", added.stderr
    assert changed.stdout == "bob is member of alpha\n"
    assert [line.split() for line in listed.stdout.splitlines()][1:] == [
        ["alice", "owner", "hand"], ["bob", "member", "hand"]
    ]  # fmt: skip
    assert removed.stdout == "bob removed from alpha\n"
    assert refused.returncode == 1 and "last owner" in refused.stderr

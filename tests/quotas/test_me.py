"""Who the caller is, as the API sees them (`GET /api/v1/me/`, CLI `whoami`): username, email
address, platform admin, tenant admin or neither, teams with their roles, and the token the
call came with."""

import pytest
from rest_framework.test import APIClient

from quotas.models import Membership
from quotas.tokens import create_token
from tests.clusters.test_node_service_api import cli_of
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def test_a_user_reads_their_address_teams_and_roles_and_the_token_used(alice, alpha, gamma):
    alice.email = "alice@example.com"
    alice.save(update_fields=["email"])
    MembershipFactory(tenant=gamma, user=alice, role=Membership.Role.VIEWER)
    _, key = create_token(alice, "laptop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    me = client.get("/api/v1/me/").json()

    assert me == {
        "username": "alice", "email": "alice@example.com", "platform_admin": False,
        "tenant_admin": False,
        "tenants": [{"slug": "alpha", "name": "Alpha", "role": "owner", "from_group": ""},
                    {"slug": "gamma", "name": "Gamma", "role": "viewer", "from_group": ""}],
        "token": {"name": "laptop", "expires": None, "read_only": False},
    }  # fmt: skip


@pytest.mark.parametrize("read_only", [False, True])
def test_a_token_revokes_itself_and_then_authenticates_nobody(alice, read_only):
    _, key = create_token(alice, "laptop", read_only=read_only)
    kept, _ = create_token(alice, "desktop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    answer = client.delete("/api/v1/me/token/")

    assert answer.status_code == 204
    assert client.get("/api/v1/me/").status_code == 401
    assert list(alice.api_tokens.all()) == [kept]


def test_a_session_has_no_token_to_revoke(client, alice):
    create_token(alice, "laptop")
    client.force_login(alice)

    answer = client.delete("/api/v1/me/token/")

    assert answer.status_code == 400 and "token" in answer.json()
    assert alice.api_tokens.count() == 1


@pytest.mark.parametrize(
    ("staff", "superuser", "platform_admin", "tenant_admin"),
    [(False, False, False, False), (True, False, False, True), (True, True, True, False)],
)
def test_it_says_whether_the_caller_is_a_platform_or_a_tenant_admin(
    client, alice, staff, superuser, platform_admin, tenant_admin
):
    alice.is_staff, alice.is_superuser = staff, superuser
    alice.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(alice)

    me = client.get("/api/v1/me/").json()

    assert (me["platform_admin"], me["tenant_admin"]) == (platform_admin, tenant_admin)


def test_a_session_has_no_token_and_a_stranger_is_refused(client, alice):
    client.force_login(alice)

    assert client.get("/api/v1/me/").json()["token"] is None
    assert APIClient().get("/api/v1/me/").status_code in (401, 403)


@pytest.mark.django_db(transaction=True)
def test_the_cli_says_who_its_token_speaks_for(live_server, alice, gamma):
    MembershipFactory(tenant=gamma, user=alice, role="viewer", from_group="auditors")
    alice.is_staff = True  # a tenant admin of alpha, which she owns
    alice.save(update_fields=["is_staff"])

    done = cli_of(live_server, alice)("whoami")

    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "alice (tenant admin), no email address\n  alpha: owner\n"
        "  gamma: viewer (from group auditors)\ntoken 'ops'\n"
    )


def test_the_tokens_page_says_who_its_tokens_speak_for(client, alice, alpha, gamma):
    MembershipFactory(tenant=gamma, user=alice, role=Membership.Role.VIEWER)
    client.force_login(alice)

    page = client.get("/tokens/").content.decode()

    assert ('<p id="who">They speak for <strong>alice</strong>: no email address (a platform '
            "admin sets it); owner of Alpha, viewer of Gamma.") in page  # fmt: skip

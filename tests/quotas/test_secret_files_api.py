"""Secrets given as files through the API: `as_file` on a PUT sets one, a PUT without it makes
it a variable again, the list says which each secret is; `as_file` not true or false, or with
a registry, is a 400 naming it, nothing written; who may set one is as for any secret."""

import pytest

from quotas import tenant_secrets
from quotas.models import Membership, TenantSecret
from tests.factories import MembershipFactory, UserFactory
from tests.jobs.test_api import client_for

pytestmark = pytest.mark.django_db
URL = "/api/v1/tenants/alpha/secrets/"
KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}\n'


def put(user, name: str, body: dict):
    return client_for(user).put(f"{URL}{name}/", body, format="json")


def test_it_sets_a_secret_given_as_a_file_and_lists_it_as_one(alice, bob, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    answer = put(alice, "GCP_KEY", {"value": KEY, "as_file": True})
    listed = client_for(bob).get(URL).json()["secrets"]

    assert answer.status_code == 201 and answer.json()["as_file"] is True
    assert TenantSecret.objects.get(name="GCP_KEY").as_file
    assert {s["name"]: s["as_file"] for s in listed} == {"GCP_KEY": True, "HF_TOKEN": False}
    assert "private_key" not in answer.content.decode() + str(listed)


def test_a_put_without_it_makes_a_file_a_variable(alice, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    answer = put(alice, "GCP_KEY", {"value": "plain"})

    assert answer.status_code == 200 and answer.json()["as_file"] is False
    assert TenantSecret.objects.get().as_file is False


@pytest.mark.parametrize(
    "body",
    [{"value": KEY, "as_file": "yes"}, {"value": KEY, "as_file": 1},
     {"value": KEY, "as_file": None},
     {"value": "ghp_token", "as_file": True, "registry": "ghcr.io", "username": "acme-bot"}],
)  # fmt: skip
def test_as_file_not_true_or_false_or_with_a_registry_is_a_400_naming_it(alice, body):
    answer = put(alice, "GCP_KEY", body)

    assert answer.status_code == 400 and list(answer.json()) == ["as_file"]
    assert not TenantSecret.objects.exists()


def test_a_refused_put_keeps_the_secret_as_it_was(alice, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    put(alice, "GCP_KEY", {"value": "other", "as_file": "no"})

    stored = TenantSecret.objects.get()
    assert (stored.as_file, stored.value()) == (True, KEY)


def test_a_member_or_viewer_may_not_set_a_file_and_another_team_gets_a_404(alpha, bob, charlie):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)

    answers = [put(user, "GCP_KEY", {"value": KEY, "as_file": True}).status_code
               for user in (bob, viewer, charlie)]  # fmt: skip

    assert answers == [403, 403, 404]
    assert not TenantSecret.objects.exists()

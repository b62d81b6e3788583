"""Registry credentials on the portal's secrets page: an owner sets one with its registry and
user; a bad one is named at its field, nothing written; every member reads its registry and
user beside the variables, never its value."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs.test_batch_shard_limit_portal import portal_of

pytestmark = pytest.mark.django_db
TOKEN = "ghp_0123456789abcdefghij"
CREDENTIAL = {"tenant": "alpha", "name": "GHCR", "value": TOKEN, "registry": "ghcr.io",
              "username": "acme-bot"}  # fmt: skip


def test_an_owner_sets_a_credential_on_the_secrets_page(alice):
    portal = portal_of(alice)

    answer = portal.post("/secrets/", CREDENTIAL)
    page = portal.get("/secrets/").text

    stored = TenantSecret.objects.get()
    assert answer.status_code == 302
    assert (stored.registry, stored.username, stored.value()) == ("ghcr.io", "acme-bot", TOKEN)
    assert "pull credential for <code>ghcr.io</code> as <code>acme-bot</code>" in page
    assert TOKEN not in page


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"registry": "not a host"}, "registry"), ({"username": ""}, "username"),
     ({"registry": ""}, "username")],
)  # fmt: skip
def test_a_bad_credential_is_named_at_its_field_and_nothing_written(alice, changes, field):
    answer = portal_of(alice).post("/secrets/", {**CREDENTIAL, **changes})

    assert answer.status_code == 400
    assert f'data-field="{field}"' in answer.text
    assert TOKEN not in answer.text
    assert not TenantSecret.objects.exists()


def test_a_member_reads_a_credentials_registry_and_user_beside_the_variables(alpha, bob):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_the_value")

    page = portal_of(bob).get("/secrets/").text

    assert "pull credential for <code>ghcr.io</code> as <code>acme-bot</code>" in page
    assert '<td class="kind">variable</td>' in page
    assert 'id="secret-form"' not in page and TOKEN not in page


def test_the_registry_and_username_fields_are_described_by_their_help(alice):
    page = portal_of(alice).get("/secrets/").text

    assert 'name="registry" value="" maxlength="255" aria-describedby="registry-help"' in page
    assert 'id="registry-help">Leave it empty for an environment variable.' in page
    assert 'aria-describedby="username-help"' in page and 'id="username-help"' in page


def test_a_refused_registry_is_described_by_its_help_and_its_error(alice):
    answer = portal_of(alice).post("/secrets/", {**CREDENTIAL, "registry": "not a host"})

    assert 'aria-invalid="true" aria-describedby="registry-help id_registry_error"' in answer.text

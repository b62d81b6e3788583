"""Registry credentials in the admin: a secret with a registry and a user, added and changed
through the verb the API uses; a changed registry or user needs its value typed again, and a
bad or second one for a registry is an error on its field, nothing written."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.quotas.test_secrets_admin import SECRETS

pytestmark = pytest.mark.django_db
TOKEN = "ghp_0123456789abcdefghij"


def add(client, tenant, **fields):
    return client.post(f"{SECRETS}add/", {"tenant": tenant.pk, "name": "GHCR", **fields})


def test_a_platform_admin_adds_a_credential_with_its_registry_and_user(platform_admin, alpha):
    added = add(platform_admin, alpha, registry="GHCR.io", username="acme-bot", value=TOKEN)

    stored = TenantSecret.objects.get()
    assert added.status_code == 302
    assert (stored.registry, stored.username, stored.value()) == ("ghcr.io", "acme-bot", TOKEN)
    listed = platform_admin.get(SECRETS).text
    assert "ghcr.io" in listed and "acme-bot" in listed and TOKEN not in listed


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"registry": "not a host", "username": "bot"}, "registry"),
     ({"registry": "ghcr.io", "username": ""}, "username"),
     ({"registry": "", "username": "bot"}, "username"),
     ({"registry": "ghcr.io", "username": "bot:x"}, "username")],
)  # fmt: skip
def test_a_bad_credential_is_an_error_on_its_field_and_nothing_is_written(
    platform_admin, alpha, fields, field
):
    page = add(platform_admin, alpha, value=TOKEN, **fields)

    assert page.status_code == 200
    assert list(page.context["adminform"].form.errors) == [field]
    assert not TenantSecret.objects.exists()


def test_a_second_credential_for_a_registry_is_an_error_naming_the_first(platform_admin, alpha):
    tenant_secrets.put(alpha, "FIRST", TOKEN, registry="ghcr.io", username="bot")

    page = platform_admin.post(
        f"{SECRETS}add/",
        {"tenant": alpha.pk, "name": "SECOND", "registry": "GHCR.io", "username": "b",
         "value": TOKEN},
    )  # fmt: skip

    errors = page.context["adminform"].form.errors
    assert list(errors) == ["registry"] and "'FIRST'" in errors["registry"][0]
    assert list(TenantSecret.objects.values_list("name", flat=True)) == ["FIRST"]


def test_changing_the_user_without_the_value_is_refused_and_keeps_the_credential(
    platform_admin, alpha
):
    secret, _ = tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")
    change = f"{SECRETS}{secret.pk}/change/"

    refused = platform_admin.post(change, {"registry": "ghcr.io", "username": "other"})
    saved = platform_admin.post(
        change, {"registry": "ghcr.io", "username": "other", "value": "ghp_new_token"}
    )

    assert "value" in refused.context["adminform"].form.errors
    assert saved.status_code == 302
    stored = TenantSecret.objects.get()
    assert (stored.username, stored.value()) == ("other", "ghp_new_token")


def test_a_new_value_keeps_a_credential_a_credential(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")

    platform_admin.post(
        f"{SECRETS}{secret.pk}/change/",
        {"registry": "ghcr.io", "username": "bot", "value": "ghp_new_token"},
    )

    stored = TenantSecret.objects.get()
    assert (stored.registry, stored.value()) == ("ghcr.io", "ghp_new_token")

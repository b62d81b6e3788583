"""Secrets given as files in the admin: its "As file" box sets one, through the verb the API
uses; a registry credential given as a file is an error on that box, nothing written; the box
changed needs the value typed again, as a changed registry does."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.quotas import test_secrets_admin
from tests.quotas.test_secrets_admin import SECRETS

pytestmark = pytest.mark.django_db
tenant_admin = test_secrets_admin.tenant_admin  # Alice, owner of alpha, as staff
KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}'


def add(client, tenant, **fields):
    return client.post(f"{SECRETS}add/", {"tenant": tenant.pk, "name": "GCP_KEY", **fields})


def test_a_tenant_admin_adds_a_secret_given_as_a_file(tenant_admin, alpha):
    added = add(tenant_admin, alpha, value=KEY, as_file="on")

    stored = TenantSecret.objects.get()
    assert added.status_code == 302
    assert (stored.as_file, stored.value()) == (True, KEY)


def test_a_credential_given_as_a_file_is_an_error_on_the_box_and_nothing_is_written(
    platform_admin, alpha
):
    page = add(platform_admin, alpha, value=KEY, as_file="on", registry="ghcr.io",
               username="acme-bot")  # fmt: skip

    errors = page.context["adminform"].form.errors
    assert list(errors) == ["as_file"] and "registry credential" in errors["as_file"][0]
    assert not TenantSecret.objects.exists()


def test_changing_the_box_without_the_value_is_refused_and_keeps_the_secret(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "GCP_KEY", KEY)
    change = f"{SECRETS}{secret.pk}/change/"

    refused = platform_admin.post(change, {"as_file": "on"})
    saved = platform_admin.post(change, {"as_file": "on", "value": KEY})

    assert list(refused.context["adminform"].form.errors) == ["value"]
    assert saved.status_code == 302
    assert TenantSecret.objects.get().as_file is True


def test_a_new_value_without_the_box_makes_a_file_a_variable(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    platform_admin.post(f"{SECRETS}{secret.pk}/change/", {"value": "plain"})

    assert TenantSecret.objects.get().as_file is False


def test_the_list_and_the_change_page_show_the_box(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    listed = platform_admin.get(SECRETS).text
    page = platform_admin.get(f"{SECRETS}{secret.pk}/change/").text

    assert "column-as_file" in listed
    assert 'id="id_as_file" checked' in page
    assert "private_key" not in listed + page

"""A registry credential's registry in the admin is compared as it is stored (lower case,
Docker Hub's names written docker.io): the same registry written otherwise, with the value left
blank, is no change and asks for no value; another registry still does."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.quotas.test_secrets_admin import SECRETS

pytestmark = pytest.mark.django_db
TOKEN = "ghp_0123456789abcdefghij"


def change(client, secret, **fields):
    return client.post(f"{SECRETS}{secret.pk}/change/", fields)


@pytest.mark.parametrize(
    ("stored", "typed"),
    [("ghcr.io", "GHCR.io"), ("docker.io", "index.docker.io"),
     ("docker.io", "Registry-1.Docker.io")],
)  # fmt: skip
def test_the_same_registry_written_otherwise_with_no_value_saves_and_keeps_the_credential(
    platform_admin, alpha, stored, typed
):
    secret, _ = tenant_secrets.put(alpha, "HUB", TOKEN, registry=stored, username="bot")

    saved = change(platform_admin, secret, registry=typed, username="bot")

    assert saved.status_code == 302, saved.context["adminform"].form.errors
    kept = TenantSecret.objects.get()
    assert (kept.registry, kept.username, kept.value()) == (stored, "bot", TOKEN)


def test_another_registry_with_no_value_still_asks_for_the_value(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")

    refused = change(platform_admin, secret, registry="quay.io", username="bot")

    assert list(refused.context["adminform"].form.errors) == ["value"]
    assert TenantSecret.objects.get().registry == "ghcr.io"

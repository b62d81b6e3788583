"""Registry credentials from the command line, against a live server: `secret-set --registry
--username` sets one, its password from standard input; `secrets` lists its registry and user;
what the server refuses is an error naming why, nothing written."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "ghp_0123456789abcdefghij"

cli = test_cli.cli  # the command line against a live server, as Alice


def test_secret_set_with_a_registry_sets_the_teams_credential_there(cli, alpha):
    out = cli("secret-set", "alpha", "GHCR", "--registry", "ghcr.io", "--username", "acme-bot",
              stdin=f"{TOKEN}\n")  # fmt: skip

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "created GHCR of alpha"
    stored = TenantSecret.objects.get()
    assert (stored.registry, stored.username, stored.value()) == ("ghcr.io", "acme-bot", TOKEN)
    assert TOKEN not in out.stdout + out.stderr


def test_secret_set_with_a_registry_and_no_user_is_refused_naming_the_field(cli, alpha):
    out = cli("secret-set", "alpha", "GHCR", "--registry", "ghcr.io", stdin=TOKEN)

    assert out.returncode == 1
    assert "username" in out.stderr
    assert not TenantSecret.objects.exists()


def test_secrets_shows_a_credentials_registry_and_user_beside_the_variables(cli, alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    out = cli("secrets", "alpha")

    header, *rows = [line.split() for line in out.stdout.splitlines()]
    assert header == ["name", "registry", "user", "updated", "(UTC)", "by"]
    assert rows[0][:3] == ["GHCR", "ghcr.io", "acme-bot"]
    assert rows[1][:3] == ["HF_TOKEN", "-", "-"]
    assert TOKEN not in out.stdout

"""`secret-set` never turns a registry credential into an environment variable unasked: the
server replaces a secret whole, so set without `--registry` a credential would silently become
a variable. The CLI refuses that (exit 2, nothing read or written) unless `--variable` says it
is meant, and then says what it did."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "ghp_0123456789abcdefghij"

cli = test_cli.cli  # the command line against a live server, as Alice


@pytest.fixture
def credential(alpha):
    secret, _ = tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")
    return secret


def kept(name: str = "GHCR") -> tuple[str, str, str]:
    secret = TenantSecret.objects.get(name=name)
    return secret.registry, secret.username, secret.value()


def test_setting_a_credential_without_a_registry_is_refused_naming_it(cli, credential):
    out = cli("secret-set", "alpha", "GHCR", stdin="plain-value\n")

    assert out.returncode == 2
    assert "GHCR of alpha is the registry credential for ghcr.io" in out.stderr
    assert "--variable" in out.stderr
    assert kept() == ("ghcr.io", "acme-bot", TOKEN)


def test_the_refusal_comes_before_the_value_is_read(cli, credential, tmp_path):
    out = cli("secret-set", "alpha", "GHCR", "--from-file", str(tmp_path / "missing"))

    assert out.returncode == 2
    assert "registry credential" in out.stderr and "cannot read" not in out.stderr


def test_with_variable_a_credential_becomes_an_environment_variable_saying_so(cli, credential):
    out = cli("secret-set", "alpha", "GHCR", "--variable", stdin="plain-value\n")

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "replaced GHCR of alpha (the registry credential for ghcr.io before: now an "
        "environment variable)"
    )
    assert kept() == ("", "", "plain-value")


def test_variable_on_a_variable_or_a_new_name_sets_it_as_without_the_flag(cli, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    replaced = cli("secret-set", "alpha", "HF_TOKEN", "--variable", stdin="hf_value_2")
    created = cli("secret-set", "alpha", "WANDB_API_KEY", "--variable", stdin="wandb_value_1")

    assert replaced.stdout.strip() == "replaced HF_TOKEN of alpha", replaced.stderr
    assert created.stdout.strip() == "created WANDB_API_KEY of alpha", created.stderr
    assert kept("HF_TOKEN") == ("", "", "hf_value_2")


def test_a_credential_set_again_with_its_registry_needs_no_flag(cli, credential):
    out = cli("secret-set", "alpha", "GHCR", "--registry", "ghcr.io", "--username", "acme-bot",
              stdin="ghp_new_token_0123456789")  # fmt: skip

    assert out.stdout.strip() == "replaced GHCR of alpha", out.stderr
    assert kept() == ("ghcr.io", "acme-bot", "ghp_new_token_0123456789")


def test_variable_with_a_registry_is_a_usage_error_writing_nothing(cli, alpha):
    out = cli("secret-set", "alpha", "GHCR", "--variable", "--registry", "ghcr.io",
              "--username", "acme-bot", stdin=TOKEN)  # fmt: skip

    assert out.returncode == 2
    assert "--variable" in out.stderr
    assert not TenantSecret.objects.exists()

"""Secrets given as files from the command line, against a live server: `secret-set --as-file`
sets one; `secrets` shows each one's kind once the tenant has a file; --as-file with a
registry, or a file set again without --as-file, is refused (exit 2), nothing written; on a
registry credential --as-file replaces it, saying so."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db(transaction=True)
KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}'
TOKEN = "ghp_0123456789abcdefghij"

cli = test_cli.cli  # the command line against a live server, as Alice


def stored(name: str = "GCP_KEY") -> tuple[bool, str, str]:
    secret = TenantSecret.objects.get(name=name)
    return secret.as_file, secret.registry, secret.value()


def test_secret_set_as_file_sets_a_secret_jobs_get_as_a_file(cli, alpha, tmp_path):
    key = tmp_path / "key.json"
    key.write_text(f"{KEY}\n")

    out = cli("secret-set", "alpha", "GCP_KEY", "--as-file", "--from-file", str(key))

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "created GCP_KEY of alpha"
    assert stored() == (True, "", KEY)


def test_secrets_shows_the_kind_of_each_once_the_tenant_has_a_file(cli, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    out = cli("secrets", "alpha")

    header, *rows = [line.split() for line in out.stdout.splitlines()]
    assert header == ["name", "kind", "registry", "user", "updated", "(UTC)", "by"]
    assert [row[:4] for row in rows] == [["GCP_KEY", "file", "-", "-"],
                                         ["GHCR", "credential", "ghcr.io", "acme-bot"],
                                         ["HF_TOKEN", "variable", "-", "-"]]  # fmt: skip
    assert "private_key" not in out.stdout and TOKEN not in out.stdout


@pytest.mark.parametrize(
    ("flags", "said"),
    [(["--registry", "ghcr.io", "--username", "acme-bot"], "without --registry and --username"),
     (["--username", "acme-bot"], "without --registry and --username"),
     (["--variable"], "--as-file a file: give one")],
)  # fmt: skip
def test_as_file_with_a_registry_or_variable_is_a_usage_error_writing_nothing(
    cli, alpha, flags, said
):
    out = cli("secret-set", "alpha", "GCP_KEY", "--as-file", *flags, stdin=KEY)

    assert out.returncode == 2
    assert said in out.stderr and "--as-file" in out.stderr
    assert not TenantSecret.objects.exists()


def test_a_file_set_again_without_as_file_is_refused_naming_it(cli, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    out = cli("secret-set", "alpha", "GCP_KEY", stdin="plain-value\n")

    assert out.returncode == 2
    assert "GCP_KEY of alpha is given to jobs as a file" in out.stderr
    assert "--as-file" in out.stderr and "--variable" in out.stderr
    assert stored() == (True, "", KEY)


def test_with_variable_a_file_becomes_an_environment_variable_saying_so(cli, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    out = cli("secret-set", "alpha", "GCP_KEY", "--variable", stdin="plain-value\n")

    assert out.stdout.strip() == (
        "replaced GCP_KEY of alpha (given to jobs as a file before: now an environment variable)"
    ), out.stderr
    assert stored() == (False, "", "plain-value")


def test_a_file_set_again_as_a_file_needs_no_other_flag(cli, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    out = cli("secret-set", "alpha", "GCP_KEY", "--as-file", stdin="new-key\n")

    assert out.stdout.strip() == "replaced GCP_KEY of alpha", out.stderr
    assert stored() == (True, "", "new-key")


def test_as_file_on_a_credential_replaces_it_saying_so(cli, alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")

    out = cli("secret-set", "alpha", "GHCR", "--as-file", stdin=KEY)

    assert out.stdout.strip() == (
        "replaced GHCR of alpha (the registry credential for ghcr.io before: now given to jobs "
        "as a file)"
    ), out.stderr
    assert stored("GHCR") == (True, "", KEY)


def test_a_credential_set_again_without_a_registry_is_refused_naming_as_file_too(cli, alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")

    out = cli("secret-set", "alpha", "GHCR", stdin="plain-value\n")

    assert out.returncode == 2
    assert "--variable or --as-file" in out.stderr
    assert stored("GHCR") == (False, "ghcr.io", TOKEN)

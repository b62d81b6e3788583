"""A tenant's secrets from the command line, against a live server: Alice, owner of alpha, sets
them from standard input or a file (never from the command line), lists their names and
deletes them; the values are never printed, and what the server refuses is an error naming
why."""

import subprocess
import sys

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.factories import JobFactory
from tests.jobs import test_cli
from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

cli = test_cli.cli  # the command line against a live server, as Alice


def stored(tenant, name: str) -> str:
    return TenantSecret.objects.get(tenant=tenant, name=name).value()


def test_secret_set_reads_the_value_from_standard_input_and_never_prints_it(cli, alpha):
    out = cli("secret-set", "alpha", "HF_TOKEN", stdin="hf_value_1\n")  # as `echo ... |` writes it

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "created HF_TOKEN of alpha"
    assert stored(alpha, "HF_TOKEN") == "hf_value_1"
    assert "hf_value_1" not in out.stdout + out.stderr


def test_secret_set_again_replaces_the_value(cli, alpha):
    cli("secret-set", "alpha", "HF_TOKEN", stdin="hf_value_1")

    out = cli("secret-set", "alpha", "HF_TOKEN", stdin="hf_value_2")

    assert out.stdout.strip() == "replaced HF_TOKEN of alpha"
    assert stored(alpha, "HF_TOKEN") == "hf_value_2"


def test_secret_set_reads_the_value_from_a_file(cli, alpha, tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN KEY-----\nabc\n-----END KEY-----\n")

    out = cli("secret-set", "alpha", "SIGNING_KEY", "--from-file", str(key))

    assert out.stdout.strip() == "created SIGNING_KEY of alpha", out.stderr
    assert stored(alpha, "SIGNING_KEY") == "-----BEGIN KEY-----\nabc\n-----END KEY-----"


def test_secrets_lists_each_name_with_when_and_by_whom_it_was_set(cli, alpha, alice):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1", by=alice)
    tenant_secrets.put(alpha, "WANDB_API_KEY", "wandb_value_1")

    out = cli("secrets", "alpha")

    header, *rows = [line.split() for line in out.stdout.splitlines()]
    assert header == ["name", "updated", "(UTC)", "by"]
    assert rows[0] == ["HF_TOKEN", f"{secret.updated:%Y-%m-%d}", f"{secret.updated:%H:%M}", "alice"]
    assert (rows[1][0], rows[1][-1]) == ("WANDB_API_KEY", "-")  # set by no one: a script
    assert "value_1" not in out.stdout


def test_secret_delete_deletes_it(cli, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    out = cli("secret-delete", "alpha", "HF_TOKEN")

    assert (out.returncode, out.stdout.strip()) == (0, "deleted HF_TOKEN of alpha")
    assert not TenantSecret.objects.exists()


def test_a_refused_delete_exits_non_zero_naming_the_job_that_names_it(cli, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    job = JobFactory(tenant=alpha, secrets=["HF_TOKEN"])

    out = cli("secret-delete", "alpha", "HF_TOKEN")

    assert (out.returncode, out.stdout) == (1, "")
    assert "error 409" in out.stderr and f"[{job.pk}]" in out.stderr
    assert TenantSecret.objects.filter(name="HF_TOKEN").exists()


@pytest.mark.parametrize("name", ["9X", "RANK", "A.B"])
def test_a_bad_name_is_an_error_naming_name_and_nothing_is_written(cli, alpha, name):
    out = cli("secret-set", "alpha", name, stdin="hf_value_1")

    assert (out.returncode, out.stdout) == (1, "")
    assert "error 400" in out.stderr and '"name"' in out.stderr
    assert not TenantSecret.objects.exists()


def test_another_teams_tenant_is_an_error_404(cli, gamma):
    out = cli("secret-set", "gamma", "HF_TOKEN", stdin="hf_value_1")

    assert out.returncode == 1 and "error 404" in out.stderr
    assert not TenantSecret.objects.exists()


def test_help_names_the_secrets_commands():
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip

    for command in ("secrets TENANT", "secret-set TENANT NAME", "secret-delete TENANT NAME"):
        assert f"\n    {command}" in out.stdout, command

"""`secret-set` never turns a registry credential into an environment variable unasked: the
server replaces a secret whole, so set without `--registry` a credential would silently become
a variable. The CLI refuses that (exit 2, nothing read or written) unless `--variable` says it
is meant, and then says what it did. The put names the kind the command read: a secret
another owner made another kind meanwhile is not replaced; and a server that stored another kind
than asked (one from before files) is an error saying so."""

import json
import os
import subprocess
import sys

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs import test_cli
from tests.jobs.test_cli import Canned, answering, run_cli
from tests.processes import ROOT

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


def test_a_secret_changed_between_its_read_and_its_put_is_refused_writing_nothing(
    cli, live_server, alpha, tmp_path
):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    fifo = tmp_path / "value"
    os.mkfifo(fifo)
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": cli.token, "PATH": "/usr/bin:/bin"}
    setting = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "secret-set", "alpha", "HF_TOKEN", "--from-file",
         str(fifo)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with open(fifo, "w") as value:  # opened once the command has read the secret's kind
        tenant_secrets.put(alpha, "HF_TOKEN", "pem-body-1", as_file=True)  # another owner
        value.write("hf_value_2")
    out, err = setting.communicate(timeout=60)

    assert setting.returncode == 1, out
    assert "error 409" in err and "changed meanwhile" in err and "a file now" in err
    assert TenantSecret.objects.get().as_file and TenantSecret.objects.get().value() == "pem-body-1"


class KnowsNoFiles(Canned):
    """A server from before secrets given as files: it stores any secret as a variable, and
    says nothing of files in its answers."""

    def do_GET(self):
        self.reply(200, b'{"tenant": "alpha", "secrets": []}')

    def do_PUT(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.reply(201, json.dumps({"name": "CERT", "registry": None, "username": None,
                                    "updated": "2026-12-05T07:00:00Z",
                                    "updated_by": "alice"}).encode())  # fmt: skip


def test_a_server_that_stored_a_file_as_a_variable_is_an_error_saying_so(tmp_path):
    (tmp_path / "cert.pem").write_text("pem-body-1")

    with answering(KnowsNoFiles) as url:
        out = run_cli(url, "t", "secret-set", "alpha", "CERT", "--as-file", "--from-file",
                      str(tmp_path / "cert.pem"))  # fmt: skip

    assert out.returncode == 1
    assert out.stderr.strip() == (
        "CERT of alpha was stored as an environment variable, not as a file: the server does "
        "not take that kind"
    )

"""`mlsched login` and `logout` against a live server, as a user runs them: the login approved
(or denied) on the server meanwhile, its token kept in the credentials file for the server,
and the commands after it using that token without MLSCHED_TOKEN."""

import json
import re
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from quotas import cli_logins
from quotas.models import ApiToken, CliLogin
from quotas.tokens import create_token
from tests.processes import ROOT, free_port

pytestmark = pytest.mark.django_db(transaction=True)

SHOWN_CODE = re.compile(r"\b[A-Z]{4}-[A-Z]{4}\b")  # as `login` prints it


@pytest.fixture
def env(live_server, tmp_path, monkeypatch):
    """The CLI's environment: the live server, a config folder of the test's own, no token;
    the server asks for a poll a second (it runs in this process)."""
    monkeypatch.setattr(cli_logins, "INTERVAL_S", 1)
    return {"MLSCHED_URL": live_server.url, "MLSCHED_CONFIG_DIR": str(tmp_path / "config"),
            "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}  # fmt: skip


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def logging_in(env, decide, *args) -> tuple[int, str, str]:
    """`login` run until it ends, `decide(user_code)` called once it has printed the code:
    its exit status, its whole output and its errors."""
    child = subprocess.Popen([sys.executable, "-m", "jobs.cli", "login", *args], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    first = child.stdout.readline()
    if code := SHOWN_CODE.search(first):
        decide(code[0])
    out, err = child.communicate(timeout=60)
    return child.returncode, first + out, err


def approved_by(user, **how):
    return lambda code: cli_logins.approve(cli_logins.waiting(code), user, **how)


def credentials(env) -> dict:
    return json.loads((Path(env["MLSCHED_CONFIG_DIR"]) / "credentials.json").read_text())


def test_login_keeps_the_token_it_gets_and_whoami_then_works_without_mlsched_token(env, alice):
    url = env["MLSCHED_URL"]

    status, out, err = logging_in(env, approved_by(alice))
    whoami = cli(env, "whoami")

    assert status == 0, err
    code = CliLogin.objects.get().user_code
    shown = f"{code[:4]}-{code[4:]}"
    assert f"Open {url}/cli-login/?code={shown} in your browser and confirm the code {shown}" in out
    assert f"Logged in to {url} as alice; the token expires " in out
    kept = credentials(env)[url]
    assert kept["username"] == "alice" and kept["token"].startswith("mls_") and kept["expires"]
    path = Path(env["MLSCHED_CONFIG_DIR"]) / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert whoami.returncode == 0, whoami.stderr
    assert whoami.stdout.startswith("alice") and "mlsched CLI on " in whoami.stdout


def test_login_names_its_token_as_asked(env, alice):
    status, _, err = logging_in(env, approved_by(alice), "--name", "  ci runner 7 ")

    assert status == 0, err
    assert ApiToken.objects.get(user=alice).name == "ci runner 7"


@pytest.mark.parametrize("name", ["", "   ", "x" * 101])
def test_login_refuses_a_name_no_token_can_have_and_starts_nothing(env, name):
    done = cli(env, "login", "--name", name)

    assert done.returncode == 2 and "--name: a name of 1 to 100 characters" in done.stderr
    assert not CliLogin.objects.exists()


def test_login_keeps_the_tokens_of_other_servers(env, alice):
    folder = Path(env["MLSCHED_CONFIG_DIR"])
    folder.mkdir(mode=0o700)
    other = {"token": "mls_other", "username": "alice", "expires": None}
    (folder / "credentials.json").write_text(json.dumps({"https://other.example.com": other}))

    status, _, err = logging_in(env, approved_by(alice))

    assert status == 0, err
    assert set(credentials(env)) == {"https://other.example.com", env["MLSCHED_URL"]}
    assert credentials(env)["https://other.example.com"] == other


def test_a_read_only_approval_keeps_a_read_only_token(env, alice):
    status, _, err = logging_in(env, approved_by(alice, read_only=True))

    assert status == 0, err
    assert "read only" in cli(env, "whoami").stdout


def test_a_login_denied_in_the_browser_exits_1_saying_so_and_keeps_nothing(env, alice):
    def denied(code):
        cli_logins.deny(cli_logins.waiting(code), alice)

    status, _, err = logging_in(env, denied)

    assert status == 1 and "the login was denied in the browser" in err
    assert not (Path(env["MLSCHED_CONFIG_DIR"]) / "credentials.json").exists()


def test_a_login_never_approved_exits_1_once_its_code_expires(env, monkeypatch):
    monkeypatch.setattr(cli_logins, "LIFE", timedelta(seconds=2))

    status, _, err = logging_in(env, lambda code: None)

    assert status == 1 and "the code expired before it was confirmed" in err


def test_login_with_browser_opens_the_page_to_approve_it(env, alice, tmp_path):
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)

    status, out, err = logging_in({**env, "BROWSER": str(browser)}, approved_by(alice),
                                  "--browser")  # fmt: skip

    code = CliLogin.objects.get().user_code
    assert status == 0, err
    assert opened.read_text().strip() == (
        f"{env['MLSCHED_URL']}/cli-login/?code={code[:4]}-{code[4:]}"
    )


def test_logout_revokes_and_forgets_the_servers_token_and_commands_then_ask_for_a_login(env, alice):
    logging_in(env, approved_by(alice))
    assert ApiToken.objects.filter(user=alice).count() == 1

    out = cli(env, "logout")
    whoami = cli(env, "whoami")
    again = cli(env, "logout")

    assert out.returncode == 0
    assert f"Logged out of {env['MLSCHED_URL']}: its token is revoked" in out.stdout
    assert credentials(env) == {}
    assert not ApiToken.objects.filter(user=alice).exists()
    assert whoami.returncode == 2
    assert "set MLSCHED_TOKEN to your API token, or run `mlsched login`" in whoami.stderr
    assert "Not logged in" in again.stdout


@pytest.mark.parametrize("entry", [{"token": "mls_kept", "username": "alice", "expires": None},
                                   ["edited by hand"], 5])  # fmt: skip
def test_logout_from_a_server_out_of_reach_forgets_the_token_and_says_it_is_not_revoked(env, entry):
    gone = f"http://127.0.0.1:{free_port()}"
    folder = Path(env["MLSCHED_CONFIG_DIR"])
    folder.mkdir(mode=0o700)
    (folder / "credentials.json").write_text(json.dumps({gone: entry}))

    out = cli({**env, "MLSCHED_URL": gone}, "logout")

    assert out.returncode == 0
    assert "the server could not revoke it (no answer)" in out.stdout
    assert credentials(env) == {}


def test_mlsched_token_comes_before_the_credentials_file(env, alice, bob):
    logging_in(env, approved_by(alice))
    _, bobs = create_token(bob, "bob's")

    whoami = cli({**env, "MLSCHED_TOKEN": bobs}, "whoami")

    assert whoami.stdout.startswith("bob")


def test_a_kept_token_with_characters_no_token_has_is_refused_naming_the_file(env):
    folder = Path(env["MLSCHED_CONFIG_DIR"])
    folder.mkdir(mode=0o700)
    kept = {env["MLSCHED_URL"]: {"token": "mls_x\x1b[2J", "username": "alice", "expires": None}}
    (folder / "credentials.json").write_text(json.dumps(kept))

    whoami = cli(env, "whoami")

    assert whoami.returncode == 2
    assert "credentials.json holds characters an API token never has" in whoami.stderr
    assert "\x1b" not in whoami.stderr

"""The command line never prints the API token it was given, even a malformed one."""

import subprocess
import sys

import pytest

from tests.processes import ROOT

SECRET = "9f2c41d0b7e8a6534c1d2e3f4a5b6c7d8e9f0a1b"


def run_cli(token: str, *args):
    env = {"MLSCHED_URL": "http://127.0.0.1:9", "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize(
    "token", [f"{SECRET}\nrest", f"{SECRET}\rrest", f"{SECRET} rest", f"{SECRET}\x01"]
)
def test_it_refuses_a_token_with_control_characters_or_spaces_without_printing_it(token):
    out = run_cli(token, "list")

    assert out.returncode != 0
    assert "MLSCHED_TOKEN" in out.stderr
    assert SECRET not in out.stdout + out.stderr

"""The local backend with --worker-uids: each tenant's workers run as a user of their own, so
a worker cannot read another tenant's files, the agent's state or the agent's environment.
Real processes switching to real user ids: the agent (this test) must be root."""

import dataclasses
import os
import signal
import sys

import pytest
from django.core.management import CommandError, call_command

from clusters.backends import base
from clusters.backends.local import LocalBackend, parse_inventory
from clusters.management.commands.run_agent import uid_range
from tests.clusters.test_local_backend import ended, phases, spec
from tests.processes import gone, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")

UIDS = range(40_000, 40_100)
# The system's interpreter: the workers' users cannot reach one under root's home.
PYTHON = "/usr/bin/python3"

PROBE = """
import os, pathlib, sys
def read(path):
    try:
        pathlib.Path(path).read_bytes()
        return "read"
    except PermissionError:
        return "denied"
ckpt = pathlib.Path(os.environ["MLSCHED_CHECKPOINT_DIR"])
(ckpt / "weights").write_text("mine")
print(os.getuid(), os.getgid())
print("neighbour checkpoint", read(os.environ["NEIGHBOUR"]))
print("agent environment", read(f"/proc/{os.environ['AGENT_PID']}/environ"))
print("own spec", read(pathlib.Path(os.environ["HOME"]).parent / "spec.json"))
"""


@pytest.fixture
def isolated(root):
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(root / "state", nodes, root / "ckpt", worker_uids=UIDS)


def tenant_spec(tenant_id: int, attempt: int, command, env=None):
    one = spec(command, attempt=attempt)
    return dataclasses.replace(one, tenant_id=tenant_id, env={**one.env, **(env or {})},
                               checkpoint_dir=f"t{tenant_id}/{attempt}")  # fmt: skip


def output(backend, attempt) -> list[str]:
    return [line.text for line in backend.logs() if line.attempt_id == attempt]


def test_each_tenants_workers_run_as_its_own_user_and_cannot_read_its_neighbours(isolated, root):
    save = "import os, pathlib; pathlib.Path(os.environ['MLSCHED_CHECKPOINT_DIR'], 'weights')"
    neighbour = tenant_spec(3, 1, [PYTHON, "-c", save + ".write_text('x')"])
    isolated.start(neighbour)
    assert ended(isolated, 1)
    secret = root / "ckpt" / "t3" / "1" / "weights"
    assert secret.read_text() == "x"

    env = {"NEIGHBOUR": str(secret), "AGENT_PID": str(os.getpid())}
    isolated.start(tenant_spec(4, 2, [PYTHON, "-c", PROBE], env))
    assert ended(isolated, 2)

    assert phases(isolated, 2)[0].exit_code == 0
    assert output(isolated, 2) == [
        "40004 40004",
        "neighbour checkpoint denied",
        "agent environment denied",
        "own spec denied",
    ]
    assert (root / "ckpt" / "t4" / "2" / "weights").stat().st_uid == 40_004


def test_a_tenant_without_a_user_in_the_range_is_refused_with_the_reason(isolated):
    isolated.start(tenant_spec(500, 1, [sys.executable, "-c", "print('ran')"]))

    status = phases(isolated, 1)[0]
    assert (status.phase, status.exit_code) == (base.FAILED, None)
    assert "--worker-uids" in status.reason
    assert output(isolated, 1) == []


def test_without_a_range_workers_run_as_the_agents_user(root):
    backend = LocalBackend(root / "state", parse_inventory("1x8xA100", "local"), root / "ckpt")
    backend.start(tenant_spec(4, 1, [sys.executable, "-c", "import os; print(os.getuid())"]))
    assert ended(backend, 1)

    assert output(backend, 1) == [str(os.getuid())]


def test_what_a_tenants_worker_left_behind_is_killed_when_it_ends(isolated):
    isolated.start(tenant_spec(4, 1, ["/bin/sh", "-c", "sleep 60 & echo $!; exit 0"]))

    assert ended(isolated, 1)
    (left,) = output(isolated, 1)
    assert phases(isolated, 1)[0].exit_code == 0
    assert wait_until(lambda: gone(int(left)), timeout=10)


def test_a_tenants_worker_dies_with_its_shim(isolated):
    # Switching users clears a parent-death signal: the shim sets it after the switch.
    isolated.start(tenant_spec(4, 1, [PYTHON, "-c", "import time; time.sleep(60)"]))
    directory = isolated.worker_dir(1, 0)
    assert wait_until(lambda: (directory / "child.pid").exists(), timeout=10)
    worker = int((directory / "child.pid").read_text())

    os.kill(int((directory / "pid").read_text()), signal.SIGKILL)

    assert wait_until(lambda: gone(worker), timeout=10)
    assert ended(isolated, 1)


@pytest.mark.parametrize("text", ["0-10", "10-5", "20000", "a-b"])
def test_a_uid_range_must_be_first_to_last_above_0(text):
    with pytest.raises(Exception, match="FIRST-LAST"):
        uid_range(text)


def test_an_agent_whose_directories_the_workers_users_cannot_reach_refuses_to_start(root):
    shut = root / "private"
    shut.mkdir(mode=0o700)
    nodes = parse_inventory("1x8xA100", "local")

    with pytest.raises(ValueError, match=f"{shut} is mode 0700: the workers' users"):
        LocalBackend(shut / "state", nodes, root / "ckpt", worker_uids=UIDS)
    with pytest.raises(ValueError, match="give it o\\+x"):
        LocalBackend(root / "state", nodes, shut / "ckpt", worker_uids=UIDS)
    LocalBackend(shut / "state", nodes, shut / "ckpt")  # its own user passes: no refusal


def test_run_agent_says_which_directory_to_open_and_does_not_start(root, monkeypatch):
    shut = root / "private"
    shut.mkdir(mode=0o700)
    monkeypatch.setenv("MLSCHED_AGENT_TOKEN", "t")

    args = ["--cluster", "local", "--inventory", "1x8xA100", "--worker-uids", "40000-40099"]

    with pytest.raises(CommandError, match=f"{shut} is mode 0700"):
        call_command("run_agent", *args, "--state-dir", str(shut / "state"))

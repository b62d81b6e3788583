"""A gang's SSH files (MLSCHED_SSH_DIR) on the local backend: a key pair of the attempt's own
that every worker of the gang holds in its own folder, private to it, with the public key as
its authorized_keys and a client config logging in with the key; none for a single worker; gone
once the attempt is forgotten. No database involved."""

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_ssh_private_key,
)

from clusters.backends import base
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, phases, restarted, spec
from tests.clusters.test_tenant_users import PYTHON, UIDS, tenant_spec

NAMES = ["authorized_keys", "config", "id_ed25519", "id_ed25519.pub"]
# Prints, as one line of JSON, the folder MLSCHED_SSH_DIR names, its mode, its owner and each
# file's mode and bytes as the worker reads them.
INSPECT = """
import json, os, pathlib
folder = os.environ.get("MLSCHED_SSH_DIR")
seen = {"dir": folder}
if folder:
    path = pathlib.Path(folder)
    seen["mode"] = oct(path.stat().st_mode & 0o777)
    seen["uid"] = path.stat().st_uid
    seen["files"] = {file.name: [oct(file.stat().st_mode & 0o777), file.read_text()]
                     for file in sorted(path.iterdir())}
print(json.dumps(seen))
"""


def gang_of(workers=2, attempt=1, python=sys.executable):
    return spec([python, "-c", INSPECT], workers=workers, attempt=attempt,
                gpus=tuple((rank,) for rank in range(workers)))  # fmt: skip


def seen(backend, attempt=1, workers=2) -> dict[int, dict]:
    """What each worker of the attempt found of its SSH files, by rank, once all have ended."""
    assert ended(backend, attempt, workers=workers)
    assert {s.exit_code for s in phases(backend, attempt).values()} == {0}
    lines = [line for line in backend.logs() if line.attempt_id == attempt]
    return {line.rank: json.loads(line.text) for line in lines}


def text(found: dict, name: str) -> str:
    return found["files"][name][1]


def test_every_worker_of_a_gang_finds_the_same_key_pair_in_a_private_folder_of_its_own(backend):
    backend.start(gang_of())

    workers = seen(backend)

    for rank, found in workers.items():
        assert found["dir"] == str(backend.worker_dir(1, rank).absolute() / "ssh")
        assert (found["mode"], found["uid"]) == ("0o700", os.getuid())
        assert sorted(found["files"]) == NAMES
        assert {mode for mode, _ in found["files"].values()} == {"0o600"}
    zero, one = workers[0], workers[1]
    for name in ("id_ed25519", "id_ed25519.pub", "authorized_keys"):
        assert text(zero, name) == text(one, name)
    assert text(zero, "config") != text(one, "config")  # each names its own folder


def test_the_private_key_matches_the_public_key_and_authorized_keys(backend):
    backend.start(gang_of())

    found = seen(backend)[1]

    key = load_ssh_private_key(text(found, "id_ed25519").encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    assert text(found, "id_ed25519").startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    public = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    assert text(found, "id_ed25519.pub") == f"{public} mlsched-attempt-1\n"
    assert text(found, "authorized_keys") == text(found, "id_ed25519.pub")


def test_the_config_logs_in_to_any_host_with_the_key_in_that_folder(backend):
    backend.start(gang_of())

    found = seen(backend)[0]

    lines = [line.split(maxsplit=1) for line in text(found, "config").splitlines()]
    assert lines[0] == ["Host", "*"]
    options = dict(lines[1:])
    assert options["IdentityFile"] == f'"{found["dir"]}/id_ed25519"'
    assert Path(options["IdentityFile"].strip('"')).name in found["files"]
    assert (options["StrictHostKeyChecking"], options["UserKnownHostsFile"]) == ("no", "/dev/null")
    assert options["LogLevel"] == "ERROR"


def test_a_single_worker_gets_no_ssh_files(backend):
    backend.start(gang_of(workers=1))

    assert seen(backend, workers=1) == {0: {"dir": None}}
    assert not (backend.worker_dir(1, 0) / "ssh").exists()


def test_each_attempt_has_a_key_pair_of_its_own(backend):
    backend.start(gang_of(attempt=1))
    first = seen(backend, 1)[0]
    backend.start(gang_of(attempt=2))
    second = seen(backend, 2)[0]

    assert text(first, "id_ed25519") != text(second, "id_ed25519")
    assert text(second, "id_ed25519.pub").endswith(" mlsched-attempt-2\n")


def test_a_start_cut_short_and_asked_again_gives_the_rest_of_the_gang_the_same_key(
    backend, monkeypatch
):
    launch = type(backend)._launch

    def dies_before_rank_1(self, directory, attempt, worker, *rest):
        if worker.rank == 1:
            raise OSError(28, "No space left on device")
        launch(self, directory, attempt, worker, *rest)

    monkeypatch.setattr(type(backend), "_launch", dies_before_rank_1)
    with pytest.raises(OSError):
        backend.start(gang_of())
    monkeypatch.undo()

    again = restarted(backend)
    again.start(gang_of())  # after an agent restart

    workers = seen(again)
    assert text(workers[0], "id_ed25519") == text(workers[1], "id_ed25519")


def test_an_agent_restarted_beside_a_gang_leaves_its_files_and_forgets_them(backend):
    backend.start(gang_of())
    workers = seen(backend)
    folders = [Path(found["dir"]) for found in workers.values()]
    key = (folders[0] / "id_ed25519").read_text()

    again = restarted(backend)
    again.start(gang_of())  # asked again: every worker is there already

    assert {s.phase for s in phases(again).values()} == {base.EXITED}
    assert [(folder / "id_ed25519").read_text() for folder in folders] == [key, key]
    again.forget(1)
    assert not any(folder.exists() for folder in folders)


@pytest.fixture
def isolated(root):
    """A backend running each tenant's workers as a user of their own."""
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(root / "state", nodes, root / "ckpt", worker_uids=UIDS)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_tenants_gang_reads_its_files_as_its_own_user(isolated):
    tenants = tenant_spec(3, 1, [PYTHON, "-c", INSPECT])
    isolated.start(dataclasses.replace(tenants, workers=gang_of(python=PYTHON).workers))

    workers = seen(isolated)

    assert {found["uid"] for found in workers.values()} == {40_003}
    for found in workers.values():
        assert sorted(found["files"]) == NAMES
        assert {Path(found["dir"], name).stat().st_uid for name in NAMES} == {40_003}

"""The local backend gives a worker each of its job's secrets given as files: a file of its own,
readable by its job alone, whose path the variable of the secret's name holds; gone once the
attempt is forgotten."""

import dataclasses
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from clusters.backends import base
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, phases, spec
from tests.clusters.test_tenant_users import PYTHON, UIDS, output, tenant_spec

# Bytes as given: not ASCII, ending in a newline the file keeps (and none added to the other).
KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}\n'
KUBECONFIG = "apiVersion: v1\nclusters: []\n# café"
FILES = {"GCP_KEY": KEY, "KUBECONFIG": KUBECONFIG}
# Prints each file's path, the SHA-256 of its bytes and its mode: never its value.
READ = """
import hashlib, os, pathlib
for name in ("GCP_KEY", "KUBECONFIG"):
    path = pathlib.Path(os.environ[name])
    print(path, hashlib.sha256(path.read_bytes()).hexdigest(), oct(path.stat().st_mode & 0o777))
"""


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def with_files(command, files=FILES, **kwargs):
    return dataclasses.replace(spec(command, **kwargs), secret_files=files)


def printed(backend) -> dict[tuple[int, int], list[tuple[Path, str, str]]]:
    """What the workers printed of their files since the last read, by (attempt, rank): the
    path, digest and mode of each."""
    found: dict[tuple[int, int], list[tuple[Path, str, str]]] = {}
    for line in backend.logs():
        path, sha, mode = line.text.split()
        found.setdefault((line.attempt_id, line.rank), []).append((Path(path), sha, mode))
    return found


def files_read(backend, attempt=1) -> list[tuple[Path, str, str]]:
    """The path, digest and mode of each file the attempt's one worker read, once it ended."""
    assert ended(backend, attempt)
    assert phases(backend, attempt)[0].exit_code == 0
    return printed(backend)[attempt, 0]


def test_a_worker_reads_each_file_by_the_path_its_variable_holds(backend):
    backend.start(with_files([sys.executable, "-c", READ]))

    key, kubeconfig = files_read(backend)

    assert (key[0].name, key[1], key[2]) == ("GCP_KEY", digest(KEY), "0o600")
    assert (kubeconfig[0].name, kubeconfig[1]) == ("KUBECONFIG", digest(KUBECONFIG))
    assert key[0].is_absolute()
    log = " ".join(line.text for line in backend.logs())
    assert "private_key" not in log and "apiVersion" not in log


def test_the_files_are_in_a_private_folder_away_from_the_checkpoint_dir(backend):
    backend.start(with_files([sys.executable, "-c", READ]))

    key, _ = files_read(backend)

    folder = key[0].parent
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder.stat().st_uid, key[0].stat().st_uid) == (os.getuid(), os.getuid())
    assert not key[0].resolve().is_relative_to(backend.checkpoint_root.resolve())
    assert not any(backend.checkpoint_root.rglob("GCP_KEY"))


def test_each_worker_of_each_attempt_has_files_of_its_own(backend):
    backend.start(with_files([sys.executable, "-c", READ], workers=2, gpus=((0,), (1,))))
    backend.start(with_files([sys.executable, "-c", READ], attempt=2, number=2))

    assert ended(backend, 1, workers=2) and ended(backend, 2)

    paths = [key[0] for key, _ in printed(backend).values()]
    assert len(paths) == 3 and len({path.parent for path in paths}) == 3
    assert all(path.read_text() == KEY for path in paths)


def test_the_files_are_gone_once_the_attempt_is_forgotten(backend):
    backend.start(with_files([sys.executable, "-c", READ]))
    key, _ = files_read(backend)
    assert key[0].exists()

    backend.forget(1)

    assert not key[0].parent.exists()


def test_a_restarted_agent_forgets_the_files_of_an_attempt_it_found(backend):
    backend.start(with_files([sys.executable, "-c", READ]))
    key, _ = files_read(backend)
    assert key[0].exists()
    restarted = LocalBackend(backend.state_dir, backend.nodes, backend.checkpoint_root)

    assert phases(restarted)[0].phase == base.EXITED
    restarted.forget(1)

    assert not key[0].parent.exists()


BOTH = """
import hashlib, os, pathlib
print(hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest())
print(hashlib.sha256(pathlib.Path(os.environ["GCP_KEY"]).read_bytes()).hexdigest())
"""


def test_a_variable_secret_still_comes_as_a_value_beside_a_file(backend):
    one = with_files([sys.executable, "-c", BOTH], files={"GCP_KEY": KEY})

    backend.start(dataclasses.replace(one, secrets={"HF_TOKEN": "hf_Zq8sEcReT"}))

    assert ended(backend)
    assert [line.text for line in backend.logs()] == [digest("hf_Zq8sEcReT"), digest(KEY)]


def test_a_file_whose_name_is_not_a_variables_is_refused(backend, tmp_path):
    backend.start(with_files([sys.executable, "-c", "pass"], files={"../../escape": KEY}))

    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.FAILED, None)
    assert "'../../escape' is not named as a variable" in status.reason
    assert not any(tmp_path.rglob("escape"))


@pytest.fixture
def isolated():
    """A backend running each tenant's workers as its own user, in a folder those users can pass
    through (pytest's own is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="mlsched-uids-"))
    root.chmod(0o711)
    nodes = parse_inventory("1x8xA100", "local")
    yield LocalBackend(root / "state", nodes, root / "ckpt", worker_uids=UIDS)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_tenants_files_are_its_workers_user_and_no_other_tenant_reads_them(isolated):
    mine = dataclasses.replace(tenant_spec(3, 1, [PYTHON, "-c", READ]), secret_files=FILES)
    isolated.start(mine)
    key, _ = files_read(isolated)
    peek = "import os, pathlib; print(pathlib.Path(os.environ['THEIRS']).read_text())"

    isolated.start(tenant_spec(4, 2, [PYTHON, "-c", peek], {"THEIRS": str(key[0])}))

    assert ended(isolated, 2)
    assert (key[1], key[2]) == (digest(KEY), "0o600")
    assert (key[0].stat().st_uid, key[0].parent.stat().st_uid) == (40_003, 40_003)
    assert phases(isolated, 2)[0].exit_code == 1
    assert any("PermissionError" in line for line in output(isolated, 2))

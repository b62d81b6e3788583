"""The job's data volumes on the local backend: each worker is told the volume's folder on the
host and finds it linked at `volumes/<name>` in its own directory; a volume it only reads is
read-only to it; forget removes the link and never the data; an attempt whose volume has no
host folder here, or cannot be made read-only, fails before it runs."""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusters.backends import base, local_volumes
from clusters.backends.base import AttemptSpec
from clusters.backends.local import SHIM, LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, phases, spec
from tests.clusters.test_tenant_users import PYTHON, UIDS, tenant_spec
from tests.processes import ROOT

# Prints where the variable says the volume is, then the file read there.
BY_VARIABLE = """
import os, pathlib
folder = os.environ["MLSCHED_VOLUME_IMAGENET"]
print(folder)
print((pathlib.Path(folder) / "labels.txt").read_text())
"""
# Prints where the link beside the working directory points, then the file read through it.
BY_LINK = """
import os, pathlib
link = pathlib.Path("..", "volumes", "imagenet")
print(os.readlink(link))
print((link / "labels.txt").read_text())
"""


@pytest.fixture
def imagenet(tmp_path) -> dict:
    folder = tmp_path / "datasets" / "imagenet"
    folder.mkdir(parents=True)
    (folder / "labels.txt").write_text("n01440764 tench")
    return {"name": "imagenet", "path": "/data/imagenet", "read_only": True,
            "claim": "imagenet-pvc", "host_path": str(folder)}  # fmt: skip


def with_volumes(command, volumes, **kwargs):
    return dataclasses.replace(spec(command, **kwargs), volumes=tuple(volumes))


def output(backend) -> list[str]:
    return [line.text for line in backend.logs()]


def test_a_worker_reads_the_volume_where_its_variable_says(backend, imagenet):
    backend.start(with_volumes([sys.executable, "-c", BY_VARIABLE], [imagenet]))

    assert ended(backend)
    assert phases(backend)[0].exit_code == 0
    assert output(backend) == [imagenet["host_path"], "n01440764 tench"]


def test_a_worker_finds_the_volume_linked_in_its_own_folder(backend, imagenet):
    backend.start(with_volumes([sys.executable, "-c", BY_LINK], [imagenet]))

    assert ended(backend)
    assert phases(backend)[0].exit_code == 0
    assert output(backend) == [imagenet["host_path"], "n01440764 tench"]


def test_each_worker_of_a_gang_is_told_of_every_volume(backend, imagenet, tmp_path):
    weights = tmp_path / "models"
    weights.mkdir()
    store = {**imagenet, "name": "model-store", "host_path": str(weights), "read_only": False}
    show = "import os; print(os.environ['MLSCHED_VOLUME_MODEL_STORE'])"

    backend.start(with_volumes([sys.executable, "-c", show], [imagenet, store], workers=2))

    assert ended(backend, workers=2)
    assert output(backend) == [str(weights), str(weights)]
    for rank in (0, 1):
        links = backend.worker_dir(1, rank) / "volumes"
        assert sorted(link.name for link in links.iterdir()) == ["imagenet", "model-store"]
        assert links.stat().st_mode & 0o777 == 0o700


def test_forget_removes_the_link_and_keeps_the_data(backend, imagenet):
    backend.start(with_volumes([sys.executable, "-c", BY_LINK], [imagenet]))
    assert ended(backend)
    link = backend.worker_dir(1, 0) / "volumes" / "imagenet"
    assert link.is_symlink()

    backend.forget(1)

    assert not link.parent.exists()
    assert not (backend.state_dir / "1").exists()
    assert Path(imagenet["host_path"], "labels.txt").read_text() == "n01440764 tench"


# An attempt that cannot be given its volumes fails before it runs, as an infrastructure
# failure (as the Kubernetes backend fails one without its claim): the control plane places
# it again where the volume is.


def test_a_volume_without_a_host_folder_fails_the_attempt_before_it_runs(backend, imagenet):
    kubernetes_only = {**imagenet, "host_path": ""}

    backend.start(with_volumes([sys.executable, "-c", "print('ran')"], [kubernetes_only]))

    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.FAILED, None)
    assert (
        status.reason
        == "its data volume 'imagenet' has no host folder: a local cluster cannot mount it"
    )
    assert output(backend) == []


def test_a_host_folder_missing_on_this_host_fails_the_attempt(backend, imagenet, tmp_path):
    elsewhere = {**imagenet, "host_path": str(tmp_path / "not-here")}

    backend.start(with_volumes([sys.executable, "-c", "print('ran')"], [elsewhere]))

    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.FAILED, None)
    assert status.reason == (
        f"its data volume 'imagenet': the host folder '{tmp_path}/not-here' is not on this host"
    )
    assert output(backend) == []


def test_a_volume_not_named_as_a_label_links_nothing_outside(backend, imagenet, tmp_path):
    escaping = {**imagenet, "name": "../../escape"}

    backend.start(with_volumes([sys.executable, "-c", "print('ran')"], [escaping]))

    status = phases(backend)[0]
    assert status.phase == base.FAILED
    assert "'../../escape' is not named as a DNS label" in status.reason
    assert not any(tmp_path.rglob("escape"))


def as_tenants_user(root: Path, script: str) -> tuple[LocalBackend, Path, AttemptSpec]:
    """An agent running tenants' workers as their own users, a volume's folder on its host
    (holding labels.txt) and tenant 3's attempt running the script with that volume."""
    isolated = LocalBackend(
        root / "state", parse_inventory("1x8xA100", "local"), root / "ckpt", worker_uids=UIDS
    )
    folder = root / "datasets" / "imagenet"
    folder.mkdir(parents=True)
    (folder / "labels.txt").write_text("n01440764 tench")
    (root / "datasets").chmod(0o755)
    volume = {"name": "imagenet", "path": "/data", "read_only": True, "claim": "",
              "host_path": str(folder)}  # fmt: skip
    mine = dataclasses.replace(tenant_spec(3, 1, [PYTHON, "-c", script]), volumes=(volume,))
    return isolated, folder, mine


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_worker_running_as_its_tenants_user_reads_through_its_own_link(root):
    isolated, folder, mine = as_tenants_user(root, BY_LINK)

    isolated.start(mine)

    assert ended(isolated)
    assert phases(isolated)[0].exit_code == 0
    assert output(isolated) == [str(folder), "n01440764 tench"]
    links = isolated.worker_dir(1, 0) / "volumes"
    assert (links.stat().st_uid, links.stat().st_mode & 0o777) == (40_003, 0o700)


# A volume the job only reads is read-only to its workers, in a mount namespace of each
# worker's own; the host, and a job that writes to its volume, see the folder as it is.

# Writes a file in the volume's folder and says what became of it.
WRITES = """
import os, pathlib
folder = pathlib.Path(os.environ["MLSCHED_VOLUME_IMAGENET"])
for target in (folder / "written.txt", pathlib.Path("..", "volumes", "imagenet", "linked.txt")):
    try:
        target.write_text("by the job")
        print("wrote", target.name)
    except OSError as error:
        print("refused", target.name, error.strerror)
"""


def test_a_volume_the_job_only_reads_is_read_only_to_its_workers(backend, imagenet):
    backend.start(with_volumes([sys.executable, "-c", WRITES], [imagenet]))

    assert ended(backend)
    assert output(backend) == [
        "refused written.txt Read-only file system",
        "refused linked.txt Read-only file system",
    ]
    Path(imagenet["host_path"], "host.txt").write_text("the host still writes")
    assert sorted(p.name for p in Path(imagenet["host_path"]).iterdir()) == [
        "host.txt", "labels.txt"
    ]  # fmt: skip


def test_a_volume_the_job_writes_to_is_writable(backend, imagenet):
    writable = {**imagenet, "read_only": False}

    backend.start(with_volumes([sys.executable, "-c", WRITES], [writable]))

    assert ended(backend)
    assert output(backend) == ["wrote written.txt", "wrote linked.txt"]
    assert Path(imagenet["host_path"], "written.txt").read_text() == "by the job"


def test_a_read_only_volume_of_a_job_beside_another_writing_it_stays_writable_there(
    backend, imagenet
):
    writer = dataclasses.replace(
        with_volumes([sys.executable, "-c", WRITES], [{**imagenet, "read_only": False}]),
        attempt_id=2,
    )

    backend.start(with_volumes([sys.executable, "-c", WRITES], [imagenet]))
    backend.start(writer)

    assert ended(backend) and ended(backend, attempt=2)
    assert [line.text for line in backend.logs() if line.attempt_id == 2] == [
        "wrote written.txt", "wrote linked.txt"
    ]  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_worker_running_as_its_tenants_user_cannot_write_a_read_only_volume(root):
    isolated, folder, mine = as_tenants_user(root, WRITES)
    folder.chmod(0o777)  # its own permissions would let anyone write

    isolated.start(mine)

    assert ended(isolated)
    assert output(isolated) == [
        "refused written.txt Read-only file system",
        "refused linked.txt Read-only file system",
    ]


# Run by a user who is not root: the namespace is made inside a user namespace of its own.
UNPRIVILEGED = """
import sys, pathlib
from clusters.backends.local_volumes import ReadOnly
folder = pathlib.Path(sys.argv[1])
ReadOnly()([str(folder)])
try:
    (folder / "written.txt").write_text("x")
    print("wrote")
except OSError as error:
    print("refused", error.strerror)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")
def test_a_worker_of_an_agent_that_is_not_root_cannot_write_a_read_only_volume(root):
    folder = root / "imagenet"
    folder.mkdir()
    folder.chmod(0o777)

    done = subprocess.run(
        [PYTHON, "-c", UNPRIVILEGED, str(folder)], cwd=ROOT, user=UIDS.start + 9,
        group=UIDS.start + 9, extra_groups=[], capture_output=True, text=True, timeout=30,
    )  # fmt: skip

    assert (done.returncode, done.stdout) == (0, "refused Read-only file system\n"), done.stderr
    (folder / "host.txt").write_text("the host still writes")


def test_a_worker_whose_volume_cannot_be_made_read_only_fails_before_it_runs(tmp_path):
    worker = tmp_path / "worker"
    worker.mkdir()
    (worker / "spec.json").write_text(json.dumps({
        "command": [sys.executable, "-c", "print('ran')"], "env": {"PATH": "/usr/bin:/bin"},
        "cwd": str(worker / "work"), "max_runtime_s": 30,
        "read_only": [str(tmp_path / "gone")],
    }))  # fmt: skip

    subprocess.run([sys.executable, "-m", SHIM, str(worker)], cwd=ROOT, timeout=30, check=True)

    exit_record = json.loads((worker / "exit.json").read_text())
    assert exit_record["code"] is None
    assert exit_record["refused"].startswith(
        "the worker could not be prepared: its read-only data volumes could not be made read "
        "only here: [Errno 2] No such file or directory"
    )
    assert not (worker / "log").exists() or "ran" not in (worker / "log").read_text()


@contextlib.contextmanager
def tmpfs_below(folder: Path):
    """A file system of its own (a tmpfs) mounted at `cache` inside the folder, as a platform
    mounts a faster disk below a dataset, writable by anyone; unmounted after."""
    cache = folder / "cache"
    cache.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(cache)], check=True)
    try:
        cache.chmod(0o777)
        yield cache
    finally:
        subprocess.run(["umount", str(cache)], check=True)


@pytest.fixture
def mounted_below(imagenet):
    with tmpfs_below(Path(imagenet["host_path"])) as cache:
        yield cache


# Writes in the file system mounted below the volume's folder.
WRITES_BELOW = """
import os, pathlib
target = pathlib.Path(os.environ["MLSCHED_VOLUME_IMAGENET"], "cache", "written.txt")
try:
    target.write_text("by the job")
    print("wrote")
except OSError as error:
    print("refused", error.strerror)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root")
def test_a_file_system_mounted_below_a_read_only_volume_is_read_only_too(
    backend, imagenet, mounted_below
):
    backend.start(with_volumes([sys.executable, "-c", WRITES_BELOW], [imagenet]))

    assert ended(backend)
    assert output(backend) == ["refused Read-only file system"]
    (mounted_below / "host.txt").write_text("the host still writes")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root")
def test_a_file_system_below_a_volume_is_read_only_to_a_worker_of_an_agent_not_root(root):
    folder = root / "imagenet"
    folder.mkdir()
    script = UNPRIVILEGED.replace('folder / "written.txt"', 'folder / "cache" / "written.txt"')

    with tmpfs_below(folder):
        done = subprocess.run(
            [PYTHON, "-c", script, str(folder)], cwd=ROOT, user=UIDS.start + 9,
            group=UIDS.start + 9, extra_groups=[], capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    assert (done.returncode, done.stdout) == (0, "refused Read-only file system\n"), done.stderr


def test_the_mounts_below_a_folder_are_read_as_mountinfo_writes_them(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_bytes(
        b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        b"30 22 0:40 / /data/imagenet rw shared:2 - ext4 /dev/sdb1 rw\n"
        b"31 30 0:41 / /data/imagenet/fast\\040cache rw - tmpfs tmpfs rw\n"
        b"32 30 0:42 / /data/imagenet/fast\\040cache rw - tmpfs tmpfs rw\n"
        b"33 22 0:43 / /data/imagenet-other rw - tmpfs tmpfs rw\n"
        b"34 30 0:44 / /data/imagenet/caf\xc3\xa9 rw - tmpfs tmpfs rw\n"
    )

    below = local_volumes.mounts_below("/data/imagenet", str(mountinfo))

    assert below == ["/data/imagenet/fast cache", "/data/imagenet/café"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root")
def test_a_file_system_below_a_volume_is_read_only_to_a_worker_as_its_tenants_user(root):
    isolated, folder, mine = as_tenants_user(root, WRITES_BELOW)

    with tmpfs_below(folder):
        isolated.start(mine)
        assert ended(isolated)

    assert output(isolated) == ["refused Read-only file system"]


# Makes the folder read-only as a worker's shim does and says whether it could.
MAKES_READ_ONLY = """
import sys
from clusters.backends.local_volumes import ReadOnly
try:
    ReadOnly()([sys.argv[1]])
    print("made read-only")
except OSError as error:
    print("refused", error.strerror, error.filename)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root")
def test_a_file_system_below_a_volume_that_cannot_be_made_read_only_is_named(root):
    folder = root / "imagenet"
    private = folder / "private"
    private.mkdir(parents=True)
    private.chmod(0o700)  # root's: a worker's user cannot reach what is mounted in it

    with tmpfs_below(private) as cache:
        done = subprocess.run(
            [PYTHON, "-c", MAKES_READ_ONLY, str(folder)], cwd=ROOT, user=UIDS.start + 9,
            group=UIDS.start + 9, extra_groups=[], capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    assert done.stdout == f"refused Permission denied {cache}\n", done.stderr

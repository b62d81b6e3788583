"""The job's data volumes on the local backend: each worker is told the volume's folder on the
host and finds it linked at `volumes/<name>` in its own directory; forget removes the link and
never the data; an attempt whose volume has no host folder here fails before it runs."""

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from clusters.backends import base
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, phases, spec
from tests.clusters.test_tenant_users import PYTHON, UIDS, tenant_spec

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


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_worker_running_as_its_tenants_user_reads_through_its_own_link(root):
    isolated = LocalBackend(
        root / "state", parse_inventory("1x8xA100", "local"), root / "ckpt", worker_uids=UIDS
    )
    folder = root / "datasets" / "imagenet"
    folder.mkdir(parents=True)
    (folder / "labels.txt").write_text("n01440764 tench")
    (root / "datasets").chmod(0o755)
    volume = {"name": "imagenet", "path": "/data", "read_only": True, "claim": "",
              "host_path": str(folder)}  # fmt: skip
    mine = dataclasses.replace(tenant_spec(3, 1, [PYTHON, "-c", BY_LINK]), volumes=(volume,))

    isolated.start(mine)

    assert ended(isolated)
    assert phases(isolated)[0].exit_code == 0
    assert output(isolated) == [str(folder), "n01440764 tench"]
    links = isolated.worker_dir(1, 0) / "volumes"
    assert (links.stat().st_uid, links.stat().st_mode & 0o777) == (40_003, 0o700)

import shutil
import tempfile
from pathlib import Path

import pytest

from clusters.backends.local import LocalBackend, parse_inventory
from jobs import cycle
from jobs.models import Family
from tests.factories import JobFactory, NodeFactory


@pytest.fixture
def backend(tmp_path):
    """A local backend with one 8-GPU node, its state under the test's temporary folder."""
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2)


@pytest.fixture
def gang(east):
    """A 2-worker gang placed on two 8-GPU nodes of `east`."""
    for i in range(2):
        NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=8, env={"LR": 0.1})
    cycle.run_cycle()
    return job


@pytest.fixture
def root():
    """A folder the workers' users can pass through to their directories: not under pytest's
    own temporary folder, which is root's alone (mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="mlsched-uids-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)

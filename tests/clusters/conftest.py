import pytest

from clusters.backends.local import LocalBackend, parse_inventory


@pytest.fixture
def backend(tmp_path):
    """A local backend with one 8-GPU node, its state under the test's temporary folder."""
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2)

"""The keys of the topology labels agents report are those a training gang can ask for
(`Job.topology`): an inventory with another is refused, naming `topology` and the key, so
no node carries a domain no job could keep to."""

import pytest

from clusters.models import Node
from tests.clusters.test_agent_api import post

pytestmark = pytest.mark.django_db


def inventory(topology: dict) -> dict:
    return {"nodes": [{"name": "east-0", "cpu_milli": 64000, "memory_mb": 512000,
                       "gpu_type": "A100", "gpu_count": 8, "topology": topology}]}  # fmt: skip


@pytest.mark.parametrize(
    "key", ["Rack", "mlsched.io/rack", "topology.kubernetes.io/zone", "rack-", "x" * 64]
)
def test_it_refuses_a_key_no_job_could_ask_for_naming_topology_and_the_key(agent, key):
    response = post(agent, "east", "inventory", inventory({"zone": "z1", key: "r1"}))

    assert response.status_code == 400
    why = str(response.json()["nodes"]["0"]["topology"])
    assert repr(key) in why and "no key a job could ask for" in why
    assert not Node.objects.exists()


@pytest.mark.parametrize("key", ["rack", "nvlink", "host", "block.v2", "pod_2", "x" * 63])
def test_it_takes_every_key_a_job_can_ask_for(agent, key):
    response = post(agent, "east", "inventory", inventory({key: "r1"}))

    assert response.status_code == 200
    assert Node.objects.get(name="east-0").topology == {key: "r1"}

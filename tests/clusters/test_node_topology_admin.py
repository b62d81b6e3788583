"""A node in the admin: its topology edited by a platform admin, held to the rule the agents'
inventory is (every key one a job could ask for), a bad key refused on the topology field,
naming it, and nothing saved; its fields named as people write them."""

import json
from html import unescape

import pytest

from clusters.models import Node
from tests.factories import NodeFactory
from tests.quotas import test_admin as quota_admin_tests

pytestmark = pytest.mark.django_db

admin_client = quota_admin_tests.admin_client  # a superuser's client


def change_form(node: Node, topology: dict) -> dict:
    """The node's change form as the admin posts it, with `topology` typed in."""
    return {
        "cluster": node.cluster_id, "name": node.name, "cpu_milli": node.cpu_milli,
        "memory_mb": node.memory_mb, "gpu_type": node.gpu_type, "gpu_count": node.gpu_count,
        "schedulable": "on", "healthy": "on", "last_seen_0": "", "last_seen_1": "",
        "topology": json.dumps(topology),
    }  # fmt: skip


def change(admin_client, node: Node, topology: dict):
    return admin_client.post(f"/admin/clusters/node/{node.pk}/change/", change_form(node, topology))


@pytest.mark.parametrize(
    "key",
    [
        "Rack",  # upper case
        "mlsched.io/rack",  # a node label's key, prefix and all
        "rack-",  # not ending in a letter or digit
        "x" * 64,  # too long
    ],
)
def test_a_key_no_job_could_ask_for_is_refused_on_the_topology_field(admin_client, key):
    node = NodeFactory(topology={"rack": "r1"})

    response = change(admin_client, node, {"zone": "z1", key: "r2"})

    assert response.status_code == 200  # the form again, not a redirect to the list
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["topology"]
    assert f"{key!r} is no key a job could ask for" in errors["topology"][0]
    assert f"{key!r} is no key a job could ask for" in unescape(response.text)
    node.refresh_from_db()
    assert node.topology == {"rack": "r1"}  # nothing saved


def test_a_topology_refused_for_its_key_saves_once_the_key_is_one_a_job_could_ask_for(
    admin_client,
):
    node = NodeFactory(topology={})

    refused = change(admin_client, node, {"Rack": "r2"})
    saved = change(admin_client, node, {"rack": "r2", "topology.zone": "z1"})

    assert refused.status_code == 200 and "topology" in refused.context["adminform"].form.errors
    assert saved.status_code == 302
    node.refresh_from_db()
    assert node.topology == {"rack": "r2", "topology.zone": "z1"}


def test_the_node_list_filters_by_gpu_type_as_people_write_it(admin_client):
    NodeFactory(gpu_type="A100")

    page = admin_client.get("/admin/clusters/node/").text

    assert "By GPU type" in page and "By gpu type" not in page

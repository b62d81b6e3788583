"""A cluster's labels and a node's topology typed into the admin as JSON that Python or
PostgreSQL cannot take (nested past the parser's depth, a lone surrogate escaped in a string,
which jsonb refuses and no UTF-8 page can print) are a form error shown back as typed, not a
500; one left empty, or typed as `null`, is none (the column's default), not a NULL the
column refuses."""

import pytest
from django.test import Client

from clusters.models import Cluster, Node
from tests.factories import ClusterFactory, NodeFactory, UserFactory

pytestmark = pytest.mark.django_db

UNSTORABLE = ["[" * 100_000, '{"zone": ' * 50_000, '{"zone": "\\ud800"}', '{"\\udfff": "a"}',
              '"\\ud800"']  # fmt: skip


@pytest.fixture
def platform_admin(db):
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.mark.parametrize("labels", UNSTORABLE)
def test_cluster_labels_no_database_can_store_are_a_form_error(platform_admin, labels):
    form = {"name": "east", "backend": "local", "region": "", "labels": labels,
            "placement_cost": "0"}  # fmt: skip

    page = platform_admin.post("/admin/clusters/cluster/add/", form)

    assert page.status_code == 200  # the form again, with the error
    assert "errorlist" in page.text
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("topology", UNSTORABLE)
def test_node_topology_no_database_can_store_is_a_form_error(platform_admin, topology):
    node = NodeFactory(topology={"rack": "r1"})
    form = {"cluster": node.cluster_id, "name": node.name, "cpu_milli": 1, "memory_mb": 1,
            "gpu_type": "A100", "gpu_count": 8, "schedulable": "on", "healthy": "on",
            "topology": topology}  # fmt: skip

    page = platform_admin.post(f"/admin/clusters/node/{node.pk}/change/", form)

    assert page.status_code == 200
    assert "errorlist" in page.text
    assert Node.objects.get(pk=node.pk).topology == {"rack": "r1"}


def test_labels_with_text_beyond_ascii_are_still_saved(platform_admin):
    form = {"name": "east", "backend": "local", "region": "", "labels": '{"zone": "zürich-é"}',
            "placement_cost": "0"}  # fmt: skip

    page = platform_admin.post("/admin/clusters/cluster/add/", form)

    assert page.status_code == 302
    assert Cluster.objects.get(name="east").labels == {"zone": "zürich-é"}


@pytest.mark.parametrize("typed", ["", "null"])
def test_cluster_labels_left_empty_or_null_are_none_not_a_null_the_column_refuses(
    platform_admin, typed
):
    cluster = ClusterFactory(name="east", labels={"zone": "a"})
    form = {"name": "east", "backend": "local", "region": "", "labels": typed,
            "placement_cost": "0"}  # fmt: skip

    page = platform_admin.post(f"/admin/clusters/cluster/{cluster.pk}/change/", form)

    assert page.status_code == 302
    assert Cluster.objects.get(pk=cluster.pk).labels == {}


@pytest.mark.parametrize("typed", ["", "null"])
def test_node_topology_and_features_left_empty_or_null_are_none(platform_admin, typed):
    node = NodeFactory(topology={"rack": "r1"}, features=["ib"])
    form = {"cluster": node.cluster_id, "name": node.name, "cpu_milli": 1, "memory_mb": 1,
            "gpu_type": "A100", "gpu_count": 8, "schedulable": "on", "healthy": "on",
            "topology": typed, "features": typed}  # fmt: skip

    page = platform_admin.post(f"/admin/clusters/node/{node.pk}/change/", form)

    assert page.status_code == 302
    saved = Node.objects.get(pk=node.pk)
    assert (saved.topology, saved.features) == ({}, [])

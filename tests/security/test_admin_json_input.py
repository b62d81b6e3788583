"""A cluster's labels and a node's topology typed into the admin as JSON that Python or
PostgreSQL cannot take (nested past the parser's depth, a lone surrogate escaped in a string,
which jsonb refuses and no UTF-8 page can print) are a form error shown back as typed, not a
500; one left empty is none (the column's default), not a NULL the column refuses; one typed
as `null` is refused as other JSON of the wrong kind is, and nothing saved."""

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


def cluster_form(**typed) -> dict:
    """Cluster east's change form, `typed` over it."""
    return {"name": "east", "backend": "local", "region": "", "labels": "{}",
            "placement_cost": "0", **typed}  # fmt: skip


def node_form(node, **typed) -> dict:
    """The node's change form, `typed` over it."""
    return {"cluster": node.cluster_id, "name": node.name, "cpu_milli": 1, "memory_mb": 1,
            "gpu_type": "A100", "gpu_count": 8, "schedulable": "on", "healthy": "on",
            "topology": "{}", "features": "[]", **typed}  # fmt: skip


def test_cluster_labels_left_empty_are_none_not_a_null_the_column_refuses(platform_admin):
    cluster = ClusterFactory(name="east", labels={"zone": "a"})

    page = platform_admin.post(f"/admin/clusters/cluster/{cluster.pk}/change/",
                               cluster_form(labels=""))  # fmt: skip

    assert page.status_code == 302
    assert Cluster.objects.get(pk=cluster.pk).labels == {}


def test_node_topology_and_features_left_empty_are_none(platform_admin):
    node = NodeFactory(topology={"rack": "r1"}, features=["ib"])

    page = platform_admin.post(f"/admin/clusters/node/{node.pk}/change/",
                               node_form(node, topology="", features=""))  # fmt: skip

    assert page.status_code == 302
    saved = Node.objects.get(pk=node.pk)
    assert (saved.topology, saved.features) == ({}, [])


@pytest.mark.parametrize("typed", ["null", " null ", "[]", '""'])
def test_cluster_labels_typed_as_null_or_empty_of_another_kind_are_refused_as_the_wrong_kind(
    platform_admin, typed
):
    cluster = ClusterFactory(name="east", labels={"zone": "a"})
    page = f"/admin/clusters/cluster/{cluster.pk}/change/"

    null = platform_admin.post(page, cluster_form(labels=typed, region="west"))
    a_list = platform_admin.post(page, cluster_form(labels='["zone"]', region="west"))

    assert null.status_code == 200
    errors = null.context["adminform"].form.errors
    assert list(errors) == ["labels"]
    assert errors["labels"] == a_list.context["adminform"].form.errors["labels"]
    assert errors["labels"][0].startswith("Give a mapping of strings to strings")
    saved = Cluster.objects.get(pk=cluster.pk)
    assert (saved.labels, saved.region) == ({"zone": "a"}, "")


@pytest.mark.parametrize(
    ("field", "typed", "wrong_kind", "said"),
    [("topology", "null", '["rack"]', "Give a mapping of strings to strings"),
     ("topology", "[]", '["rack"]', "Give a mapping of strings to strings"),
     ("features", "null", '{"ib": true}', "Give a list of names"),
     ("features", "{}", '{"ib": true}', "Give a list of names")],
)  # fmt: skip
def test_node_topology_or_features_typed_as_null_or_empty_of_another_kind_are_refused(
    platform_admin, field, typed, wrong_kind, said
):
    node = NodeFactory(topology={"rack": "r1"}, features=["ib"], gpu_count=4)
    page = f"/admin/clusters/node/{node.pk}/change/"

    null = platform_admin.post(page, node_form(node, **{field: typed}))
    other = platform_admin.post(page, node_form(node, **{field: wrong_kind}))

    assert null.status_code == 200
    errors = null.context["adminform"].form.errors
    assert list(errors) == [field]
    assert errors[field] == other.context["adminform"].form.errors[field]
    assert errors[field][0].startswith(said)
    assert null.context["adminform"].form[field].value() == typed  # shown back as typed
    saved = Node.objects.get(pk=node.pk)
    assert (saved.topology, saved.features, saved.gpu_count) == ({"rack": "r1"}, ["ib"], 4)


def test_labels_and_features_typed_empty_of_their_own_kind_are_saved_empty(platform_admin):
    cluster = ClusterFactory(name="east", labels={"zone": "a"})
    node = NodeFactory(cluster=cluster, features=["ib"])

    platform_admin.post(f"/admin/clusters/cluster/{cluster.pk}/change/",
                        cluster_form(labels="{}"))  # fmt: skip
    platform_admin.post(f"/admin/clusters/node/{node.pk}/change/",
                        node_form(node, features="[]"))  # fmt: skip

    assert Cluster.objects.get(pk=cluster.pk).labels == {}
    assert Node.objects.get(pk=node.pk).features == []

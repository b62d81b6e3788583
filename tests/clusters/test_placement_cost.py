"""A cluster's placement cost (Cluster.placement_cost, Slurm's node Weight), through the real
cycle, the admin and the clusters API: work fills the cheap cluster first and bursts to the
dear one once it is full."""

import pytest
from rest_framework.test import APIClient

from clusters.models import Cluster
from jobs import cycle
from jobs.models import Attempt
from tests.factories import ClusterFactory, JobFactory, NodeFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters(db):
    """An 8-GPU node in a cluster of one's own, and one in a rented cluster that fits a
    1-GPU job better (one GPU free) and is listed first."""
    cloud = ClusterFactory(name="a-cloud", placement_cost=1)
    own = ClusterFactory(name="b-own")
    NodeFactory(cluster=cloud, name="cloud-0", gpu_count=1)
    NodeFactory(cluster=own, name="own-0", gpu_count=8)
    return cloud, own


def cluster_of(job) -> str:
    return Attempt.objects.get(job=job).cluster.name


def test_work_starts_on_the_cheap_cluster_and_bursts_once_it_is_full(two_clusters, alpha):
    jobs = [JobFactory(tenant=alpha, gpus=1) for _ in range(9)]
    cycle.run_cycle()

    assert [cluster_of(job) for job in jobs] == ["b-own"] * 8 + ["a-cloud"]


def test_without_a_cost_the_better_fit_wins(two_clusters, alpha):
    Cluster.objects.update(placement_cost=0)
    job = JobFactory(tenant=alpha, gpus=1)
    cycle.run_cycle()

    assert cluster_of(job) == "a-cloud"


def test_a_platform_admin_sets_it_and_users_read_it(client, two_clusters, alice):
    cloud, own = two_clusters
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    form = {"name": own.name, "backend": own.backend, "region": "", "labels": "{}",
            "placement_cost": "3"}  # fmt: skip

    assert client.post(f"/admin/clusters/cluster/{own.pk}/change/", form).status_code == 302
    own.refresh_from_db()
    assert own.placement_cost == 3
    form["placement_cost"] = "-1"
    page = client.post(f"/admin/clusters/cluster/{own.pk}/change/", form)
    assert page.status_code == 200 and "placement_cost" in page.text
    api = APIClient()
    api.force_authenticate(alice)
    listed = api.get("/api/v1/clusters/").json()["clusters"]
    assert {c["name"]: c["placement_cost"] for c in listed} == {"a-cloud": 1, "b-own": 3}

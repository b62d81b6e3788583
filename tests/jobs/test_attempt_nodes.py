"""Where each attempt of a job ran (Slurm's NodeList): its nodes and the GPUs it held on each,
in the API's job document and on the job page."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import cycle
from jobs.models import Attempt, Family, Job
from jobs.serializers import JobSerializer
from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def east():
    cluster = ClusterFactory(name="east")
    for name in ("gpu-a", "gpu-b"):
        NodeFactory(cluster=cluster, name=name, gpu_type="A100", gpu_count=8)
    NodeFactory(cluster=cluster, name="t4", gpu_type="T4", gpu_count=1, gpu_shareable=True)
    return cluster


def api_job(user, job: Job) -> dict:
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/v1/jobs/{job.pk}/").json()


def test_a_gangs_attempt_names_each_node_and_the_gpus_it_held_there(east, alpha, alice):
    gang = JobFactory(tenant=alpha, owner=alice, workers=2, gpus=8, gpu_types=["A100"])
    cycle.run_cycle()

    (attempt,) = api_job(alice, gang)["attempts"]

    assert attempt["nodes"] == [
        {"node": "gpu-a", "gpus": list(range(8)), "gpu_milli": 1000},
        {"node": "gpu-b", "gpus": list(range(8)), "gpu_milli": 1000},
    ]


def test_a_gpu_share_and_a_cpu_only_job_say_what_they_held(east, alpha, alice):
    share = JobFactory(tenant=alpha, owner=alice, family=Family.EVALUATION, gpus=0,
                       gpu_milli=250, gpu_types=["T4"])  # fmt: skip
    cpu_only = JobFactory(tenant=alpha, owner=alice, gpus=0, cluster_selector={})
    cycle.run_cycle()

    assert api_job(alice, share)["attempts"][0]["nodes"] == [
        {"node": "t4", "gpus": [0], "gpu_milli": 250}
    ]
    (where,) = api_job(alice, cpu_only)["attempts"][0]["nodes"]
    assert where["gpus"] == [] and "gpu_milli" not in where


def test_the_job_page_says_where_each_attempt_ran(client, east, alpha, alice):
    share = JobFactory(tenant=alpha, owner=alice, family=Family.EVALUATION, gpus=0,
                       gpu_milli=250, gpu_types=["T4"])  # fmt: skip
    gang = JobFactory(tenant=alpha, owner=alice, workers=2, gpus=2, gpu_types=["A100"])
    cycle.run_cycle()
    client.force_login(alice)

    assert "<td>t4 (GPU 0, 250m)</td>" in client.get(f"/jobs/{share.pk}/").text
    # Both workers on one node (fewest nodes): its GPUs together.
    where = Attempt.objects.get(job=gang).where()
    assert re.fullmatch(r"gpu-[ab] \(GPUs 0, 1, 2, 3\)", where)
    assert f"<td>{where}</td>" in client.get(f"/jobs/{gang.pk}/").text


def test_the_job_list_reads_the_nodes_of_every_attempt_in_a_few_queries(east, alpha, alice):
    def listing() -> int:
        client = APIClient()
        client.force_authenticate(alice)
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/jobs/").status_code == 200
        return len(queries)

    JobFactory(tenant=alpha, owner=alice, gpus=1)
    cycle.run_cycle()
    one = listing()
    for _ in range(5):
        JobFactory(tenant=alpha, owner=alice, workers=2, gpus=1)
    cycle.run_cycle()

    assert listing() == one


def test_a_job_read_without_its_nodes_reads_them_in_two_queries(east, alpha, alice):
    # An answer built from a job read alone (a change of its priority, say), not the listing's.
    gang = JobFactory(tenant=alpha, owner=alice, workers=2, gpus=8, gpu_types=["A100"])
    cycle.run_cycle()
    job = Job.objects.get(pk=gang.pk)

    with CaptureQueriesContext(connection) as queries:
        attempts = JobSerializer(job).data["attempts"]

    assert [node["node"] for node in attempts[0]["nodes"]] == ["gpu-a", "gpu-b"]
    tables = ("clusters_allocation", "clusters_node")
    assert len([q for q in queries if any(t in q["sql"] for t in tables)]) == 2

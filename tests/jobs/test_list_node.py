"""The jobs that ran on a node (Slurm's squeue -w, sacct -N): `?node=NAME` on the job lists
(the API's, the portal's, the CLI's `list --node`), as their attempts' allocations record it;
the clusters page links each node to them."""

import pytest

from jobs import cycle
from jobs.models import Job
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_list_filters import api_ids, portal_ids

pytestmark = pytest.mark.django_db


@pytest.fixture
def placed(alpha, alice, east):
    """Two 8-GPU jobs placed, one on each node of east; a third left queued; and a node of the
    same name in another cluster, which ran nothing."""
    for name in ("east-0", "east-1"):
        NodeFactory(cluster=east, name=name, gpu_count=8)
    jobs = [JobFactory(tenant=alpha, owner=alice, gpus=8) for _ in range(3)]
    cycle.run_cycle()
    on = {Job.objects.get(pk=j.pk).attempts.get().nodes()[0]["node"]: j
          for j in jobs if Job.objects.get(pk=j.pk).state == State.SCHEDULED}  # fmt: skip
    NodeFactory(cluster=ClusterFactory(name="west"), name="west-0", gpu_count=8)
    return on


@pytest.mark.parametrize("read", [api_ids, portal_ids])
def test_node_keeps_the_jobs_that_ran_there(alice, placed, read):
    assert read(alice, "node=east-0") == [placed["east-0"].pk]
    assert read(alice, "node=west-0") == []


def test_a_name_no_node_has_is_a_400_naming_node(alice, placed):
    answer = api(alice).get("/api/v1/jobs/?node=east-9")

    assert answer.status_code == 400
    assert list(answer.json()) == ["node"]
    assert "No cluster has a node of this name." in str(answer.json()["node"])


def test_the_cli_lists_them(mlsched, placed):  # noqa: F811
    status, out, err = mlsched("list", "--node", "east-1")

    assert status == 0, err
    assert [int(line.split()[0]) for line in out.splitlines()] == [placed["east-1"].pk]


def test_the_clusters_page_links_each_node_to_its_jobs(client, alice, placed):
    client.force_login(alice)

    page = client.get("/clusters/").text

    assert '<a href="/?node=east-0" title="Jobs that ran on it">east-0</a>' in page

"""A training gang submitted with a topology domain (`topology`: a node label's key) starts on
nodes sharing one value of it, or waits saying why; the API refuses it elsewhere, naming the
field, and a resubmission keeps it."""

import pytest

from clusters.models import Allocation
from jobs import cycle
from jobs.models import Job
from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_api import client_for, normal_priority, submit  # noqa: F401

pytestmark = pytest.mark.django_db
GANG = {"gpus": 8, "workers": 2, "cpu_milli": 1000, "memory_mb": 1000}


@pytest.fixture
def racks():
    """n1 alone in rack r1, n2 and n3 in r2; n3 busy."""
    cluster = ClusterFactory()
    for name, rack in (("n1", "r1"), ("n2", "r2"), ("n3", "r2")):
        NodeFactory(cluster=cluster, name=name, topology={"rack": rack, "zone": "z1"})


def placed_on(job_id: int) -> list[str]:
    used = Allocation.objects.filter(attempt__job_id=job_id).values_list("node__name", flat=True)
    return sorted(set(used))


@pytest.mark.usefixtures("racks")
def test_a_gang_asking_for_one_rack_starts_in_one(alice):
    answer = submit(alice, topology="rack", **GANG)

    assert answer.status_code == 201 and answer.json()["topology"] == "rack"
    cycle.run_cycle()
    assert placed_on(answer.json()["id"]) == ["n2", "n3"]


@pytest.mark.usefixtures("racks")
def test_one_that_no_rack_could_hold_waits_saying_why(alice):
    answer = submit(alice, topology="rack", **{**GANG, "workers": 3})

    cycle.run_cycle()

    job = Job.objects.get(pk=answer.json()["id"])
    assert (job.state, job.pending_reason) == ("queued", "topology_too_small")


@pytest.mark.parametrize(
    ("changes", "why"),
    [({"topology": "Rack"}, "A topology label's key"),
     ({"topology": "rack!"}, "A topology label's key"),
     ({"topology": "x" * 64}, "no more than 63"),
     ({"topology": "rack", "family": "evaluation", "workers": 1}, "Only a training gang")],
)  # fmt: skip
def test_the_api_refuses_a_bad_one_naming_topology(alice, changes, why):
    answer = submit(alice, **changes)

    assert answer.status_code == 400
    assert list(answer.json()) == ["topology"]
    assert why in answer.json()["topology"][0]
    assert not Job.objects.exists()


def test_a_resubmission_keeps_it(alice):
    job = Job.objects.get(pk=submit(alice, topology="nvlink", **GANG).json()["id"])
    Job.objects.filter(pk=job.pk).update(state="canceled")

    answer = client_for(alice).post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, format="json")

    assert answer.status_code == 201 and answer.json()["topology"] == "nvlink"

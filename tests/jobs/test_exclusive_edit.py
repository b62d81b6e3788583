"""Whether a queued job takes its nodes to itself, changed with where it may run: the
constraints change (POST /api/v1/jobs/<id>/constraints/), the job page's form and the CLI's
`constrain --exclusive | --shared`; refused, on `exclusive`, for a request no node could hold
whole."""

import pytest

from jobs import cycle
from jobs.models import Job, JobEvent
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_constraints_edit import change
from tests.jobs.test_min_workers_edit import portal_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def normal(db):
    return PriorityClassFactory(name="normal", value=0)


def exclusive(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).exclusive


def test_a_job_made_exclusive_waits_for_a_node_to_itself_and_says_so(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000)
    Job.objects.filter(pk=job.pk).update(held="alice")
    cycle.run_cycle()  # the CPU-only job starts on the node

    answer = change(alice, job, {"exclusive": True})
    Job.objects.filter(pk=job.pk).update(held="")
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert answer.json()["exclusive"] is True
    waiting = Job.objects.get(pk=job.pk)
    assert waiting.state == State.QUEUED
    assert waiting.pending_reason in {"nodes_in_use", "head_of_line"}
    assert JobEvent.objects.filter(
        job=job, reason="may run on any GPU type of any cluster, each worker on a node to "
        "itself by alice"
    ).exists()  # fmt: skip


def test_a_job_shared_again_starts_beside_other_work(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED

    answer = change(alice, job, {"exclusive": False})
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


@pytest.mark.parametrize(
    ("asks", "said"),
    [({"family": "evaluation", "gpus": 0, "gpu_milli": 500}, "ask whole GPUs, or none"),
     ({"gpus": 3}, "No node has exactly 3 GPUs")],
    ids=["a share", "no node of that many"],
)  # fmt: skip
def test_it_is_refused_on_exclusive_for_a_request_no_node_holds_whole(
    alice, alpha, east, asks, said
):
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, **asks)

    answer = change(alice, job, {"exclusive": True})

    assert answer.status_code == 400
    assert said in answer.json()["exclusive"][0]
    assert not exclusive(job)


def test_the_job_page_form_sets_and_clears_it(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=8)
    portal = portal_of(alice)
    url = f"/jobs/{job.pk}/constraints/"

    set_on = portal.post(url, {"gpu_types": "", "exclusive": "true"})
    page = portal.get(f"/jobs/{job.pk}/").text
    cleared = portal.post(url, {"gpu_types": ""})

    assert set_on.status_code == 302
    form = page.split('<form id="constraints-form"')[1].split("</form>")[0]
    assert (
        'id="constraints-exclusive" type="checkbox" name="exclusive" value="true" checked' in form
    )
    assert cleared.status_code == 302
    assert not exclusive(job)


def test_the_cli_constrains_it_both_ways(mlsched, alice, alpha, east):  # noqa: F811
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=8)

    status, out, err = mlsched("constrain", str(job.pk), "--exclusive")
    made = exclusive(job)
    shared = mlsched("constrain", str(job.pk), "--shared")

    assert (status, out) == (
        0, "may run on any GPU type of any cluster, each worker on a node to itself (1 job)\n"
    ), err  # fmt: skip
    assert made
    assert shared[1] == "may run on any GPU type of any cluster (1 job)\n"
    assert not exclusive(job)

"""Changing what each worker of a queued job asks for (Slurm's `scontrol update` of a pending
job's NumCPUs, MinMemoryNode and Gres): actions.change_request, POST
/api/v1/jobs/<id>/request/, the job page's form and the CLI's `resize`. The job keeps its place
in the queue; a job placed keeps what it started with."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from clusters.models import Allocation
from jobs import actions, cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Family, Job, JobEvent
from jobs.placement import PLACED, place
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit import batch
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_lifecycle_races import high_job, low_job, n8_a100_node
from tests.jobs.test_min_workers_edit import portal_of

pytestmark = pytest.mark.django_db


def change(user, job, body) -> object:
    return api(user).post(f"/api/v1/jobs/{job.pk}/request/", body, format="json")


def asks(job: Job) -> tuple:
    row = Job.objects.get(pk=job.pk)
    return (row.cpu_milli, row.memory_mb, row.gpus, row.gpu_milli)


def test_a_job_asking_less_starts_where_it_fits_and_keeps_its_submit_time(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=4)
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, memory_mb=4096)
    Job.objects.filter(pk=job.pk).update(created=timezone.now() - timedelta(hours=2))
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED  # no node has 8 GPUs

    answer = change(alice, job, {"gpus": 4})
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert (answer.json()["gpus"], answer.json()["changed"]) == (4, 1)
    placed = Job.objects.get(pk=job.pk)
    assert placed.state == State.SCHEDULED
    assert timezone.now() - placed.created > timedelta(hours=1)  # its place, its wait kept
    assert JobEvent.objects.filter(
        job=job, reason="request per worker set to 2000m CPU, 4096 MiB, 4 GPUs by alice"
    ).exists()


def a_preemptor() -> Job:
    """A queued job that evicted lower-priority work for itself and holds a claim on its room."""
    n8_a100_node()
    low_job()
    cycle.run_cycle()
    high = high_job()
    cycle.run_cycle()
    assert Job.objects.get(pk=high.pk).preempting_until > timezone.now()
    return high


def test_a_preemptor_asking_otherwise_gives_up_its_claim_on_the_room(alice):
    high = a_preemptor()

    actions.change_request(high, {"gpus": 4}, "alice")

    assert Job.objects.get(pk=high.pk).preempting_until is None


def test_a_share_replaces_whole_gpus_when_both_are_given(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, family=Family.EVALUATION, gpus=1)

    answer = change(alice, job, {"gpus": 0, "gpu_milli": 500, "memory_mb": 2048})

    assert answer.status_code == 200, answer.content
    assert asks(job)[1:] == (2048, 0, 500)


def test_a_batchs_queued_shards_change_and_its_placed_ones_keep_theirs(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    first = batch(alice, alpha, PriorityClassFactory(name="normal"), shards=5, limit=2)
    cycle.run_cycle()
    shards = Job.objects.filter(pk__gte=first.pk, tenant=alpha)

    answer = change(alice, first, {"cpu_milli": 500})

    assert answer.status_code == 200 and answer.json()["changed"] == 3
    cpus = {(s.state == State.QUEUED, s.cpu_milli) for s in shards.all()}
    assert cpus == {(True, 500), (False, first.cpu_milli)}


def test_a_placed_job_keeps_what_it_started_with(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1)
    cycle.run_cycle()

    answer = change(alice, job, {"gpus": 2})

    assert answer.status_code == 409
    assert "a job placed keeps what it started with" in answer.json()["detail"]
    assert asks(job)[2] == 1


@pytest.mark.parametrize(
    "body, field, said",
    [
        ({"gpus": 0, "gpu_milli": 500}, "gpu_milli", "Training gets whole, exclusive GPUs"),
        ({"gpus": 65}, "gpus", "less than or equal to 64"),
        ({"cpu_milli": 0}, "cpu_milli", "greater than or equal to 1"),
        ({"memory_mb": "lots"}, "memory_mb", "A valid integer is required"),
        ({}, "non_field_errors", "Give cpu_milli, memory_mb, gpus or gpu_milli"),
    ],
)
def test_a_request_it_may_not_make_is_a_400_naming_the_field_and_changes_nothing(
    alice, alpha, body, field, said
):
    job = JobFactory(tenant=alpha, owner=alice, gpus=1)
    before = asks(job)

    answer = change(alice, job, body)

    assert answer.status_code == 400
    assert said in answer.json()[field][0]
    assert asks(job) == before


def test_whole_gpus_and_a_share_at_once_is_a_400_on_the_share(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, family=Family.EVALUATION, gpus=1)

    answer = change(alice, job, {"gpu_milli": 250})

    assert answer.status_code == 400
    assert answer.json() == {"gpu_milli": ["Ask for whole GPUs or for a share of one, not both."]}


def test_another_team_finds_no_job(alice, alpha, charlie):
    job = JobFactory(tenant=alpha, owner=alice, gpus=1)

    assert change(charlie, job, {"gpus": 2}).status_code == 404
    assert asks(job)[2] == 1


def test_the_job_page_changes_it_and_says_a_refusal_on_the_field(alice, bob, alpha):
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, cpu_milli=1000)
    portal = portal_of(bob)

    page = portal.get(f"/jobs/{job.pk}/").text
    done = portal.post(f"/jobs/{job.pk}/request/", {"gpus": "2", "cpu_milli": "", "memory_mb": ""})
    refused = portal.post(f"/jobs/{job.pk}/request/", {"gpu_milli": "300"})

    assert f'<form id="request-form" method="post" action="/jobs/{job.pk}/request/">' in page
    assert 'name="gpus" type="number" min="0" max="64" value="1"' in page
    assert done.status_code == 302 and asks(job)[0::2] == (1000, 2)
    assert refused.status_code == 400
    assert 'aria-invalid="true"' in refused.text.split('id="request-gpu-milli"')[1][:200]
    assert asks(job)[2:] == (2, 0)


def test_the_cli_resizes_and_says_what_each_worker_asks(mlsched, alice, alpha):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, cpu_milli=1000, memory_mb=4096)

    status, out, err = mlsched("resize", str(job.pk), "--gpus", "4", "--cpu-milli", "8000")

    assert (status, out) == (0, "each worker asks for 8 cores, 4096 MiB and 4 GPUs (1 job)\n"), err
    assert asks(job) == (8000, 4096, 4, 0)


def test_a_request_changed_after_the_snapshot_does_not_start_on_the_old_ones_room(
    alice, alpha, east
):
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=2)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes if o.status == PLACED]
    assert [len(o.workers[0].gpu_indices) for o in placed] == [2]  # decided for 2 GPUs

    actions.change_request(job, {"gpus": 4}, "alice")

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED
    cycle.run_cycle()  # decided again on what it asks now
    assert Allocation.objects.filter(attempt__job=job).count() == 4

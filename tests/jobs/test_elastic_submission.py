"""Elastic training gangs at the API (torchrun's --nnodes=MIN:MAX): a submission's
`min_workers`, checked and stored; the job's answer with it and each attempt's `workers`, the
size it started with; a resubmission that keeps it; a test-only submission that takes it."""

import pytest

from jobs import cycle
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, NodeFactory
from tests.jobs.test_batch_cancel import api

pytestmark = pytest.mark.django_db

# A gang of four 8-GPU workers: one A100 node each.
BODY = {"tenant": "alpha", "name": "llama", "family": Family.TRAINING, "image": "pytorch:2",
        "command": ["torchrun", "train.py"], "cpu_milli": 8000, "memory_mb": 32_000,
        "gpus": 8, "workers": 4, "max_runtime_s": 3600}  # fmt: skip


def submit(user, path: str = "/api/v1/jobs/", **changes):
    return api(user).post(path, {**BODY, **changes}, format="json")


def written() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


# -- submit -------------------------------------------------------------------------------------


def test_a_training_job_submitted_with_min_workers_stores_and_answers_it(alice, normal_priority):
    response = submit(alice, min_workers=2)

    assert response.status_code == 201, response.content
    assert (response.json()["workers"], response.json()["min_workers"]) == (4, 2)
    assert Job.objects.get().min_workers == 2


def test_a_job_submitted_without_min_workers_is_rigid(alice, normal_priority):
    response = submit(alice)

    assert response.json()["min_workers"] is None
    assert Job.objects.get().min_workers is None


def test_min_workers_null_is_rigid_as_left_out(alice, normal_priority):
    response = submit(alice, min_workers=None)

    assert response.status_code == 201
    assert Job.objects.get().min_workers is None


def test_min_workers_equal_to_workers_is_stored_as_rigid(alice, normal_priority):
    response = submit(alice, min_workers=4)

    assert response.status_code == 201
    assert response.json()["min_workers"] is None
    assert Job.objects.get().min_workers is None


def test_a_one_worker_gang_may_be_elastic_from_one_and_is_then_rigid(alice, normal_priority):
    response = submit(alice, workers=1, min_workers=1)

    assert response.status_code == 201
    assert Job.objects.get().min_workers is None


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"min_workers": 0}, "At least 1"),
        ({"min_workers": -3}, "At least 1"),
        ({"min_workers": 5}, "5 is more than its 4 workers"),
        ({"min_workers": 2000}, "At most 1024"),
        ({"min_workers": "two"}, "valid integer"),
        ({"min_workers": 1.5}, "valid integer"),
        ({"min_workers": True}, "valid integer"),
        ({"min_workers": [2]}, "valid integer"),
        ({"family": Family.EVALUATION, "workers": 1, "min_workers": 1}, "Only a training job"),
        ({"family": Family.BATCH_INFERENCE, "workers": 1, "gpus": 1, "shards": 4,
          "min_workers": 1}, "Only a training job"),
    ],
)  # fmt: skip
def test_a_refused_min_workers_is_a_400_naming_it_and_writes_nothing(
    alice, normal_priority, changes, says
):
    before = written()

    response = submit(alice, **changes)

    assert response.status_code == 400
    assert list(response.json()) == ["min_workers"]
    assert says in " ".join(response.json()["min_workers"])
    assert written() == before


# -- the job's answer ---------------------------------------------------------------------------


def test_each_attempt_in_the_jobs_detail_says_the_workers_it_started_with(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, workers=4, min_workers=2, gpus=8)
    AttemptFactory(job=job, number=1, workers=4, outcome=Attempt.Outcome.PREEMPTED)
    AttemptFactory(job=job, number=2, workers=3)

    answer = api(alice).get(f"/api/v1/jobs/{job.pk}/").json()

    assert (answer["workers"], answer["min_workers"]) == (4, 2)
    assert [(a["number"], a["workers"]) for a in answer["attempts"]] == [(1, 4), (2, 3)]


def test_the_job_list_gives_each_jobs_min_workers(alpha, alice):
    elastic = JobFactory(tenant=alpha, owner=alice, workers=4, min_workers=2)
    rigid = JobFactory(tenant=alpha, owner=alice, workers=4)

    listed = api(alice).get("/api/v1/jobs/").json()["jobs"]

    assert {job["id"]: job["min_workers"] for job in listed} == {elastic.pk: 2, rigid.pk: None}


def test_an_elastic_gang_submitted_through_the_api_answers_the_size_its_attempt_started_with(
    alice, normal_priority
):
    NodeFactory.create_batch(3, cluster=ClusterFactory(), gpu_type="A100", gpu_count=8)
    pk = submit(alice, min_workers=2).json()["id"]

    cycle.run_cycle()

    answer = api(alice).get(f"/api/v1/jobs/{pk}/").json()
    assert answer["state"] == State.SCHEDULED
    assert [a["workers"] for a in answer["attempts"]] == [3]


# -- resubmission -------------------------------------------------------------------------------


@pytest.mark.parametrize("least", [2, None])
def test_a_resubmission_keeps_the_jobs_min_workers(alpha, alice, normal_priority, least):
    ended = JobFactory(tenant=alpha, owner=alice, priority_class=normal_priority, workers=4,
                       min_workers=least, state=State.FAILED)  # fmt: skip

    response = api(alice).post(f"/api/v1/jobs/{ended.pk}/resubmit/")

    assert response.status_code == 201, response.content
    again = Job.objects.get(pk=response.json()["id"])
    assert (again.workers, again.min_workers, response.json()["min_workers"]) == (4, least, least)


# -- test-only submission -----------------------------------------------------------------------


def test_a_test_only_submission_takes_min_workers_and_places_the_gang_smaller(
    alice, normal_priority
):
    NodeFactory.create_batch(3, cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=8)

    elastic = submit(alice, "/api/v1/jobs/test/", min_workers=2)
    rigid = submit(alice, "/api/v1/jobs/test/")

    assert elastic.status_code == 200, elastic.content
    (placed,) = elastic.json()["jobs"]
    assert (placed["status"], placed["nodes"], elastic.json()["starts_now"]) == ("placed", 3, True)
    assert placed["workers"] == 3
    assert rigid.json()["jobs"][0]["status"] != "placed"
    assert written() == (0, 0)


def test_a_test_only_submission_refuses_min_workers_as_a_submission_does(alice, normal_priority):
    response = submit(alice, "/api/v1/jobs/test/", min_workers=6)

    assert response.status_code == 400
    assert list(response.json()) == ["min_workers"]

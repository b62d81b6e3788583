"""A job that lists several GPU types may wait for its first alone for a while
(`first_type_wait_s`, from when it may run) before taking the others: a job twice as fast on
H100s is worth a short wait rather than ten hours on A100s. Through the real cycle, the
submission, the portal and the CLI."""

# ruff: noqa: F811 (the CLI tests' fixture, imported, is a test's argument)

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import cycle
from jobs.cli import describe
from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_notify_start import FORM, SPEC

pytestmark = pytest.mark.django_db
TYPES = ["H100", "A100"]


@pytest.fixture
def fleet(east):
    """An H100 node and an A100 node."""
    NodeFactory(cluster=east, name="h100-0", gpu_type="H100")
    NodeFactory(cluster=east, name="a100-0", gpu_type="A100")


def placed_on(job: Job) -> set[str]:
    return {a.node.gpu_type for a in job.attempts.get().allocations.all()}


def test_it_takes_its_first_type_when_that_is_free(alpha, alice, fleet):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["A100", "H100"],
                     first_type_wait_s=600)  # fmt: skip

    cycle.run_cycle()

    assert placed_on(Job.objects.get(pk=job.pk)) == {"A100"}


def test_it_waits_for_its_first_type_then_takes_another(alpha, alice, fleet):
    hog = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["H100"], priority=10)
    cycle.run_cycle()
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=TYPES, first_type_wait_s=600)

    cycle.run_cycle()
    waiting = Job.objects.get(pk=job.pk)
    Job.objects.filter(pk=job.pk).update(eligible_at=timezone.now() - timedelta(seconds=601))
    cycle.run_cycle()

    assert Job.objects.get(pk=hog.pk).state == State.SCHEDULED
    assert waiting.state == State.QUEUED  # holding the H100 node for itself, as head of line
    assert "8 GPUs (H100)," in waiting.pending_message  # its first type alone
    assert placed_on(Job.objects.get(pk=job.pk)) == {"A100"}


def test_without_a_wait_it_takes_any_of_its_types_at_once(alpha, alice, fleet):
    JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["H100"], priority=10)
    cycle.run_cycle()
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=TYPES)

    cycle.run_cycle()

    assert placed_on(Job.objects.get(pk=job.pk)) == {"A100"}


def test_a_test_only_submission_says_it_would_wait_for_its_first_type(alpha, alice, fleet):
    JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["H100"], priority=10)
    cycle.run_cycle()
    PriorityClassFactory(name="normal")
    spec = {**SPEC, "gpus": 8, "gpu_types": TYPES, "first_type_wait_s": 600}
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.post("/api/v1/jobs/test/", spec, format="json").json()

    assert answer["starts_now"] is False
    assert answer["jobs"][0]["status"] == "reserved"
    assert "8 GPUs (H100)," in answer["jobs"][0]["pending_message"]


def test_the_api_takes_it_gives_it_back_and_refuses_it_without_two_types(alpha, alice):
    PriorityClassFactory(name="normal")
    client = APIClient()
    client.force_authenticate(alice)
    body = {**SPEC, "gpu_types": TYPES, "first_type_wait_s": 1800}

    job = client.post("/api/v1/jobs/", body, format="json").json()
    spec = client.get(f"/api/v1/jobs/{job['id']}/spec/").json()
    one_type = client.post("/api/v1/jobs/", {**body, "gpu_types": ["H100"]}, format="json")
    no_gpu = client.post("/api/v1/jobs/", {**body, "gpus": 0}, format="json")
    too_long = client.post("/api/v1/jobs/", {**body, "first_type_wait_s": 8 * 86400},
                           format="json")  # fmt: skip

    assert job["first_type_wait_s"] == spec["first_type_wait_s"] == 1800
    (why,) = one_type.json()["first_type_wait_s"]
    assert why == "It waits for the first of its GPU types before the others: list two or more."
    assert no_gpu.json() == {"first_type_wait_s": [
        "A job without GPUs has no GPU type to wait for."]}  # fmt: skip
    assert too_long.status_code == 400 and list(too_long.json()) == ["first_type_wait_s"]
    assert Job.objects.count() == 1


def test_the_submit_form_takes_it_and_the_job_page_says_it(alpha, alice, client):
    PriorityClassFactory(name="normal")
    client.force_login(alice)
    client.post("/jobs/new/", {**FORM, "gpu_types": "h100, a100", "first_type_wait_s": "1800"})
    job = Job.objects.get(name="x")
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert job.first_type_wait_s == 1800
    assert ('<span id="first-type-wait">(h100 alone for its first 30 min free to run, then '
            "any)</span>") in page  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_it_and_its_status_says_it(cli):
    spec = {**SPEC, "gpu_types": TYPES}

    done = cli("submit", "-", "--first-type-wait", "2h", stdin=json.dumps(spec))
    job = Job.objects.get(name="told")
    described = json.loads(cli("status", str(job.pk)).stdout)

    assert done.returncode == 0, done.stderr
    assert job.first_type_wait_s == 7200
    assert dict(describe.fields(described))["GPU types"] == (
        "H100, A100 (H100 alone for its first 2 h free to run, then any)"
    )


def test_a_first_type_no_node_has_is_not_waited_for(alpha, alice, fleet):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["B200", "A100"],
                     first_type_wait_s=600)  # fmt: skip

    cycle.run_cycle()

    assert placed_on(Job.objects.get(pk=job.pk)) == {"A100"}


# -- changed while it waits (the constraints change) -------------------------------------------


def change(user, job, body):
    client = APIClient()
    client.force_authenticate(user)
    return client.post(f"/api/v1/jobs/{job.pk}/constraints/", body, format="json")


def test_a_job_waiting_for_its_first_type_takes_another_once_its_wait_is_dropped(
    alpha, alice, fleet
):
    JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["H100"], priority=10)
    cycle.run_cycle()
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=TYPES, first_type_wait_s=3600)
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED

    answer = change(alice, job, {"first_type_wait_s": None})
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert (answer.json()["first_type_wait_s"], answer.json()["changed"]) == (None, 1)
    assert placed_on(Job.objects.get(pk=job.pk)) == {"A100"}
    assert job.events.filter(
        reason="may run on GPU types H100, A100 of any cluster by alice"
    ).exists()


def test_a_wait_set_while_it_waits_keeps_it_to_its_first_type(alpha, alice, fleet):
    JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["H100"], priority=10)
    cycle.run_cycle()
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["A100"], held="user")

    answer = change(alice, job, {"gpu_types": TYPES, "first_type_wait_s": 1800})
    Job.objects.filter(pk=job.pk).update(held="", eligible_at=timezone.now())
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert job.events.filter(
        reason="may run on GPU types H100, A100 (H100 alone for its first "
        "30 min free to run, then any) of any cluster by alice"
    ).exists()
    waiting = Job.objects.get(pk=job.pk)
    assert waiting.state == State.QUEUED and "8 GPUs (H100)," in waiting.pending_message


def test_narrowed_to_one_type_it_must_drop_its_wait_too(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=TYPES, first_type_wait_s=600)

    kept = change(alice, job, {"gpu_types": ["A100"]})
    one = change(alice, JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["A100"]),
                 {"first_type_wait_s": 600})  # fmt: skip
    dropped = change(alice, job, {"gpu_types": ["A100"], "first_type_wait_s": None})

    assert kept.status_code == 400
    assert kept.json() == {"first_type_wait_s": [
        "It waits for the first of its GPU types before the others: list two or more. It keeps "
        "the wait it has: give first_type_wait_s null to drop it."]}  # fmt: skip
    assert one.json() == {
        "first_type_wait_s": ["It waits for the first of its GPU types before the others: list "
                              "two or more."]}  # fmt: skip
    assert dropped.status_code == 200, dropped.content
    row = Job.objects.get(pk=job.pk)
    assert (row.gpu_types, row.first_type_wait_s) == (["A100"], None)


def test_the_job_page_and_the_cli_change_it(alpha, alice, mlsched):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=TYPES)
    portal = Client()
    portal.force_login(alice)

    form = portal.get(f"/jobs/{job.pk}/").content.decode().split('id="constraints-form"')[1]
    done = portal.post(f"/jobs/{job.pk}/constraints/", {"gpu_types": "H100, A100",
                       "first_type_wait_s": "900"})  # fmt: skip
    set_by_page = Job.objects.get(pk=job.pk).first_type_wait_s
    status, out, err = mlsched("constrain", str(job.pk), "--first-type-wait", "2h")
    dropped = mlsched("constrain", str(job.pk), "--no-first-type-wait")

    assert 'name="first_type_wait_s" value=""' in form.split("</form>")[0]
    assert (done.status_code, set_by_page) == (302, 900)
    assert (status, out) == (0, "may run on GPU types H100, A100 (H100 alone for its first 2 h "
                                "free to run, then any) of any cluster (1 job)\n"), err  # fmt: skip
    assert dropped[:2] == (0, "may run on GPU types H100, A100 of any cluster (1 job)\n")
    assert Job.objects.get(pk=job.pk).first_type_wait_s is None

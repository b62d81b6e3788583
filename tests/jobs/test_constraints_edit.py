"""Where a queued job may run, changed (Slurm's `scontrol update` of a pending job's Features
and Partition): actions.change_constraints, POST /api/v1/jobs/<id>/constraints/, the job
page's form and the CLI's `constrain`. A job waiting for a GPU type no node has free starts
once it takes another; it keeps its place; a job placed keeps where it runs."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from jobs import actions, cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Job, JobEvent
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import Membership
from tests.factories import (
    ClusterFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit import batch
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_min_workers_edit import portal_of
from tests.jobs.test_request_edit import a_preemptor

pytestmark = pytest.mark.django_db


def change(user, job, body) -> object:
    return api(user).post(f"/api/v1/jobs/{job.pk}/constraints/", body, format="json")


def where(job: Job) -> tuple:
    row = Job.objects.get(pk=job.pk)
    return row.gpu_types, row.cluster_selector


def test_a_job_that_takes_another_gpu_type_starts_on_it_and_keeps_its_place(alice, alpha, east):
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, gpu_types=["H100"])
    Job.objects.filter(pk=job.pk).update(created=timezone.now() - timedelta(hours=2))
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED  # no H100 here

    answer = change(alice, job, {"gpu_types": ["H100", "A100"]})
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert (answer.json()["gpu_types"], answer.json()["changed"]) == (["H100", "A100"], 1)
    placed = Job.objects.get(pk=job.pk)
    assert placed.state == State.SCHEDULED
    assert timezone.now() - placed.created > timedelta(hours=1)  # its place, its wait kept
    assert JobEvent.objects.filter(
        job=job, reason="may run on GPU types H100, A100 of any cluster by alice"
    ).exists()


def test_a_preemptor_that_may_run_elsewhere_gives_up_its_claim_on_the_room(alice):
    high = a_preemptor()

    actions.change_constraints(high, {"gpu_types": ["H100"]}, "alice")

    assert Job.objects.get(pk=high.pk).preempting_until is None


def test_a_cluster_selector_keeps_it_off_the_clusters_without_the_labels(alice, alpha):
    eu = ClusterFactory(name="eu", labels={"region": "eu"})
    us = ClusterFactory(name="us", labels={"region": "us"})
    NodeFactory(cluster=us, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1)

    change(alice, job, {"cluster_selector": {"region": "eu"}})
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED
    NodeFactory(cluster=eu, gpu_count=8)
    cycle.run_cycle()

    attempt = Job.objects.get(pk=job.pk).attempts.get()
    assert attempt.cluster_id == eu.pk
    assert where(job) == ([], {"region": "eu"})  # its GPU types kept: any


def test_a_batchs_queued_shards_change_and_its_placed_ones_keep_theirs(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    first = batch(alice, alpha, PriorityClassFactory(name="normal"), shards=4, limit=1)
    cycle.run_cycle()

    answer = change(alice, first, {"gpu_types": ["A100"]})

    assert answer.status_code == 200 and answer.json()["changed"] == 3
    shards = Job.objects.filter(pk__gte=first.pk, tenant=alpha)
    assert sorted((s.state, tuple(s.gpu_types)) for s in shards) == [
        (State.QUEUED, ("A100",))] * 3 + [(State.SCHEDULED, ())]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({}, "non_field_errors", "Give gpu_types, cluster_selector, exclude_nodes, only_nodes"),
        ({"gpu_types": "A100"}, "gpu_types", "Expected a list of items"),
        ({"gpu_types": ["x" * 65]}, "gpu_types", "no more than 64 characters"),
        ({"cluster_selector": ["region"]}, "cluster_selector", "Expected a dictionary"),
        ({"cluster_selector": {"a b": "c"}}, "cluster_selector", ""),
    ],
)
def test_what_a_submission_refuses_is_a_400_naming_it_and_changes_nothing(
    alice, alpha, body, field, said
):
    job = JobFactory(tenant=alpha, owner=alice, gpu_types=["H100"])

    answer = change(alice, job, body)

    assert answer.status_code == 400
    assert list(answer.json()) == [field] and said in str(answer.json()[field])
    assert where(job) == (["H100"], {})


def test_a_placed_job_is_a_409_a_viewer_a_403_and_another_team_a_404(alice, alpha, charlie, east):
    NodeFactory(cluster=east, gpu_count=8)
    placed = JobFactory(tenant=alpha, owner=alice, gpus=1)
    cycle.run_cycle()
    vera = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=vera, role=Membership.Role.VIEWER)
    queued = JobFactory(tenant=alpha, owner=alice)

    answer = change(alice, placed, {"gpu_types": ["A100"]})

    assert answer.status_code == 409
    assert "a job placed keeps where it runs" in answer.json()["detail"]
    assert change(vera, queued, {"gpu_types": ["A100"]}).status_code == 403
    assert change(charlie, queued, {"gpu_types": ["A100"]}).status_code == 404
    assert where(placed) == ([], {}) and where(queued) == ([], {})


def test_where_it_may_run_changed_after_the_snapshot_does_not_start_it_there(alice, alpha, east):
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=2)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes if o.status == PLACED]
    assert len(placed) == 1  # decided for any GPU type

    actions.change_constraints(job, {"gpu_types": ["H100"]}, "alice")

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_the_job_page_changes_it_and_says_a_refusal_on_the_field(alice, bob, alpha):
    job = JobFactory(tenant=alpha, owner=alice, gpu_types=["H100"], cluster_selector={"a": "b"})
    portal = portal_of(bob)

    page = portal.get(f"/jobs/{job.pk}/").text
    url = f"/jobs/{job.pk}/constraints/"
    done = portal.post(url, {"gpu_types": "H100, A100", "cluster_selector": "region=eu\r\n"})
    refused = portal.post(url, {"gpu_types": "", "cluster_selector": "region"})

    form = page.split('<form id="constraints-form"')[1].split("</form>")[0]
    assert f'action="/jobs/{job.pk}/constraints/">' in form
    assert 'name="gpu_types" value="H100"' in form and ">a=b\n</textarea>" in form
    assert done.status_code == 302
    assert where(job) == (["H100", "A100"], {"region": "eu"})
    assert refused.status_code == 400
    assert 'aria-invalid="true"' in refused.text.split('id="constraints-selector"')[1][:200]
    assert where(job) == (["H100", "A100"], {"region": "eu"})


def test_the_cli_constrains_and_says_where(mlsched, alice, alpha):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, gpu_types=["H100"])

    status, out, err = mlsched("constrain", str(job.pk), "--gpu-types", "h100,a100",
                               "--cluster-selector", "region=eu")  # fmt: skip
    widened = mlsched("constrain", str(job.pk), "--any-gpu-type", "--any-cluster")

    assert (status, out) == (
        0, "may run on GPU types h100, a100 of clusters with region=eu (1 job)\n"), err  # fmt: skip
    assert widened[1] == "may run on any GPU type of any cluster (1 job)\n"
    assert where(job) == ([], {})

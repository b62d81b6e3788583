"""Clusters whose nodes may be taken back at any time (a cloud's spot instances:
`Cluster.interruptible`): only preemptible jobs are placed there, the commit checks it again
on the rows, and a job whose node fails or is lost there is queued again without using a retry,
as a preemption is."""

import time
from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from clusters.models import Cluster
from jobs import actions, cycle, snapshot
from jobs.actions.attempts import INTERRUPTED
from jobs.cli.describe import retries
from jobs.commit import commit_batch
from jobs.models import Attempt, Family, Job
from jobs.placement import PLACED, place
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


@pytest.fixture
def spot(db):
    """A spot cluster, cheapest, and one of the platform's own: one 8-GPU node each."""
    PriorityClassFactory(name="normal", value=0)
    cheap = ClusterFactory(name="spot", interruptible=True, placement_cost=0)
    NodeFactory(cluster=cheap, name="spot-0", gpu_count=8)
    own = ClusterFactory(name="own", placement_cost=5)
    NodeFactory(cluster=own, name="own-0", gpu_count=8)
    return cheap


def where(job: Job) -> str:
    return Job.objects.get(pk=job.pk).attempts.get().cluster.name


def test_only_preemptible_work_goes_to_a_spot_cluster(spot):
    steady = JobFactory(family=Family.TRAINING, gpus=8, preemptible=False)
    spare = JobFactory(family=Family.BATCH_INFERENCE, gpus=8, preemptible=True)

    cycle.run_cycle()

    assert (where(steady), where(spare)) == ("own", "spot")


def test_a_job_that_is_not_preemptible_waits_rather_than_run_there(spot):
    JobFactory(family=Family.TRAINING, gpus=8, preemptible=False)
    waiting = JobFactory(family=Family.TRAINING, gpus=8, preemptible=False)

    cycle.run_cycle()

    assert Job.objects.get(pk=waiting.pk).state == State.QUEUED
    assert Cluster.objects.get(name="spot").nodes.get().allocations.filter(active=True).count() == 0


def test_where_every_cluster_is_spot_a_steady_job_says_why_it_waits(spot):
    Cluster.objects.exclude(pk=spot.pk).delete()
    steady = JobFactory(family=Family.TRAINING, gpus=8, preemptible=False)

    cycle.run_cycle()

    waiting = Job.objects.get(pk=steady.pk)
    assert (waiting.state, waiting.pending_reason) == (State.QUEUED, "only_interruptible_clusters")
    assert "the only clusters that would take it are interruptible" in waiting.pending_message


def placed_on_spot(spot) -> tuple[Job, Attempt]:
    job = JobFactory(family=Family.BATCH_INFERENCE, gpus=1, preemptible=True, max_retries=1)
    cycle.run_cycle()
    attempt = Job.objects.get(pk=job.pk).attempts.get()
    assert attempt.cluster == spot
    actions.mark_running(attempt.pk)
    return job, attempt


@pytest.mark.parametrize(
    "outcome", [Outcome.LOST, Outcome.INFRA_ERROR], ids=["lost", "node failed"]
)
def test_a_job_whose_spot_node_is_taken_back_is_queued_again_without_a_retry(spot, outcome):
    job, attempt = placed_on_spot(spot)

    actions.end_attempt(attempt.pk, outcome, reason="worker 0: its node went away")

    job.refresh_from_db()
    assert (job.state, job.retries_used, job.not_before) == (State.QUEUED, 0, None)
    assert job.events.last().reason == f"{outcome}: worker 0: its node went away ({INTERRUPTED})"


def taken_back_again(job: Job) -> Job:
    """Its next attempt placed on the spot cluster, and its node taken back."""
    cycle.run_cycle()
    attempt = Job.objects.get(pk=job.pk).attempts.get(outcome="")
    actions.mark_running(attempt.pk)
    actions.end_attempt(attempt.pk, Outcome.LOST, reason="worker 0: its node went away")
    return Job.objects.get(pk=job.pk)


def test_its_node_taken_back_more_often_than_the_platform_allows_uses_a_retry(spot, settings):
    settings.MLSCHED_INTERRUPTION_REQUEUES = 2
    job, attempt = placed_on_spot(spot)
    actions.end_attempt(attempt.pk, Outcome.LOST, reason="worker 0: its node went away")
    second = taken_back_again(job)
    assert (second.state, second.interruptions, second.retries_used) == (State.QUEUED, 2, 0)

    third = taken_back_again(job)

    assert (third.state, third.interruptions, third.retries_used) == (State.QUEUED, 2, 1)
    assert third.events.last().reason.startswith(
        "lost: worker 0: its node went away (its node taken back 2 times already); retry in "
    )


def test_past_them_a_job_without_retries_left_fails(spot, settings):
    settings.MLSCHED_INTERRUPTION_REQUEUES = 0
    job, attempt = placed_on_spot(spot)
    Job.objects.filter(pk=job.pk).update(max_retries=0)

    actions.end_attempt(attempt.pk, Outcome.LOST, reason="worker 0: its node went away")

    failed = Job.objects.get(pk=job.pk)
    assert (failed.state, failed.interruptions) == (State.FAILED, 0)
    assert failed.events.last().reason == (
        "lost: worker 0: its node went away (its node taken back 0 times already) "
        "(retries exhausted)"
    )


def test_the_api_cli_and_job_page_count_them(spot, alice, alpha):
    job, attempt = placed_on_spot(spot)
    Job.objects.filter(pk=job.pk).update(tenant=alpha, owner=alice)
    actions.end_attempt(attempt.pk, Outcome.LOST, reason="worker 0: its node went away")
    client = APIClient()
    client.force_login(alice)

    answer = client.get(f"/api/v1/jobs/{job.pk}/").json()
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert answer["interruptions"] == 1
    assert retries(answer) == (
        "0 of 1 used (infrastructure failures alone); queued again free as its spot node was "
        "taken back: 1"
    )
    assert "queued again free as its spot node was taken back: 1</span>" in page


@pytest.mark.parametrize(
    "reason",
    [Attempt.AGENT_SILENT, "worker 0: ErrImagePull: registry unavailable (503)"],
    ids=["its agent silent", "a registry's outage"],
)
def test_what_says_nothing_of_the_node_uses_a_retry_there_as_anywhere(spot, reason):
    job, attempt = placed_on_spot(spot)
    outcome = Outcome.LOST if reason == Attempt.AGENT_SILENT else Outcome.INFRA_ERROR

    actions.end_attempt(attempt.pk, outcome, reason=reason)

    assert Job.objects.get(pk=job.pk).retries_used == 1


def test_a_node_lost_on_the_platforms_own_cluster_uses_a_retry(spot):
    job = JobFactory(family=Family.TRAINING, gpus=8, preemptible=False)
    cycle.run_cycle()
    attempt = Job.objects.get(pk=job.pk).attempts.get()

    actions.end_attempt(attempt.pk, Outcome.LOST, reason="worker 0: its node went away")

    assert Job.objects.get(pk=job.pk).retries_used == 1


def test_a_cluster_made_spot_after_the_snapshot_takes_no_steady_work(db):
    PriorityClassFactory(name="normal", value=0)
    cluster = ClusterFactory(name="east")
    NodeFactory(cluster=cluster, gpu_count=8)
    job = JobFactory(gpus=1, preemptible=False)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes
              if o.status == PLACED]  # fmt: skip
    assert len(placed) == 1

    Cluster.objects.filter(pk=cluster.pk).update(interruptible=True)

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_the_clusters_api_page_and_cli_say_it(spot, alice):
    client = APIClient()
    client.force_authenticate(alice)

    listed = {c["name"]: c["interruptible"] for c in client.get("/api/v1/clusters/").json()[
        "clusters"]}  # fmt: skip
    client.force_login(alice)
    page = client.get("/clusters/").content.decode()

    assert listed == {"own": False, "spot": True}
    assert "<td>0</td><td>yes</td></tr>" in page and "<td>5</td><td>no</td></tr>" in page

"""Requeuing a running job (Slurm's `scontrol requeue` and `requeuehold`): it is stopped as a
preemption stops it, with its grace period to checkpoint, and queued again without using a
retry; held once queued if asked. Whoever may cancel a job may requeue it."""

import pytest
from django.test import Client

from jobs import actions, cycle
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_batch import SPEC
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line
from tests.jobs.test_hold import admin, admin_action, api, viewer  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db
PREEMPTED = Attempt.Outcome.PREEMPTED


@pytest.fixture
def running(alice, alpha, east):
    """Alice's training job, placed on the only node and started."""
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=8)
    job = JobFactory(owner=alice, tenant=alpha, family=Family.TRAINING, gpus=8, max_retries=2)
    cycle.run_cycle()
    actions.mark_running(job.attempts.get().pk)
    job.refresh_from_db()
    return job


def stopped(job: Job) -> Job:
    """End the job's live attempt as its agent reports a stop it was asked for."""
    attempt = job.attempts.get(outcome="")
    actions.end_attempt(attempt.pk, attempt.stop_reason, reason=attempt.reason)
    job.refresh_from_db()
    return job


def test_it_stops_the_job_as_a_preemption_and_queues_it_again_without_a_retry(alice, running):
    response = api(alice).post(f"/api/v1/jobs/{running.pk}/requeue/")
    attempt = running.attempts.get()

    assert response.status_code == 202
    assert (response.json()["changed"], response.json()["state"]) == (1, State.RUNNING)
    assert (attempt.stop_reason, attempt.reason) == (PREEMPTED, "requeued by alice")
    job = stopped(running)
    assert (job.state, job.retries_used, job.held) == (State.QUEUED, 0, "")
    assert job.events.order_by("-id").first().reason == "requeued by alice"
    document = api(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert document["attempts"][0]["stop_cause"] == "requeue"  # not the scheduler's preemption
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED  # placed again


def test_a_job_requeued_held_waits_in_the_queue_until_released(alice, running):
    response = api(alice).post(f"/api/v1/jobs/{running.pk}/requeue/", {"hold": True}, "json")

    assert response.status_code == 202
    job = stopped(running)
    cycle.run_cycle()
    job.refresh_from_db()
    assert (job.state, job.held, job.pending_reason) == (State.QUEUED, Job.Hold.USER, "held")
    assert job.pending_message == actions.HELD_WHEN_REQUEUED[Job.Hold.USER]
    assert api(alice).post(f"/api/v1/jobs/{job.pk}/release/").status_code == 200
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_a_platform_admins_requeue_hold_only_a_platform_admin_releases(alice, admin, running):  # noqa: F811
    MembershipFactory(tenant=running.tenant, user=admin, role=Membership.Role.MEMBER)

    api(admin).post(f"/api/v1/jobs/{running.pk}/requeue/", {"hold": True}, "json")
    job = stopped(running)

    assert (job.held, job.pending_message) == (
        Job.Hold.ADMIN, actions.HELD_WHEN_REQUEUED[Job.Hold.ADMIN]
    )  # fmt: skip
    assert api(alice).post(f"/api/v1/jobs/{job.pk}/release/").status_code == 403


def test_a_job_that_ends_on_its_own_meanwhile_keeps_its_end_and_no_hold(alice, running):
    actions.requeue(running, "alice", hold=True)
    actions.end_attempt(running.attempts.get().pk, Attempt.Outcome.SUCCEEDED)

    running.refresh_from_db()
    assert (running.state, running.held) == (State.SUCCEEDED, "")


@pytest.mark.parametrize("how", ["queued", "stopping", "ended"])
def test_a_job_with_nothing_running_left_to_stop_is_a_conflict(alice, alpha, running, how):
    job = running
    if how == "queued":
        job = JobFactory(owner=alice, tenant=alpha)
    elif how == "stopping":
        actions.requeue(running, "alice")
    else:
        actions.cancel(running)
        stopped(running)

    response = api(alice).post(f"/api/v1/jobs/{job.pk}/requeue/")

    assert response.status_code == 409
    assert "Only a scheduled or running job can be requeued" in response.json()["detail"]
    assert Attempt.objects.filter(job=job, stop_reason=PREEMPTED).count() == (how == "stopping")


def test_a_hold_that_is_not_true_or_false_is_refused_naming_it(alice, running):
    response = api(alice).post(f"/api/v1/jobs/{running.pk}/requeue/", {"hold": "maybe"}, "json")

    assert response.status_code == 400
    assert "hold" in response.json()
    assert running.attempts.get().stop_requested_at is None


def test_a_viewer_may_not_requeue(viewer, running):  # noqa: F811
    response = api(viewer).post(f"/api/v1/jobs/{running.pk}/requeue/")

    assert response.status_code == 403
    assert running.attempts.get().stop_requested_at is None


def test_another_tenants_job_is_a_404(charlie, running):
    assert api(charlie).post(f"/api/v1/jobs/{running.pk}/requeue/").status_code == 404


def test_a_batch_requeues_its_running_shards_and_leaves_the_queued_ones(alice, alpha, east):
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=2)
    batch, _ = actions.submit(
        alice, alpha, {**SPEC, "shards": 3, "priority_class": PriorityClassFactory()}
    )
    cycle.run_cycle()

    requeued = actions.requeue(batch, "alice")

    states = dict(batch.batch().values_list("shard_index", "state"))
    asked = Attempt.objects.filter(job__in=batch.batch(), stop_reason=PREEMPTED)
    assert requeued == 2 == asked.count()
    assert sorted(states.values()) == [State.QUEUED, State.SCHEDULED, State.SCHEDULED]


def test_the_job_page_requeues_held_from_its_form(alice, running):
    client = Client()
    client.force_login(alice)
    page = client.get(f"/jobs/{running.pk}/").content.decode()

    response = client.post(f"/jobs/{running.pk}/requeue/", {"hold": "on"})

    assert f'id="requeue-form" method="post" action="/jobs/{running.pk}/requeue/">' in page
    assert response.status_code == 302
    assert stopped(running).held == Job.Hold.USER


def test_the_job_page_says_why_a_requeue_is_refused(alice, alpha):
    job = JobFactory(owner=alice, tenant=alpha)
    client = Client()
    client.force_login(alice)

    response = client.post(f"/jobs/{job.pk}/requeue/")

    assert response.status_code == 409
    assert "Only a scheduled or running job can be requeued" in response.content.decode()
    assert not JobEvent.objects.filter(job=job, reason__startswith="requeued").exists()


@pytest.mark.django_db(transaction=True)
def test_the_cli_requeues_a_running_job_held(cli, running):  # noqa: F811
    done = cli("requeue", str(running.pk), "--hold")
    again = cli("requeue", str(running.pk))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "requeued 1 job, held once queued"
    assert again.returncode == 1 and "Only a scheduled or running job" in again.stderr
    assert stopped(running).held == Job.Hold.USER


def test_a_platform_admin_requeues_running_jobs_from_the_admin(admin, alice, alpha, running):  # noqa: F811
    queued = JobFactory(owner=alice, tenant=alpha)

    for job in (running, queued):
        admin_action(admin, "requeue_jobs", job)

    assert running.attempts.get().reason == "requeued by root"
    assert stopped(running).state == State.QUEUED
    assert not queued.attempts.exists()  # refused: nothing of it runs

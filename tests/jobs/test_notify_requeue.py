"""Requeue notifications (Slurm's --mail-type=REQUEUE): a job that asks for it
(`notify_requeue`) has its tenant's webhook told each time it is stopped and queued again; a
batch once for its shards queued again within REQUEUE_GATHER_S of the first. The job-end
tests' receiver plays the webhook."""

# ruff: noqa: F811 (the job-end tests' fixtures, imported, are the tests' arguments)

import json

import pytest
from django.core.cache import caches
from rest_framework.test import APIClient

from jobs import actions, cycle, notify, tasks
from jobs.cli import describe
from jobs.models import Attempt, Job
from jobs.states import State
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_notify import (  # noqa: F401 (fixtures)
    BATCH,
    hooked,
    queued,
    receiver,
    room,
    running,
    verifies,
)
from tests.jobs.test_notify_start import FORM, SPEC
from tests.jobs.test_requeue import stopped

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


@pytest.fixture
def sent(monkeypatch) -> list[tuple]:
    """The arguments and countdown each requeue notification was queued with; one queued
    without a countdown runs at once, as a worker would run it, the others when `run_due`."""
    told: list[tuple] = []

    def delay(*args):
        told.append((*args, 0))
        tasks.notify_job_requeue.apply(args=args)

    def apply_async(args, countdown):
        told.append((*args, countdown))

    monkeypatch.setattr(tasks.notify_job_requeue, "delay", delay)
    monkeypatch.setattr(tasks.notify_job_requeue, "apply_async", apply_async)
    return told


def run_due(sent) -> None:
    """Run the notifications queued with a countdown, as the worker does once it has passed."""
    for *args, countdown in sent:
        if countdown:
            tasks.notify_job_requeue.apply(args=args)


def test_a_job_requeued_by_its_user_is_told_with_its_cause_signed(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    job = running(hooked, alice, name="train-llm", labels={"project": "llm"}, notify_requeue=True)
    attempt = job.attempts.get()
    actions.requeue(job, "alice")

    with django_capture_on_commit_callbacks(execute=True):
        stopped(job)

    (post,) = receiver.received
    attempt.refresh_from_db()
    move = job.events.get(from_state=State.RUNNING, to_state=State.QUEUED)
    assert sent == [(job.pk, move.time.timestamp(), 0, 0)]  # no retry used
    assert post.headers["X-Mlsched-Delivery"] == f"job.requeued:{job.pk}:{move.pk}"
    assert verifies(post, hooked.notify_secret)
    assert post.document == {
        "event": "job.requeued", "job": job.pk, "name": "train-llm", "tenant": "alpha",
        "owner": "alice", "labels": {"project": "llm"},
        "requeued_at": move.time.isoformat(), "outcome": "preempted",
        "cause": "requeue", "reason": attempt.reason, "attempt": 1, "retries_used": 0,
        "max_retries": job.max_retries, "url": f"https://mlsched.example.com/jobs/{job.pk}/",
        "shards": None, "requeued_shards": None,
        "text": f"Job #{job.pk} train-llm queued again: {attempt.reason} "
                f"https://mlsched.example.com/jobs/{job.pk}/",
    }  # fmt: skip
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_a_retry_after_an_infrastructure_failure_is_told_each_time_with_its_retries(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    job = running(hooked, alice, notify_requeue=True, max_retries=3)

    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            actions.end_attempt(job.attempts.get(outcome="").pk, Outcome.INFRA_ERROR,
                                reason="node east-0 went away")  # fmt: skip
        Job.objects.filter(pk=job.pk).update(not_before=None)  # past its retry's backoff
        cycle.run_cycle()
        actions.mark_running(job.attempts.get(outcome="").pk)

    told = [post.document for post in receiver.received]
    assert [(d["outcome"], d["attempt"], d["retries_used"]) for d in told] == [
        ("infra_error", 1, 1), ("infra_error", 2, 2)]  # fmt: skip
    assert {d["reason"] for d in told} == {"node east-0 went away"}
    deliveries = {post.headers["X-Mlsched-Delivery"] for post in receiver.received}
    assert len(deliveries) == 2  # each requeue its own


def test_the_retries_told_are_those_the_requeue_left_though_it_is_sent_later(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks, monkeypatch
):
    job = running(hooked, alice, notify_requeue=True, max_retries=3)
    monkeypatch.setattr(tasks.notify_job_requeue, "delay", lambda *args: sent.append((*args, 0)))
    with django_capture_on_commit_callbacks(execute=True):
        actions.end_attempt(job.attempts.get().pk, Outcome.INFRA_ERROR, reason="node lost")
    Job.objects.filter(pk=job.pk).update(retries_used=2)  # another retry before it is sent

    tasks.notify_job_requeue.apply(args=sent[0][:-1])

    assert sent[0][-2] == 1
    assert receiver.received[0].document["retries_used"] == 1


def test_a_job_that_does_not_ask_or_ends_instead_is_not_told(
    hooked, alice, room, receiver, sent, queued, django_capture_on_commit_callbacks
):
    quiet = running(hooked, alice)
    failing = running(hooked, alice, notify_requeue=True, max_retries=0)

    with django_capture_on_commit_callbacks(execute=True):
        actions.end_attempt(quiet.attempts.get().pk, Outcome.INFRA_ERROR, reason="lost")
        actions.end_attempt(failing.attempts.get().pk, Outcome.INFRA_ERROR, reason="lost")

    assert Job.objects.get(pk=quiet.pk).state == State.QUEUED  # retried, untold
    assert Job.objects.get(pk=failing.pk).state == State.FAILED  # out of retries: ended
    assert sent == []
    assert queued == [failing.pk]  # its end is told
    assert [post.document["event"] for post in receiver.received] == ["job.ended"]


def requeued_batch(owner, tenant, shards: int) -> tuple[Job, list[Job]]:
    """A batch of `shards` that asks to be told of its requeues, running, then requeued by
    its owner (its shards stop once their agents report them stopped): its first shard and
    its shards by index."""
    spec = {**BATCH, "shards": shards, "notify_requeue": True,
            "priority_class": PriorityClassFactory()}  # fmt: skip
    first, _ = actions.submit(owner, tenant, spec)
    cycle.run_cycle()
    every = list(first.batch().order_by("shard_index"))
    for shard in every:
        actions.mark_running(shard.attempts.get().pk)
    actions.requeue(first, owner.username)
    return first, every


def test_a_batchs_shards_requeued_one_after_another_are_told_together_once(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    first, shards = requeued_batch(alice, hooked, 3)

    for shard in shards[1:]:  # each in a commit of its own, as agents report them
        with django_capture_on_commit_callbacks(execute=True):
            stopped(shard)
    assert receiver.received == []  # gathering
    run_due(sent)

    (post,) = receiver.received
    (gathering,) = sent
    # Its retries read when it is sent (None), the countdown the gathering's.
    assert (gathering[0], *gathering[2:]) == (first.pk, None, notify.REQUEUE_GATHER_S)
    assert post.document["job"] == first.pk
    assert (post.document["shards"], post.document["requeued_shards"]) == (3, [1, 2])
    assert post.document["cause"] == "requeue"


def test_a_requeue_after_the_gathering_is_told_again(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    first, shards = requeued_batch(alice, hooked, 2)
    with django_capture_on_commit_callbacks(execute=True):
        stopped(shards[0])
    run_due(sent)
    sent.clear()
    caches["shared"].delete(f"requeued-batch-{first.pk}")  # the gathering's time is over

    with django_capture_on_commit_callbacks(execute=True):
        stopped(shards[1])
    run_due(sent)

    told = [post.document["requeued_shards"] for post in receiver.received]
    assert told == [[0], [1]]


def test_the_api_takes_it_gives_it_back_in_the_spec_and_names_a_bad_one(alpha, alice, room):
    PriorityClassFactory(name="normal")
    client = APIClient()
    client.force_authenticate(alice)
    body = {**BATCH, "shards": 1, "tenant": "alpha", "notify_requeue": True}

    job = client.post("/api/v1/jobs/", body, format="json").json()
    spec = client.get(f"/api/v1/jobs/{job['id']}/spec/").json()
    refused = client.post("/api/v1/jobs/", {**body, "notify_requeue": "maybe"}, format="json")

    assert job["notify_requeue"] is True and spec["notify_requeue"] is True
    assert refused.status_code == 400 and list(refused.json()) == ["notify_requeue"]
    assert JobFactory(tenant=alpha, owner=alice).notify_requeue is False  # the default


def test_the_submit_form_takes_it_a_copy_keeps_it_and_the_job_page_says_it(alpha, alice, client):
    PriorityClassFactory(name="normal")
    client.force_login(alice)
    client.post("/jobs/new/", {**FORM, "notify_start": "true", "notify_requeue": "true"})
    job = Job.objects.get(name="x")
    copy = client.get(f"/jobs/new/?copy={job.pk}").content.decode()
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert job.notify_requeue
    assert 'name="notify_requeue" value="true" checked' in copy
    assert '<dd id="notifies">its start and each requeue to its team\'s webhook</dd>' in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_it_and_its_status_says_it(cli):
    done = cli("submit", "-", "--notify-requeue", stdin=json.dumps(SPEC))
    job = Job.objects.get(name="told")
    described = cli("status", str(job.pk))

    assert done.returncode == 0, done.stderr
    assert job.notify_requeue and json.loads(described.stdout)["notify_requeue"] is True
    # As `status` describes it on a terminal.
    assert describe.notifies({"notify_requeue": True}) == "each requeue, to its team's webhook"

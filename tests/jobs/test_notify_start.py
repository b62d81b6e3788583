"""Job-start notifications (Slurm's --mail-type=BEGIN): a job that asks for it (`notify_start`)
has its tenant's webhook told of its first start; a batch once, for its shard that started
first. The same receiver as the job-end notifications' plays the webhook."""

# ruff: noqa: F811 (the job-end tests' fixtures, imported, are the tests' arguments)

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import actions, cycle, tasks
from jobs.models import Attempt, Job
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_notify import (  # noqa: F401 (fixtures)
    BATCH,
    hooked,
    receiver,
    room,
    run_when_sent,
    verifies,
)

pytestmark = pytest.mark.django_db
# A training job as the submit form posts it, and as the CLI reads it, named "x" and "told".
FORM = {"tenant": "alpha", "name": "x", "family": "training", "image": "i", "command": "x",
        "cpu_milli": "1000", "memory_mb": "1000", "gpus": "1", "gpu_milli": "0",
        "workers": "1", "shards": "1", "priority_class": "normal", "priority": "0",
        "max_runtime_s": "60", "max_retries": "3"}  # fmt: skip
SPEC = {"tenant": "alpha", "name": "told", "family": "training", "image": "i",
        "command": ["x"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
        "max_runtime_s": 60}  # fmt: skip


@pytest.fixture
def sent(monkeypatch):
    """The job ids whose start notification was queued; each runs at once."""
    return run_when_sent(monkeypatch, tasks.notify_job_start)


def placed(job: Job) -> Attempt:
    cycle.run_cycle()
    return job.attempts.get(outcome="")


def placed_batch(owner, tenant) -> tuple[Job, list[Job]]:
    """A batch of 3 shards that asks for its start to be told, placed: its first shard and
    its shards by index."""
    spec = {**BATCH, "shards": 3, "notify_start": True, "priority_class": PriorityClassFactory()}
    first, _ = actions.submit(owner, tenant, spec)
    cycle.run_cycle()
    return first, list(first.batch().order_by("shard_index"))


def starts(attempt: Attempt, capture) -> None:
    with capture(execute=True):
        actions.mark_running(attempt.pk)


def test_a_job_that_asks_is_told_started_signed_with_its_wait(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    job = JobFactory(tenant=hooked, owner=alice, name="train-llm", labels={"project": "llm"},
                     notify_start=True)  # fmt: skip
    Job.objects.filter(pk=job.pk).update(created=timezone.now() - timedelta(minutes=5))
    attempt = placed(job)

    starts(attempt, django_capture_on_commit_callbacks)

    (post,) = receiver.received
    job.refresh_from_db()
    assert sent == [job.pk]
    assert post.headers["X-Mlsched-Delivery"] == f"job.started:{job.pk}"
    assert verifies(post, hooked.notify_secret)
    document = post.document
    waited = document.pop("waited_s")
    assert document == {
        "event": "job.started", "job": job.pk, "name": "train-llm", "tenant": "alpha",
        "owner": "alice", "labels": {"project": "llm"},
        "started_at": job.started_at.isoformat(), "cluster": room.cluster.name, "workers": 1,
        "url": f"https://mlsched.example.com/jobs/{job.pk}/", "shards": None, "shard": None,
        "text": f"Job #{job.pk} train-llm started on {room.cluster.name} "
                f"https://mlsched.example.com/jobs/{job.pk}/",
    }  # fmt: skip
    assert waited == pytest.approx((job.started_at - job.eligible_at).total_seconds(), abs=1e-3)
    assert 300 <= waited < 360  # submitted five minutes before it started, free to run since


def test_a_job_that_does_not_ask_is_not_told_its_start(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice)

    starts(placed(job), django_capture_on_commit_callbacks)

    assert sent == [] and receiver.received == []


def test_a_retrys_start_is_not_told_again(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice, notify_start=True, max_retries=2)
    first = placed(job)
    starts(first, django_capture_on_commit_callbacks)
    actions.end_attempt(first.pk, Attempt.Outcome.LOST, reason="node lost")
    Job.objects.filter(pk=job.pk).update(not_before=None)  # its backoff passed

    starts(placed(job), django_capture_on_commit_callbacks)

    assert Attempt.objects.filter(job=job, started_at__isnull=False).count() == 2
    assert sent == [job.pk]  # the first start alone
    assert len(receiver.received) == 1


def test_a_batch_is_told_once_for_its_shard_that_started_first(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    first, shards = placed_batch(alice, hooked)

    starts(shards[2].attempts.get(), django_capture_on_commit_callbacks)
    starts(shards[0].attempts.get(), django_capture_on_commit_callbacks)

    assert sent == [shards[2].pk]
    (post,) = receiver.received
    assert post.headers["X-Mlsched-Delivery"] == f"job.started:{first.pk}"
    assert (post.document["job"], post.document["shards"], post.document["shard"]) == (
        first.pk, 3, 2)  # fmt: skip


def test_a_tenant_without_a_url_queues_nothing(
    alpha, alice, room, sent, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=alpha, owner=alice, notify_start=True)

    starts(placed(job), django_capture_on_commit_callbacks)

    assert sent == []


def test_the_api_takes_it_and_gives_it_back_in_the_job_and_its_spec(alpha, alice):
    PriorityClassFactory(name="normal")
    client = APIClient()
    client.force_authenticate(alice)
    body = {"tenant": "alpha", "name": "x", "family": "training", "image": "i",
            "command": ["x"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
            "max_runtime_s": 60, "notify_start": True}  # fmt: skip

    job = client.post("/api/v1/jobs/", body, format="json").json()
    spec = client.get(f"/api/v1/jobs/{job['id']}/spec/").json()
    refused = client.post("/api/v1/jobs/", {**body, "notify_start": "maybe"}, format="json")

    assert job["notify_start"] is True and spec["notify_start"] is True
    assert Job.objects.get(pk=job["id"]).notify_start
    assert refused.status_code == 400 and list(refused.json()) == ["notify_start"]


def test_the_submit_form_takes_it_and_a_copy_keeps_it_ticked(alpha, alice, client):
    PriorityClassFactory(name="normal")
    client.force_login(alice)
    client.post("/jobs/new/", {**FORM, "notify_start": "true"})
    job = Job.objects.get(name="x")
    copy = client.get(f"/jobs/new/?copy={job.pk}").content.decode()
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert job.notify_start
    assert 'name="notify_start" value="true" checked' in copy
    assert '<dd id="notifies">its start to its team\'s webhook</dd>' in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_it_with_notify_start(cli):
    done = cli("submit", "-", "--notify-start", stdin=json.dumps(SPEC))

    assert done.returncode == 0, done.stderr
    assert Job.objects.get(name="told").notify_start


def test_two_shards_starting_in_one_commit_are_told_once_as_the_lower(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    _, shards = placed_batch(alice, hooked)
    now = timezone.now()

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        actions.mark_running(shards[2].attempts.get().pk, now=now)
        actions.mark_running(shards[1].attempts.get().pk, now=now)

    assert sent == [shards[1].pk]
    assert len(receiver.received) == 1

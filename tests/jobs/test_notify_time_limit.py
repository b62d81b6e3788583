"""Time-limit warnings (Slurm's --mail-type=TIME_LIMIT_90): a job that asks for it
(`notify_time_limit`) has its tenant's webhook told once a run of it has used 90 % of its
runtime limit; each run once. The same receiver as the job-end notifications' plays the
webhook."""

# ruff: noqa: F811 (the job-end tests' fixtures, imported, are the tests' arguments)

import json
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from jobs import actions, cycle, scheduler, tasks, time_limit_alerts
from jobs.cli import describe
from jobs.models import Attempt, Job
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_notify import hooked, receiver, room, run_when_sent, verifies  # noqa: F401
from tests.jobs.test_notify_start import FORM, SPEC
from tests.jobs.test_retention import Once

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    """The attempt ids whose warning was queued; each runs at once."""
    return run_when_sent(monkeypatch, tasks.notify_time_limit)


def running_for(job: Job, seconds: float) -> Attempt:
    """The job placed, its run started `seconds` ago."""
    cycle.run_cycle()
    attempt = job.attempts.get(outcome="")
    actions.mark_running(attempt.pk)
    started = timezone.now() - timedelta(seconds=seconds)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=started)
    return Attempt.objects.get(pk=attempt.pk)


def check(capture) -> int:
    with capture(execute=True):
        return time_limit_alerts.check()


def test_a_run_past_90_percent_of_its_limit_is_told_once_signed(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    job = JobFactory(tenant=hooked, owner=alice, name="train-llm", labels={"project": "llm"},
                     max_runtime_s=1000, notify_time_limit=True)  # fmt: skip
    attempt = running_for(job, 901)

    claimed = check(django_capture_on_commit_callbacks)
    again = check(django_capture_on_commit_callbacks)

    (post,) = receiver.received
    assert (claimed, again, sent) == (1, 0, [attempt.pk])
    assert post.headers["X-Mlsched-Delivery"] == f"job.time_limit:{attempt.pk}"
    assert verifies(post, hooked.notify_secret)
    assert post.document == {
        "event": "job.time_limit", "job": job.pk, "name": "train-llm", "tenant": "alpha",
        "owner": "alice", "labels": {"project": "llm"}, "attempt": 1, "percent": 90,
        "started_at": attempt.started_at.isoformat(),
        "stops_at": (attempt.started_at + timedelta(seconds=1000)).isoformat(),
        "max_runtime_s": 1000, "cluster": room.cluster.name,
        "url": f"https://mlsched.example.com/jobs/{job.pk}/",
        "text": f"Job #{job.pk} train-llm has used 90 % of its runtime limit "
                f"https://mlsched.example.com/jobs/{job.pk}/",
    }  # fmt: skip


def test_a_run_short_of_90_percent_is_not_told_yet(
    hooked, alice, room, receiver, sent, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=1000, notify_time_limit=True)
    running_for(job, 880)

    assert check(django_capture_on_commit_callbacks) == 0
    assert sent == [] and receiver.received == []


def test_a_limit_lowered_while_it_runs_is_read_as_it_stands(
    hooked, alice, room, sent, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=3600, notify_time_limit=True)
    attempt = running_for(job, 600)
    assert check(django_capture_on_commit_callbacks) == 0

    actions.set_runtime_limit(Job.objects.get(pk=job.pk), 650, "alice")

    assert check(django_capture_on_commit_callbacks) == 1
    assert sent == [attempt.pk]


@pytest.mark.parametrize("told", ["not asked", "no url"])
def test_a_job_that_does_not_ask_or_a_tenant_without_a_url_is_not_told(
    hooked, alice, room, sent, django_capture_on_commit_callbacks, told
):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=100,
                     notify_time_limit=told == "no url")  # fmt: skip
    if told == "no url":
        type(hooked).objects.filter(pk=hooked.pk).update(notify_url="")
    running_for(job, 95)

    assert check(django_capture_on_commit_callbacks) == 0
    assert sent == []


def test_a_retrys_run_is_told_again(hooked, alice, room, sent, django_capture_on_commit_callbacks):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=100, notify_time_limit=True)
    first = running_for(job, 95)
    check(django_capture_on_commit_callbacks)
    actions.end_attempt(first.pk, Attempt.Outcome.INFRA_ERROR, reason="node lost")
    Job.objects.filter(pk=job.pk).update(not_before=None)

    second = running_for(job, 95)
    check(django_capture_on_commit_callbacks)

    assert sent == [first.pk, second.pk]


def test_beat_sends_the_check_every_minute_and_a_stale_one_expires():
    entry = django_settings.CELERY_BEAT_SCHEDULE["time-limit-warnings"]

    assert entry == {"task": "jobs.tasks.warn_time_limits", "schedule": 60.0}
    assert tasks.warn_time_limits.name == entry["task"]
    assert tasks.warn_time_limits.expires == 60


def test_the_api_takes_it_and_refuses_it_for_a_batch_of_several_shards(alpha, alice):
    from tests.jobs.test_batch_cancel import api

    PriorityClassFactory(name="normal")
    batch = {**SPEC, "family": "batch_inference", "shards": 3, "notify_time_limit": True}

    job = api(alice).post("/api/v1/jobs/", {**SPEC, "notify_time_limit": True}, format="json")
    refused = api(alice).post("/api/v1/jobs/", batch, format="json")

    assert job.status_code == 201 and job.json()["notify_time_limit"] is True
    assert refused.status_code == 400
    assert refused.json()["notify_time_limit"] == [
        "A batch's shards would each be told: ask it of a job of one shard."
    ]


def test_the_submit_form_takes_it_and_the_job_page_says_it(alpha, alice, client):
    PriorityClassFactory(name="normal")
    client.force_login(alice)
    client.post("/jobs/new/", {**FORM, "notify_time_limit": "true", "notify_start": "true"})
    job = Job.objects.get(name="x")
    copy = client.get(f"/jobs/new/?copy={job.pk}").content.decode()
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert job.notify_time_limit
    assert 'name="notify_time_limit" value="true" checked' in copy
    assert ('<dd id="notifies">its start and 90 % of its runtime limit used to its team\'s '
            "webhook</dd>") in page  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_it_and_status_says_it(cli):
    done = cli("submit", "-", "--notify-time-limit", "--notify-requeue", stdin=json.dumps(SPEC))
    job = Job.objects.get(name="told")
    status = cli("status", str(job.pk))

    assert done.returncode == 0, done.stderr
    assert job.notify_time_limit
    # As `status` describes it on a terminal (piped, it prints the JSON).
    assert ("Notifies", "each requeue and 90 % of its runtime limit used, to its team's "
            "webhook") in describe.fields(json.loads(status.stdout))  # fmt: skip


def test_the_embedded_mode_checks_them_beside_the_budgets_even_when_those_fail(monkeypatch):
    checked = []

    def budgets_fail():
        raise RuntimeError("the budgets' query failed")

    monkeypatch.setattr(tasks, "alert_budgets", budgets_fail)
    budgets_fail.name = "jobs.tasks.alert_budgets"
    monkeypatch.setattr(time_limit_alerts, "check", lambda: checked.append(True))

    scheduler.alerts_forever(Once())

    assert checked == [True]


def test_a_warning_the_broker_refuses_is_given_back_for_the_next_check(
    hooked, alice, room, monkeypatch, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=100, notify_time_limit=True)
    attempt = running_for(job, 95)

    def refused(*args):
        raise ConnectionError("the broker is down")

    monkeypatch.setattr(tasks.notify_time_limit, "delay", refused)
    assert check(django_capture_on_commit_callbacks) == 1

    assert Attempt.objects.get(pk=attempt.pk).time_limit_told_at is None

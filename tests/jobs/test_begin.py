"""A deferred start (`begin`, Slurm's --begin): the job is queued but not placed before its
begin, waits as `deferred` until then, and is eligible to run (its queue wait starts) from it."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import F
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import actions, cycle, dependencies, reports
from jobs.clock import database_now
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.jobs.conftest import STEP

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("room", "normal_priority")]

H = timedelta(hours=1)
MINUTES_10 = timedelta(minutes=10)
SPEC = {"tenant": "alpha", "name": "nightly-eval", "family": "evaluation", "image": "python:3.11",
        "command": ["python", "eval.py"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
        "max_runtime_s": 600}  # fmt: skip


def ahead(delta: timedelta = H) -> datetime:
    """A whole minute at least `delta` from now, on the database's clock."""
    return (database_now() + delta + timedelta(minutes=1)).replace(second=0, microsecond=0)


def zulu(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def post(user, body: dict):
    client = APIClient()
    client.force_authenticate(user)
    # As JSON text: a lone surrogate goes as \ud800, as a client would escape it.
    return client.post("/api/v1/jobs/", json.dumps(body), content_type="application/json")


def deferred(alice, alpha, normal_priority, begin: datetime, **spec) -> Job:
    fields = {**STEP, "priority_class": normal_priority, "begin": begin, **spec}
    return actions.submit(alice, alpha, fields)[0]


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def test_a_submission_with_a_begin_is_queued_with_it_and_not_eligible_yet(alice, alpha):
    begin = ahead()

    response = post(alice, {**SPEC, "begin": zulu(begin)})

    assert response.status_code == 201
    answer = response.json()
    job = Job.objects.get(pk=answer["id"])
    assert (job.state, job.begin, job.not_before) == (State.QUEUED, begin, begin)
    assert datetime.fromisoformat(answer["begin"]) == begin
    assert answer["eligible_at"] is None  # not before its begin


def test_a_begin_with_an_offset_is_the_same_time_in_utc(alice, alpha):
    begin = ahead()
    paris = begin.astimezone(UTC).replace(tzinfo=None) + H

    response = post(alice, {**SPEC, "begin": f"{paris.isoformat()}+01:00"})

    assert response.status_code == 201
    assert Job.objects.get().begin == begin


def test_a_begin_from_now_is_read_by_the_servers_clock(alice, alpha, monkeypatch):
    later = timezone.now() + timedelta(days=1)  # the server's clock, a day ahead of the caller's
    monkeypatch.setattr("jobs.fields.timezone.now", lambda: later)

    response = post(alice, {**SPEC, "begin": "now+2h"})
    refused = post(alice, {**SPEC, "begin": "now+2w"})

    assert response.status_code == 201, response.content
    assert Job.objects.get().begin == later + 2 * H
    assert refused.status_code == 400 and "now+2h, now-1d" in refused.json()["begin"][0]


@pytest.mark.parametrize("ago", [timedelta(0), H, timedelta(days=3000)])
def test_a_begin_past_or_now_defers_nothing(alice, alpha, ago):
    response = post(alice, {**SPEC, "begin": zulu(database_now() - ago)})

    assert response.status_code == 201
    assert response.json()["begin"] is None
    job = Job.objects.get()
    assert (job.begin, job.not_before, job.eligible_at) == (None, None, job.created)


def test_a_job_submitted_without_a_begin_answers_begin_null(alice, alpha):
    response = post(alice, SPEC)

    assert response.status_code == 201
    assert response.json()["begin"] is None


BAD_BEGINS = {
    "no zone": "2026-12-03T02:00:00",
    "a day": "2026-12-03",
    "words": "in an hour",
    "month 13": "2026-13-03T02:00:00Z",
    "lone surrogate": "\ud800",  # no answer could quote it
    "too long": "2026-12-03T02:00:00Z" + " " * 100,
    "a number": 12,
    "a list": ["2026-12-03T02:00:00Z"],
    "a boolean": True,
    "empty": "",
}


@pytest.mark.parametrize("begin", BAD_BEGINS.values(), ids=BAD_BEGINS.keys())
def test_a_bad_begin_is_a_400_naming_begin_and_writes_nothing(alice, alpha, begin):
    response = post(alice, {**SPEC, "begin": begin})

    assert response.status_code == 400
    assert list(response.json()) == ["begin"]
    assert not Job.objects.exists()


def test_a_begin_without_a_zone_is_refused_saying_utc_is_expected(alice, alpha):
    naive = ahead().replace(tzinfo=None).isoformat()

    response = post(alice, {**SPEC, "begin": naive})

    assert response.status_code == 400
    assert "UTC is expected" in response.json()["begin"][0]


def test_a_begin_more_than_366_days_ahead_is_refused(alice, alpha):
    too_far = post(alice, {**SPEC, "begin": zulu(ahead(timedelta(days=366)))})
    a_year = post(alice, {**SPEC, "begin": zulu(ahead(timedelta(days=365)))})

    assert too_far.status_code == 400
    assert "366 days" in too_far.json()["begin"][0]
    assert a_year.status_code == 201
    assert Job.objects.count() == 1


def test_a_deferred_job_is_not_placed_before_its_begin_and_is_by_the_first_cycle_after(
    alice, alpha, normal_priority
):
    begin = ahead()
    job = deferred(alice, alpha, normal_priority, begin)

    before = cycle.run_cycle(now=begin.timestamp() - 1)
    at = cycle.run_cycle(now=begin.timestamp())

    assert (before.considered, before.placed) == (0, [])
    assert at.placed == [job.pk]
    assert fresh(job).state == State.SCHEDULED


def test_a_deferred_job_waits_as_deferred_until_its_begin(client, alice, alpha, normal_priority):
    begin = ahead()
    job = deferred(alice, alpha, normal_priority, begin)

    cycle.run_cycle()

    job = fresh(job)
    sentence = f"Deferred until {begin:%Y-%m-%d %H:%M} UTC (begin)."
    assert (job.pending_reason, job.pending_message) == ("deferred", sentence)
    assert job.estimated_start == begin
    client.force_login(alice)
    answer = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (answer["pending_reason"], answer["pending_message"]) == ("deferred", sentence)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'<p id="reason" aria-live="polite">{sentence}</p>' in page
    assert f'<dd id="begin">not placed before {begin:%Y-%m-%d %H:%M:%S} UTC</dd>' in page


def test_a_begin_with_seconds_is_said_to_the_second(alice, alpha, normal_priority):
    begin = ahead() + timedelta(seconds=30)
    job = deferred(alice, alpha, normal_priority, begin)

    cycle.run_cycle()

    assert fresh(job).pending_message == f"Deferred until {begin:%Y-%m-%d %H:%M:%S} UTC (begin)."


def test_every_shard_of_a_deferred_batch_waits_for_the_begin(alice, alpha, normal_priority):
    begin = ahead()
    first = deferred(alice, alpha, normal_priority, begin, family=Family.BATCH_INFERENCE,
                     gpus=0, shards=3)  # fmt: skip

    before = cycle.run_cycle(now=begin.timestamp() - 1)
    shards = list(first.batch())
    at = cycle.run_cycle(now=begin.timestamp())

    assert len(shards) == 3 and before.placed == []
    assert {(s.begin, s.not_before, s.eligible_at) for s in shards} == {(begin, begin, begin)}
    assert {s.pending_reason for s in shards} == {"deferred"}
    assert sorted(at.placed) == [s.pk for s in shards]


def test_a_deferred_job_is_eligible_from_its_begin_and_its_wait_runs_from_there(
    alice, alpha, normal_priority
):
    begin = ahead()
    job = deferred(alice, alpha, normal_priority, begin)
    assert cycle.run_cycle(now=begin.timestamp()).placed == [job.pk]

    started = begin + MINUTES_10
    actions.mark_running(job.attempts.get().pk, started)

    job = fresh(job)
    assert job.eligible_at == begin > job.created
    since = started.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    usage = reports.usage([alpha], since, since + timedelta(days=3), started + H).tenants[0]
    assert usage.started == 1
    assert usage.mean_wait_s == pytest.approx(600, abs=0.01)


def test_a_deferred_job_with_a_dependency_met_is_eligible_no_earlier_than_its_begin(
    alice, alpha, normal_priority
):
    first = deferred(alice, alpha, normal_priority, None)
    cycle.run_cycle()
    actions.end_attempt(first.attempts.get().pk, Attempt.Outcome.SUCCEEDED, exit_code=0)
    begin = ahead()
    waits = [dependencies.Wait(first.pk, "afterok")]
    job = deferred(alice, alpha, normal_priority, begin, depends_on=waits)

    cycle.run_cycle()
    waiting = fresh(job)
    cycle.run_cycle(now=begin.timestamp())

    assert (waiting.eligible_at, waiting.pending_reason) == (None, "deferred")
    assert (fresh(job).state, fresh(job).eligible_at) == (State.SCHEDULED, begin)


def test_a_retry_of_a_deferred_job_waits_out_its_backoff_and_keeps_its_begin(
    alice, alpha, normal_priority
):
    begin = ahead()
    job = deferred(alice, alpha, normal_priority, begin)
    cycle.run_cycle(now=begin.timestamp())
    failed = begin + MINUTES_10

    actions.end_attempt(job.attempts.get().pk, Attempt.Outcome.INFRA_ERROR, now=failed)
    cycle.run_cycle(now=failed.timestamp())

    job = fresh(job)
    assert job.state == State.QUEUED
    assert job.begin == begin < failed < job.not_before
    assert (job.pending_reason, job.estimated_start) == ("retry_backoff", job.not_before)
    assert job.eligible_at == job.not_before  # it never started: eligible again after it


def test_a_held_deferred_job_says_held_and_its_release_before_the_begin_keeps_it_deferred(
    alice, alpha, normal_priority
):
    begin = ahead()
    job = deferred(alice, alpha, normal_priority, begin)

    actions.hold(job, "alice")
    cycle.run_cycle()
    held = fresh(job)
    actions.release_hold(job, "alice")
    cycle.run_cycle()

    assert (held.pending_reason, held.eligible_at) == ("held", None)
    assert (fresh(job).pending_reason, fresh(job).eligible_at) == ("deferred", begin)


def test_a_deferred_job_released_after_its_begin_is_eligible_from_the_release(
    alice, alpha, normal_priority
):
    job = deferred(alice, alpha, normal_priority, ahead())
    actions.hold(job, "alice")
    # Two hours on: submitted two hours ago, its begin an hour ago, held since.
    Job.objects.filter(pk=job.pk).update(
        created=F("created") - 2 * H, begin=F("begin") - 2 * H, not_before=F("not_before") - 2 * H
    )
    released = database_now()

    actions.release_hold(job, "alice")

    job = fresh(job)
    assert job.begin < released <= job.eligible_at <= database_now()


def test_a_resubmitted_deferred_job_keeps_a_begin_still_ahead(alice, alpha, normal_priority):
    begin = ahead()
    job = deferred(alice, alpha, normal_priority, begin)
    actions.cancel(job, "canceled by alice")

    again, created = actions.resubmit(alice, fresh(job))

    assert created
    assert (again.begin, again.not_before, again.eligible_at) == (begin, begin, begin)


FORM = {"tenant": "alpha", "name": "nightly-eval", "family": "evaluation", "image": "python:3.11",
        "command": "python eval.py", "cpu_milli": "1000", "memory_mb": "1000", "gpus": "1",
        "gpu_milli": "0", "gpu_types": "", "workers": "1", "shards": "1",
        "priority_class": "normal", "priority": "0", "preemptible": "", "max_runtime_s": "600",
        "max_retries": "3", "env": "", "cluster_selector": ""}  # fmt: skip


def test_the_submit_form_says_its_begin_is_utc(client, alice):
    client.force_login(alice)

    page = client.get("/jobs/new/").content.decode()

    assert 'type="datetime-local" name="begin" value="" aria-describedby="begin-help"' in page
    assert "Start no earlier than (UTC)" in page
    assert '<small id="begin-help">The time is UTC, whatever your computer' in page


def test_the_submit_form_reads_its_begin_as_utc(client, alice):
    begin = ahead()
    client.force_login(alice)

    # What a browser's datetime-local input sends: the time without a zone.
    response = client.post("/jobs/new/", {**FORM, "begin": f"{begin:%Y-%m-%dT%H:%M}"})

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert (job.begin, job.not_before, job.eligible_at) == (begin, begin, begin)


def test_the_submit_form_takes_no_begin_as_none(client, alice):
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "begin": ""})

    assert response.status_code == 302
    assert Job.objects.get().begin is None


@pytest.mark.parametrize("begin", ["2030-02-31T02:00", "tomorrow", "02:00"])
def test_a_bad_begin_on_the_form_is_an_error_on_begin_and_writes_nothing(client, alice, begin):
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "begin": begin})

    assert response.status_code == 400
    assert '<span class="error" data-field="begin">A time with its zone' in response.text
    assert 'aria-invalid="true" aria-describedby="begin-help id_begin_error"' in response.text
    assert not Job.objects.exists()


def test_a_begin_over_a_year_ahead_on_the_form_is_an_error_and_is_shown_again(client, alice):
    typed = f"{ahead(timedelta(days=367)):%Y-%m-%dT%H:%M}"
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "begin": typed})

    assert response.status_code == 400
    assert '<span class="error" data-field="begin">More than 366 days ahead' in response.text
    assert f'name="begin" value="{typed}"' in response.text
    assert not Job.objects.exists()

"""Why a job ended, where its state is read: the API's `end_reason`, the portal list's Why
column and the job page's line under its state, from its last move into its ended state."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import Job, JobEvent
from jobs.states import State
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def ended(job, state: str, reason: str) -> Job:
    actions.transition(job, State.SCHEDULED, "placed on gpu-1")
    actions.transition(job, State.RUNNING, "attempt 1 running")
    actions.transition(job, state, reason)
    return Job.objects.get(pk=job.pk)


def api_job(user, job) -> dict:
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/v1/jobs/{job.pk}/").json()


def portal(user, path: str) -> str:
    client = Client()
    client.force_login(user)
    return client.get(path).content.decode()


def test_the_api_says_why_a_job_failed_and_nothing_while_it_lives(alpha, alice):
    failed = ended(
        JobFactory(tenant=alpha, owner=alice), State.FAILED, "worker 0 exited with code 3"
    )
    live = JobFactory(tenant=alpha, owner=alice)

    assert api_job(alice, failed)["end_reason"] == "worker 0 exited with code 3"
    assert api_job(alice, live)["end_reason"] == ""


def test_a_lost_attempts_late_success_not_taken_is_not_why_it_ended(alpha, alice):
    job = ended(JobFactory(tenant=alpha, owner=alice), State.FAILED, "worker 0 exited with code 3")
    JobEvent.objects.create(job=job, from_state=State.FAILED, to_state=State.FAILED,
                            reason="a lost attempt's success, not taken")  # fmt: skip

    assert api_job(alice, job)["end_reason"] == "worker 0 exited with code 3"


def test_the_api_list_reads_why_each_job_ended_with_the_jobs(alpha, alice):
    for n in range(3):
        ended(JobFactory(tenant=alpha, owner=alice), State.FAILED, f"worker 0 exited with code {n}")
    client = APIClient()
    client.force_authenticate(alice)
    client.get("/api/v1/jobs/")  # a first read: the session's and the tenants' queries warm

    with CaptureQueriesContext(connection) as one:
        listed = client.get("/api/v1/jobs/").json()["jobs"]
    ended(JobFactory(tenant=alpha, owner=alice), State.CANCELED, "canceled by alice")
    with CaptureQueriesContext(connection) as more:
        again = client.get("/api/v1/jobs/").json()["jobs"]

    assert [job["end_reason"] for job in listed] == [
        f"worker 0 exited with code {n}" for n in (2, 1, 0)
    ]
    assert again[0]["end_reason"] == "canceled by alice"
    assert len(more) == len(one)


def test_an_outsider_reads_why_it_ended_without_the_teams_other_jobs(alpha, alice, charlie):
    job = ended(JobFactory(tenant=alpha, owner=alice), State.CANCELED, "dependency 12 failed")
    assign_perm("view_job", charlie, job)

    assert api_job(alice, job)["end_reason"] == "dependency 12 failed"
    assert api_job(charlie, job)["end_reason"] == "a dependency failed"
    assert "a dependency failed" in portal(charlie, "/")
    assert "dependency 12" not in portal(charlie, "/")


def test_the_portal_list_says_why_a_job_failed_or_was_canceled_not_why_one_succeeded(alpha, alice):
    ended(
        JobFactory(tenant=alpha, owner=alice, name="a"), State.FAILED, "worker 1 exited with code 2"
    )
    ended(JobFactory(tenant=alpha, owner=alice, name="b"), State.CANCELED, "canceled by alice")
    ended(JobFactory(tenant=alpha, owner=alice, name="c"), State.SUCCEEDED, "exit code 0")

    page = portal(alice, "/")

    assert "worker 1 exited with code 2" in page and "canceled by alice" in page
    assert "exit code 0" not in page


def test_the_job_page_says_why_the_job_failed_under_its_state(alpha, alice):
    job = ended(JobFactory(tenant=alpha, owner=alice), State.FAILED, "exceeded its runtime limit")

    page = portal(alice, f"/jobs/{job.pk}/")

    assert '<p id="reason" aria-live="polite">exceeded its runtime limit</p>' in page

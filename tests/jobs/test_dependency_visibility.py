"""What a job shared with an outsider (a guardian view_job grant) shows of the team's other
jobs: only those the outsider may see."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm

from jobs.models import Dependency, JobEvent
from tests.factories import JobFactory
from tests.jobs.test_batch_cancel import api

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(alpha, alice):
    """alpha's job waiting for another of alpha's jobs, as the cycle writes its sentence."""
    first = JobFactory(tenant=alpha, owner=alice, name="prepare")
    job = JobFactory(
        tenant=alpha, owner=alice, name="train", pending_reason="waiting_for_dependency",
        pending_message=f"Waiting for job #{first.pk} to succeed.",
    )  # fmt: skip
    Dependency.objects.create(job=job, on=first)
    return job


def shown(user, job) -> dict:
    return api(user).get(f"/api/v1/jobs/{job.pk}/").json()


def portal(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_outsider_sees_no_id_of_the_team_jobs_a_shared_job_waits_for(charlie, waiting):
    assign_perm("jobs.view_job", charlie, waiting)
    first = waiting.dependency_links.get().on_id

    job = shown(charlie, waiting)
    listed = api(charlie).get("/api/v1/jobs/").json()["jobs"]
    page = portal(charlie).get(f"/jobs/{waiting.pk}/").text
    index = portal(charlie).get("/").text

    assert (job["depends_on"], job["dependencies"]) == ([], [])
    assert job["pending_message"] == "Waiting for jobs of its team that you cannot see."
    assert listed[0]["pending_message"] == job["pending_message"]
    for text in (page, index):
        assert f"#{first}" not in text
        assert "Waiting for jobs of its team that you cannot see." in text


def test_an_outsider_shown_the_dependency_too_sees_it(charlie, waiting):
    assign_perm("jobs.view_job", charlie, waiting)
    assign_perm("jobs.view_job", charlie, waiting.dependency_links.get().on)

    job = shown(charlie, waiting)

    assert job["depends_on"] == [waiting.dependency_links.get().on_id]
    assert job["pending_message"] == waiting.pending_message


def test_the_team_sees_every_id(bob, waiting):
    job = shown(bob, waiting)

    assert job["depends_on"] == [waiting.dependency_links.get().on_id]
    assert job["pending_message"] == waiting.pending_message
    assert waiting.pending_message in portal(bob).get(f"/jobs/{waiting.pk}/").text


def test_the_job_list_reads_the_dependencies_of_a_page_in_one_query(alice, alpha, charlie, gamma):
    def queries(own: int) -> int:
        JobFactory.create_batch(own, tenant=gamma, owner=charlie)
        with CaptureQueriesContext(connection) as caught:
            assert portal(charlie).get("/").status_code == 200
        return len(caught)

    job = JobFactory(tenant=alpha, owner=alice, pending_reason="waiting_for_dependency",
                     pending_message="Waiting for job #1 to succeed.")  # fmt: skip
    Dependency.objects.create(job=job, on=JobFactory(tenant=alpha, owner=alice))
    assign_perm("jobs.view_job", charlie, job)  # one shared job naming a hidden one

    assert queries(5) == queries(25)


def test_a_shared_jobs_events_do_not_name_the_teams_jobs(alice, alpha, bob, charlie, waiting):
    assign_perm("jobs.view_job", charlie, waiting)
    first = waiting.dependency_links.get().on_id
    JobEvent.objects.create(job=waiting, from_state="queued", to_state="queued",
                            reason=f"dependencies afterok:{first}:77, set by alice")  # fmt: skip
    JobEvent.objects.create(job=waiting, from_state="queued", to_state="canceled",
                            reason=f"dependency {first} failed")  # fmt: skip

    def reasons(user):
        events = api(user).get(f"/api/v1/jobs/{waiting.pk}/events/").json()["events"]
        return [event["reason"] for event in events][-2:]

    assert reasons(charlie) == ["dependencies afterok:..., set by alice", "a dependency failed"]
    assert reasons(bob) == [f"dependencies afterok:{first}:77, set by alice",
                            f"dependency {first} failed"]  # fmt: skip

"""Per-job guardian grants: given in the admin, used through the API and the portal.

A cancel_job grant lets someone outside the job's tenant cancel that one job without seeing it;
without the grant (or a membership) the job stays a 404.
"""

import pytest
from django.contrib.auth.models import Group, Permission
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs import access
from jobs.states import State
from tests.factories import JobFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def job(alpha, alice):
    return JobFactory(tenant=alpha, owner=alice, name="alice-train", env={"TOKEN": "s3cret"})


def api_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def state_of(job):
    job.refresh_from_db()
    return job.state


def test_an_admin_reaches_the_object_permissions_page_of_a_job(admin_client, job):
    change = admin_client.get(f"/admin/jobs/job/{job.pk}/change/")
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/permissions/")

    assert f"/admin/jobs/job/{job.pk}/permissions/" in change.text  # the "Object permissions" link
    assert page.status_code == 200
    assert "alice-train" in page.text


def test_a_cancel_grant_given_in_the_admin_lets_the_user_cancel(admin_client, job, charlie):
    pick = admin_client.post(
        f"/admin/jobs/job/{job.pk}/permissions/",
        {"user": "charlie", "submit_manage_user": "Manage user"},
    )
    admin_client.post(pick.url, {"permissions": ["cancel_job"]})

    response = api_for(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert pick.url == f"/admin/jobs/job/{job.pk}/permissions/user-manage/{charlie.pk}/"
    assert response.status_code == 202
    assert state_of(job) == State.CANCELED


def test_staff_without_guardians_own_permissions_cannot_grant(client, job, charlie):
    staff = UserFactory(username="operator", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="change_job"))
    client.force_login(staff)

    page = client.get(f"/admin/jobs/job/{job.pk}/permissions/")
    grant = client.post(
        f"/admin/jobs/job/{job.pk}/permissions/user-manage/{charlie.pk}/",
        {"permissions": ["cancel_job"]},
    )

    assert (page.status_code, page.url) == (302, "/admin/")
    assert (grant.status_code, grant.url) == (302, "/admin/")
    assert not charlie.has_perm("jobs.cancel_job", job)


def test_an_outsider_with_the_cancel_grant_alone_cancels_through_the_api(job, charlie):
    assign_perm("jobs.cancel_job", charlie, job)

    response = api_for(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 202
    assert response.json() == {"id": job.pk, "state": State.CANCELED}  # not the env, say
    assert state_of(job) == State.CANCELED


def test_a_cancel_grant_alone_does_not_show_the_job(job, charlie):
    assign_perm("jobs.cancel_job", charlie, job)

    assert api_for(charlie).get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert api_for(charlie).get("/api/v1/jobs/").json()["jobs"] == []


def test_a_cancel_grant_to_a_group_lets_its_members_cancel(job, charlie):
    reviewers = Group.objects.create(name="reviewers")
    charlie.groups.add(reviewers)
    assign_perm("jobs.cancel_job", reviewers, job)

    response = api_for(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 202
    assert state_of(job) == State.CANCELED


def test_a_cancel_grant_on_one_job_leaves_its_tenants_other_jobs_a_404(job, alpha, alice, charlie):
    other = JobFactory(tenant=alpha, owner=alice)
    assign_perm("jobs.cancel_job", charlie, job)

    response = api_for(charlie).post(f"/api/v1/jobs/{other.pk}/cancel/")

    assert response.status_code == 404
    assert state_of(other) == State.QUEUED


def test_an_outsider_with_neither_membership_nor_grant_gets_a_404_from_the_api(job, charlie):
    response = api_for(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 404
    assert state_of(job) == State.QUEUED


def test_an_outsider_with_the_cancel_grant_alone_cancels_from_the_portal(client, job, charlie):
    assign_perm("jobs.cancel_job", charlie, job)
    client.force_login(charlie)

    response = client.post(f"/jobs/{job.pk}/cancel/")

    assert (response.status_code, response.url) == (302, "/")  # its page would be a 404
    assert state_of(job) == State.CANCELED


def test_an_outsider_with_neither_membership_nor_grant_gets_a_404_from_the_portal(
    client, job, alpha, alice, charlie
):
    assign_perm("jobs.cancel_job", charlie, JobFactory(tenant=alpha, owner=alice))
    client.force_login(charlie)

    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    assert state_of(job) == State.QUEUED


def test_a_team_mate_is_still_sent_back_to_the_job_page(client, job, bob):
    client.force_login(bob)

    response = client.post(f"/jobs/{job.pk}/cancel/")

    assert response.url == f"/jobs/{job.pk}/"
    assert state_of(job) == State.CANCELED


def test_a_view_grant_is_read_as_ids_so_the_job_query_scans_no_other_jobs(job, charlie):
    assign_perm("jobs.view_job", charlie, job)
    group = Group.objects.create(name="auditors")
    group.user_set.add(charlie)
    other = JobFactory()
    assign_perm("jobs.view_job", group, other)

    visible = access.visible_jobs(charlie)

    assert sorted(visible.values_list("pk", flat=True)) == sorted([job.pk, other.pk])
    assert str(visible.query).count('FROM "jobs_job"') == 1  # no subquery over every job

"""Changing a queued job's priority (POST /api/v1/jobs/<id>/priority/, CLI `priority`)."""

import re

import pytest
from django.test import Client
from guardian.shortcuts import assign_perm

from jobs import cycle
from jobs.models import Job, JobEvent
from jobs.states import State
from quotas.models import Membership
from tests.factories import (
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)
from tests.jobs.test_batch_cancel import api, batch_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def classes(alpha):
    """normal (0), low (-10), and high (100, may preempt) open to alpha only."""
    high = PriorityClassFactory(name="high", value=100, may_preempt=True)
    high.tenants.add(alpha)
    return {"normal": PriorityClassFactory(), "low": PriorityClassFactory(name="low", value=-10),
            "high": high}  # fmt: skip


def change(user, job, **body):
    return api(user).post(f"/api/v1/jobs/{job.pk}/priority/", body, format="json")


def test_a_queued_job_moves_to_another_class_and_is_placed_as_one_of_it(alice, alpha, classes):
    NodeFactory(gpu_count=8)
    early = JobFactory(tenant=alpha, owner=alice, gpus=8, priority_class=classes["normal"])
    late = JobFactory(tenant=alpha, owner=alice, gpus=8, priority_class=classes["low"])

    response = change(alice, late, priority_class="high", priority=5)
    cycle.run_cycle()

    assert response.status_code == 200
    assert (response.json()["priority_class"], response.json()["priority"]) == ("high", 5)
    assert response.json()["changed"] == 1
    late.refresh_from_db(), early.refresh_from_db()
    assert (late.state, early.state) == (State.SCHEDULED, State.QUEUED)  # it went first
    noted = JobEvent.objects.filter(job=late, reason__startswith="priority").get()
    assert (noted.from_state, noted.to_state, noted.reason) == (
        State.QUEUED, State.QUEUED, "priority set to high +5 by alice",
    )  # fmt: skip


def test_the_value_alone_changes_within_the_class(alice, alpha, classes):
    job = JobFactory(tenant=alpha, owner=alice, priority_class=classes["normal"])

    change(alice, job, priority=-7)

    job.refresh_from_db()
    assert (job.priority_class.name, job.priority) == ("normal", -7)


def test_a_batch_moves_its_queued_shards_only(alice, alpha, classes):
    batch = batch_of(alice, alpha, 4, running_every=2)  # shards 0 and 2 run

    response = change(alice, batch, priority_class="low")

    assert response.json()["changed"] == 2
    rows = dict(batch.batch().values_list("shard_index", "priority_class__name"))
    assert rows == {0: "normal", 1: "low", 2: "normal", 3: "low"}


def test_a_class_not_open_to_the_tenant_is_a_400_naming_it(bob, charlie, gamma, classes):
    job = JobFactory(tenant=gamma, owner=charlie, priority_class=classes["normal"])

    refused = change(charlie, job, priority_class="high")
    unknown = change(charlie, job, priority_class="urgent")

    assert (refused.status_code, unknown.status_code) == (400, 400)
    assert "priority_class" in refused.json() and "priority_class" in unknown.json()
    job.refresh_from_db()
    assert job.priority_class.name == "normal"


@pytest.mark.parametrize("body", [{}, {"priority": 1001}, {"priority": "x"}])
def test_a_change_of_nothing_or_out_of_range_is_a_400(alice, alpha, classes, body):
    job = JobFactory(tenant=alpha, owner=alice, priority_class=classes["normal"])

    response = change(alice, job, **body)

    assert response.status_code == 400
    assert not JobEvent.objects.filter(job=job, reason__startswith="priority").exists()


def test_a_job_that_left_the_queue_is_a_409(alice, alpha, classes):
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)

    assert change(alice, job, priority=3).status_code == 409


def test_who_may_not_cancel_may_not_change_it(alice, alpha, charlie, classes):
    job = JobFactory(tenant=alpha, owner=alice, priority_class=classes["normal"])
    assign_perm("jobs.view_job", charlie, job)
    other = JobFactory(tenant=alpha, owner=alice)

    assert change(charlie, job, priority=3).status_code == 403
    assign_perm("jobs.cancel_job", charlie, other)
    granted = change(charlie, other, priority=3)
    assert granted.status_code == 200 and set(granted.json()) == {
        "id", "state", "priority_class", "priority", "changed",
    }  # fmt: skip
    assert Job.objects.get(pk=job.pk).priority == 0


def portal_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_job_page_moves_a_queued_job_to_a_class_open_to_its_tenant(alice, alpha, classes):
    job = JobFactory(tenant=alpha, owner=alice, priority_class=classes["normal"])
    page = portal_of(alice).get(f"/jobs/{job.pk}/").text
    options = re.findall(r'<option value="([^"]+)"', page)

    moved = portal_of(alice).post(f"/jobs/{job.pk}/priority/", {"priority_class": "high",
                                                                 "priority": "9"})  # fmt: skip

    assert 'id="priority-form"' in page and options == ["high", "normal", "low"]
    assert moved.status_code == 302
    job.refresh_from_db()
    assert (job.priority_class.name, job.priority) == ("high", 9)


def test_the_job_page_refuses_a_class_not_open_to_its_tenant_and_says_why(charlie, gamma, classes):
    job = JobFactory(tenant=gamma, owner=charlie, priority_class=classes["normal"])

    page = portal_of(charlie).post(f"/jobs/{job.pk}/priority/", {"priority_class": "high"})

    assert page.status_code == 400
    assert "may not run jobs at &#x27;high&#x27;" in page.text
    assert ">high (" not in portal_of(charlie).get(f"/jobs/{job.pk}/").text


def test_a_viewer_gets_no_priority_form_and_cannot_post_one(alpha, alice, classes):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    job = JobFactory(tenant=alpha, owner=alice, priority_class=classes["normal"])

    page = portal_of(viewer).get(f"/jobs/{job.pk}/").text
    posted = portal_of(viewer).post(f"/jobs/{job.pk}/priority/", {"priority": "5"})

    assert 'id="priority-form"' not in page
    assert posted.status_code == 403
    assert Job.objects.get(pk=job.pk).priority == 0

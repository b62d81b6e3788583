"""Changing a queued training job's fewest workers (Slurm's `scontrol update NumNodes=MIN-MAX`
for a pending job): actions.set_min_workers, POST /api/v1/jobs/<id>/min-workers/ and the job
page's form. A rigid gang that waits for its whole gang is made elastic, or an elastic one
rigid again, without leaving its place in the queue."""

import time
from datetime import UTC, datetime

import pytest
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.exceptions import ValidationError

from jobs import actions, cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import Membership
from tests.factories import ClusterFactory, JobFactory, MembershipFactory, NodeFactory, UserFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit import batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_nodes():
    """Three 8-GPU nodes of one cluster: room for three of a gang's four workers."""
    return NodeFactory.create_batch(3, cluster=ClusterFactory())


@pytest.fixture
def vera(alpha):
    """A viewer of Alice's team: she sees its jobs and changes none."""
    user = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=user, role=Membership.Role.VIEWER)
    return user


def gang(alice, alpha, **fields) -> Job:
    """Alice's queued training gang of four 8-GPU workers (one node each), rigid unless told."""
    return JobFactory(tenant=alpha, owner=alice, workers=4, gpus=8, **fields)


def change(user, job, body) -> object:
    return api(user).post(f"/api/v1/jobs/{job.pk}/min-workers/", body, format="json")


def least(job: Job) -> int | None:
    return Job.objects.get(pk=job.pk).min_workers


def noted(job: Job) -> list[str]:
    return list(
        JobEvent.objects.filter(job=job, reason__startswith="min workers").values_list(
            "reason", flat=True
        )
    )


# -- the change, at the API ----------------------------------------------------------------------


def test_a_queued_rigid_gang_made_elastic_starts_with_the_free_nodes_at_the_next_cycle(
    alice, alpha, three_nodes
):
    job = gang(alice, alpha)
    assert cycle.run_cycle().placed == []  # its whole gang does not fit

    response = change(alice, job, {"min_workers": 2})
    placed = cycle.run_cycle().placed

    assert response.status_code == 200
    assert (response.json()["workers"], response.json()["min_workers"]) == (4, 2)
    assert placed == [job.pk]
    assert Attempt.objects.get(job=job).workers == 3


def test_null_makes_an_elastic_gang_rigid_again_and_it_waits_for_its_whole_gang(
    alice, alpha, three_nodes
):
    job = gang(alice, alpha, min_workers=2)

    response = change(alice, job, {"min_workers": None})

    assert (response.status_code, response.json()["min_workers"]) == (200, None)
    assert least(job) is None
    assert cycle.run_cycle().placed == []


def test_min_workers_equal_to_workers_is_stored_as_null(alice, alpha):
    job = gang(alice, alpha, min_workers=2)

    response = change(alice, job, {"min_workers": 4})

    assert (response.status_code, response.json()["min_workers"]) == (200, None)
    assert least(job) is None


def test_the_change_keeps_the_jobs_place_in_the_queue(alice, alpha):
    job = gang(alice, alpha)
    Job.objects.filter(pk=job.pk).update(eligible_at=datetime(2026, 1, 1, tzinfo=UTC))

    change(alice, job, {"min_workers": 2})

    assert Job.objects.get(pk=job.pk).eligible_at == datetime(2026, 1, 1, tzinfo=UTC)


def test_the_change_records_an_event_from_and_to_queued_and_wakes_the_scheduler(
    alice, bob, alpha, django_capture_on_commit_callbacks
):
    job = gang(alice, alpha)

    with django_capture_on_commit_callbacks() as hooks:
        change(bob, job, {"min_workers": 2})

    event = JobEvent.objects.get(job=job)
    assert (event.from_state, event.to_state, event.reason) == (
        State.QUEUED, State.QUEUED, "min workers: at least 2, set by bob",
    )  # fmt: skip
    assert actions.kick in hooks


def test_a_change_to_rigid_records_that_all_start_together(alice, alpha):
    job = gang(alice, alpha, min_workers=2)

    change(alice, job, {"min_workers": None})

    assert noted(job) == ["min workers: none (all 4 together), set by alice"]


@pytest.mark.parametrize("body", [
    {"min_workers": 0}, {"min_workers": -1}, {"min_workers": 5}, {"min_workers": "two"},
    {"min_workers": 2.5}, {"min_workers": True}, {"min_workers": ""}, {},
])  # fmt: skip
def test_a_bad_value_is_a_400_naming_min_workers_and_writes_nothing(alice, alpha, body):
    job = gang(alice, alpha, min_workers=3)

    response = change(alice, job, body)

    assert (response.status_code, list(response.json())) == (400, ["min_workers"])
    assert least(job) == 3
    assert noted(job) == []


def test_more_than_its_workers_says_how_many_it_has(alice, alpha):
    job = gang(alice, alpha)

    response = change(alice, job, {"min_workers": 5})

    assert "5 is more than its 4 workers" in response.json()["min_workers"][0]


@pytest.mark.parametrize("family", [Family.EVALUATION, Family.BATCH_INFERENCE])
def test_a_job_that_is_not_training_is_a_400_naming_min_workers(alice, alpha, family):
    job = JobFactory(tenant=alpha, owner=alice, family=family)

    response = change(alice, job, {"min_workers": 1})

    assert response.status_code == 400
    assert "Only a training job is elastic" in response.json()["min_workers"][0]
    assert noted(job) == []


def test_a_batchs_shard_is_a_400_naming_min_workers(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=3)

    response = change(alice, first, {"min_workers": 1})

    assert (response.status_code, list(response.json())) == (400, ["min_workers"])
    assert set(first.batch().values_list("min_workers", flat=True)) == {None}


@pytest.mark.parametrize("state", [State.SCHEDULED, State.RUNNING, State.SUCCEEDED])
def test_a_job_not_queued_is_a_409(alice, alpha, state):
    job = gang(alice, alpha, state=state)

    response = change(alice, job, {"min_workers": 2})

    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"Only a queued job's fewest workers change: job #{job.pk} is {state}."
    )
    assert (least(job), noted(job)) == (None, [])


def test_a_viewer_gets_a_403_and_another_team_a_404(alice, alpha, vera, charlie):
    job = gang(alice, alpha)

    assert change(vera, job, {"min_workers": 2}).status_code == 403
    assert change(charlie, job, {"min_workers": 2}).status_code == 404
    assert least(job) is None


def test_a_holder_of_a_cancel_grant_alone_is_told_the_setting_and_no_more(alice, alpha, charlie):
    job = gang(alice, alpha)
    assign_perm("jobs.cancel_job", charlie, job)

    response = change(charlie, job, {"min_workers": 2})

    assert response.status_code == 200
    assert response.json() == {
        "id": job.pk, "state": State.QUEUED, "workers": 4, "min_workers": 2, "changed": 1,
    }  # fmt: skip


# -- the verb and the commit ---------------------------------------------------------------------


def test_the_verb_refuses_fewer_than_one_on_min_workers(alice, alpha):
    job = gang(alice, alpha)

    with pytest.raises(ValidationError) as refused:
        actions.set_min_workers(job, 0, "alice")

    assert list(refused.value.detail) == ["min_workers"]
    assert least(job) is None


def test_a_gang_made_rigid_after_the_snapshot_does_not_start_smaller(alice, alpha, three_nodes):
    job = gang(alice, alpha, min_workers=2)
    outcomes = place(snapshot.load(time.time()).snapshot).outcomes
    placed = [o for o in outcomes if o.status == PLACED]
    assert [len(o.workers) for o in placed] == [3]  # decided while it was elastic

    actions.set_min_workers(job, None, "alice")

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


# -- the job page -------------------------------------------------------------------------------


def portal_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_queued_training_jobs_page_has_the_form_with_its_setting(alice, alpha):
    job = gang(alice, alpha, min_workers=2)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert f'<form id="min-workers-form" method="post" action="/jobs/{job.pk}/min-workers/">' in (
        page
    )
    assert "Fewest workers it may start with" in page
    assert 'name="min_workers" type="number" min="1" max="4" value="2"' in page


def test_a_member_makes_a_gang_elastic_from_the_page_and_the_page_shows_it(alice, bob, alpha):
    job = gang(alice, alpha)

    response = portal_of(bob).post(f"/jobs/{job.pk}/min-workers/", {"min_workers": "2"})

    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    page = portal_of(bob).get(response.url).text
    assert '<dd id="workers">4 (elastic: at least 2;' in page
    assert 'value="2"' in page
    assert noted(job) == ["min workers: at least 2, set by bob"]


def test_an_empty_field_makes_the_gang_rigid_again(alice, alpha):
    job = gang(alice, alpha, min_workers=2)

    portal_of(alice).post(f"/jobs/{job.pk}/min-workers/", {"min_workers": ""})

    assert least(job) is None
    assert '<dd id="workers">4</dd>' in portal_of(alice).get(f"/jobs/{job.pk}/").text


@pytest.mark.parametrize(
    ("typed", "says"),
    [("0", "At least 1"), ("two", "valid integer"), ("5", "5 is more than its 4 workers")],
)
def test_a_refused_value_is_the_page_with_why_on_the_field(alice, alpha, typed, says):
    job = gang(alice, alpha, min_workers=3)

    response = portal_of(alice).post(f"/jobs/{job.pk}/min-workers/", {"min_workers": typed})

    assert response.status_code == 400
    assert says in response.text
    assert 'aria-invalid="true" aria-describedby="min-workers-help error"' in response.text
    assert (least(job), noted(job)) == (3, [])


def test_a_running_jobs_form_is_hidden_and_a_change_is_a_409(alice, alpha):
    job = gang(alice, alpha, state=State.RUNNING)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text
    posted = portal_of(alice).post(f"/jobs/{job.pk}/min-workers/", {"min_workers": "2"})

    assert f'action="/jobs/{job.pk}/min-workers/" hidden>' in page
    assert posted.status_code == 409 and "Only a queued job" in posted.text
    assert least(job) is None


def test_a_job_that_is_not_training_has_no_form(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, family=Family.EVALUATION)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert 'id="min-workers-form"' not in page


def test_a_viewer_has_no_form_and_may_not_post_and_another_team_gets_a_404(
    alice, alpha, vera, charlie
):
    job = gang(alice, alpha)

    page = portal_of(vera).get(f"/jobs/{job.pk}/").text
    posted = portal_of(vera).post(f"/jobs/{job.pk}/min-workers/", {"min_workers": "2"})
    other = portal_of(charlie).post(f"/jobs/{job.pk}/min-workers/", {"min_workers": "2"})

    assert 'id="min-workers-form"' not in page
    assert (posted.status_code, other.status_code) == (403, 404)
    assert least(job) is None

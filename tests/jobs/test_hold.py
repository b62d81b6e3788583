"""Holding a queued job (Slurm's hold / release): a held job is never placed until it is
released. A team's own hold, its members release; a platform admin's, only a platform admin."""

import time

import pytest
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs import actions, cycle, dependencies, snapshot
from jobs.models import Family, Job, JobEvent
from jobs.placement import place
from jobs.states import State
from quotas.models import Membership
from tests.factories import (
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def room(east):
    return NodeFactory(cluster=east, gpu_type="A100", gpu_count=8)


@pytest.fixture
def admin(db):
    return UserFactory(username="root", is_superuser=True, is_staff=True)


@pytest.fixture
def viewer(alpha):
    user = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=user, role=Membership.Role.VIEWER)
    return user


def job_of(alice, alpha, **kw):
    return JobFactory(owner=alice, tenant=alpha, family=Family.TRAINING, **kw)


def test_a_held_job_is_not_placed_and_says_why(alice, alpha, room):
    job = job_of(alice, alpha)

    response = api(alice).post(f"/api/v1/jobs/{job.pk}/hold/")
    cycle.run_cycle()

    assert response.status_code == 200
    assert response.json()["held"] == "user"
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.pending_reason == "held"
    assert "alice" in job.pending_message


def test_a_released_job_is_placed_by_the_next_cycle(alice, alpha, room):
    job = job_of(alice, alpha)
    actions.hold(job, "alice")
    cycle.run_cycle()

    response = api(alice).post(f"/api/v1/jobs/{job.pk}/release/")
    cycle.run_cycle()

    assert response.status_code == 200
    job.refresh_from_db()
    assert (job.held, job.state) == ("", State.SCHEDULED)


def test_hold_and_release_are_in_the_jobs_history(alice, alpha):
    job = job_of(alice, alpha)

    actions.hold(job, "alice")
    actions.release_hold(job, "bob")

    events = JobEvent.objects.filter(job=job).order_by("id")
    assert [(e.from_state, e.to_state, e.reason) for e in events] == [
        ("queued", "queued", "held by alice"),
        ("queued", "queued", "released by bob"),
    ]


def test_a_job_held_after_the_snapshot_is_not_placed_by_that_cycle(alice, alpha, room):
    job = job_of(alice, alpha)
    loaded = snapshot.load(time.time())
    decision = place(loaded.snapshot)
    assert decision.by_job()[str(job.pk)].status == "placed"

    actions.hold(job, "alice")
    result = cycle.CycleResult()
    cycle.commit(decision, time.time(), result)
    cycle.explain(decision, loaded, result)

    job.refresh_from_db()
    assert result.placed == []
    assert (job.state, job.pending_reason) == (State.QUEUED, "held")


def test_a_held_job_keeps_its_explanation_through_cycles(alice, alpha, room):
    big = job_of(alice, alpha, gpus=16)  # never fits: the cycle would explain it
    actions.hold(big, "alice")

    cycle.run_cycle()

    big.refresh_from_db()
    assert big.pending_reason == "held"


def test_holding_a_batch_holds_its_queued_shards_only(alice, alpha):
    first, _ = actions.submit(alice, alpha, {
        "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
        "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 4,
        "priority_class": job_of(alice, alpha).priority_class,
    })  # fmt: skip
    running = first.batch().last()
    Job.objects.filter(pk=running.pk).update(state=State.RUNNING)

    held = actions.hold(first, "alice")

    assert held == 3
    states = dict(first.batch().values_list("pk", "held"))
    assert states.pop(running.pk) == ""
    assert set(states.values()) == {"user"}


def test_only_a_queued_job_can_be_held(alice, alpha):
    job = job_of(alice, alpha, state=State.RUNNING)

    response = api(alice).post(f"/api/v1/jobs/{job.pk}/hold/")

    assert response.status_code == 409
    assert "queued" in response.json()["detail"]
    job.refresh_from_db()
    assert job.held == ""


def test_releasing_a_job_not_held_is_a_conflict(alice, alpha):
    job = job_of(alice, alpha)

    response = api(alice).post(f"/api/v1/jobs/{job.pk}/release/")

    assert response.status_code == 409


def admin_action(user, action: str, job) -> None:
    client = Client()
    client.force_login(user)
    data = {"action": action, "_selected_action": [job.pk]}
    assert client.post("/admin/jobs/job/", data).status_code == 302


def test_a_platform_admins_hold_is_released_only_by_a_platform_admin(alice, alpha, admin):
    job = job_of(alice, alpha)
    admin_action(admin, "hold_jobs", job)
    job.refresh_from_db()
    assert (job.held, job.pending_reason) == ("admin", "held")

    refused = api(alice).post(f"/api/v1/jobs/{job.pk}/release/")
    job.refresh_from_db()
    assert refused.status_code == 403
    assert job.held == "admin"

    admin_action(admin, "release_jobs", job)
    job.refresh_from_db()
    assert job.held == ""


def test_a_platform_admin_in_the_team_holds_as_a_platform_admin_through_the_api(alice, alpha,
                                                                               admin):  # fmt: skip
    MembershipFactory(tenant=alpha, user=admin, role=Membership.Role.MEMBER)
    job = job_of(alice, alpha)

    assert api(admin).post(f"/api/v1/jobs/{job.pk}/hold/").json()["held"] == "admin"


def test_a_team_hold_does_not_lift_an_admin_hold(alice, alpha, admin):
    job = job_of(alice, alpha)
    actions.hold(job, "root", admin=True)

    api(alice).post(f"/api/v1/jobs/{job.pk}/hold/")

    job.refresh_from_db()
    assert job.held == "admin"


def test_a_viewer_may_not_hold_and_another_team_does_not_see_the_job(alice, alpha, viewer,
                                                                    charlie):  # fmt: skip
    job = job_of(alice, alpha)

    assert api(viewer).post(f"/api/v1/jobs/{job.pk}/hold/").status_code == 403
    assert api(charlie).post(f"/api/v1/jobs/{job.pk}/hold/").status_code == 404
    job.refresh_from_db()
    assert job.held == ""


def test_a_held_preemptor_evicts_nobody(alice, alpha):
    job = job_of(alice, alpha)
    victim = job_of(alice, alpha, state=State.RUNNING)
    actions.hold(job, "alice")

    asked = actions.preempt({job.pk: [victim.pk]})

    assert asked == []


def test_the_portal_holds_and_releases_from_the_job_page(alice, alpha):
    job = job_of(alice, alpha)
    client = Client()
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/")
    assert f"/jobs/{job.pk}/hold/" in page.content.decode()
    client.post(f"/jobs/{job.pk}/hold/")
    job.refresh_from_db()
    assert job.held == "user"
    assert f"/jobs/{job.pk}/release/" in client.get(f"/jobs/{job.pk}/").content.decode()

    client.post(f"/jobs/{job.pk}/release/")
    job.refresh_from_db()
    assert job.held == ""


SPEC = {
    "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
    "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60,
}  # fmt: skip


def a_batch(alice, alpha, shards=3) -> list[Job]:
    spec = {**SPEC, "shards": shards, "priority_class": PriorityClassFactory()}
    first, _ = actions.submit(alice, alpha, spec)
    return list(first.batch())


def test_the_answer_counts_the_shards_held_when_the_first_has_left_the_queue(alice, alpha):
    first, *rest = a_batch(alice, alpha)
    Job.objects.filter(pk=first.pk).update(state=State.RUNNING)

    response = api(alice).post(f"/api/v1/jobs/{first.pk}/hold/")

    assert (response.status_code, response.json()["changed"]) == (200, 2)
    assert {job.held for job in Job.objects.filter(pk__in=[j.pk for j in rest])} == {"user"}


def test_a_team_releases_its_own_holds_of_a_batch_and_leaves_a_platform_admins(alice, alpha,
                                                                              admin):  # fmt: skip
    first, second, third = a_batch(alice, alpha)
    actions.hold(third, "root", admin=True)
    actions.hold(first, "alice")
    page = Client()
    page.force_login(alice)
    assert f"/jobs/{first.pk}/release/" in page.get(f"/jobs/{first.pk}/").content.decode()

    response = api(alice).post(f"/api/v1/jobs/{first.pk}/release/")

    held = dict(first.batch().values_list("pk", "held"))
    assert (response.status_code, response.json()["changed"]) == (200, 2)
    assert held == {first.pk: "", second.pk: "", third.pk: "admin"}
    assert api(alice).post(f"/api/v1/jobs/{first.pk}/release/").status_code == 403


def waiting_for_a_running_job(alice, alpha):
    dependency = JobFactory(owner=alice, tenant=alpha)
    spec = {**SPEC, "family": Family.TRAINING, "priority_class": dependency.priority_class,
            "depends_on": [dependencies.Wait(dependency.pk, "afterok")]}  # fmt: skip
    job, _ = actions.submit(alice, alpha, spec)
    return dependency, job


def test_a_held_job_that_ends_is_no_longer_held(alice, alpha):
    dependency, job = waiting_for_a_running_job(alice, alpha)
    actions.hold(job, "alice")

    actions.cancel(dependency)  # the cascade cancels the held dependent

    job.refresh_from_db()
    assert (job.state, job.held) == (State.CANCELED, "")


def test_a_held_job_waiting_for_a_dependency_keeps_saying_it_is_held(alice, alpha, room,
                                                                    monkeypatch):  # fmt: skip
    dependency, job = waiting_for_a_running_job(alice, alpha)
    Job.objects.filter(pk=dependency.pk).update(state=State.RUNNING)
    actions.hold(job, "alice")
    sent = []
    real = actions.record_pending
    monkeypatch.setattr(actions, "record_pending", lambda c: (sent.append(c), real(c))[1])

    result = cycle.run_cycle()

    job.refresh_from_db()
    assert job.pending_reason == "held"
    assert result.waiting == 0 and all(job.pk not in changes for changes in sent)


def test_the_job_answers_the_hold_verb_open_to_its_reader(alice, alpha, viewer, admin):
    MembershipFactory(tenant=alpha, user=admin, role=Membership.Role.MEMBER)
    job = job_of(alice, alpha)
    verb = lambda user: api(user).get(f"/api/v1/jobs/{job.pk}/").json()["hold_verb"]  # noqa: E731
    assert (verb(alice), verb(viewer)) == ("hold", "")

    actions.hold(job, "alice")
    assert (verb(alice), verb(admin)) == ("release", "release")

    actions.hold(job, "root", admin=True)
    assert (verb(alice), verb(admin)) == ("", "release")

    Job.objects.filter(pk=job.pk).update(state=State.RUNNING, held="")
    assert (verb(alice), verb(admin)) == ("", "")


def test_the_job_page_draws_the_hold_button_hidden_while_the_job_is_not_queued(alice, alpha):
    job = job_of(alice, alpha, state=State.RUNNING)
    client = Client()
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert f'<form id="hold-form" method="post" action="/jobs/{job.pk}/hold/" hidden>' in page


def test_a_refused_hold_is_a_409_in_the_portal_for_a_cancel_grant_holder_alone(
    alpha, alice, charlie
):
    job = job_of(alice, alpha, state=State.RUNNING)
    assign_perm("jobs.cancel_job", charlie, job)
    client = Client()
    client.force_login(charlie)

    via_api = api(charlie).post(f"/api/v1/jobs/{job.pk}/hold/")
    via_portal = client.post(f"/jobs/{job.pk}/hold/")

    assert via_api.status_code == via_portal.status_code == 409
    assert "Only a queued job can be held" in via_portal.content.decode()

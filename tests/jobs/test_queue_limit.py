"""A tenant's limit on queued jobs (Tenant.max_queued_jobs, Slurm's MaxSubmitJobs)."""

import pytest
from rest_framework.exceptions import ValidationError

from jobs import actions
from jobs.models import Job
from jobs.states import State
from quotas.models import Tenant
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import SPEC, api
from tests.jobs.test_lock_order import commit_once_waited_on, in_a_thread, other_connection

pytestmark = pytest.mark.django_db


def limit(tenant, most: int | None) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(max_queued_jobs=most)


def post(user, **changes):
    PriorityClassFactory(name="normal")
    body = {**SPEC, "family": "evaluation", "tenant": "alpha", **changes}
    return api(user).post("/api/v1/jobs/", body, format="json")


def test_a_submission_past_the_limit_is_a_400_naming_tenant_and_writes_nothing(alice, alpha):
    limit(alpha, 2)
    JobFactory.create_batch(2, tenant=alpha, owner=alice)

    response = post(alice)

    assert response.status_code == 400
    assert response.json()["tenant"] == [
        "alpha has 2 jobs queued and may have at most 2 (max_queued_jobs), not one more: wait "
        "for some to start, or cancel some."
    ]
    assert Job.objects.count() == 2


def test_a_batch_counts_its_shards(alice, alpha):
    limit(alpha, 5)
    JobFactory.create_batch(2, tenant=alpha, owner=alice)

    refused = post(alice, family="batch_inference", shards=4)
    accepted = post(alice, family="batch_inference", shards=3)

    assert (refused.status_code, accepted.status_code) == (400, 201)
    assert "not these 4 jobs" in refused.json()["tenant"][0]
    assert Job.objects.filter(state=State.QUEUED).count() == 5


def test_jobs_that_left_the_queue_make_room_and_held_ones_do_not(alice, alpha):
    limit(alpha, 2)
    started, held = JobFactory.create_batch(2, tenant=alpha, owner=alice)
    Job.objects.filter(pk=held.pk).update(held="user")
    Job.objects.filter(pk=started.pk).update(state=State.RUNNING)

    first, second = post(alice), post(alice)

    assert (first.status_code, second.status_code) == (201, 400)


def test_no_limit_and_other_tenants_jobs_do_not_count(alice, alpha, gamma, charlie):
    JobFactory.create_batch(3, tenant=gamma, owner=charlie)
    limit(gamma, 1)

    assert post(alice).status_code == 201
    limit(alpha, 1)
    assert post(alice).status_code == 400


def test_a_repeated_submission_is_answered_with_its_job_not_refused(alice, alpha):
    limit(alpha, 1)
    first = post(alice, idempotency_key="k1")

    again = post(alice, idempotency_key="k1")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]


def run_while_its_turn_is_held(holder, submit) -> None:
    """Run `submit` in a thread while `holder` (another connection) holds the tenant's turn:
    once it waits for the turn, `holder` commits."""
    commit_once_waited_on(holder, in_a_thread(submit), "pg_advisory_xact_lock")


@pytest.mark.django_db(transaction=True)
def test_a_submission_waits_its_turn_and_counts_what_the_one_before_it_queued(alice, alpha):
    limit(alpha, 1)
    earlier = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)
    spec = {**SPEC, "family": "evaluation", "priority_class": PriorityClassFactory()}
    # Another submission of the tenant, in flight: it holds the tenant's turn and queues a job.
    other = other_connection()
    other.execute("SELECT pg_advisory_xact_lock(%s, %s)", [actions.QUEUE_LOCK, alpha.pk])
    other.execute("UPDATE jobs_job SET state = 'queued' WHERE id = %s", [earlier.pk])
    refusals = []

    def submit():
        try:
            actions.submit(alice, alpha, spec)
        except ValidationError as refusal:
            refusals.append(refusal.detail)

    run_while_its_turn_is_held(other, submit)

    assert len(refusals) == 1 and "tenant" in refusals[0]
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_twin_submission_waiting_for_its_turn_gets_the_job_its_twin_queued(alice, alpha):
    limit(alpha, 1)
    earlier = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)
    spec = {**SPEC, "family": "evaluation", "priority_class": PriorityClassFactory(),
            "idempotency_key": "click"}  # fmt: skip
    # The twin (the same form sent twice): it holds the tenant's turn and queues its job.
    twin = other_connection()
    twin.execute("SELECT pg_advisory_xact_lock(%s, %s)", [actions.QUEUE_LOCK, alpha.pk])
    twin.execute(
        "UPDATE jobs_job SET state = 'queued', idempotency_key = 'click' WHERE id = %s",
        [earlier.pk],
    )
    answers = []
    run_while_its_turn_is_held(twin, lambda: answers.append(actions.submit(alice, alpha, spec)))

    assert [(job.pk, created) for job, created in answers] == [(earlier.pk, False)]
    assert Job.objects.count() == 1

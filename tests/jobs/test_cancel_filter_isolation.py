"""A cancel_job grant alone (no view_job, outside the job's tenant) lets its holder cancel the job
named by its id, and reveals nothing else: a filter on what the job is (its name, state, tenant or
owner) never matches it, so a cancel of many cannot tell a right guess from a wrong one."""

import pytest
from guardian.shortcuts import assign_perm

from jobs.states import State
from tests.factories import AttemptFactory, JobFactory
from tests.jobs.test_batch_cancel import batch_of
from tests.jobs.test_cancel_many import cancel, states

pytestmark = pytest.mark.django_db


@pytest.fixture
def secret(alpha, alice, charlie):
    """alpha's running job "secret-run", which charlie may cancel but not see."""
    job = JobFactory(tenant=alpha, owner=alice, name="secret-run", state=State.RUNNING)
    AttemptFactory(job=job)
    assign_perm("jobs.cancel_job", charlie, job)
    return job


GUESSES = [
    # (case, a right guess, a wrong one)
    ("name", {"name": "secret-run"}, {"name": "other-run"}),
    ("ids and name", {"name": "secret-run"}, {"name": "other-run"}),
    ("ids and state", {"state": "running"}, {"state": "queued"}),
    ("ids, name and state", {"name": "secret-run", "state": "running"},
     {"name": "secret-run", "state": "queued"}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "right", "wrong"), GUESSES, ids=[c[0] for c in GUESSES])
def test_it_answers_a_right_guess_about_a_hidden_job_as_a_wrong_one_and_cancels_nothing(
    charlie, secret, case, right, wrong
):
    by_id = {"ids": [secret.pk]} if case.startswith("ids") else {}

    answers = [cancel(charlie, **by_id, **guess) for guess in (right, wrong)]

    assert [a.status_code for a in answers] == [202, 202]
    assert answers[0].json() == answers[1].json() == {"canceled": [], "more": False}
    assert states(secret) == [State.RUNNING]


def test_it_answers_a_filter_on_a_tenant_not_the_callers_as_it_does_any_other(charlie, secret):
    theirs, unknown = cancel(charlie, tenant="alpha"), cancel(charlie, tenant="nowhere")

    assert theirs.status_code == unknown.status_code == 400
    assert theirs.json()["tenant"] == ["No tenant 'alpha' of yours."]
    assert unknown.json()["tenant"] == ["No tenant 'nowhere' of yours."]
    assert states(secret) == [State.RUNNING]


def test_it_still_cancels_a_hidden_job_named_by_its_id_alone(charlie, secret):
    response = cancel(charlie, ids=[secret.pk])

    assert response.json() == {"canceled": [secret.pk], "more": False}
    assert states(secret) == [State.CANCELED]


def test_it_cancels_a_hidden_batch_named_by_its_id_alone_with_every_shard(alice, alpha, charlie):
    first = batch_of(alice, alpha, shards=3, running_every=2)
    assign_perm("jobs.cancel_job", charlie, first)
    shards = list(first.batch())

    filtered = cancel(charlie, ids=[first.pk], state="queued")
    named = cancel(charlie, ids=[first.pk])

    assert filtered.json() == {"canceled": [], "more": False}
    assert named.json()["canceled"] == [shard.pk for shard in shards]


def test_it_matches_a_job_shared_with_view_and_cancel_grants_by_its_name(
    alpha, alice, charlie, secret
):
    assign_perm("jobs.view_job", charlie, secret)

    response = cancel(charlie, name="secret-run", state="running")

    assert response.json() == {"canceled": [secret.pk], "more": False}


def test_its_filters_name_the_callers_own_jobs_beside_a_hidden_one(charlie, gamma, secret):
    own = JobFactory(tenant=gamma, owner=charlie, name="secret-run")

    response = cancel(charlie, ids=[secret.pk, own.pk], name="secret-run")

    assert response.json() == {"canceled": [own.pk], "more": False}
    assert states(secret, own) == [State.RUNNING, State.CANCELED]

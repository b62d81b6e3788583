"""Canceling the jobs a filter names (POST /api/v1/jobs/cancel/), as Slurm's scancel does."""

import json

import pytest
from guardian.shortcuts import assign_perm

from jobs.models import Attempt, Job, JobEvent
from jobs.states import State
from quotas.models import Membership
from tests.factories import AttemptFactory, JobFactory, MembershipFactory, UserFactory
from tests.jobs.test_batch_cancel import api, batch_of

pytestmark = pytest.mark.django_db


def cancel(user, **filters):
    body = json.dumps(filters)  # a lone surrogate escaped, as \ud800
    return api(user).post("/api/v1/jobs/cancel/", body, content_type="application/json")


def states(*jobs) -> list[str]:
    return [Job.objects.get(pk=job.pk).state for job in jobs]


@pytest.fixture
def sweep(alpha, alice, bob, gamma, charlie):
    """Jobs named "sweep": two of alice's queued, one of bob's running, one ended, in alpha;
    one queued in gamma, charlie's; and alice's queued "other"."""
    jobs = {
        "queued": [JobFactory(tenant=alpha, owner=alice, name="sweep") for _ in range(2)],
        "running": JobFactory(tenant=alpha, owner=bob, name="sweep", state=State.RUNNING),
        "ended": JobFactory(tenant=alpha, owner=alice, name="sweep", state=State.SUCCEEDED),
        "theirs": JobFactory(tenant=gamma, owner=charlie, name="sweep"),
        "other": JobFactory(tenant=alpha, owner=alice, name="other"),
    }
    AttemptFactory(job=jobs["running"])
    return jobs


def test_a_name_cancels_every_live_job_of_it_the_caller_may_cancel(alice, sweep):
    queued, running = sweep["queued"], sweep["running"]

    response = cancel(alice, name="sweep")

    assert response.status_code == 202
    assert response.json() == {"canceled": sorted(j.pk for j in [*queued, running]),
                               "more": False}  # fmt: skip
    assert states(*queued, running) == [State.CANCELED] * 3
    assert states(sweep["ended"], sweep["theirs"], sweep["other"]) == [
        State.SUCCEEDED, State.QUEUED, State.QUEUED,
    ]  # fmt: skip
    assert running.attempts.get().stop_reason == Attempt.Outcome.CANCELED
    reasons = JobEvent.objects.filter(to_state=State.CANCELED).values_list("reason", flat=True)
    assert set(reasons) == {"canceled by alice"}


def test_a_state_and_mine_narrow_the_name(alice, bob, sweep):
    cancel(bob, name="sweep", state="queued", mine=True)  # bob's only sweep job runs
    assert states(*sweep["queued"], sweep["running"]) == [State.QUEUED] * 2 + [State.RUNNING]

    response = cancel(alice, name="sweep", state="queued")

    assert response.json()["canceled"] == [job.pk for job in sweep["queued"]]
    assert states(sweep["running"]) == [State.RUNNING]


def test_a_misspelled_filter_is_refused_naming_it_and_cancels_nothing(alice, sweep):
    response = cancel(alice, name="sweep", stat="queued")  # not every state of "sweep"

    assert response.status_code == 400
    assert response.json() == {"stat": ["There is no field 'stat' here. Did you mean 'state'?"]}
    assert states(*sweep["queued"], sweep["running"]) == [State.QUEUED] * 2 + [State.RUNNING]


def test_ids_name_only_the_jobs_the_caller_may_cancel(alice, charlie, sweep):
    viewed = sweep["other"]
    assign_perm("jobs.view_job", charlie, viewed)  # to see it, not to cancel it
    granted = sweep["queued"][0]
    assign_perm("jobs.cancel_job", charlie, granted)

    response = cancel(charlie, ids=[viewed.pk, granted.pk, sweep["theirs"].pk, 10**12])

    assert response.json()["canceled"] == [granted.pk, sweep["theirs"].pk]
    assert states(viewed) == [State.QUEUED]


def test_a_batch_named_by_its_first_shard_stands_for_its_shards_within_the_state(alice, alpha):
    batch = batch_of(alice, alpha, shards=4, running_every=2)  # shards 0 and 2 run
    shards = list(batch.batch())

    response = cancel(alice, ids=[batch.pk], state="queued")

    assert response.json()["canceled"] == [shards[1].pk, shards[3].pk]
    assert states(*shards) == [State.RUNNING, State.CANCELED, State.RUNNING, State.CANCELED]


def test_a_tenant_names_its_jobs_and_must_be_the_callers(alice, sweep):
    refused = cancel(alice, tenant="gamma")
    done = cancel(alice, tenant="alpha", state="running")

    assert refused.status_code == 400 and "tenant" in refused.json()
    assert done.json()["canceled"] == [sweep["running"].pk]
    assert states(sweep["theirs"]) == [State.QUEUED]


def test_a_viewer_cancels_nothing(alpha, sweep):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)

    response = cancel(viewer, tenant="alpha")

    assert response.json() == {"canceled": [], "more": False}
    assert State.CANCELED not in states(*sweep["queued"], sweep["running"], sweep["other"])


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "non_field_errors"),
        ({"state": "queued"}, "non_field_errors"),
        ({"mine": False}, "non_field_errors"),
        ({"name": "sweep", "state": "succeeded"}, "state"),
        ({"ids": []}, "ids"),
        ({"ids": ["x"]}, "ids"),
        ({"ids": [2**63]}, "ids"),
        ({"ids": list(range(1, 10_002))}, "ids"),
        ({"name": "\ud800"}, "name"),
        ({"name": "a\x00"}, "name"),
        ({"tenant": "no such"}, "tenant"),
    ],
)
def test_a_bad_filter_is_a_400_naming_its_field_and_cancels_nothing(alice, sweep, body, field):
    response = cancel(alice, **body)

    assert response.status_code == 400
    assert field in response.json()
    assert not Job.objects.filter(state=State.CANCELED).exists()


def test_past_the_limit_a_request_cancels_the_oldest_and_says_there_are_more(
    alice, sweep, monkeypatch
):
    monkeypatch.setattr("jobs.api.MAX_CANCELED", 2)
    live = sorted(j.pk for j in [*sweep["queued"], sweep["running"], sweep["other"]])

    first = cancel(alice, tenant="alpha").json()
    second = cancel(alice, tenant="alpha").json()

    assert first == {"canceled": live[:2], "more": True}
    assert second == {"canceled": live[2:], "more": False}

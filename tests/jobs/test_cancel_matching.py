"""The job list's "Cancel every live job these filters match": every page's jobs, not the
ticked, of those the user may cancel, asked first (a GET says how many), then canceled by a POST
of the same filters, the list shown again with what was done; only for a list narrowed to a part
of one's jobs (a state or a time alone is a 400)."""

import pytest
from django.test import Client

from jobs import action_views
from jobs.models import Attempt, Job
from jobs.states import State
from quotas.models import Membership
from tests.factories import AttemptFactory, JobFactory, MembershipFactory
from tests.jobs.test_batch_cancel import batch_of

pytestmark = pytest.mark.django_db

PATH = "/jobs/matching/cancel/"
SWEEP = {"label": "sweep=lr"}


@pytest.fixture
def portal(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def sweep(alpha, alice, bob, gamma, charlie):
    """Labelled sweep=lr: 60 of alice's queued jobs (more than a page of the list), one of
    bob's running, one ended, in alpha; one queued in gamma, charlie's; alice's queued job of
    another label."""
    labels = {"sweep": "lr"}
    jobs = {
        "queued": [JobFactory(tenant=alpha, owner=alice, labels=labels) for _ in range(60)],
        "running": JobFactory(tenant=alpha, owner=bob, labels=labels, state=State.RUNNING),
        "ended": JobFactory(tenant=alpha, owner=alice, labels=labels, state=State.SUCCEEDED),
        "theirs": JobFactory(tenant=gamma, owner=charlie, labels=labels),
        "other": JobFactory(tenant=alpha, owner=alice, labels={"sweep": "wd"}),
    }
    AttemptFactory(job=jobs["running"])
    return jobs


def state(job: Job) -> str:
    return Job.objects.get(pk=job.pk).state


def test_the_list_offers_it_only_when_narrowed_to_a_part_of_ones_jobs(portal, sweep):
    labelled = portal.get("/", SWEEP).text
    everything = portal.get("/").text
    queued = portal.get("/", {"state": "queued"}).text

    assert 'id="cancel-matching" href="/jobs/matching/cancel/?label=sweep%3Dlr"' in labelled
    assert 'id="cancel-matching"' not in everything and 'id="cancel-matching"' not in queued


def test_it_asks_first_saying_how_many_live_jobs_match_on_every_page(portal, sweep):
    page = portal.get(PATH, SWEEP)

    assert page.status_code == 200
    assert "61 live jobs you may cancel match these filters, on every page" in page.text
    assert '<input type="hidden" name="label" value="sweep=lr">' in page.text
    assert state(sweep["queued"][0]) == State.QUEUED  # nothing canceled yet


def test_the_post_cancels_them_alone_and_shows_the_list_again_saying_so(portal, sweep):
    done = portal.post(PATH, SWEEP, follow=True)

    assert done.redirect_chain[0][0] == "/?label=sweep%3Dlr"
    assert "Canceled 61 jobs these filters match." in done.text
    assert {state(job) for job in sweep["queued"]} == {State.CANCELED}
    assert state(sweep["running"]) == State.CANCELED
    assert sweep["running"].attempts.get().stop_reason == Attempt.Outcome.CANCELED
    left = [state(sweep[name]) for name in ("ended", "theirs", "other")]
    assert left == [State.SUCCEEDED, State.QUEUED, State.QUEUED]


def test_the_filters_narrow_each_other_as_the_list_does(portal, sweep):
    portal.post(PATH, {**SWEEP, "state": "running"})

    assert state(sweep["running"]) == State.CANCELED
    assert state(sweep["queued"][0]) == State.QUEUED


def test_a_viewer_cancels_nothing(alpha, sweep):
    viewer = MembershipFactory(tenant=alpha, role=Membership.Role.VIEWER).user
    client = Client()
    client.force_login(viewer)

    asked = client.get(PATH, SWEEP)
    client.post(PATH, SWEEP)

    assert "No live job you may cancel matches these filters." in asked.text
    assert state(sweep["queued"][0]) == State.QUEUED


def test_a_batchs_shards_match_each_on_its_own(portal, alpha, alice):
    first = batch_of(alice, alpha, shards=4, running_every=2)  # shards 0 and 2 run

    portal.post(PATH, {"batch": first.pk, "state": "queued"})

    states = list(first.batch().order_by("shard_index").values_list("state", flat=True))
    assert states == [State.RUNNING, State.CANCELED, State.RUNNING, State.CANCELED]


def test_past_the_most_at_a_press_the_oldest_go_and_it_says_more_are_left(
    portal, sweep, monkeypatch
):
    monkeypatch.setattr(action_views, "MAX_CANCELED", 10)

    done = portal.post(PATH, SWEEP, follow=True)

    assert "Canceled 10 jobs these filters match; more are left: cancel again." in done.text
    assert [state(job) for job in sweep["queued"][:11]] == [State.CANCELED] * 10 + [State.QUEUED]


@pytest.mark.parametrize("asked", [{}, {"state": "queued"}, {"since": "now-1d"}, {"mine": "0"}])
def test_a_list_not_narrowed_to_a_part_of_ones_jobs_is_a_400_and_cancels_nothing(
    portal, sweep, asked
):
    looked, pressed = portal.get(PATH, asked), portal.post(PATH, asked)

    assert (looked.status_code, pressed.status_code) == (400, 400)
    assert pressed.text.startswith("filters: Narrow the list to a part of your jobs first")
    assert state(sweep["queued"][0]) == State.QUEUED


def test_a_bad_filter_is_a_400_naming_it(portal, sweep):
    answer = portal.post(PATH, {**SWEEP, "state": "asleep"})

    assert answer.status_code == 400 and answer.text.startswith("state: ")
    assert state(sweep["queued"][0]) == State.QUEUED


def test_it_needs_a_login(sweep):
    answer = Client().post(PATH, SWEEP)

    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")
    assert state(sweep["queued"][0]) == State.QUEUED

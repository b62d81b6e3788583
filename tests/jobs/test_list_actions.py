"""The job list's actions on the jobs ticked: cancel, hold or release each, as its page's button
does (a batch's row: its shards), for whoever may cancel it; the list again, with what was done
(the ticking in a browser: tests/e2e/test_list_actions_page.py)."""

import pytest

from jobs import actions
from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import SPEC
from tests.jobs.test_min_workers_edit import portal_of

pytestmark = pytest.mark.django_db


def act(portal, verb: str, *ids, next_page: str = "/?state=queued"):
    return portal.post("/jobs/selected/", {"verb": verb, "id": [str(i) for i in ids],
                                           "next": next_page}, follow=True)  # fmt: skip


def test_the_ticked_jobs_are_canceled_and_the_list_says_so(alice, alpha):
    one, two, kept = (JobFactory(tenant=alpha, owner=alice) for _ in range(3))

    page = act(portal_of(alice), "cancel", one.pk, two.pk)

    assert page.redirect_chain == [("/?state=queued", 302)]
    assert "Canceled 2 jobs." in page.text
    states = dict(Job.objects.values_list("pk", "state"))
    assert (states[one.pk], states[two.pk], states[kept.pk]) == (
        State.CANCELED, State.CANCELED, State.QUEUED
    )  # fmt: skip


def test_a_batchs_row_stands_for_its_shards(alice, alpha):
    first, _ = actions.submit(alice, alpha, {**SPEC, "shards": 3,
                                             "priority_class": PriorityClassFactory()})  # fmt: skip
    portal = portal_of(alice)

    act(portal, "hold", first.pk)
    held = list(first.batch().values_list("held", flat=True))
    Job.objects.filter(pk=first.pk).update(state=State.SUCCEEDED)  # its other shards live on
    page = act(portal, "cancel", first.pk)

    assert held == ["user"] * 3
    assert "Canceled 1 job." in page.text
    assert list(first.batch().order_by("shard_index").values_list("state", flat=True)) == [
        State.SUCCEEDED, State.CANCELED, State.CANCELED]  # fmt: skip


def test_a_ticked_job_that_has_ended_is_said_so(alice, alpha):
    ended = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    live = JobFactory(tenant=alpha, owner=alice)

    page = act(portal_of(alice), "cancel", ended.pk, live.pk)

    assert f"Canceled 1 job; #{ended.pk} had already ended." in page.text


def test_hold_then_release_say_the_jobs_they_could_not_change(alice, alpha):
    queued = JobFactory(tenant=alpha, owner=alice)
    running = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    portal = portal_of(alice)

    held = act(portal, "hold", queued.pk, running.pk)
    released = act(portal, "release", queued.pk, running.pk)

    assert f"Held 1 job; #{running.pk} had nothing queued." in held.text
    assert f"Released 1 job; #{running.pk} had no hold you may release." in released.text
    assert Job.objects.get(pk=queued.pk).held == ""


def test_jobs_the_user_may_not_cancel_are_left_alone(alice, bob, alpha, charlie, gamma):
    theirs = JobFactory(tenant=gamma, owner=charlie)

    page = act(portal_of(alice), "cancel", theirs.pk)

    assert "Canceled 0 jobs." in page.text
    assert Job.objects.get(pk=theirs.pk).state == State.QUEUED


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"verb": "delete", "id": ["1"]}, "verb: one of cancel, hold, release."),
        ({"verb": "cancel", "id": ["1", "x"]}, "id: job ids, whole numbers."),
        ({"verb": "cancel", "id": [str(i) for i in range(101)]}, "id: at most 100 jobs at once."),
    ],
    ids=["verb", "id", "too many"],
)
def test_what_is_no_verb_or_no_id_is_a_400_naming_it(alice, alpha, form, said):
    job = JobFactory(tenant=alpha, owner=alice)

    answer = portal_of(alice).post("/jobs/selected/", form)

    assert (answer.status_code, answer.text) == (400, said)
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


@pytest.mark.parametrize("elsewhere", ["https://evil.example.com/", "//evil.example.com/", "x",
                                       "index", ""])  # fmt: skip
def test_nothing_ticked_says_so_and_an_address_elsewhere_goes_to_the_list(alice, alpha, elsewhere):
    page = act(portal_of(alice), "cancel", next_page=elsewhere)

    assert page.redirect_chain == [("/", 302)]
    assert "No job was ticked." in page.text


def test_the_list_draws_a_tick_for_each_live_job_the_user_may_change(alice, alpha, charlie,
                                                                    gamma):  # fmt: skip
    live = JobFactory(tenant=alpha, owner=alice)
    ended = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)

    page = portal_of(alice).get("/").text
    nothing = portal_of(charlie).get("/").text

    assert f'name="id" value="{live.pk}" form="selected"' in page
    assert f'name="id" value="{ended.pk}"' not in page
    assert 'id="selected"' in page and 'id="selected"' not in nothing

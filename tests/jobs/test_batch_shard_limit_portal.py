"""The portal's side of a batch's limit on its shards running at once: the submit form's
field beside the shards, and the batch's page, which shows the limit and lets whoever may
cancel the batch change it, as the API does."""

import pytest
from django.test import Client

from jobs.models import Job, JobEvent
from jobs.states import State
from quotas.models import Membership
from tests.factories import MembershipFactory, UserFactory
from tests.jobs.test_batch_shard_limit import batch, limits
from tests.jobs.test_portal_submit import FORM

pytestmark = pytest.mark.django_db

BATCH_FORM = {**FORM, "family": "batch_inference", "shards": "4"}


def portal_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_submit_form_offers_the_limit_beside_the_shards(alice, normal_priority):
    page = portal_of(alice).get("/jobs/new/").text

    shards, limit = page.index('name="shards"'), page.index('name="max_running_shards"')
    assert shards < limit < page.index('name="cluster_selector"')
    assert "Shards running at once, at most (batch inference)" in page
    assert 'aria-describedby="max-running-shards-help"' in page


def test_the_submit_form_queues_a_batch_with_its_limit(alice, normal_priority):
    response = portal_of(alice).post("/jobs/new/", {**BATCH_FORM, "max_running_shards": "2"})

    first = Job.objects.get(parent=None)
    assert response.status_code == 302 and response.url == f"/jobs/{first.pk}/"
    assert (first.batch().count(), limits(first)) == (4, {2})


def test_the_submit_form_takes_an_empty_limit_as_none(alice, normal_priority):
    portal_of(alice).post("/jobs/new/", {**BATCH_FORM, "max_running_shards": ""})

    assert limits(Job.objects.get(parent=None)) == {None}


@pytest.mark.parametrize(
    ("typed", "says"),
    [("0", "greater than or equal to 1"), ("two", "valid integer"), ("2", "Only a batch")],
)
def test_a_refused_limit_is_an_error_on_its_field_and_writes_nothing(
    alice, normal_priority, typed, says
):
    form = {**BATCH_FORM, "shards": "1" if typed == "2" else "4", "max_running_shards": typed}

    response = portal_of(alice).post("/jobs/new/", form)

    assert response.status_code == 400
    assert '<span class="error" data-field="max_running_shards">' in response.text
    assert says in response.text
    assert f'name="max_running_shards" value="{typed}"' in response.text
    assert not Job.objects.exists()


def test_the_batch_page_shows_its_limit_and_a_form_to_change_it(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4, limit=3)

    page = portal_of(alice).get(f"/jobs/{first.pk}/").text

    assert '<dd id="max-running-shards">at most 3 run at once;' in page
    assert 'id="shard-limit-form"' in page
    assert 'name="max_running_shards" type="number" min="1" value="3"' in page


def test_a_batch_without_a_limit_says_so(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4, limit=None)

    page = portal_of(alice).get(f"/jobs/{first.pk}/").text

    assert '<dd id="max-running-shards">no limit</dd>' in page


def test_a_member_changes_the_limit_from_the_page(alice, bob, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4)

    response = portal_of(bob).post(f"/jobs/{first.pk}/shard-limit/", {"max_running_shards": "1"})

    assert response.status_code == 302 and response.url == f"/jobs/{first.pk}/"
    assert limits(first) == {1}
    assert JobEvent.objects.filter(job=first, reason__endswith="at most 1, set by bob").exists()


def test_an_empty_limit_from_the_page_removes_it(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4)

    portal_of(alice).post(f"/jobs/{first.pk}/shard-limit/", {"max_running_shards": ""})

    assert limits(first) == {None}


def test_a_refused_change_is_the_page_with_why_on_the_field(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4)

    response = portal_of(alice).post(f"/jobs/{first.pk}/shard-limit/", {"max_running_shards": "0"})

    assert response.status_code == 400
    assert "greater than or equal to 1" in response.text
    assert 'aria-invalid="true" aria-describedby="shard-limit-help error"' in response.text
    assert limits(first) == {2}


def test_an_ended_batch_has_no_form_and_a_change_is_a_409(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4)
    first.batch().update(state=State.SUCCEEDED)

    page = portal_of(alice).get(f"/jobs/{first.pk}/").text
    posted = portal_of(alice).post(f"/jobs/{first.pk}/shard-limit/", {"max_running_shards": "1"})

    assert 'id="shard-limit-form"' not in page
    assert posted.status_code == 409 and "has ended" in posted.text


def test_a_viewer_sees_the_limit_but_no_form_and_may_not_post(alpha, alice, normal_priority):
    vera = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=vera, role=Membership.Role.VIEWER)
    first = batch(alice, alpha, normal_priority, shards=4)

    page = portal_of(vera).get(f"/jobs/{first.pk}/").text
    posted = portal_of(vera).post(f"/jobs/{first.pk}/shard-limit/", {"max_running_shards": "1"})

    assert '<dd id="max-running-shards">at most 2' in page
    assert 'id="shard-limit-form"' not in page
    assert posted.status_code == 403
    assert limits(first) == {2}


def test_another_team_gets_a_404(alpha, alice, charlie, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4)

    posted = portal_of(charlie).post(f"/jobs/{first.pk}/shard-limit/", {"max_running_shards": "1"})

    assert posted.status_code == 404
    assert limits(first) == {2}

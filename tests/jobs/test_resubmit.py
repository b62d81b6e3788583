"""Resubmit: an ended job runs again as a new job of the same spec, under every submission rule."""

import pytest
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs.models import Family, Job
from jobs.states import State
from quotas.models import Membership, PriorityClass
from tests.factories import JobFactory, MembershipFactory, PriorityClassFactory, UserFactory

pytestmark = pytest.mark.django_db

# Every field a submission holds, none at its default.
SPEC = {"name": "llama-eval", "family": Family.EVALUATION, "image": "python:3.11",
        "command": ["python", "eval.py", "--split", "test"], "env": {"HF_HOME": "/cache"},
        "cpu_milli": 2000, "memory_mb": 8000, "gpus": 0, "gpu_milli": 500,
        "gpu_types": ["A100", "H100"], "cluster_selector": {"region": "eu"}, "workers": 1,
        "max_runtime_s": 900, "max_retries": 5, "retry_user_errors": True, "priority": 7,
        "preemptible": False}  # fmt: skip


@pytest.fixture(autouse=True)
def normal_priority():
    return PriorityClassFactory(name="normal", value=0)


@pytest.fixture
def high(alpha):
    high = PriorityClassFactory(name="high", value=100)
    high.tenants.add(alpha)
    return high


@pytest.fixture
def failed(alpha, alice, high):
    return JobFactory(tenant=alpha, owner=alice, priority_class=high, state=State.FAILED, **SPEC)


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def resubmit(user, job):
    return client_for(user).post(f"/api/v1/jobs/{job.pk}/resubmit/")


@pytest.mark.parametrize("state", [State.FAILED, State.CANCELED, State.SUCCEEDED])
def test_an_ended_job_runs_again_as_a_new_queued_job_with_the_same_spec(failed, bob, state):
    Job.objects.filter(pk=failed.pk).update(state=state)

    response = resubmit(bob, failed)

    assert response.status_code == 201
    again = Job.objects.get(pk=response.json()["id"])
    assert again.pk != failed.pk
    assert {field: getattr(again, field) for field in SPEC} == SPEC
    assert (again.tenant, again.priority_class.name, again.shards) == (failed.tenant, "high", 1)
    assert (again.state, again.owner, again.resubmitted_from) == (State.QUEUED, bob, failed)
    assert list(again.events.values_list("to_state", flat=True)) == [State.QUEUED]


def test_the_job_json_names_the_job_it_was_resubmitted_from(failed, alice):
    again_id = resubmit(alice, failed).json()["id"]

    shown = client_for(alice).get(f"/api/v1/jobs/{again_id}/").json()

    assert shown["resubmitted_from"] == failed.pk
    assert client_for(alice).get(f"/api/v1/jobs/{failed.pk}/").json()["resubmitted_from"] is None


def test_the_idempotency_key_stays_with_the_original_job(failed, alice):
    Job.objects.filter(pk=failed.pk).update(idempotency_key="nightly-eval")

    response = resubmit(alice, failed)

    assert response.status_code == 201
    assert response.json()["id"] != failed.pk
    assert response.json()["idempotency_key"] is None


def test_deleting_the_original_job_leaves_the_resubmission_without_its_origin(failed, alice):
    again = Job.objects.get(pk=resubmit(alice, failed).json()["id"])

    failed.delete()

    again.refresh_from_db()
    assert again.resubmitted_from is None


def test_a_batch_is_resubmitted_whole_with_the_same_shard_count(alice):
    spec = {"tenant": "alpha", "name": "embed", "family": "batch_inference", "image": "py:3",
            "command": ["embed"], "cpu_milli": 1000, "memory_mb": 2000, "gpu_milli": 250,
            "shards": 3, "max_runtime_s": 600}  # fmt: skip
    batch = Job.objects.get(
        pk=client_for(alice).post("/api/v1/jobs/", spec, format="json").json()["id"]
    )
    client_for(alice).post(f"/api/v1/jobs/{batch.pk}/cancel/")

    response = resubmit(alice, batch)

    assert response.status_code == 201
    again = Job.objects.get(pk=response.json()["id"])
    shards = list(again.batch())
    assert again.is_batch and again.shards == 3
    assert [shard.shard_index for shard in shards] == [0, 1, 2]
    assert [shard.parent_id for shard in shards] == [None, again.pk, again.pk]
    assert {shard.state for shard in shards} == {State.QUEUED}
    assert {shard.resubmitted_from_id for shard in shards} == {batch.pk}


def test_a_shard_other_than_the_first_is_a_409_naming_its_batch(alice, alpha):
    batch = JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, gpus=0,
                       shards=2, shard_index=0, state=State.FAILED)  # fmt: skip
    shard = JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, gpus=0,
                       shards=2, shard_index=1, parent=batch, state=State.FAILED)  # fmt: skip

    response = resubmit(alice, shard)

    assert response.status_code == 409
    assert f"batch #{batch.pk}" in response.json()["detail"]
    assert Job.objects.count() == 2


@pytest.mark.parametrize("state", [State.QUEUED, State.SCHEDULED, State.RUNNING])
def test_a_live_job_is_a_409_saying_so_and_writes_nothing(failed, alice, state):
    Job.objects.filter(pk=failed.pk).update(state=state)

    response = resubmit(alice, failed)

    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"Job #{failed.pk} is still {state}: cancel it or wait for it to end."
    )
    assert Job.objects.count() == 1


def test_a_batch_with_a_shard_still_running_is_a_409(alice, alpha):
    batch = JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, gpus=0,
                       shards=2, shard_index=0, state=State.CANCELED)  # fmt: skip
    JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, gpus=0, shards=2,
               shard_index=1, parent=batch, state=State.RUNNING)  # fmt: skip

    response = resubmit(alice, batch)

    assert response.status_code == 409
    assert "live shards" in response.json()["detail"]


def test_another_tenants_job_is_a_404(failed, charlie):
    assert resubmit(charlie, failed).status_code == 404
    assert Job.objects.count() == 1


def test_a_view_grant_alone_shows_the_job_but_resubmitting_it_is_a_403(failed, charlie):
    assign_perm("jobs.view_job", charlie, failed)

    response = resubmit(charlie, failed)

    assert client_for(charlie).get(f"/api/v1/jobs/{failed.pk}/").status_code == 200
    assert response.status_code == 403
    assert Job.objects.count() == 1


def test_a_cancel_grant_alone_does_not_reach_resubmit(failed, charlie):
    assign_perm("jobs.cancel_job", charlie, failed)

    assert resubmit(charlie, failed).status_code == 404


def test_a_viewer_of_the_tenant_cannot_resubmit(failed, alpha):
    viewer = UserFactory(username="victor")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)

    assert resubmit(viewer, failed).status_code == 403
    assert Job.objects.count() == 1


def test_a_priority_class_closed_to_the_tenant_since_is_a_400_naming_it(failed, alice, high):
    high.tenants.clear()
    PriorityClass.objects.filter(pk=high.pk).update(may_preempt=True)  # now listed tenants only

    response = resubmit(alice, failed)

    assert response.status_code == 400
    assert "priority_class" in response.json()
    assert Job.objects.count() == 1


def test_resubmissions_count_against_the_users_submission_rate(failed, alice, settings):
    settings.MLSCHED_SUBMIT_RATE = "2/minute"
    submitted = client_for(alice).post("/api/v1/jobs/", {**SPEC, "tenant": "alpha",
                                       "priority_class": "high"}, format="json")  # fmt: skip

    codes = [resubmit(alice, failed).status_code for _ in range(2)]

    assert (submitted.status_code, codes) == (201, [201, 429])
    assert 0 < int(resubmit(alice, failed)["Retry-After"]) <= 60
    assert Job.objects.count() == 3


def test_resubmissions_count_against_the_tenants_submission_rate(failed, alice, bob, settings):
    settings.MLSCHED_TENANT_SUBMIT_RATE = "2/minute"

    codes = [resubmit(user, failed).status_code for user in (alice, bob, alice)]

    assert codes == [201, 201, 429]


def test_a_refused_resubmission_does_not_count_against_the_submission_rate(failed, alice, settings):
    settings.MLSCHED_SUBMIT_RATE = "1/minute"
    live = JobFactory(tenant=failed.tenant, owner=alice, state=State.RUNNING)

    codes = [resubmit(alice, live).status_code for _ in range(3)] + [
        resubmit(alice, failed).status_code
    ]

    assert codes == [409, 409, 409, 201]


# The portal's button.


@pytest.fixture
def browser(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    return browser


def press_resubmit(browser, job, times: int = 1, rerun: bool = False):
    """Post the job page's Resubmit form as drawn (its CSRF token and key), `times` times; with
    `rerun`, a batch page's form rerunning its shards that did not succeed."""
    page = browser.get(f"/jobs/{job.pk}/")  # sets the CSRF cookie, as a browser would have it
    key = page.context["rerun"]["key"] if rerun else page.context["resubmit_key"]
    form = {"csrfmiddlewaretoken": browser.cookies["csrftoken"].value, "idempotency_key": key}
    if rerun:
        form["shards"] = "unsucceeded"
    answers = [browser.post(f"/jobs/{job.pk}/resubmit/", form) for _ in range(times)]
    return answers[-1]


def test_a_double_click_on_resubmit_makes_one_job(browser, failed):
    answer = press_resubmit(browser, failed, times=2)

    (again,) = Job.objects.filter(resubmitted_from=failed)
    assert answer["Location"] == f"/jobs/{again.pk}/"


def test_a_resubmission_repeated_under_its_key_answers_the_same_job(failed, alice):
    key = {"idempotency_key": "retry-once"}
    first = client_for(alice).post(f"/api/v1/jobs/{failed.pk}/resubmit/", key, format="json")
    second = client_for(alice).post(f"/api/v1/jobs/{failed.pk}/resubmit/", key, format="json")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Job.objects.filter(resubmitted_from=failed).count() == 1


def test_the_resubmit_button_runs_the_job_again_and_opens_the_new_jobs_page(browser, failed):
    answer = press_resubmit(browser, failed)

    again = Job.objects.get(resubmitted_from=failed)
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{again.pk}/"
    assert again.state == State.QUEUED


def test_the_new_jobs_page_links_to_the_job_it_was_resubmitted_from(browser, failed):
    press_resubmit(browser, failed)

    page = browser.get(f"/jobs/{Job.objects.get(resubmitted_from=failed).pk}/")

    assert f'href="/jobs/{failed.pk}/">#{failed.pk}<' in page.text


def test_the_resubmit_button_needs_a_post_with_a_csrf_token(browser, failed):
    assert browser.get(f"/jobs/{failed.pk}/resubmit/").status_code == 405
    assert browser.post(f"/jobs/{failed.pk}/resubmit/").status_code == 403
    assert Job.objects.count() == 1


def test_the_resubmit_button_is_drawn_hidden_while_the_job_lives(browser, failed):
    shown = browser.get(f"/jobs/{failed.pk}/").text
    Job.objects.filter(pk=failed.pk).update(state=State.RUNNING)

    hidden = browser.get(f"/jobs/{failed.pk}/").text

    assert 'id="resubmit-form" method="post"' in shown and "hidden" not in form_tag(shown)
    assert "hidden" in form_tag(hidden)


def form_tag(page: str) -> str:
    start = page.index('<form id="resubmit-form"')
    return page[start : page.index(">", start)]


def test_resubmitting_a_live_job_from_the_portal_says_why(browser, failed):
    Job.objects.filter(pk=failed.pk).update(state=State.QUEUED)

    answer = press_resubmit(browser, failed)

    assert answer.status_code == 409
    assert "is still queued" in answer.text
    assert Job.objects.count() == 1


def test_the_resubmit_button_counts_against_the_submission_rate(browser, failed, settings):
    settings.MLSCHED_SUBMIT_RATE = "1/minute"

    answers = [press_resubmit(browser, failed) for _ in range(2)]

    assert [a.status_code for a in answers] == [302, 429]
    assert "Too many submissions" in answers[1].text
    assert Job.objects.count() == 2


def test_a_viewer_sees_no_resubmit_button_and_cannot_resubmit(client, failed, alpha):
    viewer = UserFactory(username="victor")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    client.force_login(viewer)

    page = client.get(f"/jobs/{failed.pk}/")

    assert page.status_code == 200 and 'id="resubmit"' not in page.text
    assert client.post(f"/jobs/{failed.pk}/resubmit/").status_code == 403
    assert Job.objects.count() == 1


def test_an_outsider_cannot_resubmit_another_tenants_job_from_the_portal(client, failed, charlie):
    client.force_login(charlie)

    assert client.post(f"/jobs/{failed.pk}/resubmit/").status_code == 404
    assert Job.objects.count() == 1


def test_a_submission_rule_no_longer_met_is_shown_on_the_job_page(browser, failed, high):
    high.tenants.clear()
    PriorityClass.objects.filter(pk=high.pk).update(may_preempt=True)  # now listed tenants only

    answer = press_resubmit(browser, failed)

    assert answer.status_code == 400
    assert "may not submit at &#x27;high&#x27;" in answer.text
    assert Job.objects.count() == 1

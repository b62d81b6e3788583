"""Secrets in the portal: the submit form's "Secrets" field, checked by the API's serializer;
the job page naming them; the secrets page, where a team's owners set and delete them and
its members read their names. No value is ever drawn into a page."""

import pytest

from jobs.models import Job
from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.factories import JobFactory
from tests.jobs.test_batch_shard_limit_portal import portal_of
from tests.jobs.test_portal_submit import FORM

pytestmark = pytest.mark.django_db


@pytest.fixture
def secrets(alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_the_value")
    tenant_secrets.put(alpha, "WANDB_API_KEY", "wandb_the_value")


def test_the_submit_form_offers_secrets_with_its_help(alice, normal_priority):
    page = portal_of(alice).get("/jobs/new/").text

    assert 'name="secrets" value=""' in page
    assert 'aria-describedby="secrets-help"' in page


def test_the_submit_form_queues_a_job_naming_its_teams_secrets(alice, normal_priority, secrets):
    answer = portal_of(alice).post("/jobs/new/", {**FORM, "secrets": "HF_TOKEN, WANDB_API_KEY"})

    job = Job.objects.get()
    assert answer.status_code == 302
    assert job.secrets == ["HF_TOKEN", "WANDB_API_KEY"]


def test_an_unknown_secret_is_named_on_the_form_and_nothing_queued(alice, normal_priority, secrets):
    answer = portal_of(alice).post("/jobs/new/", {**FORM, "secrets": "HF_TOKEN, NOPE"})

    assert answer.status_code == 400
    assert "no secret &#x27;NOPE&#x27;" in answer.text
    assert 'name="secrets" value="HF_TOKEN, NOPE"' in answer.text
    assert not Job.objects.exists()


def test_the_job_page_names_its_secrets_not_their_values(alice, normal_priority, secrets):
    portal_of(alice).post("/jobs/new/", {**FORM, "secrets": "HF_TOKEN"})
    job = Job.objects.get()

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert "<code>HF_TOKEN</code>" in page and "hf_the_value" not in page


# -- the secrets page ----------------------------------------------------------------------------


def test_an_owner_sets_a_secret_on_the_secrets_page_and_never_sees_its_value(alice):
    portal = portal_of(alice)

    answer = portal.post("/secrets/", {"tenant": "alpha", "name": "HF_TOKEN", "value": "hf_1234"})
    page = portal.get("/secrets/").text

    assert answer.status_code == 302
    assert TenantSecret.objects.get().value() == "hf_1234"
    assert "<code>HF_TOKEN</code>" in page and "hf_1234" not in page
    assert "Secret HF_TOKEN of alpha created." in page


def test_a_member_sees_the_names_but_no_form_and_cannot_set_or_delete(alpha, bob, secrets):
    portal = portal_of(bob)

    page = portal.get("/secrets/").text
    refused = portal.post("/secrets/", {"tenant": "alpha", "name": "NEW", "value": "v-1234"})
    deleted = portal.post("/secrets/alpha/HF_TOKEN/delete/")

    assert "<code>HF_TOKEN</code>" in page and 'id="secret-form"' not in page
    assert (refused.status_code, deleted.status_code) == (400, 404)
    assert TenantSecret.objects.count() == 2


def test_another_teams_secrets_are_neither_listed_nor_deletable(charlie, secrets):
    portal = portal_of(charlie)

    page = portal.get("/secrets/").text
    deleted = portal.post("/secrets/alpha/HF_TOKEN/delete/")

    assert "HF_TOKEN" not in page and deleted.status_code == 404
    assert TenantSecret.objects.count() == 2


def test_a_bad_name_is_named_on_the_page_and_nothing_written(alice):
    answer = portal_of(alice).post("/secrets/", {"tenant": "alpha", "name": "RANK", "value": "v"})

    assert answer.status_code == 400
    assert 'data-field="name"' in answer.text and "set by mlsched" in answer.text
    assert not TenantSecret.objects.exists()


def test_deleting_a_secret_a_live_job_names_keeps_it_and_says_which_job(alice, alpha, secrets):
    job = JobFactory(tenant=alpha, secrets=["HF_TOKEN"])
    portal = portal_of(alice)

    kept = portal.post("/secrets/alpha/HF_TOKEN/delete/", follow=True)
    gone = portal.post("/secrets/alpha/WANDB_API_KEY/delete/", follow=True)

    assert "Secret HF_TOKEN of alpha not deleted" in kept.text and str(job.pk) in kept.text
    assert "Secret WANDB_API_KEY of alpha deleted." in gone.text
    assert list(TenantSecret.objects.values_list("name", flat=True)) == ["HF_TOKEN"]

"""Secrets in the portal: the submit form's "Secrets" field, checked by the API's serializer,
and the job page naming them, never their values."""

import pytest

from jobs.models import Job
from quotas import tenant_secrets
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

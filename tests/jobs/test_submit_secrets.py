"""A submission names its tenant's secrets: each one the tenant has, once, not also in its env
(a 400 naming `secrets` otherwise, nothing written); the job keeps the names, never the
values, and a resubmission names them again."""

import pytest
from rest_framework.exceptions import ValidationError

from jobs import actions
from jobs.api import submission
from jobs.models import Job
from jobs.states import State
from quotas import tenant_secrets
from tests.jobs.test_api import SPEC, client_for, normal_priority, submit  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def hf_token(alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_the_value")


def test_a_job_keeps_the_names_of_its_secrets_and_shows_them_not_the_values(alice, hf_token):
    answer = submit(alice, secrets=["HF_TOKEN"])

    assert answer.status_code == 201
    job = Job.objects.get(pk=answer.json()["id"])
    shown = client_for(alice).get(f"/api/v1/jobs/{job.pk}/")
    assert job.secrets == ["HF_TOKEN"] and shown.json()["secrets"] == ["HF_TOKEN"]
    assert "hf_the_value" not in shown.content.decode()


@pytest.mark.parametrize(
    ("changes", "said"),
    [({"secrets": ["NOPE"]}, "no secret 'NOPE'"),
     ({"secrets": ["HF_TOKEN", "HF_TOKEN"]}, "named twice"),
     ({"secrets": ["HF_TOKEN"], "env": {"HF_TOKEN": "x"}}, "in env too"),
     ({"secrets": "HF_TOKEN"}, ""), ({"secrets": ["X"] * 51}, "")],
)  # fmt: skip
def test_a_bad_list_of_secrets_is_a_400_naming_it_and_writes_nothing(
    alice, hf_token, changes, said
):
    answer = submit(alice, **changes)

    assert answer.status_code == 400 and said in str(answer.json()["secrets"])
    assert not Job.objects.exists()


def test_another_tenants_secret_of_the_name_does_not_count(alice, gamma):
    tenant_secrets.put(gamma, "HF_TOKEN", "theirs")

    answer = submit(alice, secrets=["HF_TOKEN"])

    assert answer.status_code == 400 and "no secret 'HF_TOKEN'" in str(answer.json())


def test_a_test_only_submission_checks_the_secrets_too(alice, hf_token):
    client = client_for(alice)

    refused = client.post("/api/v1/jobs/test/", {**SPEC, "secrets": ["NOPE"]}, format="json")
    allowed = client.post("/api/v1/jobs/test/", {**SPEC, "secrets": ["HF_TOKEN"]}, format="json")

    assert (refused.status_code, allowed.status_code) == (400, 200)


def test_a_resubmission_names_the_same_secrets(alice, hf_token):
    first = Job.objects.get(pk=submit(alice, secrets=["HF_TOKEN"]).json()["id"])
    Job.objects.filter(pk=first.pk).update(state=State.FAILED)

    again = client_for(alice).post(f"/api/v1/jobs/{first.pk}/resubmit/")

    assert again.status_code == 201
    assert Job.objects.get(pk=again.json()["id"]).secrets == ["HF_TOKEN"]


def test_a_secret_deleted_after_the_check_refuses_the_submission_under_the_tenants_lock(
    alice, alpha, hf_token, rf
):
    request = rf.post("/api/v1/jobs/")
    request.user, request.data = alice, {**SPEC, "secrets": ["HF_TOKEN"]}
    tenant, spec = submission(request)
    tenant_secrets.delete(alpha, "HF_TOKEN")  # between the check and the write

    with pytest.raises(ValidationError) as refused:
        actions.submit(alice, tenant, spec)

    assert "secrets" in refused.value.detail and not Job.objects.exists()

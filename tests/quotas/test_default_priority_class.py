"""A tenant's default priority class (Slurm's DefaultQOS on an account): a platform admin sets
it on the tenant, one open to it; a job its members submit without a class gets it (else
`normal`), through the API, the portal's form and a test-only submission alike."""

import pytest
from django.core.exceptions import ValidationError

from jobs.models import Job
from tests.factories import PriorityClassFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_min_workers_edit import portal_of
from tests.jobs.test_portal import FORM
from tests.quotas.test_priority_classes_api import listed

pytestmark = pytest.mark.django_db

SPEC = {"tenant": "alpha", "name": "sweep", "family": "evaluation", "image": "python:3.11",
        "command": ["python", "eval.py"], "cpu_milli": 1000, "memory_mb": 1024,
        "max_runtime_s": 600}  # fmt: skip


@pytest.fixture
def batch_low(alpha, gamma):
    """`normal`, and `batch-low`, open to alpha alone, alpha's default."""
    PriorityClassFactory(name="normal", value=0)
    low = PriorityClassFactory(name="batch-low", value=-10)
    low.tenants.add(alpha)
    alpha.default_priority_class = low
    alpha.save()
    return low


def submitted(user, spec=SPEC, **fields) -> Job:
    answer = api(user).post("/api/v1/jobs/", {**spec, **fields}, format="json")
    assert answer.status_code == 201, answer.content
    return Job.objects.get(pk=answer.json()["id"])


def test_a_job_without_a_class_gets_its_tenants_default(alice, batch_low):
    assert submitted(alice).priority_class == batch_low


def test_a_class_asked_for_wins_over_the_default(alice, batch_low):
    assert submitted(alice, priority_class="normal").priority_class.name == "normal"


def test_a_tenant_without_a_default_submits_at_normal(charlie, gamma, batch_low):
    assert submitted(charlie, tenant="gamma").priority_class.name == "normal"


def test_without_a_default_or_a_normal_class_it_is_a_400_naming_priority_class(alice, alpha):
    answer = api(alice).post("/api/v1/jobs/", SPEC, format="json")

    assert answer.status_code == 400
    assert answer.json() == {"priority_class": ["No priority class 'normal'."]}


def test_a_test_only_submission_is_decided_at_the_default(alice, batch_low):
    answer = api(alice).post("/api/v1/jobs/test/", SPEC, format="json")

    assert answer.status_code == 200, answer.content
    assert not Job.objects.exists()


def test_a_default_not_open_to_the_tenant_is_refused_on_its_field(gamma, batch_low):
    gamma.default_priority_class = batch_low

    with pytest.raises(ValidationError) as refused:
        gamma.full_clean()

    assert list(refused.value.message_dict) == ["default_priority_class"]
    assert "'batch-low' is not open to this tenant" in str(refused.value)


def test_the_classes_api_names_each_teams_default(alice, batch_low):
    ranks = {c["name"]: c["default_for"] for c in listed(alice).json()["priority_classes"]}

    assert ranks == {"normal": [], "batch-low": ["alpha"]}


def test_the_submit_form_offers_the_default_first_and_submits_at_it(alice, batch_low):
    portal = portal_of(alice)

    page = portal.get("/jobs/new/").text
    done = portal.post("/jobs/new/", {**FORM, "priority_class": ""})

    assert '<option value="" selected>its team&#x27;s default (batch-low)</option>' in page
    assert done.status_code == 302, done.text[:2000]
    assert Job.objects.get(name=FORM["name"]).priority_class == batch_low


# A class's default runtime limit (Slurm's partition DefaultTime).


def test_a_job_without_a_runtime_limit_gets_its_classs_default(alice, batch_low):
    batch_low.default_runtime_s = 1800
    batch_low.save()
    spec = {k: v for k, v in SPEC.items() if k != "max_runtime_s"}

    job = submitted(alice, spec)

    assert (job.priority_class, job.max_runtime_s) == (batch_low, 1800)


def test_without_a_default_runtime_limit_one_is_required_naming_its_class(alice, batch_low):
    spec = {k: v for k, v in SPEC.items() if k != "max_runtime_s"}

    answer = api(alice).post("/api/v1/jobs/", spec, format="json")

    assert answer.status_code == 400
    assert answer.json() == {"max_runtime_s": [
        "This field is required: class 'batch-low' has no default runtime limit."]}  # fmt: skip


def test_a_default_runtime_limit_past_the_classs_longest_is_refused_on_its_field(batch_low):
    batch_low.max_runtime_s, batch_low.default_runtime_s = 3600, 7200

    with pytest.raises(ValidationError) as refused:
        batch_low.full_clean()

    assert refused.value.message_dict == {
        "default_runtime_s": ["At most the class's longest runtime limit, 3600 s."]
    }

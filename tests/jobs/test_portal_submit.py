"""The portal's submit form offers every field the API takes, checked by the API's serializer."""

import pytest

from jobs.models import Job
from tests.factories import PriorityClassFactory

# An evaluation job: preemptible unless it says otherwise, so "no" is visibly the user's choice.
FORM = {"tenant": "alpha", "name": "llama-eval", "family": "evaluation", "image": "python:3.11",
        "command": "python eval.py", "cpu_milli": "2000", "memory_mb": "8000", "gpus": "1",
        "gpu_milli": "0", "gpu_types": "", "workers": "1", "shards": "1",
        "priority_class": "normal", "priority": "0", "preemptible": "", "max_runtime_s": "600",
        "max_retries": "3", "env": "", "cluster_selector": ""}  # fmt: skip


@pytest.fixture
def browser(client, alice):
    """Alice's browser, with the "normal" priority class the form picks by default."""
    PriorityClassFactory(name="normal", value=0)
    client.force_login(alice)
    return client


def test_the_submit_form_queues_a_job_with_its_env_gpu_types_selector_priority_and_retries(browser):
    extras = {
        # As a browser sends a textarea: CRLF line breaks; a blank line; a value that starts
        # with a space, holds '=' and ends with a space.
        "env": "HF_HOME=/cache\r\n\r\nEXTRA_ARGS= --lr=0.1 ",
        "gpu_types": "h100, a100",
        "cluster_selector": "region=eu\r\nrack=r7",
        "priority": "50",
        "preemptible": "false",
        "max_retries": "5",
        "retry_user_errors": "true",
    }

    response = browser.post("/jobs/new/", {**FORM, **extras})

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.env == {"HF_HOME": "/cache", "EXTRA_ARGS": " --lr=0.1 "}
    assert job.gpu_types == ["h100", "a100"]
    assert job.cluster_selector == {"region": "eu", "rack": "r7"}
    assert (job.priority, job.preemptible) == (50, False)
    assert (job.max_retries, job.retry_user_errors) == (5, True)


def test_an_env_line_without_an_equals_sign_is_an_error_on_env_and_writes_nothing(browser):

    response = browser.post("/jobs/new/", {**FORM, "env": "HF_HOME=/cache\r\nWANDB_MODE"})

    assert response.status_code == 400
    assert '<span class="error" data-field="env">Line 2 has no' in response.text
    assert not Job.objects.exists()


def test_a_selector_label_without_a_value_is_an_error_naming_the_label(browser):

    response = browser.post("/jobs/new/", {**FORM, "cluster_selector": "region=eu\r\nrack="})

    assert response.status_code == 400
    assert '<span class="error" data-field="cluster_selector">&#x27;rack&#x27;: ' in response.text
    assert not Job.objects.exists()


def test_after_an_error_the_form_shows_the_users_env_gpu_types_selector_and_retry_choices(browser):
    extras = {"cpu_milli": "0", "env": "A= spaced ", "gpu_types": "h100, a100",
              "cluster_selector": "region=eu", "priority": "7", "preemptible": "false",
              "max_retries": "5", "retry_user_errors": "true"}  # fmt: skip

    page = browser.post("/jobs/new/", {**FORM, **extras}).text

    assert 'data-field="cpu_milli"' in page
    assert ">\nA= spaced </textarea>" in page
    assert 'name="gpu_types" value="h100, a100"' in page
    assert ">\nregion=eu</textarea>" in page
    assert 'name="priority" value="7"' in page
    assert '<option value="false" selected>No</option>' in page
    assert 'name="max_retries" value="5"' in page
    assert 'name="retry_user_errors" value="true" checked' in page


def test_the_priority_class_select_offers_a_preempting_class_only_once_open_to_the_users_tenant(
    browser, alpha
):
    urgent = PriorityClassFactory(name="urgent", value=100, may_preempt=True)

    closed = browser.get("/jobs/new/").text
    urgent.tenants.add(alpha)
    opened = browser.get("/jobs/new/").text

    assert '<option value="normal"' in closed
    assert '<option value="urgent"' not in closed
    assert '<option value="urgent"' in opened


def test_the_form_counts_against_the_users_submission_rate(browser, settings):
    settings.MLSCHED_SUBMIT_RATE = "2/minute"

    answers = [browser.post("/jobs/new/", FORM) for _ in range(3)]

    assert [a.status_code for a in answers] == [302, 302, 429]
    assert "Too many submissions" in answers[2].content.decode()
    assert Job.objects.count() == 2


def test_the_form_counts_against_the_tenants_submission_rate(browser, settings, bob):
    settings.MLSCHED_TENANT_SUBMIT_RATE = "1/minute"
    browser.post("/jobs/new/", FORM)
    browser.force_login(bob)  # another member of the same tenant

    answer = browser.post("/jobs/new/", FORM)

    assert answer.status_code == 429
    assert Job.objects.count() == 1

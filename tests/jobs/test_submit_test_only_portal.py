"""The portal's submit form's "Check when it would start": a test-only submission (jobs.trial)
from the form as filled, the form drawn again with the answer, nothing submitted."""

import pytest

from jobs.models import Job
from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_begin import FORM

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(client, alice, normal_priority):
    client.force_login(alice)
    return client


@pytest.fixture
def east(db):
    return ClusterFactory(name="east")


def test_checking_a_job_that_fits_says_it_would_start_now_and_submits_nothing(browser, east):
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=8)

    page = browser.post("/jobs/new/", {**FORM, "test_only": "1"})

    assert page.status_code == 200
    assert '<p id="trial-verdict">It would start now.</p>' in page.text
    assert "starts now on 1 node in east" in page.text
    assert 'name="name" value="nightly-eval"' in page.text  # the form as it was filled
    assert not Job.objects.exists()


def test_checking_a_job_that_cannot_fit_says_why_it_would_wait(browser, east):
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=8)

    page = browser.post("/jobs/new/", {**FORM, "gpus": "16", "test_only": "1"})

    assert "It would wait, with no estimate of when it starts." in page.text
    assert "the job can never fit" in page.text
    assert not Job.objects.exists()


def test_a_bad_field_is_shown_on_the_form_as_a_submission_shows_it(browser, east):
    page = browser.post("/jobs/new/", {**FORM, "max_runtime_s": "0", "test_only": "1"})

    assert page.status_code == 400
    assert '<span class="error" data-field="max_runtime_s">' in page.text
    assert 'id="trial"' not in page.text

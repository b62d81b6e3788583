"""The portal's submit form's "Cancel unless it can end by (UTC)": a deadline read as UTC, as
its begin is, and checked by the API's serializer."""

from datetime import timedelta

import pytest

from jobs.models import Job
from tests.jobs.test_begin import FORM, ahead

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(client, alice, normal_priority):
    client.force_login(alice)
    return client


def test_the_submit_form_offers_a_deadline_and_says_it_is_utc(browser):
    page = browser.get("/jobs/new/").content.decode()

    assert "Cancel unless it can end by (UTC)" in page
    assert 'type="datetime-local" name="deadline" value="" aria-describedby="deadline-help"' in page
    assert '<small id="deadline-help">The time is UTC, whatever your computer' in page


def test_the_submit_form_reads_its_deadline_as_utc(browser):
    deadline = ahead()

    # What a browser's datetime-local input sends: the time without a zone.
    response = browser.post("/jobs/new/", {**FORM, "deadline": f"{deadline:%Y-%m-%dT%H:%M}"})

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.deadline == deadline


def test_the_submit_form_takes_no_deadline_as_none(browser):
    response = browser.post("/jobs/new/", {**FORM, "deadline": ""})

    assert response.status_code == 302
    assert Job.objects.get().deadline is None


def test_a_deadline_the_job_could_not_end_by_is_an_error_on_the_field_shown_again(browser):
    typed = f"{ahead(timedelta(minutes=-55)):%Y-%m-%dT%H:%M}"  # 5 or 6 minutes on; it runs 10

    response = browser.post("/jobs/new/", {**FORM, "deadline": typed})

    assert response.status_code == 400
    assert '<span class="error" data-field="deadline">Not after ' in response.text
    assert 'aria-invalid="true" aria-describedby="deadline-help id_deadline_error"' in response.text
    assert f'name="deadline" value="{typed}"' in response.text
    assert not Job.objects.exists()


def test_the_job_page_shows_the_deadline_in_utc(browser):
    deadline = ahead()
    browser.post("/jobs/new/", {**FORM, "deadline": f"{deadline:%Y-%m-%dT%H:%M}"})

    page = browser.get(f"/jobs/{Job.objects.get().pk}/").text

    assert (
        f'<dd id="deadline">canceled unless it can end by {deadline:%Y-%m-%d %H:%M:%S} UTC</dd>'
        in page
    )

"""Requeuing from the job page in a real browser: the form is there while the job runs, and once
its agent has stopped it the page shows it queued and held, offering the release instead. Run in
its own pytest process."""

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Attempt
from jobs.states import State
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import AttemptFactory, ClusterFactory, JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_running_job_requeued_held_from_its_page_comes_back_held(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    attempt = AttemptFactory(job=job, cluster=ClusterFactory(name="east"))
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#hold-form")).to_be_hidden()
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    page.locator("#requeue-hold").check()
    page.locator("#requeue").click()
    expect(page.locator("#requeue-form")).to_be_visible()  # until its agent has stopped it
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    in_thread(lambda: actions.end_attempt(attempt.pk, Attempt.Outcome.PREEMPTED))

    expect(page.locator("#state")).to_have_text("queued", timeout=10_000)
    expect(page.locator("#requeue-form")).to_be_hidden()
    expect(page.locator("#release")).to_have_text("Release the hold")
    expect(page.locator("#reason")).to_have_text(
        "Held since it was requeued: it starts once released."
    )

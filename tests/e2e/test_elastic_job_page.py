"""An elastic gang's job page in a real browser (see test_job_page.py): the attempts it redraws
on a state change keep the column of the workers each started with."""

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.states import State
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import AttemptFactory, ClusterFactory, JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_elastic_gangs_page_redraws_the_workers_its_attempt_started_with(
    server, browser_page, alpha, alice
):
    page = browser_page
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    def scheduler():
        actions.transition(job, State.SCHEDULED, "placed")
        attempt = AttemptFactory(job=job, cluster=cluster, workers=3)
        actions.transition(job, State.RUNNING, "attempt 1 running", attempt=attempt)

    in_thread(scheduler)

    expect(page.locator("#state")).to_have_text("running", timeout=10_000)
    cells = page.locator("#attempts tr").first.locator("td")
    expect(cells.nth(2)).to_have_text("started with 3 of 8 workers")
    expect(cells).to_have_count(13)

"""The job list's ticks in a real browser: the box in the ticks' column head ticks every job of
the page the user may change, and the list's Cancel cancels those ticked, then shows the list
again with its filters, saying what it did; and its "Cancel every live job these filters
match", asked first, for the jobs of every page. Run in its own pytest process."""

import pytest
from playwright.sync_api import expect

from jobs.models import Job
from jobs.states import State
from tests.e2e.test_job_page import log_in
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_tick_every_job_of_the_page_then_cancel_them(server, browser_page, alpha, alice):
    page = browser_page
    jobs = [JobFactory(tenant=alpha, owner=alice, name=f"sweep-{i}") for i in range(3)]
    done = JobFactory(tenant=alpha, owner=alice, name="sweep-done", state=State.SUCCEEDED)
    log_in(page, server, "alice")
    page.goto(f"{server}/?q=sweep")

    page.locator("#tick-all").check()
    expect(page.locator("input.tick:checked")).to_have_count(3)
    page.locator(f"input.tick[value='{jobs[0].pk}']").uncheck()
    expect(page.locator("#tick-all")).not_to_be_checked()
    page.locator("#selected button[value='cancel']").click()

    expect(page.locator("#messages")).to_have_text("Canceled 2 jobs.")
    assert page.url == f"{server}/?q=sweep"
    states = dict(Job.objects.values_list("pk", "state"))
    assert [states[job.pk] for job in jobs] == [State.QUEUED, State.CANCELED, State.CANCELED]
    assert states[done.pk] == State.SUCCEEDED
    expect(page.locator("input.tick")).to_have_count(1)  # the one still queued


def test_cancel_every_job_the_filters_match_on_every_page(server, browser_page, alpha, alice):
    page = browser_page
    jobs = [JobFactory(tenant=alpha, owner=alice, name=f"sweep-{i}") for i in range(55)]
    other = JobFactory(tenant=alpha, owner=alice, name="eval")
    log_in(page, server, "alice")
    page.goto(f"{server}/?q=sweep")
    expect(page.locator("input.tick")).to_have_count(50)  # a page of the 55

    page.locator("#cancel-matching").click()
    expect(page.locator("#matching")).to_contain_text("55 live jobs you may cancel match")
    page.locator("#cancel-them").click()

    expect(page.locator("#messages")).to_have_text("Canceled 55 jobs these filters match.")
    assert page.url == f"{server}/?q=sweep"
    states = dict(Job.objects.values_list("pk", "state"))
    assert {states[job.pk] for job in jobs} == {State.CANCELED}
    assert states[other.pk] == State.QUEUED

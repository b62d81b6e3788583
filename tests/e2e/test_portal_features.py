"""Resubmitting, changing a queued job's dependencies, downloading a log and issuing an API token
from the portal, in Chromium against daphne (fixtures in conftest.py)."""

import pytest
import requests
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Attempt, Job
from jobs.states import State
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_resubmit_button_appears_as_the_job_ends_and_opens_the_new_job(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, name="vit-sweep",
                     priority_class=PriorityClassFactory(name="normal"))  # fmt: skip
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#resubmit")).to_be_hidden()

    def runs_and_fails():
        actions.transition(job, State.SCHEDULED, "placed")
        attempt = AttemptFactory(job=job, cluster=ClusterFactory(name="east"))
        actions.transition(job, State.RUNNING, "running", attempt=attempt)
        actions.end_attempt(attempt.pk, Attempt.Outcome.USER_ERROR, exit_code=1)

    in_thread(runs_and_fails)
    expect(page.locator("#state")).to_have_text("failed", timeout=10_000)
    page.click("#resubmit")

    expect(page.locator("#resubmitted-from")).to_have_text(f"#{job.pk}", timeout=10_000)
    (again,) = Job.objects.filter(resubmitted_from=job)
    assert page.url == f"{server}/jobs/{again.pk}/"
    expect(page.locator("#state")).to_have_text("queued")


def test_the_owner_changes_a_queued_jobs_dependencies_and_the_form_goes_as_it_leaves_the_queue(
    server, browser_page, alpha, alice
):
    page = browser_page
    normal = PriorityClassFactory(name="normal")
    train = JobFactory(tenant=alpha, owner=alice, name="train-llama", priority_class=normal)
    evaluate = JobFactory(tenant=alpha, owner=alice, name="eval-llama", priority_class=normal)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{evaluate.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    page.fill("#dependencies", f"afterany:{train.pk},singleton")
    page.click("#change-dependencies")

    expect(page.locator("#depends-on")).to_contain_text(f"#{train.pk} train-llama")
    expect(page.locator("#depends-on .kind")).to_have_text("afterany")
    expect(page.locator("#dependencies")).to_have_value(f"afterany:{train.pk},singleton")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    in_thread(lambda: actions.transition(evaluate, State.SCHEDULED, "placed"))
    expect(page.locator("#dependencies-form")).to_be_hidden(timeout=10_000)


def test_a_user_issues_an_api_token_sees_it_once_and_the_api_takes_it(
    server, browser_page, alpha, alice
):
    page = browser_page
    JobFactory(tenant=alpha, owner=alice, name="from-the-cli")
    log_in(page, server, "alice")

    page.goto(f"{server}/tokens/")
    page.fill("input[name=name]", "laptop")
    page.click("text=Create token")
    key = page.locator("#new-token").input_value()
    page.goto(f"{server}/tokens/")

    assert key.startswith("mls_") and key not in page.content()
    answer = requests.get(f"{server}/api/v1/jobs/", headers={"Authorization": f"Token {key}"},
                          timeout=10)  # fmt: skip
    assert answer.status_code == 200
    assert [j["name"] for j in answer.json()["jobs"]] == ["from-the-cli"]

"""The submit form shows the parts of the family chosen and sends only those (in Chromium
against daphne, fixtures in conftest.py): a training gang's workers, a batch's shards, a share
of a GPU (which training does not take)."""

import pytest
from playwright.sync_api import expect

from jobs.models import Job
from tests.e2e.test_job_page import log_in
from tests.factories import PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)


def open_form(page, server, name: str = ""):
    """The submit form, Alice's; with `name`, filled in with it, an image and a command."""
    PriorityClassFactory(name="normal")
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/new/")
    if name:
        page.fill('input[name="name"]', name)
        page.fill('input[name="image"]', "python:3.11")
        page.fill('[name="command"]', "python eval.py")


def test_each_family_shows_its_own_parts_alone(server, browser_page, alpha, alice):
    page = browser_page
    open_form(page, server)
    gang = page.locator("fieldset", has_text="Its gang (training)")
    shards = page.locator("fieldset", has_text="Its shards (batch inference)")
    share = page.locator('input[name="gpu_milli"]')

    expect(gang).to_be_visible()  # training, the form's first choice
    expect(shards).to_be_hidden()
    expect(share).to_be_hidden()

    page.select_option('select[name="family"]', "batch_inference")
    expect(gang).to_be_hidden()
    expect(shards).to_be_visible()
    expect(share).to_be_visible()

    page.select_option('select[name="family"]', "evaluation")
    expect(gang).to_be_hidden()
    expect(shards).to_be_hidden()
    expect(share).to_be_visible()


def test_a_part_hidden_after_it_was_filled_in_is_not_sent(server, browser_page, alpha, alice):
    page = browser_page
    open_form(page, server, "mmlu")
    page.fill('input[name="workers"]', "4")  # typed for training, then another family chosen
    page.fill('input[name="min_workers"]', "2")
    page.select_option('select[name="family"]', "evaluation")

    page.click("button[type=submit]:has-text('Submit')")

    page.wait_for_url(f"{server}/jobs/*/")
    job = Job.objects.get(name="mmlu")
    assert (job.family, job.workers, job.min_workers) == ("evaluation", 1, None)


def test_a_part_the_server_refused_stays_in_sight(server, browser_page, alpha, alice):
    page = browser_page
    open_form(page, server, "mmlu")
    # Sent as a browser without the script would send it: an evaluation of 4 workers.
    page.evaluate("document.querySelectorAll('fieldset').forEach(f => f.disabled = false)")
    page.select_option('select[name="family"]', "evaluation")
    page.evaluate("document.querySelector('input[name=\"workers\"]').value = '4'")
    page.evaluate("document.querySelectorAll('fieldset').forEach(f => f.disabled = false)")

    page.click("button[type=submit]:has-text('Submit')")

    expect(page.locator("#id_workers_error")).to_have_text("An evaluation job has one worker.")
    expect(page.locator('input[name="workers"]')).to_be_visible()
    assert not Job.objects.exists()


def test_a_gpu_share_typed_sets_the_whole_gpus_to_none_and_back(server, browser_page, alpha, alice):
    page = browser_page
    open_form(page, server, "shared-eval")
    page.select_option('select[name="family"]', "evaluation")
    gpus, share = page.locator('input[name="gpus"]'), page.locator('input[name="gpu_milli"]')
    expect(gpus).to_have_value("1")  # the form's first value

    share.fill("250")
    expect(gpus).to_have_value("0")
    gpus.fill("2")
    expect(share).to_have_value("0")
    share.fill("250")
    page.click("button[type=submit]:has-text('Submit')")

    page.wait_for_url(f"{server}/jobs/*/")
    job = Job.objects.get(name="shared-eval")
    assert (job.gpus, job.gpu_milli) == (0, 250)

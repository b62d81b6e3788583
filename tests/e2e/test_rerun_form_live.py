"""A batch that ends while its page is open gets its rerun form without a reload, in Chromium
against daphne: the form the server draws for an ended batch, and one that works. Run in its own
pytest process."""

import re

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Family, Job
from jobs.states import State
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)

BATCH = {
    "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
    "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 5,
}  # fmt: skip
FAILED_SHARDS = [1, 3]


def running_batch(alice, alpha) -> Job:
    made = []
    spec = {**BATCH, "priority_class": PriorityClassFactory()}
    in_thread(lambda: made.append(actions.submit(alice, alpha, spec)[0]))  # it publishes
    (batch,) = made
    Job.objects.filter(pk__in=batch.batch().values("pk")).update(state=State.RUNNING)
    return batch


def open_live(page, server, batch) -> None:
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{batch.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#rerun-form")).to_have_count(0)  # drawn for a batch that has ended


def end_shards_then_the_first(batch) -> None:
    """Shards 1 and 3 fail, the others succeed; the first (the page's job) ends last, so its
    state message finds the whole batch ended."""

    def end():
        for shard in batch.batch().order_by("-pk"):
            failed = shard.shard_index in FAILED_SHARDS
            actions.transition(shard, State.FAILED if failed else State.SUCCEEDED, "exited")

    in_thread(end)


def form_html(page) -> str:
    """#rerun-form's markup, its per-page key and CSRF token masked."""
    html = page.locator("#rerun-form").evaluate("form => form.outerHTML")
    html = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "CSRF", html)
    return re.sub(r"rerun-\d+-[0-9a-f]{16}", "KEY", html)


def ended_on_its_page(page, server, alice, alpha) -> Job:
    """A running batch whose page is open, then ended, shards 1 and 3 failed."""
    batch = running_batch(alice, alpha)
    open_live(page, server, batch)
    end_shards_then_the_first(batch)
    return batch


def test_the_rerun_form_is_drawn_as_the_server_draws_it_when_the_batch_ends_on_its_page(
    server, browser_page, alpha, alice
):
    page = browser_page
    batch = ended_on_its_page(page, server, alice, alpha)

    rerun = page.locator("#rerun")
    expect(rerun).to_have_text("Rerun the 2 shards that did not succeed", timeout=10_000)
    expect(page.locator("#resubmit-form + #rerun-form")).to_be_visible()
    key = page.locator("#rerun-form input[name=idempotency_key]").input_value()
    assert re.fullmatch(rf"rerun-{batch.pk}-[0-9a-f]{{16}}", key)
    drawn_live = form_html(page)
    page.reload()
    assert form_html(page) == drawn_live
    assert page.locator("#rerun-form input[name=idempotency_key]").input_value() != key


def test_the_rerun_form_drawn_live_reruns_the_failed_shards_once_if_sent_twice(
    server, browser_page, alpha, alice
):
    page = browser_page
    batch = ended_on_its_page(page, server, alice, alpha)
    expect(page.locator("#rerun")).to_be_visible(timeout=10_000)
    sent = page.locator("#rerun-form").evaluate("form => Object.fromEntries(new FormData(form))")

    page.click("#rerun")  # posted with the CSRF token the form came with
    expect(page.locator("#resubmitted-from")).to_have_text(f"#{batch.pk}", timeout=10_000)
    # Sent again (a double click, a retry): the key the form came with names the same batch.
    twice = page.request.post(f"{server}/jobs/{batch.pk}/resubmit/", form=sent, max_redirects=0)

    again = Job.objects.get(resubmitted_from=batch, parent=None)
    assert page.url == f"{server}/jobs/{again.pk}/"
    assert (twice.status, twice.headers["location"]) == (302, f"/jobs/{again.pk}/")
    assert again.idempotency_key == sent["idempotency_key"]
    assert sorted(again.batch().values_list("shard_index", flat=True)) == FAILED_SHARDS
    expect(page.locator("#shards")).to_have_text("2 of 5: 2 queued (cancel stops them all)")

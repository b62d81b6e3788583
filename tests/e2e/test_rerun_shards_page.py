"""Rerunning an ended batch's shards that did not succeed from its page, in Chromium against
daphne: the new batch's page counts its shards of the batch's, and keeps that count as they
change live. Run in its own pytest process."""

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


def test_the_rerun_button_makes_a_batch_of_the_failed_shards_counted_of_the_batchs(
    server, browser_page, alpha, alice
):
    page = browser_page
    spec = {**BATCH, "priority_class": PriorityClassFactory()}
    made = []
    in_thread(lambda: made.append(actions.submit(alice, alpha, spec)[0]))  # it publishes
    (batch,) = made
    Job.objects.filter(pk__in=batch.batch().values("pk")).update(state=State.SUCCEEDED)
    Job.objects.filter(parent=batch, shard_index__in=[1, 3]).update(state=State.FAILED)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{batch.pk}/")

    expect(page.locator("#rerun")).to_have_text("Rerun the 2 shards that did not succeed")
    page.click("#rerun")

    expect(page.locator("#resubmitted-from")).to_have_text(f"#{batch.pk}", timeout=10_000)
    again = Job.objects.get(resubmitted_from=batch, parent=None)
    assert page.url == f"{server}/jobs/{again.pk}/"
    expect(page.locator("#shards")).to_have_text("2 of 5: 2 queued (cancel stops them all)")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    in_thread(lambda: actions.cancel(again, "canceled by alice"))

    expect(page.locator("#state")).to_have_text("canceled", timeout=10_000)
    expect(page.locator("#shards")).to_have_text("2 of 5: 2 canceled")

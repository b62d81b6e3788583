"""The job page keeps itself whole in a real browser: a batch cancel reaches it, a refused log
read is asked again from where it stopped, what changes without a message (the reason for the
wait, the estimated start) is re-read every 30 s, and a batch's page counts its other shards as
they move. Run in its own pytest process."""

from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Family, LogChunk
from jobs.states import State
from tests.e2e.test_job_page import in_thread, log_in
from tests.e2e.test_rerun_form_live import open_live, running_batch
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)

BATCH = {
    "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
    "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 150,
}  # fmt: skip


def test_the_page_of_a_150_shard_batch_shows_its_cancel_live(server, browser_page, alpha, alice):
    page = browser_page
    spec = {**BATCH, "priority_class": PriorityClassFactory()}
    made = []
    in_thread(lambda: made.append(actions.submit(alice, alpha, spec)[0]))  # it publishes
    (batch,) = made
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{batch.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    in_thread(lambda: actions.cancel(batch, "canceled by alice"))

    expect(page.locator("#state")).to_have_text("canceled", timeout=10_000)
    expect(page.locator("#shards")).to_have_text("150: 150 canceled")
    expect(page.locator("#live")).to_have_text("live")  # it came over the websocket


def test_a_log_read_refused_with_429_is_asked_again_and_leaves_no_hole(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    attempt = AttemptFactory(job=job, cluster=ClusterFactory(name="east"))
    LogChunk.objects.bulk_create(
        LogChunk(attempt=attempt, seq=n, text=f"line {n:04d}") for n in range(1, 2501)
    )
    asked = []

    def refuse_the_first_read(route):
        asked.append(route.request.url)
        if len(asked) == 1:
            route.fulfill(status=429, headers={"Retry-After": "1"}, json={"detail": "slow down"})
        else:
            route.continue_()

    page.route("**/api/v1/jobs/*/logs/*", refuse_the_first_read)
    log_in(page, server, "alice")

    page.goto(f"{server}/jobs/{job.pk}/")

    rows = page.locator("#log span")
    expect(rows).to_have_count(2500, timeout=15_000)
    assert asked[1] == asked[0]  # the refused read again, from the same line
    expect(rows.first).to_have_text("[1.0] line 0001\n")
    expect(rows.nth(999)).to_have_text("[1.0] line 1000\n")
    expect(rows.last).to_have_text("[1.0] line 2500\n")


def test_the_page_rereads_the_wait_reason_and_estimated_start_every_30_s(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice)
    page.clock.install()
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#estimate")).to_be_hidden()

    start = datetime(2030, 5, 6, 7, 8, tzinfo=UTC)
    reason = ("no_capacity", "Waiting for 1 GPU of type A100.", start)
    in_thread(lambda: actions.record_pending({job.pk: reason}))  # no message: a cycle's note
    page.clock.run_for(31_000)

    expect(page.locator("#reason")).to_have_text("Waiting for 1 GPU of type A100.")
    expect(page.locator("#estimated-start")).to_have_text("2030-05-06 07:08 UTC")
    expect(page.locator("#estimate")).to_be_visible()


def test_a_batchs_page_counts_its_other_shards_as_they_end(server, browser_page, alpha, alice):
    page = browser_page
    batch = running_batch(alice, alpha)
    open_live(page, server, batch)

    def end_others():
        for shard in batch.batch().exclude(pk=batch.pk):
            actions.transition(shard, State.SUCCEEDED, "exited")

    in_thread(end_others)

    # Well before the page's 30-second re-read: the socket said the other shards moved.
    expect(page.locator("#shards")).to_contain_text("4 succeeded", timeout=10_000)
    expect(page.locator("#shards")).to_contain_text("1 running")
    # Redrawn, each count still lists the batch's shards in its state.
    succeeded = page.locator("#shards a", has_text="4 succeeded")
    expect(succeeded).to_have_attribute("href", f"/?batch={batch.pk}&state=succeeded")

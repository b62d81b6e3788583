"""The job page's log narrowed to one worker or one attempt, in a real browser (Debian's
Chromium, driven by Playwright), served by daphne with live lines over Channels and Redis."""

import pytest
from playwright.sync_api import expect

from clusters import agents
from clusters.backends.base import LogLine
from jobs.models import LogChunk
from jobs.states import State
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import AttemptFactory, ClusterFactory, JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_choosing_a_worker_shows_its_lines_alone_live_and_downloads_its_log(
    server, browser_page, alpha, alice
):
    page = browser_page
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=alpha, owner=alice, workers=3, gpus=1, state=State.RUNNING)
    lost = AttemptFactory(job=job, cluster=cluster, number=1, outcome="lost")
    attempt = AttemptFactory(job=job, cluster=cluster, number=2)
    for rank in range(3):
        LogChunk.objects.create(attempt=lost, worker=rank, seq=0, text=f"first try {rank}")
    for rank in range(3):
        LogChunk.objects.create(attempt=attempt, worker=rank, seq=0, text=f"rank {rank} up")
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#log")).to_contain_text("[2.2] rank 2 up", timeout=10_000)
    expect(page.locator("#log > span")).to_have_count(6)

    page.select_option("#log-worker", "1")

    expect(page.locator("#log > span")).to_have_text(["[1.1] first try 1\n", "[2.1] rank 1 up\n"])
    download = page.locator("#download-log")
    expect(download).to_have_attribute("href", f"/api/v1/jobs/{job.pk}/logs.txt?worker=1")

    lines = [LogLine(attempt.pk, 0, 1, "stdout", "loss 0.9 on rank 0"),
             LogLine(attempt.pk, 1, 1, "stdout", "loss 0.9 on rank 1")]  # fmt: skip
    in_thread(lambda: agents.store_logs(cluster, lines))

    expect(page.locator("#log > span").last).to_have_text("[2.1] loss 0.9 on rank 1\n")
    expect(page.locator("#log")).not_to_contain_text("rank 0")

    page.select_option("#log-attempt", "2")
    expect(page.locator("#log > span")).to_have_text(
        ["[2.1] rank 1 up\n", "[2.1] loss 0.9 on rank 1\n"]
    )
    expect(download).to_have_attribute("href", f"/api/v1/jobs/{job.pk}/logs.txt?worker=1&attempt=2")
    with page.expect_download() as saved:
        download.click()
    assert saved.value.path().read_text() == "rank 1 up\nloss 0.9 on rank 1\n"

    page.select_option("#log-worker", "")
    expect(page.locator("#log > span")).to_have_count(5)  # attempt 2's, each rank's


def test_a_single_worker_job_of_one_attempt_offers_no_choice(server, browser_page, alpha, alice):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    AttemptFactory(job=job, cluster=ClusterFactory(name="east"))
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    expect(page.locator("#log-worker")).to_have_count(0)
    expect(page.locator("#log-attempt")).to_be_hidden()


def test_the_choice_is_in_the_pages_address_and_a_shared_address_brings_it(
    server, browser_page, alpha, alice
):
    page = browser_page
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=alpha, owner=alice, workers=2, gpus=1, state=State.RUNNING)
    attempt = AttemptFactory(job=job, cluster=cluster)
    for rank in range(2):
        LogChunk.objects.create(attempt=attempt, worker=rank, seq=0, text=f"rank {rank} up")
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)

    page.select_option("#log-worker", "1")
    expect(page.locator("#log > span")).to_have_text(["[1.1] rank 1 up\n"])
    assert page.url == f"{server}/jobs/{job.pk}/#worker=1"

    page.goto(f"{server}/jobs/{job.pk}/")  # the choice dropped with the address's
    page.goto(f"{server}/jobs/{job.pk}/#worker=0")
    page.reload()
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#log-worker")).to_have_value("0")
    expect(page.locator("#log > span")).to_have_text(["[1.0] rank 0 up\n"])
    expect(page.locator("#download-log")).to_have_attribute(
        "href", f"/api/v1/jobs/{job.pk}/logs.txt?worker=0"
    )


def test_typing_a_text_shows_the_lines_holding_it_live_and_in_the_address(
    server, browser_page, alpha, alice
):
    page = browser_page
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, state=State.RUNNING)
    attempt = AttemptFactory(job=job, cluster=cluster)
    for seq, text in enumerate(["step 1", "Loss 2.3", "step 2", "loss 1.9"]):
        LogChunk.objects.create(attempt=attempt, seq=seq, text=text)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#log > span")).to_have_count(4, timeout=10_000)

    page.fill("#log-grep", "LOSS")

    expect(page.locator("#log > span")).to_have_text(["[1.0] Loss 2.3\n", "[1.0] loss 1.9\n"])
    assert page.url == f"{server}/jobs/{job.pk}/#grep=LOSS"
    expect(page.locator("#download-log")).to_have_attribute(
        "href", f"/api/v1/jobs/{job.pk}/logs.txt?grep=LOSS"
    )
    lines = [LogLine(attempt.pk, 0, 4, "stdout", "step 3"),
             LogLine(attempt.pk, 0, 5, "stdout", "loss 1.2")]  # fmt: skip
    in_thread(lambda: agents.store_logs(cluster, lines))
    expect(page.locator("#log > span").last).to_have_text("[1.0] loss 1.2\n")
    expect(page.locator("#log")).not_to_contain_text("step")

    page.fill("#log-grep", "")
    expect(page.locator("#log > span")).to_have_count(6)
    page.goto(f"{server}/jobs/{job.pk}/#grep=step%203")
    page.reload()
    expect(page.locator("#log-grep")).to_have_value("step 3")
    expect(page.locator("#log > span")).to_have_text(["[1.0] step 3\n"])

"""The job page in a real browser (Debian's Chromium, driven by Playwright), served by daphne,
with live updates over Channels and Redis (the `server` and `browser_page` fixtures are in
conftest.py). Run in its own pytest process (see the Makefile)."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from clusters import agents
from clusters.backends.base import LogLine
from jobs import actions
from jobs.models import Family, LogChunk
from jobs.states import State
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)


def in_thread(work) -> None:
    """Run server-side work off this thread: Playwright's event loop runs here, and publishing
    to the channel layer needs a thread without one (as in the web app and the scheduler)."""
    failures = []

    def run():
        try:
            work()
        except Exception as error:  # surfaced below, in the test's thread
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not failures, failures


def log_in(page, url, username):
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")


def test_the_job_page_shows_state_changes_attempts_and_log_lines_as_they_happen(
    server, browser_page, alpha, alice, tmp_path
):
    page = browser_page
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=alpha, owner=alice, name="bert-finetune")
    log_in(page, server, "alice")

    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#state")).to_have_text("queued")
    expect(page.locator("#attempts")).to_have_text("Not placed yet.")

    def scheduler_and_agent():
        actions.transition(job, State.SCHEDULED, "placed")
        attempt = AttemptFactory(job=job, cluster=cluster)
        actions.transition(job, State.RUNNING, "attempt 1 running", attempt=attempt)
        lines = [LogLine(attempt.pk, 0, 0, "stdout", "epoch 1 loss 0.42"),
                 LogLine(attempt.pk, 0, 1, "stderr", "grad norm high")]  # fmt: skip
        agents.store_logs(cluster, lines)

    in_thread(scheduler_and_agent)

    expect(page.locator("#state")).to_have_text("running", timeout=10_000)
    expect(page.locator("#log")).to_contain_text("[1.0] epoch 1 loss 0.42", timeout=10_000)
    expect(page.locator("#log .stderr")).to_have_text("[1.0] grad norm high\n")
    attempts = page.locator("#attempts tr")
    expect(attempts).to_have_count(1)
    cells = ["1", "east", "", "live", *[""] * 8]  # not started, nothing measured
    expect(attempts.first.locator("td")).to_have_text(cells)
    expect(page.locator("#live")).to_have_text("live")  # it came over the websocket
    page.screenshot(path=str(tmp_path / "job-page.png"), full_page=True)


def open_running_job_with_lines(page, server, tenant, owner, count: int, width: int):
    """A running job on `east` whose log holds "line 1" to "line <count>" (zero-padded to
    `width`), its page opened by its owner once live; (cluster, attempt)."""
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=tenant, owner=owner, state=State.RUNNING)
    attempt = AttemptFactory(job=job, cluster=cluster)
    LogChunk.objects.bulk_create(
        LogChunk(attempt=attempt, seq=n, text=f"line {n:0{width}d}") for n in range(1, count + 1)
    )
    log_in(page, server, owner.username)
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    return cluster, attempt


def test_the_job_pages_history_gains_each_transition_as_it_happens(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, name="bert-finetune")
    in_thread(lambda: actions.transition(job, State.SCHEDULED, "placed on gpu-a"))  # drawn
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    page.locator("#history summary").click()
    expect(page.locator("#history-rows tr")).to_have_count(1)

    in_thread(lambda: actions.transition(job, State.RUNNING, "attempt 1 running"))

    rows = page.locator("#history-rows tr")
    expect(rows).to_have_count(2, timeout=10_000)
    expect(rows.first.locator("td").nth(1)).to_have_text("scheduled")
    expect(rows.first.locator("td").nth(2)).to_have_text("running")
    expect(rows.first.locator("td").nth(3)).to_have_text("attempt 1 running")
    expect(page.locator("#history-summary")).to_have_text(
        "History (the last 2 events, newest first)"
    )


def test_the_job_page_shows_every_stored_log_line_past_one_page_once_then_live_ones(
    server, browser_page, alpha, alice
):
    page = browser_page
    # The logs endpoint gives at most 1,000 lines a page.
    cluster, attempt = open_running_job_with_lines(page, server, alpha, alice, 1500, 4)
    rows = page.locator("#log span")
    expect(rows).to_have_count(1500, timeout=10_000)
    live = [LogLine(attempt.pk, 0, 1501, "stdout", "line 1501")]
    in_thread(lambda: agents.store_logs(cluster, live))

    expect(rows).to_have_count(1501, timeout=10_000)
    for n in (1, 1500, 1501):
        expect(rows.filter(has_text=f"line {n:04d}")).to_have_count(1)
    expect(rows.first).to_have_text("[1.0] line 0001\n")
    expect(rows.last).to_have_text("[1.0] line 1501\n")


def test_a_long_log_shows_its_last_lines_and_keeps_only_as_many_as_new_ones_come(
    server, browser_page, alpha, alice
):
    page = browser_page
    cluster, attempt = open_running_job_with_lines(page, server, alpha, alice, 12_000, 5)
    lines = page.locator("#log span:not(.gap)")
    expect(lines).to_have_count(5000, timeout=10_000)
    expect(lines.first).to_have_text("[1.0] line 07001\n")
    expect(page.locator("#log .gap")).to_have_count(1)
    expect(page.locator("#log-note")).to_be_visible()
    live = [LogLine(attempt.pk, 0, 12_001, "stdout", "line 12001")]
    in_thread(lambda: agents.store_logs(cluster, live))

    expect(lines.last).to_have_text("[1.0] line 12001\n", timeout=10_000)
    expect(lines).to_have_count(5000)
    expect(lines.first).to_have_text("[1.0] line 07002\n")  # the oldest went, its gap first
    expect(page.locator("#log .gap")).to_have_count(0)


def test_the_hold_button_and_the_queued_jobs_forms_follow_changes_made_elsewhere(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#hold")).to_have_text("Hold: do not start it yet")
    expect(page.locator("#runtime-limit-form")).to_be_visible()
    expect(page.locator("#request-form")).to_be_visible()
    expect(page.locator("#constraints-form")).to_be_visible()

    in_thread(lambda: actions.hold(job, "alice from the CLI"))  # not through this page

    expect(page.locator("#release")).to_have_text("Release the hold", timeout=10_000)
    expect(page.locator("#hold-form")).to_have_attribute("action", f"/jobs/{job.pk}/release/")
    in_thread(lambda: actions.release_hold(job, "alice from the CLI"))
    expect(page.locator("#hold")).to_be_visible(timeout=10_000)
    in_thread(lambda: actions.transition(job, State.SCHEDULED, "placed"))
    expect(page.locator("#hold-form")).to_be_hidden(timeout=10_000)
    expect(page.locator("#runtime-limit-form")).to_be_visible()  # a job placed: a lower limit
    expect(page.locator("#request-form")).to_be_hidden()  # it keeps what it asked for
    expect(page.locator("#constraints-form")).to_be_hidden()  # and where it runs

    page.reload()  # drawn by the server for a job no longer queued: hidden too
    expect(page.locator("#state")).to_have_text("scheduled")
    expect(page.locator("#hold-form")).to_be_hidden()
    expect(page.locator("#runtime-limit-form")).to_be_visible()
    expect(page.locator("#request-form")).to_be_hidden()
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    in_thread(lambda: actions.transition(job, State.CANCELED, "canceled by alice"))
    expect(page.locator("#runtime-limit-form")).to_be_hidden(timeout=10_000)  # ended: none


def test_the_request_form_asks_for_a_gpu_share_once_one_is_typed(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, family=Family.EVALUATION, gpus=1)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")

    page.fill("#request-gpu-milli", "500")
    expect(page.locator("#request-gpus")).to_have_value("0")
    with page.expect_navigation():
        page.click("#change-request")

    expect(page.locator("#request-gpu-milli")).to_have_value("500")  # drawn again from the job
    job.refresh_from_db()
    assert (job.gpus, job.gpu_milli) == (0, 500)


def test_the_front_page_links_to_the_jobs_of_the_users_tenant(server, browser_page, alpha, alice):
    JobFactory(tenant=alpha, owner=alice, name="resnet-sweep")
    log_in(browser_page, server, "alice")

    browser_page.click("text=resnet-sweep")

    expect(browser_page.locator("h1")).to_contain_text("resnet-sweep")


def fill_an_evaluation(page, name: str, command: str) -> None:
    """Open the submit form and fill it for an evaluation on half a GPU."""
    page.click("text=Submit a job")
    page.fill("input[name=name]", name)
    page.select_option("select[name=family]", "evaluation")
    page.fill("input[name=image]", "python:3.11")
    page.fill("[name=command]", command)
    page.fill("input[name=gpus]", "0")
    page.fill("input[name=gpu_milli]", "500")


def test_a_user_submits_a_job_from_the_portal_and_lands_on_its_page(
    server, browser_page, alpha, alice, tmp_path
):
    PriorityClassFactory(name="normal", value=0)
    page = browser_page
    log_in(page, server, "alice")

    fill_an_evaluation(page, "llama-eval", "python eval.py --split test")
    page.screenshot(path=str(tmp_path / "submit.png"), full_page=True)
    page.click("button[type=submit]")

    expect(page.locator("h1")).to_contain_text("llama-eval")
    expect(page.locator("#state")).to_have_text("queued")
    assert page.locator("#cancel").is_visible()


def test_a_user_defers_a_job_from_the_portal_to_a_time_read_as_utc(
    server, browser_page, alpha, alice, tmp_path
):
    PriorityClassFactory(name="normal", value=0)
    begin = (timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    page = browser_page
    log_in(page, server, "alice")

    fill_an_evaluation(page, "nightly-eval", "python eval.py")
    page.fill("input[name=begin]", f"{begin:%Y-%m-%dT%H:%M}")  # the input holds no zone
    page.screenshot(path=str(tmp_path / "submit-begin.png"), full_page=True)
    page.click("button[type=submit]")

    expect(page.locator("h1")).to_contain_text("nightly-eval")
    expect(page.locator("#begin")).to_have_text(f"not placed before {begin:%Y-%m-%d %H:%M:%S} UTC")


def test_the_job_page_keeps_saying_why_the_job_failed_once_it_reads_the_job_again(
    server, browser_page, alpha, alice
):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, name="bert-finetune")
    in_thread(lambda: actions.transition(job, State.SCHEDULED, "placed on gpu-a"))
    in_thread(lambda: actions.transition(job, State.RUNNING, "attempt 1 running"))
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    page.locator("#history summary").click()

    in_thread(lambda: actions.transition(job, State.FAILED, "worker 0 exited with code 3"))

    # The history is redrawn after the job is read again, which redraws the state's line.
    expect(page.locator("#history-rows tr").first.locator("td").nth(2)).to_have_text(
        "failed", timeout=10_000
    )
    expect(page.locator("#state")).to_have_text("failed")
    expect(page.locator("#reason")).to_have_text("worker 0 exited with code 3")

"""What a user or a job controls, shown on the job page in Chromium: as text, never run. The
page draws some of it on the server and job.js the rest, from the websocket (states, reasons,
live log lines) and the REST API (the job, its attempts, the log lines written before the page
opened). Each payload would set window.pwned if it ran."""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from clusters import agents
from clusters.backends.base import LogLine
from jobs import actions
from jobs.states import State
from quotas.models import ApiToken, Rate
from quotas.tokens import create_token
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import AttemptFactory, ClusterFactory, JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

IMG = '<img src=x onerror="window.pwned=1">'
SCRIPT = "<script>window.pwned=1</script>"


def test_the_job_page_shows_markup_from_the_job_and_its_logs_as_text_and_never_runs_it(
    server, browser_page, alpha, alice
):
    page = browser_page
    cluster = ClusterFactory(name="east")
    job = JobFactory(tenant=alpha, owner=alice, name=IMG, image=SCRIPT, command=["echo", IMG],
                     pending_message=SCRIPT)  # fmt: skip
    earlier = AttemptFactory(job=job, cluster=cluster, number=1, outcome="lost", reason=IMG)
    earlier.log_chunks.create(seq=0, text=f"polled {IMG}")  # read through the REST API
    log_in(page, server, "alice")

    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#log")).to_contain_text(f"polled {IMG}", timeout=10_000)
    # The scheduler's message as queued (once running, the page shows the reason pushed or,
    # after the re-read each state change makes, the job's own, which a running job has not).
    expect(page.locator("#reason")).to_have_text(SCRIPT)

    def runs_and_writes():
        attempt = AttemptFactory(job=job, cluster=cluster, number=2)
        actions.transition(job, State.SCHEDULED, IMG)
        actions.transition(job, State.RUNNING, SCRIPT, attempt=attempt)
        lines = [LogLine(attempt.pk, 0, 0, "stdout", f"live {IMG}"),
                 LogLine(attempt.pk, 0, 1, "stderr", f"live {SCRIPT}")]  # fmt: skip
        agents.store_logs(cluster, lines)

    in_thread(runs_and_writes)

    expect(page.locator("#log")).to_contain_text(f"live {SCRIPT}", timeout=10_000)
    expect(page.locator("#log")).to_contain_text(f"live {IMG}")
    expect(page.locator("#state")).to_have_text("running")
    expect(page.locator("#attempts tr").first.locator("td").nth(5)).to_have_text(IMG)
    expect(page.locator("h1")).to_contain_text(IMG)
    expect(page.locator("dd code").first).to_have_text(SCRIPT)
    assert page.locator("#job img, #job script").count() == 0
    page.wait_for_timeout(500)  # an image that failed to load would have fired onerror by now
    assert page.evaluate("window.pwned") is None


PAGES = ["/", "/queue/", "/jobs/new/", "/overview/", "/clusters/", "/usage/", "/quotas/",
         "/secrets/", "/tokens/", "/accounts/password/", "/accounts/sign-ins/",
         "/teams/"]  # fmt: skip


def test_the_portals_pages_run_within_their_content_security_policy_and_block_markup_scripts(
    server, browser_page, policy_refused, alpha, alice
):
    page, refused = browser_page, policy_refused
    job = JobFactory(tenant=alpha, owner=alice, name="train")
    # A rate: the quotas page draws its Prices, the usage page its link to them.
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))
    log_in(page, server, "alice")

    for path in PAGES:
        page.goto(f"{server}{path}")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)  # its websocket
    assert refused == []
    # Markup that got into a page past its escaping: its handler is refused, not run.
    page.evaluate("""document.body.insertAdjacentHTML(
        "beforeend", '<img src="/nowhere.png" onerror="window.pwned=1">')""")
    page.wait_for_timeout(500)
    assert page.evaluate("window.pwned") is None
    assert any("inline event handler" in text for _, text in refused)


def test_revoking_a_token_asks_first_and_a_no_keeps_it(server, browser_page, alice):
    page = browser_page
    create_token(alice, "laptop")
    log_in(page, server, "alice")
    page.goto(f"{server}/tokens/")

    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("button:text-is('Revoke')")
    page.wait_for_timeout(300)
    kept = ApiToken.objects.filter(name="laptop").exists()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:text-is('Revoke')")
    expect(page.locator("button:text-is('Revoke')")).to_have_count(0)

    assert kept
    assert not ApiToken.objects.filter(name="laptop").exists()

"""A queued job's page says where it stands in line, and says it again, without a reload, as
the line moves. Run in its own pytest process."""

import pytest
from playwright.sync_api import expect

from jobs import actions, cycle
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import ClusterFactory, JobFactory, NodeFactory, QuotaFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_page_follows_the_job_up_the_line(
    server, browser_page, alpha, gamma, alice, charlie, settings
):
    settings.MLSCHED_LINE_EVERY_S = 0  # each cycle keeps its line
    page = browser_page
    first = JobFactory(tenant=alpha, owner=alice, gpus=8, priority=10)  # no node holds them
    job = JobFactory(tenant=alpha, owner=alice, gpus=8)
    in_thread(cycle.run_cycle)
    page.clock.install()
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")

    expect(page.locator("#standing")).to_have_text(
        "2nd in line of 2 waiting jobs (2nd of its team's 2); ahead of it: 1 of its team's."
    )
    expect(page.locator("#standing-points")).to_contain_text("Its points in its team's line: ")
    expect(page.locator("#standing-share")).to_contain_text(
        "Its team's fair share: 0 (it holds nothing and has used nothing recently); no other "
        "team has jobs waiting"
    )

    in_thread(lambda: actions.cancel(first, "canceled by alice"))
    JobFactory(tenant=gamma, owner=charlie, gpus=8)  # another team's turn comes after
    in_thread(cycle.run_cycle)
    page.clock.run_for(31_000)  # the page re-reads its job every 30 s

    expect(page.locator("#standing")).to_have_text(
        "1st in line of 2 waiting jobs (1st of its team's 1).", timeout=10_000
    )
    expect(page.locator("#standing-share")).to_contain_text(
        "has used nothing recently); its turn comes 1st of the 2 teams with jobs waiting"
    )


def test_the_queue_page_lists_the_line_and_fits_a_1024_pixel_window(
    server, browser_page, alpha, alice
):
    page = browser_page
    east = ClusterFactory(name="a-cluster-with-a-long-name-east-1")
    NodeFactory(cluster=east, name="a-node-with-a-long-name-0001", gpu_count=8, gpu_type="A100")
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    JobFactory(tenant=alpha, owner=alice, gpus=8, priority=5)  # placed: the node is its
    job = JobFactory(tenant=alpha, owner=alice, name="a-job-with-a-rather-long-name", gpus=8)
    in_thread(cycle.run_cycle)
    page.set_viewport_size({"width": 1024, "height": 800})
    log_in(page, server, "alice")

    page.click("nav >> text=Queue")

    rows = page.locator("#queue tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("a-job-with-a-rather-long-name")
    assert rows.first.locator("td").nth(2).inner_text() == str(job.pk)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024

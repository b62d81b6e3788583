"""A job page open while maintenance is planned over its running job's node says, without a
reload, which window will stop the job before its runtime limit. Run in its own pytest
process."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from clusters.models import MaintenanceWindow
from jobs import cycle
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_page_tells_of_a_window_planned_over_its_running_job(
    server, browser_page, alpha, alice
):
    page = browser_page
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east, name="east-0", gpu_count=1)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=10 * 3600)
    in_thread(cycle.run_cycle)  # it places the job (and publishes the move)
    page.clock.install()
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#window-ahead")).to_be_hidden()

    starts = timezone.now() + timedelta(hours=1)
    MaintenanceWindow.objects.create(
        cluster=east, starts_at=starts, ends_at=starts + timedelta(hours=2), reason="firmware"
    )
    page.clock.run_for(31_000)  # the page re-reads its job every 30 s

    notice = page.locator("#window-ahead")
    expect(notice).to_be_visible(timeout=10_000)
    expect(notice).to_contain_text("Maintenance of east (firmware) starts")
    expect(notice).to_contain_text(f"{starts:%Y-%m-%d %H:%M} UTC")

"""The portal fits a laptop's window: the submit form's long labels and help texts wrap, and a
table wider than the window scrolls in its box, instead of widening the page past the header
(in Chromium against daphne, fixtures in conftest.py)."""

from decimal import Decimal

import pytest

from quotas.models import Rate
from tests.e2e.test_job_page import log_in
from tests.factories import (
    ClusterFactory,
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_submit_form_needs_no_sideways_scrolling_in_a_1280_pixel_window(
    server, browser_page, alpha, alice
):
    page = browser_page
    PriorityClassFactory(name="normal")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, server, "alice")

    page.goto(f"{server}/jobs/new/")
    page_width = page.evaluate("document.documentElement.scrollWidth")
    form = page.locator("form.submit").bounding_box()

    assert page_width <= 1280
    assert form["x"] + form["width"] <= 1280


@pytest.mark.parametrize("path", ["/", "/clusters/", "/overview/", "/quotas/"])
def test_a_portal_page_needs_no_sideways_scrolling_in_a_1024_pixel_window(
    server, browser_page, alpha, alice, path
):
    page = browser_page
    east = ClusterFactory(name="a-cluster-with-a-long-name-east-1", last_heartbeat=None)
    NodeFactory(cluster=east, name="a-node-with-a-long-name-0001", gpu_count=8, gpu_type="A100")
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))  # the quotas page's Prices
    JobFactory(tenant=alpha, owner=alice, name="a-job-with-a-rather-long-name", gpus=8)
    page.set_viewport_size({"width": 1024, "height": 800})
    log_in(page, server, "alice")

    page.goto(f"{server}{path}")

    assert page.evaluate("document.documentElement.scrollWidth") <= 1024


def test_a_queued_jobs_verbs_share_a_row_and_each_changes_help_sits_under_its_field(
    server, browser_page, alpha, alice
):
    page = browser_page
    PriorityClassFactory(name="normal")
    job = JobFactory(tenant=alpha, owner=alice, name="gang", workers=2, min_workers=1)
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, server, "alice")

    page.goto(f"{server}/jobs/{job.pk}/")
    cancel, hold = (page.locator(f"#{id}").bounding_box() for id in ("cancel", "hold"))
    field = page.locator("#min-workers-input").bounding_box()
    help_text = page.locator("#min-workers-help").bounding_box()

    assert abs(cancel["y"] - hold["y"]) < 2 and hold["x"] > cancel["x"] + cancel["width"]
    assert help_text["y"] >= field["y"] + field["height"] - 1
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280

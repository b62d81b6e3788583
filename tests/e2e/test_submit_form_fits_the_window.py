"""The submit form fits a laptop's window: its long labels and help texts wrap instead of
widening the page past the header (in Chromium against daphne, fixtures in conftest.py)."""

import pytest

from tests.e2e.test_job_page import log_in
from tests.factories import PriorityClassFactory

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

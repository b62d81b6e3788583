"""The usage page in Chromium against daphne (fixtures in conftest.py): the form, the table
of the user's own teams, and the CSV download of the same rows."""

import csv

import pytest
from playwright.sync_api import expect

from jobs.models import Attempt
from tests.e2e.test_job_page import log_in
from tests.jobs.test_usage_cost import card
from tests.jobs.test_usage_report import SINCE, H, as_shown, run

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = "rows => rows.map(row => [...row.cells].map(cell => cell.textContent))"


def test_a_user_reads_their_teams_usage_and_downloads_the_same_rows_as_csv(
    server, browser_page, alpha, alice, gamma
):
    page = browser_page
    a100 = run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100", workers=2)  # 2 h x 2 GPUs
    # Measured: 4 of its 16 core-hours busy; 8,000 of 16,000 MiB per worker reached; 3 of its
    # 4 GPU-hours busy.
    Attempt.objects.filter(pk=a100.pk).update(
        cpu_seconds=4 * 3600, memory_peak_mb=8000, gpu_busy_seconds=3 * 3600
    )
    run(alpha, SINCE - H, SINCE + 2 * H, gpu_type="T4", gpus=0, gpu_milli=500)  # 2 h x 0.5
    run(gamma, SINCE + H, SINCE + 9 * H, gpu_type="H100")
    card(gpu_A100="2.00")  # 4 A100-hours: 8.00; no rate for T4 or cpu
    log_in(page, server, "alice")

    page.click("header >> text=Usage")
    page.fill("input[name=since]", "2025-03-01")
    page.fill("input[name=until]", "2025-03-02")
    page.click("button:has-text('Show')")
    expect(page.locator("#window")).to_contain_text("From 2025-03-01 00:00 to 2025-03-02 00:00")
    table = page.locator("#usage tbody tr").evaluate_all(ROWS)
    with page.expect_download() as download:
        page.click("#csv")
    with open(download.value.path(), newline="") as file:
        rows = list(csv.reader(file))

    jobs, none = ["0", "0", "0", "0", "", ""], [""] * 6
    costs, nothing = ["8.00 USD", "0.00 USD"], ["0.00 USD", "0.00 USD"]
    measured = ["16.00", "4.00", "0.25", "31.25"]  # the A100 attempt's
    gpus = ["4.00", "3.00", "0.75"]  # its 2 GPUs for 2 h, 3 GPU-hours busy
    assert table == [
        ["alpha", "all", "5.00", "24.00", "0.00", "0.00", *costs, *jobs, *measured, "5.00",
         "2.00", "2.50", *gpus],
        ["alpha", "A100", "4.00", "16.00", "0.00", "0.00", *costs, *none, *measured, "2.00",
         "1.00", "2.00", *gpus],
        ["alpha", "T4", "1.00", "8.00", "0.00", "0.00", *nothing, *none, "0.00", "0.00", "",
         "0.00", "3.00", "1.00", "3.00", "0.00", "0.00", ""],
    ]  # fmt: skip
    # The CSV's rows are the table's, then its window, whether it is whole, and the costs
    # written apart from their currency.
    assert [as_shown(row) for row in rows[1:]] == table
    assert {tuple(row[-6:-4]) for row in rows[1:]} == {
        ("2025-03-01T00:00:00Z", "2025-03-02T00:00:00Z")
    }
    assert "gamma" not in page.content() and "H100" not in page.content()


def test_a_window_that_ends_before_it_starts_is_shown_as_the_until_fields_error(
    server, browser_page, alpha, alice
):
    page = browser_page
    log_in(page, server, "alice")
    page.goto(f"{server}/usage/")

    page.fill("input[name=since]", "2025-03-05")
    page.fill("input[name=until]", "2025-03-02")
    page.click("button:has-text('Show')")

    expect(page.locator("p.error[data-field=until]")).to_contain_text("until: Must be after since")
    expect(page.locator("input[name=until]")).to_have_class("invalid")
    expect(page.locator("#usage")).to_have_count(0)


def test_the_wide_usage_table_scrolls_in_its_box_not_the_page(server, browser_page, alpha, alice):
    page = browser_page
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100")
    page.set_viewport_size({"width": 1024, "height": 800})
    log_in(page, server, "alice")

    page.goto(f"{server}/usage/?since=2025-03-01&until=2025-03-02")
    expect(page.locator("#usage tbody tr")).to_have_count(2)
    box = page.locator("#usage").evaluate("t => [t.parentElement.clientWidth, t.scrollWidth]")

    assert page.evaluate("document.documentElement.scrollWidth") <= 1024
    assert box[1] > box[0]  # the table is wider than its box, which scrolls


def test_the_chart_of_gpu_hours_per_day_draws_its_bars_within_the_pages_policy(
    server, browser_page, policy_refused, alpha, alice
):
    page, refused = browser_page, policy_refused
    run(alpha, SINCE + 20 * H, SINCE + 26 * H, gpu_type="A100")  # 4 h, then 2 h
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="T4")
    log_in(page, server, "alice")

    page.goto(f"{server}/usage/?since=2025-03-01&until=2025-03-03")
    bars = page.locator("#per-day-chart rect.bar")
    expect(bars).to_have_count(3)
    drawn = bars.evaluate_all(
        "bars => bars.map(b => [b.getBBox().height, getComputedStyle(b).fill])"
    )
    page.click("#per-day-figures summary")

    # One team shown: stacked by GPU type, A100 in the palette's first colour, T4 its second.
    heights = [height for height, _ in drawn]
    assert heights[0] == pytest.approx(2 * heights[1], rel=0.01)  # 4 h against 2 h on day 1
    assert heights[2] == pytest.approx(heights[1], rel=0.01)  # A100's 2 h on day 2
    assert [fill for _, fill in drawn] == ["rgb(0, 114, 178)", "rgb(230, 159, 0)",
                                           "rgb(0, 114, 178)"]  # fmt: skip
    expect(page.locator("#per-day-legend li")).to_have_text(["A100", "T4"])
    expect(page.locator("#per-day-table tbody tr").first).to_have_text("2025-03-014.002.006.00")
    assert refused == []

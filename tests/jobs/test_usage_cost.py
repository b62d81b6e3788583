"""Costs in the usage reports (chargeback in money, jobs/costs.py): each row's GPU-hours at its
GPU type's price and core-hours at the core-hour's, from the rate card (here unchanged over
the window: tests/jobs/test_usage_price_changes.py changes it), over rolled-up days and the
live part alike; a flavor without a rate costs nothing and is named; to the cent, half to
even; through the API, the page, the CSVs and the CLI; one read of the card per report."""

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import costs, reports, rollup
from jobs.usage_queries import TypeUsage
from quotas.models import Rate
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_usage_report import SINCE, UNTIL, WINDOW, H, run

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 6, 30, 12, tzinfo=UTC)
DAY = timedelta(days=1)
WEEK = (datetime(2025, 6, 25, tzinfo=UTC), NOW)  # rolled up through the 28th, then live


def card(**prices: str) -> None:
    """The rate card: `gpu_A100="2.50"` for gpu:A100."""
    for name, price in prices.items():
        Rate.objects.create(flavor=name.replace("gpu_", "gpu:"), price=Decimal(price))


def ran(tenant, start, end, **spec):
    """An attempt of `tenant`'s (one worker, one A100, 4 cores unless `spec` says otherwise),
    its job submitted as it started, so the roll-up begins at its day."""
    return run(tenant, start, end, created=start, **spec)


@pytest.fixture
def week(alpha, gamma):
    """A week of two teams on A100s, T4s and CPUs, part of it before the roll-up's last day,
    part after, one attempt across that midnight and one still running."""
    day = WEEK[0]
    ran(alpha, day + DAY + 10 * H, day + DAY + 14 * H, wasted=1800)  # 4 A100-h, 16 core-h
    ran(alpha, day + 4 * DAY + 2 * H, day + 4 * DAY + 5 * H, gpu_type="T4", gpus=2)  # 6, 12
    ran(alpha, day + 2 * DAY, day + 2 * DAY + 10 * H, gpus=0, cpu_milli=8000)  # 80 core-h
    ran(gamma, day + 3 * DAY + 20 * H, day + 4 * DAY + 4 * H, gpus=2)  # 16 A100-h, 32 core-h
    ran(gamma, NOW - 2 * H, None, gpu_type="T4")  # 2 T4-h, 8 core-h so far
    card(gpu_A100="2.50", gpu_T4="0.75", cpu="0.04")


def costs_of(report: reports.Report) -> dict:
    return {t.slug: ({u.gpu_type: t.costs[u.gpu_type].used for u in t.by_type},
                     t.total_cost().used) for t in report.tenants}  # fmt: skip


def test_costs_are_hours_at_the_card_over_rolled_up_days_and_the_live_part(week, alpha, gamma):
    assert rollup.roll_up(NOW) > 0

    report = reports.usage([alpha, gamma], *WEEK, NOW)

    # The 26th (the first job's day) to the 28th rolled up; the 25th, 29th and 30th live.
    assert report.rolled_up == ((WEEK[0] + DAY).date(), (NOW - DAY).date())
    assert costs_of(report) == {
        # A100: 4 x 2.50 + 16 x 0.04; T4: 6 x 0.75 + 12 x 0.04; CPU alone: 80 x 0.04
        "alpha": ({"A100": Decimal("10.64"), "T4": Decimal("4.98"), "": Decimal("3.20")},
                  Decimal("18.82")),
        # A100 across midnight: 16 x 2.50 + 32 x 0.04; T4 running: 2 x 0.75 + 8 x 0.04
        "gamma": ({"A100": Decimal("41.28"), "T4": Decimal("1.82")}, Decimal("43.10")),
    }  # fmt: skip
    assert report.total_cost() == costs.Cost(Decimal("61.92"), Decimal("1.25"))  # 0.5 h wasted
    assert (report.currency, report.unpriced) == ("USD", [])


def test_a_flavor_without_a_rate_costs_nothing_and_is_named_unpriced(week, alpha, gamma):
    Rate.objects.filter(flavor__in=["gpu:T4", "cpu"]).delete()
    Rate.objects.create(flavor="gpu:H100", price=Decimal("9"))  # priced, never used

    report = reports.usage([alpha, gamma], *WEEK, NOW)

    assert report.unpriced == ["cpu", "gpu:T4"]
    assert costs_of(report)["alpha"] == (
        {"A100": Decimal("10.00"), "T4": Decimal("0.00"), "": Decimal("0.00")},
        Decimal("10.00"),
    )
    assert report.as_json()["unpriced"] == ["cpu", "gpu:T4"]


@pytest.mark.parametrize(
    ("hours", "price", "want"),
    [
        pytest.param(0.5, "0.05", "0.02", id="half a cent down to even"),
        pytest.param(1.5, "0.05", "0.08", id="half a cent up to even"),
        pytest.param(0.1, "0.25", "0.02", id="0.1 h is 0.1, not the float above it"),
        pytest.param(1 / 3, "3", "1.00", id="a third"),
        pytest.param(2.0, "0.000001", "0.00", id="six places"),
    ],
)
def test_a_cost_is_rounded_to_the_cent_half_to_even(hours, price, want):
    priced = costs.Card({"gpu:A100": Decimal(price)}, "USD")

    cost = priced.cost(TypeUsage("A100", gpu_hours=hours))

    assert cost.used == Decimal(want) and str(cost.used) == want


def test_a_split_is_priced_by_the_gpu_types_of_its_hours(alpha, alice):
    card(gpu_A100="2.00", gpu_T4="1.00")
    run(alpha, SINCE, SINCE + 2 * H, labels={"project": "llm"}, owner=alice)  # 2 A100-h
    run(alpha, SINCE, SINCE + 3 * H, labels={"project": "llm"}, gpu_type="T4")  # 3 T4-h
    run(alpha, SINCE, SINCE + H, owner=alice)  # no label: 1 A100-h

    (usage,) = reports.usage([alpha], SINCE, UNTIL, SINCE + DAY, "project", ("user",)).tenants

    by_label = {u.gpu_type: cost.used for u, cost in usage.labelled()}
    by_user = {u.gpu_type: cost.used for u, cost in usage.split_of("user")}
    assert by_label == {"llm": Decimal("7.00"), None: Decimal("2.00")}  # 2 x 2.00 + 3 x 1.00
    assert by_user["alice"] == Decimal("6.00")  # 3 A100-h, with and without the label


def test_the_api_gives_costs_as_strings_in_the_platforms_currency(alpha, alice, settings):
    settings.MLSCHED_CURRENCY = "EUR"
    card(gpu_A100="2.50")
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100", wasted=3600)
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/usage/", {**WINDOW, "by_label": "project"}).json()

    assert (answer["currency"], answer["cost"], answer["wasted_cost"]) == ("EUR", "5.00", "2.50")
    assert answer["unpriced"] == ["cpu"]
    (team,) = answer["tenants"]
    assert (team["cost"], team["by_gpu_type"][0]["cost"]) == ("5.00", "5.00")
    assert team["by_label"][0]["cost"] == "5.00"


def test_each_usage_csv_has_the_cost_and_its_currency_last(alpha, alice, client):
    card(gpu_A100="2.50", cpu="0.10")
    run(alpha, SINCE + H, SINCE + 3 * H, labels={"project": "llm"})  # 2 A100-h, 8 core-h
    client.force_login(alice)
    asked = {**WINDOW, "by_label": "project", "by_user": "1", "by_class": "1"}

    for path in ("/usage.csv", "/usage-by-label.csv", "/usage-by-user.csv",
                 "/usage-by-class.csv"):  # fmt: skip
        header, first, *_ = csv.reader(io.StringIO(client.get(path, asked).content.decode()))
        row = dict(zip(header, first, strict=True))

        assert (row["cost"], row["wasted_cost"], row["currency"]) == ("5.80", "0.00", "USD"), path
        # Last, after the window: the columns before them keep their places.
        assert header[-6:] == ["since", "until", "incomplete", "cost", "wasted_cost", "currency"]


def test_the_usage_page_shows_each_cost_and_the_total_with_the_currency(alpha, alice, client):
    card(gpu_A100="308.625")  # 4 h: 1,234.50; no rate for cpu
    run(alpha, SINCE + H, SINCE + 5 * H)
    client.force_login(alice)

    page = client.get("/usage/", WINDOW).text

    table = page[page.index('id="usage"') :]
    assert "<td>4.00</td><td>16.00</td><td>0.00</td><td>0.00</td><td>1,234.50 USD</td>" in table
    assert "<th>Cost</th><th>Wasted cost</th>" in table
    assert 'id="total-cost">Total cost: <strong>1,234.50 USD</strong>' in page
    assert 'id="unpriced">No rate for cpu: counted as costing nothing.' in page


# The usage page's tables, each split asked for, and a job in each (2 A100-hours, 8 core-hours).
TABLES = ["usage", "usage-by-label", "usage-by-user", "usage-by-class"]
EVERY_SPLIT = {**WINDOW, "by_label": "project", "by_user": "1", "by_class": "1"}


def table_of(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    """A table of the page: its headings, and its rows' cells."""
    table = page[page.index(f'id="{table_id}"') :]
    head, body = table[: table.index("</table>")].split("<tbody>")
    rows = re.findall(r"<tr.*?</tr>", body, re.S)
    return re.findall(r"<th>(.*?)</th>", head), [re.findall(r"<td>(.*?)</td>", r) for r in rows]


def test_without_any_rate_the_usage_page_leaves_every_cost_column_out(alpha, alice, client):
    run(alpha, SINCE + H, SINCE + 3 * H, labels={"project": "llm"}, owner=alice)
    client.force_login(alice)

    page = client.get("/usage/", EVERY_SPLIT).text

    for table_id in TABLES:
        headings, rows = table_of(page, table_id)
        assert "Cost" not in headings and "Wasted cost" not in headings, table_id
        assert rows and all(len(row) == len(headings) for row in rows), table_id
        assert not [cell for row in rows for cell in row if "USD" in cell], table_id
    assert page.count("No prices are set") == 1 and 'id="total-cost"' not in page
    assert "Costs: the GPU-hours" not in page
    # Scripts read the CSV by column: it keeps its costs, 0.
    header, first, *_ = csv.reader(io.StringIO(client.get("/usage.csv", WINDOW).text))
    assert header[-3:] == reports.COST_COLUMNS and first[-3:] == ["0.00", "0.00", "USD"]


def test_with_a_rate_every_table_of_the_usage_page_has_its_cost_columns(alpha, alice, client):
    card(gpu_A100="2.50")  # no rate for cpu
    run(alpha, SINCE + H, SINCE + 3 * H, labels={"project": "llm"}, owner=alice)
    client.force_login(alice)

    page = client.get("/usage/", EVERY_SPLIT).text

    for table_id in TABLES:
        headings, rows = table_of(page, table_id)
        cost = headings.index("Cost")
        assert headings[cost + 1] == "Wasted cost", table_id
        assert [row[cost : cost + 2] for row in rows] == [["5.00 USD", "0.00 USD"]] * len(rows)
    assert "No prices are set" not in page and 'id="total-cost"' in page


def test_the_cli_prints_a_cost_column_the_total_and_what_has_no_rate(alpha, mlsched, settings):  # noqa: F811
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    card(gpu_A100="2.50")
    run(alpha, SINCE + H, SINCE + 3 * H)

    status, out, err = mlsched("usage", "--since", "2025-03-01", "--until", "2025-03-02")

    assert status == 0, err
    lines = out.splitlines()
    header = lines[1].split()
    assert header[:9] == ["tenant", "gpu", "type", "GPU-h", "CPU", "core-h", "wasted", "GPU-h",
                          "preempted"] and header[9] == "cost"  # fmt: skip
    assert lines[2].split()[:7] == ["alpha", "all", "2.00", "8.00", "0.00", "0.00", "5.00"]
    assert lines[3].split()[:7] == ["alpha", "A100", "2.00", "8.00", "0.00", "0.00", "5.00"]
    assert lines[4] == "cost: 5.00 USD in all, wasted 0.00, at the prices in force when used"
    assert lines[5] == "note: no rate for cpu: counted as costing nothing"


def test_the_report_reads_the_rate_card_once_whatever_it_prices(week, alpha, gamma):
    card(**{f"gpu_X{n}": "1" for n in range(20)})

    with CaptureQueriesContext(connection) as seen:
        report = reports.usage([alpha, gamma], *WEEK, NOW, "project", tuple(reports.SPLITS))

    assert report.total_cost().used > 0
    assert sum('"quotas_rate"' in query["sql"] for query in seen) == 1

"""The rate card on the portal: the quotas page's Prices, each flavor for people and its price
in force today with the platform's currency, the flavors the teams' rows name without a rate
as "no price" (none at all: one line), and the changes scheduled ("3.00 USD from 2027-01-01");
the usage page's link to them where a rate is set; one query."""

from datetime import timedelta
from decimal import Decimal

import pytest

from quotas.models import Rate, utc_today
from tests.factories import QuotaFactory

pytestmark = pytest.mark.django_db


def card(**prices: str) -> None:
    """The rate card: `gpu_A100="2.50"` for gpu:A100."""
    for name, price in prices.items():
        Rate.objects.create(flavor=name.replace("gpu_", "gpu:"), price=Decimal(price))


def prices_of(page: str) -> list[list[str]]:
    """The Prices table's rows, each its cells' text."""
    table = page[page.index('id="rates"') :].split("</table>")[0]
    rows = table.split("<tbody>")[1].split("</tr>")[:-1]
    return [[cell.split("</td>")[0].split(">", 1)[1] for cell in row.split("<td")[1:]]
            for row in rows]  # fmt: skip


@pytest.fixture
def page(client, alice, alpha):
    """The quotas page as Alice reads it, alpha's quotas on A100s and memory."""
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=524_288)
    client.force_login(alice)
    return lambda: client.get("/quotas/").text


def test_it_lists_each_price_with_the_currency_to_the_cent_or_beyond(page, settings):
    settings.MLSCHED_CURRENCY = "EUR"
    card(gpu_A100="2.5", cpu="0.0125", gpu_H100="1200")

    shown = page()

    assert prices_of(shown) == [
        ["CPU core-hour", "0.0125 EUR"],
        ["A100 GPU-hour", "2.50 EUR"],
        ["H100 GPU-hour", "1,200.00 EUR"],
        ["Memory GiB-hour", "no price"],  # alpha's quota names it; the card does not price it
    ]
    assert shown.index('id="team-alpha"') < shown.index('<h2 id="prices">Prices</h2>')
    assert (
        'The <a href="/usage/">usage page</a> prices your teams\' GPU-hours and core-hours at '
        "the prices in force on the days (UTC) they were used: a scheduled price holds from its "
        "day on, and the days before keep the price they had."
    ) in shown
    assert "<th>Scheduled</th>" not in shown  # nothing scheduled: no column for it


def test_it_shows_the_price_in_force_today_and_each_change_scheduled(page):
    today = utc_today()
    later, latest = today + timedelta(days=10), today + timedelta(days=40)
    card(gpu_A100="2.5", cpu="0.04")
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2"), since=today)  # in force now
    Rate.objects.create(flavor="gpu:A100", price=Decimal("3"), since=later)
    Rate.objects.create(flavor="gpu:A100", price=Decimal("3.5"), since=latest)
    Rate.objects.create(flavor="gpu:H100", price=Decimal("9"), since=later)  # none before

    shown = page()

    assert "<th>Flavor</th><th>Price</th><th>Scheduled</th>" in shown
    assert prices_of(shown) == [
        ["CPU core-hour", "0.04 USD", ""],
        ["A100 GPU-hour", "2.00 USD", f"3.00 USD from {later}, 3.50 USD from {latest}"],
        ["H100 GPU-hour", "no price", f"9.00 USD from {later}"],
        ["Memory GiB-hour", "no price", ""],
    ]


def test_without_a_rate_it_says_in_one_line_that_usage_is_not_charged(page):
    shown = page()

    section = shown.split('<h2 id="prices">Prices</h2>')[1].split("<h2")[0].split("</main>")[0]
    assert section.strip() == '<p id="no-prices">No prices are set: usage is not charged.</p>'
    assert 'id="rates"' not in shown and "no price<" not in shown


def test_the_usage_page_links_to_the_prices_only_where_a_rate_is_set(client, alice):
    client.force_login(alice)
    before = client.get("/usage/").text
    card(cpu="0.04")

    after = client.get("/usage/").text

    link = 'id="rate-card">Priced at the rate card: see <a href="/quotas/#prices">Prices</a>.'
    assert link in after and 'id="total-cost"' in after
    assert 'id="rate-card">No prices are set: usage is not charged.</p>' in before
    assert 'id="total-cost"' not in before and 'id="unpriced"' not in before


def test_the_page_reads_the_rate_card_in_one_query_whatever_it_lists(
    page, django_assert_num_queries
):
    page()  # caches warmed
    for n in (1, 20):
        Rate.objects.all().delete()
        card(**{f"gpu_X{i}": "1" for i in range(n)})
        # The session and its user, the teams, status.of's five (allocations, recent use, the
        # tenants with their quotas, the queued jobs), the fair-share classes, the classes open
        # to the teams and their GPUs held: 11; the rate card: 12.
        with django_assert_num_queries(12):
            shown = page()
        assert len(prices_of(shown)) == n + 2  # and alpha's A100s and memory, without a price

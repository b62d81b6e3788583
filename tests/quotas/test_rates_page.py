"""The rate card on the portal: the quotas page's Prices, each flavor for people and its price
with the platform's currency, the flavors the teams' rows name without a rate as "no price"
(none at all: one line); the usage page's link to them where a rate is set; one query."""

from decimal import Decimal

import pytest

from quotas.models import Rate
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
        'The <a href="/usage/">usage page</a> prices your teams\' GPU-hours and core-hours with '
        "these prices as they stand now: a report prices its whole window at today's card."
    ) in shown


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
    assert link in after
    assert 'id="rate-card"' not in before and 'id="total-cost"' in before


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

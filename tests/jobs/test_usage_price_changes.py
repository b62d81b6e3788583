"""Effective-dated prices in the usage reports (jobs/costs.py): hours are priced at the rate in
force on the day they were used, the window cut at each midnight from which a price changes,
over rolled-up days and the live part alike; a row's cost the sum of its stretches', each
rounded to the cent; splits priced stretch by stretch; a flavor used where no rate was in
force named unpriced; the figures themselves, and the queries where nothing changes inside the
window, as without dated prices."""

# ruff: noqa: F811 (the fixtures imported are the tests' arguments)

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import costs, reports, rollup
from quotas.models import Rate, utc_today
from tests.jobs.test_usage_cost import NOW, WEEK, card, costs_of, week  # noqa: F401 (week)
from tests.jobs.test_usage_report import H, run
from tests.jobs.test_usage_rollup import figures

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)
JUNE_27, JUNE_29 = date(2025, 6, 27), date(2025, 6, 29)


def price_from(day: date, **prices: str) -> None:
    """Rates holding from `day`: `gpu_A100="5.00"` for gpu:A100."""
    for name, price in prices.items():
        flavor = name.replace("gpu_", "gpu:")
        Rate.objects.create(flavor=flavor, price=Decimal(price), since=day)


def week_report(alpha, gamma) -> reports.Report:
    return reports.usage([alpha, gamma], *WEEK, NOW, "project", tuple(reports.SPLITS))


def queries_of(alpha, gamma) -> int:
    with CaptureQueriesContext(connection) as seen:
        week_report(alpha, gamma)
    return len(seen)


# The week (tests/jobs/test_usage_cost.py): rolled up from the 26th through the 28th, the 25th,
# 29th and 30th read from the jobs. Each stretch's hours at its prices (A100 2.50, T4 0.75,
# CPU 0.04 from the start), with CPU 0.10 from the 27th (a rolled-up day) and A100 5.00 from
# the 29th (read from the jobs):
WANT = {
    # A100 on the 26th: 4 x 2.50 + 16 x 0.04; T4 on the 29th: 6 x 0.75 + 12 x 0.10; CPU alone
    # on the 27th: 80 x 0.10
    "alpha": ({"A100": Decimal("10.64"), "T4": Decimal("5.70"), "": Decimal("8.00")},
              Decimal("24.34")),
    # A100 from 20:00 on the 28th to 04:00 on the 29th, 2 GPUs: 8 x 2.50 + 16 x 0.10, then
    # 8 x 5.00 + 16 x 0.10; T4 running on the 30th: 2 x 0.75 + 8 x 0.10
    "gamma": ({"A100": Decimal("63.20"), "T4": Decimal("2.30")}, Decimal("65.50")),
}  # fmt: skip


def test_hours_are_priced_at_the_rate_in_force_the_day_they_were_used(week, alpha, gamma):
    assert rollup.roll_up(NOW) > 0
    price_from(JUNE_27, cpu="0.10")
    price_from(JUNE_29, gpu_A100="5.00")

    report = week_report(alpha, gamma)

    assert report.rolled_up == (date(2025, 6, 26), date(2025, 6, 29))
    assert costs_of(report) == WANT
    # The A100-hours wasted ended on the 26th: at 2.50.
    assert report.total_cost() == costs.Cost(Decimal("89.84"), Decimal("1.25"))
    assert report.unpriced == []


def test_rolled_up_days_and_the_jobs_price_a_window_alike(week, alpha, gamma):
    price_from(JUNE_27, cpu="0.10")
    price_from(JUNE_29, gpu_A100="5.00")
    from_jobs = week_report(alpha, gamma)

    assert rollup.roll_up(NOW) > 0
    rolled = week_report(alpha, gamma)

    assert (from_jobs.rolled_up, rolled.rolled_up) == (None, (JUNE_29 - 3 * DAY, JUNE_29))
    assert costs_of(from_jobs) == costs_of(rolled) == WANT


def test_a_price_change_leaves_the_figures_as_they_were(week, alpha, gamma):
    assert rollup.roll_up(NOW) > 0
    before = week_report(alpha, gamma)
    price_from(JUNE_27, cpu="0.10")
    price_from(JUNE_29, gpu_A100="5.00")

    after = week_report(alpha, gamma)

    assert figures(after) == figures(before)
    for was, now in zip(before.tenants, after.tenants, strict=True):
        assert (was.p95_wait_s, now.by_label, now.by_split) == (
            now.p95_wait_s, was.by_label, was.by_split)  # fmt: skip


def test_a_price_change_outside_the_window_changes_nothing_and_reads_nothing_more(
    week, alpha, gamma
):
    assert rollup.roll_up(NOW) > 0
    unchanged, queries = costs_of(week_report(alpha, gamma)), queries_of(alpha, gamma)
    price_from(date(2025, 7, 1), gpu_A100="50.00", cpu="1")  # after it
    price_from(date(2025, 6, 20), gpu_T4="0.75")  # before it, at the price it had
    price_from(JUNE_27, gpu_T4="0.75")  # inside it, at the same price: no change

    assert costs_of(week_report(alpha, gamma)) == unchanged
    assert queries_of(alpha, gamma) == queries


def test_a_price_change_inside_the_window_reads_each_stretch(week, alpha, gamma):
    assert rollup.roll_up(NOW) > 0
    queries = queries_of(alpha, gamma)
    price_from(JUNE_29, gpu_A100="5.00")

    # Per stretch: the rolled-up days' hours, the hours of the part read from the jobs, the
    # splits by label, by user and by class.
    assert queries_of(alpha, gamma) > queries


def test_a_rate_dated_ahead_does_not_price_today(alpha, alice):
    now = timezone.now()
    card(gpu_A100="2.50")
    price_from(utc_today() + DAY, gpu_A100="100.00")
    run(alpha, now - 3 * H, now - H, cpu_milli=0)  # 2 A100-hours
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/usage/").json()

    assert (answer["cost"], answer["tenants"][0]["by_gpu_type"][0]["cost"]) == ("5.00", "5.00")


def test_a_flavor_used_before_its_first_rate_is_unpriced_there(week, alpha, gamma):
    Rate.objects.filter(flavor="gpu:T4").delete()
    price_from(date(2025, 6, 30), gpu_T4="0.75")  # alpha's T4-hours were on the 29th

    report = week_report(alpha, gamma)

    assert report.unpriced == ["gpu:T4"]
    alpha_costs, gamma_costs = costs_of(report)["alpha"][0], costs_of(report)["gamma"][0]
    assert (alpha_costs["T4"], gamma_costs["T4"]) == (Decimal("0.48"), Decimal("1.82"))


def test_a_flavor_without_a_rate_where_it_was_not_used_is_not_unpriced(week, alpha, gamma):
    Rate.objects.filter(flavor="gpu:T4").delete()
    price_from(JUNE_29, gpu_T4="0.75")  # every T4-hour was used from the 29th

    report = week_report(alpha, gamma)

    assert report.unpriced == []
    assert costs_of(report)["alpha"][0]["T4"] == Decimal("4.98")


def test_a_rows_cost_is_the_sum_of_its_stretches_each_rounded_to_the_cent(alpha):
    since = datetime(2025, 3, 1, tzinfo=UTC)
    card(gpu_A100="0.05")
    price_from(date(2025, 3, 2), gpu_A100="0.01")
    run(alpha, since + 23.5 * H, since + 24.5 * H, cpu_milli=0)  # half an hour each side

    (usage,) = reports.usage([alpha], since, since + 2 * DAY, since + 3 * DAY).tenants

    # 0.025 to 0.02 and 0.005 to 0.00, half to even: 0.02 (the unrounded 0.03 is no row's).
    assert usage.costs["A100"].used == Decimal("0.02") == usage.total_cost().used


def test_each_split_is_priced_stretch_by_stretch(alpha, alice):
    since = datetime(2025, 3, 1, tzinfo=UTC)
    card(gpu_A100="2.00", gpu_T4="1.00")
    price_from(date(2025, 3, 2), gpu_A100="4.00")
    run(alpha, since + 22 * H, since + 26 * H, labels={"project": "llm"}, owner=alice,
        cpu_milli=0)  # 2 A100-hours each side of midnight: 4.00 + 8.00  # fmt: skip
    run(alpha, since + 30 * H, since + 33 * H, gpu_type="T4", cpu_milli=0)  # 3 T4-h: 3.00

    (usage,) = reports.usage([alpha], since, since + 2 * DAY, since + 3 * DAY, "project",
                             ("user", "class")).tenants  # fmt: skip

    assert {u.gpu_type: cost.used for u, cost in usage.labelled()} == {
        "llm": Decimal("12.00"), None: Decimal("3.00")}  # fmt: skip
    by_user = {u.gpu_type: cost.used for u, cost in usage.split_of("user")}
    by_class = [cost.used for _, cost in usage.split_of("class")]  # both jobs' class
    assert (by_user["alice"], by_class) == (Decimal("12.00"), [Decimal("15.00")])
    assert usage.total_cost().used == Decimal("15.00")


@pytest.mark.parametrize(
    ("rates", "want"),
    [
        pytest.param([], [], id="no rate"),
        pytest.param([("cpu", date(2000, 1, 1), "1")], [], id="from the start"),
        pytest.param([("cpu", date(2025, 3, 2), "1")], [date(2025, 3, 2)], id="a first rate"),
        pytest.param(
            [("cpu", date(2000, 1, 1), "1"), ("cpu", date(2025, 3, 2), "1.0")],
            [],
            id="the same price again",
        ),
        pytest.param(
            [("cpu", date(2025, 3, 1), "1"), ("gpu:A100", date(2025, 3, 4), "2")],
            [],
            id="on the first day and on the end",
        ),
        pytest.param(
            [("cpu", date(2025, 3, 2), "1"), ("cpu", date(2025, 3, 3), "2")],
            [date(2025, 3, 2), date(2025, 3, 3)],
            id="two",
        ),
    ],
)
def test_the_window_is_cut_where_a_price_changes_inside_it(rates, want):
    card = costs.RateCard(
        [Rate(flavor=f, since=day, price=Decimal(p)) for f, day, p in rates], "USD"
    )

    cuts = card.changes(datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 4, tzinfo=UTC))

    assert cuts == [rollup.midnight(day) for day in want]

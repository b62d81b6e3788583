"""The month's spend forecast (jobs.forecast): this month's cost so far plus what the running
jobs may still cost up to their runtime limits, each counted to the month's end at most, at
the prices in force on the days still to run for each job's GPU type and cores (a change
scheduled later this month prices the hours after its midnight); the quota API, page and CLI
give it beside the month's cost. Every job has a runtime limit (Job.max_runtime_s is
required), so none is left out."""

# ruff: noqa: F811 (the fixtures imported are the tests' arguments)

from datetime import date
from decimal import Decimal
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from jobs import budgets, forecast
from jobs.costs import ZERO
from jobs.models import Attempt
from quotas import status
from quotas.models import Rate
from tests.factories import UserFactory
from tests.jobs import test_cli
from tests.jobs.test_budget_alerts import NOW, H, used
from tests.jobs.test_spend_alerts import alert
from tests.jobs.test_usage_cost import card
from tests.jobs.test_usage_report import run
from tests.quotas.test_user_gpu_limit import quota_as

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice
MONTH_END = budgets.renews(NOW)  # 2027-01-01: 276 hours after NOW


def running(tenant, started=NOW - H, limit_h: float = 4, **spec) -> Attempt:
    """An attempt of the tenant running since `started` (one A100, 4 cores unless `spec` says
    otherwise), its job's runtime limit `limit_h` hours."""
    return run(tenant, started, None, max_runtime_s=int(limit_h * 3600), **spec)


def forecast_of(tenant) -> Decimal:
    return forecast.month_forecast(budgets.spent_money([tenant], NOW), NOW)[tenant.pk]


def test_it_adds_what_running_jobs_may_still_cost_to_their_limits(alpha):
    card(gpu_A100="2.00")
    used(alpha, 10)  # 20.00
    running(alpha, started=NOW - H, limit_h=4)  # 2.00 so far, 3 hours left: 6.00

    assert budgets.spent_money([alpha], NOW) == {alpha.pk: Decimal("22.00")}
    assert forecast_of(alpha) == Decimal("28.00")


def test_a_running_job_counts_only_up_to_the_months_end(alpha):
    card(gpu_A100="1.00")
    running(alpha, started=NOW - H, limit_h=1000)

    assert MONTH_END - NOW == 276 * H
    assert forecast_of(alpha) == Decimal("277.00")  # 1 hour so far, 276 to the month's end


def test_each_running_job_is_priced_at_its_gpu_types_price_and_its_cores(alpha):
    card(gpu_A100="2.50", gpu_T4="0.50", cpu="0.10")
    # 2 A100s, 4 cores, 2 hours: 4 x 2.50 + 8 x 0.10
    running(alpha, started=NOW, limit_h=2, gpus=2)
    # 2 workers of half a T4 and a core each, 2 hours: 2 x 0.50 + 4 x 0.10
    running(alpha, started=NOW, limit_h=2, gpu_type="T4", gpus=0, gpu_milli=500, workers=2,
            cpu_milli=1000)  # fmt: skip

    assert forecast_of(alpha) == Decimal("12.20")


CHRISTMAS = date(2026, 12, 25)  # 4.5 days (108 hours) after NOW


def test_a_price_rise_scheduled_this_month_prices_the_hours_after_its_midnight(alpha):
    card(gpu_A100="1.00", cpu="0.10")
    running(alpha, started=NOW, limit_h=200)  # 108 hours before the 25th, 92 from it
    before = forecast_of(alpha)
    Rate.objects.create(flavor="gpu:A100", price=Decimal("5.00"), since=CHRISTMAS)

    assert before == Decimal("280.00")  # 200 x 1.00 + 800 core-hours x 0.10
    assert forecast_of(alpha) - before == 92 * Decimal("4.00")  # the rise, from the 25th


def test_a_price_change_from_the_months_end_on_changes_nothing(alpha):
    card(gpu_A100="1.00")
    Rate.objects.create(flavor="gpu:A100", price=Decimal("5.00"), since=MONTH_END.date())
    Rate.objects.create(flavor="gpu:A100", price=Decimal("9.00"), since=date(2027, 1, 5))
    running(alpha, started=NOW - H, limit_h=1000)

    assert forecast_of(alpha) == Decimal("277.00")  # 1 hour so far, 276 to the month's end


def test_a_job_ending_before_a_price_change_is_priced_as_without_it(alpha, gamma):
    card(gpu_A100="1.00")
    Rate.objects.create(flavor="gpu:A100", price=Decimal("5.00"), since=CHRISTMAS)
    running(alpha, started=NOW, limit_h=108)  # ends at the 25th's midnight
    running(gamma, started=NOW, limit_h=110)  # 2 hours past it

    assert forecast_of(alpha) == Decimal("108.00")
    assert forecast_of(gamma) == Decimal("118.00")  # 108 x 1.00 + 2 x 5.00


def test_a_job_run_to_its_limit_costs_the_month_what_its_forecast_said(alpha):
    card(gpu_A100="1.00", cpu="0.10")
    Rate.objects.create(flavor="gpu:A100", price=Decimal("5.00"), since=CHRISTMAS)
    attempt = running(alpha, started=NOW, limit_h=200)
    said = forecast_of(alpha)
    ended = NOW + 200 * H
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=ended, outcome=Attempt.Outcome.SUCCEEDED)

    assert said == Decimal("648.00")  # 108 x 1.00 + 92 x 5.00 + 800 core-hours x 0.10
    assert budgets.spent_money([alpha], ended) == {alpha.pk: said}


def test_each_stretch_is_rounded_to_the_cent_as_a_report_row_is(alpha):
    card(gpu_A100="0.20375")
    Rate.objects.create(flavor="gpu:A100", price=Decimal("0.01"), since=CHRISTMAS)
    # 108 hours at 0.20375: 22.005, to the cent 22.00 (half to even); then half an hour at
    # 0.01: 0.005, 0.00. Rounded once, 22.01.
    running(alpha, started=NOW, limit_h=108.5)

    assert forecast_of(alpha) == Decimal("22.00")


def test_a_job_placed_and_not_started_counts_its_whole_limit_from_now(alpha):
    card(gpu_A100="1.00")
    placed = running(alpha, started=NOW - H, limit_h=2)
    Attempt.objects.filter(pk=placed.pk).update(started_at=None)

    assert forecast_of(alpha) == Decimal("2.00")


def test_a_job_asked_to_stop_counts_only_until_its_stop_grace_has_passed_twice(alpha, settings):
    settings.MLSCHED_STOP_GRACE_S = 1800
    card(gpu_A100="1.00")
    stopping = running(alpha, started=NOW, limit_h=10)
    Attempt.objects.filter(pk=stopping.pk).update(stop_requested_at=NOW)

    assert forecast_of(alpha) == Decimal("1.00")


def test_a_job_past_its_limit_and_ended_jobs_add_nothing(alpha):
    card(gpu_A100="1.00")
    running(alpha, started=NOW - 5 * H, limit_h=4)  # 5.00 so far, not stopped yet
    used(alpha, 3)  # 3.00, ended

    assert forecast_of(alpha) == Decimal("8.00")


def test_another_tenants_running_jobs_add_nothing(alpha, gamma):
    card(gpu_A100="1.00")
    running(gamma, started=NOW, limit_h=10)

    assert forecast.month_forecast({alpha.pk: Decimal("3.00")}, NOW) == {alpha.pk: Decimal("3.00")}


@pytest.mark.parametrize("jobs", [1, 6])
@pytest.mark.parametrize(("changes", "each"), [(0, 120), (5, 180)])
def test_it_reads_the_running_jobs_and_the_card_once_whatever_their_number(
    alpha, gamma, jobs, changes, each, django_assert_num_queries
):
    card(gpu_A100="1.00")
    for day in range(changes):  # 2.00 from the 21st, 1.00 from the 22nd, 2.00... to the 25th
        Rate.objects.create(flavor="gpu:A100", price=2 - day % 2, since=date(2026, 12, 21 + day))
    for tenant in (alpha, gamma):
        for _ in range(jobs):
            # To noon on the 25th: 12 hours on the 20th, 24 a day, 12 on the 25th.
            running(tenant, started=NOW, limit_h=120)

    with django_assert_num_queries(2):  # the live attempts with their jobs, the card
        ahead = forecast.month_forecast({alpha.pk: ZERO, gamma.pk: ZERO}, NOW)

    assert ahead == {alpha.pk: Decimal(each * jobs), gamma.pk: Decimal(each * jobs)}


def test_no_tenant_costs_no_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert forecast.month_forecast({}, NOW) == {}


@pytest.fixture
def frozen(monkeypatch):
    """The quota status's clock at NOW."""
    monkeypatch.setattr(status, "timezone", SimpleNamespace(now=lambda: NOW))


@pytest.mark.usefixtures("frozen")
def test_the_quota_api_page_and_cli_give_the_forecast_beside_the_months_cost(
    alpha, gamma, alice, client, cli
):
    card(gpu_A100="2.50")
    alert(alpha, "1000")
    used(alpha, 12.5)  # 31.25
    running(alpha, started=NOW - H, limit_h=3)  # 2.50 so far, 5.00 still

    team, page, shown = quota_as(alice, client, cli)

    assert (team["cost_this_month"], team["cost_forecast_this_month"]) == ("33.75", "38.75")
    assert "By the month's end it may cost up to 38.75 USD, if its running jobs run to their " \
           "runtime limits (at the prices in force on the days still to run)." in page  # fmt: skip
    assert (
        "33.75 USD of its 1,000.00 USD spend alert spent this month, up to 38.75 USD by "
        "the month's end if its running jobs run to their limits"
    ) in shown.stdout


@pytest.mark.usefixtures("frozen")
def test_a_tenant_without_a_spend_alert_has_no_forecast(gamma):
    card(gpu_A100="2.50")
    running(gamma, started=NOW, limit_h=3)
    api = APIClient()
    api.force_authenticate(UserFactory(username="root", is_staff=True, is_superuser=True))

    (team,) = api.get("/api/v1/quotas/", {"tenant": "gamma"}).json()["tenants"]

    assert (team["cost_this_month"], team["cost_forecast_this_month"]) == (None, None)

"""Spend alerts (Tenant.spend_alert_per_month, jobs.budget_alerts), as cloud billing budgets
alert: a tenant's webhook and owners hear once a month of each threshold (80 %, then 100 %)
that the month's usage, priced at the rate card as the usage report prices it, reaches of its
alert, signed and delivered as the GPU-hour alerts are; nothing is held. The quota API, page
and CLI show the alert and the month's cost; a platform admin sets it. The receiver is the
real HTTP server of the job-end tests, the mail server a real SMTP server."""

# ruff: noqa: F811 (the fixtures imported are the tests' arguments)

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.db import IntegrityError, transaction
from rest_framework.test import APIClient

from jobs import budget_alerts, budgets, reports, tasks
from jobs.models import BudgetAlert
from quotas.models import Rate, Tenant
from tests.factories import UserFactory
from tests.jobs import test_cli
from tests.jobs.test_budget_alerts import (  # noqa: F401 (checked, sent, webhook: fixtures)
    NEXT_MONTH,
    NOW,
    H,
    budget,
    checked,
    sent,
    used,
    webhook,
)
from tests.jobs.test_notify import hooked, receiver, run_when_sent, verifies  # noqa: F401
from tests.jobs.test_notify_email import carol, mailbox, mailed  # noqa: F401
from tests.jobs.test_usage_cost import card
from tests.quotas.test_gpu_budget import used_this_month
from tests.quotas.test_user_gpu_limit import quota_as, room  # noqa: F401
from tests.security.test_admin_scope import GRANTED, tenant_form

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice


def alert(tenant, amount: str | None) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(
        spend_alert_per_month=None if amount is None else Decimal(amount)
    )


def told(webhook) -> list[tuple[str, str, int, str]]:
    return [(post.document["event"], post.document["month"], post.document["percent"],
             post.document["spent"]) for post in webhook.received]  # fmt: skip


# -- what is sent -----------------------------------------------------------------------------


def test_80_then_100_are_each_posted_once_with_the_months_cost_at_the_card(
    alpha, webhook, checked, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    card(gpu_A100="10.00")  # cores unpriced: the A100-hours alone cost
    alert(alpha, "1000.00")
    used(alpha, 70)  # 700.00: 70 %
    assert checked() == 0

    used(alpha, 11.24, ending=NOW - 80 * H)  # 812.40
    assert (checked(), checked()) == (1, 0)
    used(alpha, 20, ending=NOW - 100 * H)  # 1,012.40
    assert (checked(), checked()) == (1, 0)

    first, second = webhook.received
    assert first.headers["X-Mlsched-Delivery"] == "tenant.spend:alpha:2026-12:80"
    assert verifies(first, alpha.notify_secret)
    link = "https://mlsched.example.com/usage/?since=2026-12-01&until=2027-01-01&tenant=alpha"
    assert first.document == {
        "event": "tenant.spend", "tenant": "alpha", "month": "2026-12", "percent": 80,
        "budget": "1000.00", "spent": "812.40", "currency": "USD", "url": link,
        "text": "Team alpha has spent 81 % of its 1,000.00 USD spend alert this month "
                f"(812.40 USD). {link}",
    }  # fmt: skip
    assert (second.document["percent"], second.document["spent"]) == (100, "1012.40")
    assert second.document["text"].startswith(
        "Team alpha has spent 101 % of its 1,000.00 USD spend alert this month (1,012.40 USD)."
    )
    assert second.headers["X-Mlsched-Delivery"] == "tenant.spend:alpha:2026-12:100"


def test_the_cost_is_the_usage_reports_for_the_month(alpha, gamma):
    card(gpu_A100="2.50", cpu="0.04")
    used(alpha, 10)  # 25.00 of A100-hours, 40 core-hours 1.60
    used(alpha, 10, ending=budgets.month_start(NOW))  # November's: not this month's

    cost = budgets.spent_money([alpha, gamma], NOW)

    report = reports.usage([alpha], budgets.month_start(NOW), NOW, NOW)
    assert cost == {alpha.pk: Decimal("26.60"), gamma.pk: Decimal("0.00")}
    assert cost[alpha.pk] == report.tenants[0].total_cost().used


def test_a_price_raised_from_a_day_of_the_month_prices_the_days_before_at_the_old_one(
    alpha, webhook, checked
):
    card(gpu_A100="1.00")
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.00"), since=date(2026, 12, 15))
    alert(alpha, "35")
    used(alpha, 10, ending=datetime(2026, 12, 10, 12, tzinfo=UTC))  # 10.00, before the raise
    used(alpha, 10)  # on the 20th: 20.00

    assert budgets.spent_money([alpha], NOW) == {alpha.pk: Decimal("30.00")}  # not 40.00
    assert checked() == 1
    assert told(webhook) == [("tenant.spend", "2026-12", 80, "30.00")]  # not yet 100 %


def test_without_a_rate_card_the_cost_is_0_and_nothing_is_told(alpha, webhook, checked):
    alert(alpha, "0.01")
    used(alpha, 500)

    assert checked() == 0

    assert budgets.spent_money([alpha], NOW) == {alpha.pk: Decimal("0.00")}
    assert (webhook.received, BudgetAlert.objects.count()) == ([], 0)


def test_checked_twice_it_is_told_once(alpha, webhook, checked):
    card(gpu_A100="1")
    alert(alpha, "100")
    used(alpha, 85)

    assert (checked(), checked()) == (1, 0)

    assert told(webhook) == [("tenant.spend", "2026-12", 80, "85.00")]


def test_both_reached_at_once_posts_100_and_claims_both(alpha, webhook, checked):
    card(gpu_A100="1")
    alert(alpha, "100")
    used(alpha, 120)

    assert checked() == 1

    assert told(webhook) == [("tenant.spend", "2026-12", 100, "120.00")]
    rows = BudgetAlert.objects.values_list("kind", "percent", "budget_spend", "spent_spend")
    assert sorted(rows) == [("spend", 80, Decimal("100.00"), Decimal("120.00")),
                            ("spend", 100, Decimal("100.00"), Decimal("120.00"))]  # fmt: skip


def test_a_month_later_it_is_told_again(alpha, webhook, checked):
    card(gpu_A100="1")
    alert(alpha, "100")
    used(alpha, 85)
    checked()

    assert checked(NEXT_MONTH) == 0  # December's usage costs nothing in January
    used(alpha, 90, ending=NEXT_MONTH)

    assert checked(NEXT_MONTH) == 1
    assert told(webhook) == [("tenant.spend", "2026-12", 80, "85.00"),
                             ("tenant.spend", "2027-01", 80, "90.00")]  # fmt: skip
    assert webhook.received[-1].headers["X-Mlsched-Delivery"] == "tenant.spend:alpha:2027-01:80"


def test_a_gpu_hour_threshold_told_leaves_the_spend_one_to_tell_and_back(alpha, webhook, checked):
    card(gpu_A100="1")
    budget(alpha, 100)
    used(alpha, 85)
    assert checked() == 1  # the GPU-hours' 80 %: the spend alert is not set yet
    alert(alpha, "100")

    assert (checked(), checked()) == (1, 0)

    assert [(post.document["event"], post.document["percent"]) for post in webhook.received] == [
        ("budget.threshold", 80), ("tenant.spend", 80)
    ]  # fmt: skip
    rows = BudgetAlert.objects.values_list("kind", "percent", "budget_gpu_hours", "budget_spend")
    assert sorted(rows) == [("gpu_hours", 80, 100, None), ("spend", 80, None, Decimal("100.00"))]


def test_the_owners_are_emailed_the_alert(
    alpha, alice, carol, mailbox, mailed, monkeypatch, django_capture_on_commit_callbacks
):
    # Carol owns alpha and has an address; Alice owns it without one. No webhook.
    run_when_sent(monkeypatch, tasks.notify_budget)
    card(gpu_A100="1")
    alert(alpha, "100")
    used(alpha, 85)

    with django_capture_on_commit_callbacks(execute=True):
        claimed = budget_alerts.check(NOW)

    ((_, to, message),) = mailbox.messages
    assert (claimed, mailed, to) == (1, ["tenant.spend:alpha:2026-12:80"], ["carol@example.com"])
    assert message["Subject"] == (
        "Team alpha has spent 85 % of its 100.00 USD spend alert this month (85.00 USD)."
    )
    body = message.get_content()
    assert "budget: 100.00" in body and "spent: 85.00" in body and "currency: USD" in body


# -- who is sent nothing, and what it costs ---------------------------------------------------


def test_no_spend_alert_or_nobody_to_tell_still_costs_one_query(
    alpha, gamma, webhook, checked, django_assert_num_queries
):
    card(gpu_A100="1")
    alert(gamma, "10")  # an alert, no URL nor owner to email
    used(gamma, 50)
    used(alpha, 50)  # a URL, no alert

    with django_assert_num_queries(1):  # the tenants watched, GPU-hour budgets and alerts alike
        assert checked() == 0

    assert (webhook.received, BudgetAlert.objects.count()) == ([], 0)


def test_a_tenant_told_both_thresholds_is_not_priced_again(
    alpha, webhook, checked, django_assert_num_queries
):
    card(gpu_A100="1")
    alert(alpha, "10")
    used(alpha, 50)
    checked()

    with django_assert_num_queries(2):  # the tenants watched, the thresholds told
        assert checked() == 0


# -- where it is shown, and who sets it -------------------------------------------------------


@pytest.mark.usefixtures("room")
def test_the_quota_api_page_and_cli_show_the_alert_and_this_months_cost(
    alpha, gamma, alice, client, cli
):
    card(gpu_A100="2.50")
    alert(alpha, "1000")
    used_this_month(alpha, 12.5)  # 31.25

    team, page, shown = quota_as(alice, client, cli)

    assert (team["spend_alert_per_month"], team["cost_this_month"]) == ("1000.00", "31.25")
    assert "Its usage has cost 31.25 USD this month at the prices in force when it was used, " \
           "of its spend alert of 1,000.00 USD" in page  # fmt: skip
    assert "31.25 USD of its 1,000.00 USD spend alert spent this month" in shown.stdout
    api = APIClient()
    api.force_authenticate(UserFactory(username="root", is_staff=True, is_superuser=True))
    answer = api.get("/api/v1/quotas/", {"tenant": "gamma"}).json()
    (other,) = answer["tenants"]
    assert (other["spend_alert_per_month"], other["cost_this_month"]) == (None, None)
    assert answer["currency"] == "USD"


def test_only_a_platform_admin_sets_the_spend_alert(client, alice, alpha):
    alice.is_staff = True  # alice owns alpha: staff without superuser rights, its admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    page = f"/admin/quotas/tenant/{alpha.pk}/change/"

    client.force_login(alice)
    assert 'name="spend_alert_per_month"' not in client.get(page).text
    client.post(page, {**tenant_form(alpha), "spend_alert_per_month": "5000"})
    assert Tenant.objects.get(pk=alpha.pk).spend_alert_per_month is None

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    saved = client.post(page, {**tenant_form(alpha), "spend_alert_per_month": "5000.50"})
    assert saved.status_code == 302
    assert Tenant.objects.get(pk=alpha.pk).spend_alert_per_month == Decimal("5000.50")


@pytest.mark.parametrize("amount", ["0", "-5", "0.00"])
def test_a_spend_alert_of_0_or_less_is_refused_naming_the_field(client, alpha, amount):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    refused = client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/",
        {**tenant_form(alpha), "spend_alert_per_month": amount},
    )

    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert list(errors) == ["spend_alert_per_month"]
    assert Tenant.objects.get(pk=alpha.pk).spend_alert_per_month is None


def test_the_database_refuses_a_spend_alert_of_0(alpha):
    with pytest.raises(IntegrityError), transaction.atomic():
        alert(alpha, "0")


def test_the_admin_lists_spend_alerts_with_their_kind_and_money(client, alpha):
    month = NOW.date().replace(day=1)
    BudgetAlert.objects.create(tenant=alpha, month=month, kind="spend", percent=80,
                               budget_spend=Decimal("1000"),
                               spent_spend=Decimal("812.4"))  # fmt: skip
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    listed = client.get("/admin/jobs/budgetalert/").text

    assert '<td class="field-kind">spend alert</td>' in listed
    assert '<td class="field-budget_spend">1000.00</td>' in listed
    assert '<td class="field-spent_spend">812.40</td>' in listed

"""The admin's tenant list shows each tenant's spend alert, the amount with the currency, and
prices no tenant's month to draw it (the quotas page and /metrics say what a month cost)."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import reports
from tests.factories import TenantFactory, UserFactory
from tests.jobs.test_spend_alerts import alert
from tests.jobs.test_usage_cost import card
from tests.quotas.test_gpu_budget import used_this_month
from tests.security.test_admin_scope import GRANTED

pytestmark = pytest.mark.django_db
LIST = "/admin/quotas/tenant/"


@pytest.fixture
def root_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_tenant_list_shows_each_tenants_spend_alert_with_the_currency(
    root_client, alpha, gamma
):
    alert(alpha, "1234.5")

    listed = root_client.get(LIST).text

    assert "Spend alert a month" in listed
    assert '<td class="field-spend_alert">1,234.50 USD</td>' in listed
    assert '<td class="field-spend_alert">-</td>' in listed  # gamma: none


def test_a_tenant_admin_sees_their_tenants_spend_alert_too(client, alice, alpha):
    alice.is_staff = True  # alice owns alpha: staff without superuser rights, its admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    alert(alpha, "500")
    client.force_login(alice)

    assert '<td class="field-spend_alert">500.00 USD</td>' in client.get(LIST).text


def test_the_tenant_list_prices_no_tenants_month(root_client, alpha, monkeypatch):
    card(gpu_A100="2.50")
    alert(alpha, "1000")
    used_this_month(alpha, 10)

    def priced(*args, **kwargs):
        raise AssertionError("the tenant list priced a month")

    monkeypatch.setattr(reports, "usage", priced)

    assert root_client.get(LIST).status_code == 200


def list_queries(client) -> int:
    with CaptureQueriesContext(connection) as seen:
        assert client.get(LIST).status_code == 200
    return len(seen)


def test_the_tenant_list_costs_the_same_queries_for_ten_alerted_tenants_as_for_one(root_client):
    TenantFactory(spend_alert_per_month=Decimal("100"))
    list_queries(root_client)  # caches warmed
    one = list_queries(root_client)
    for _ in range(9):
        TenantFactory(spend_alert_per_month=Decimal("100"))

    assert list_queries(root_client) == one

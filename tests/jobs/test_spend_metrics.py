"""Spend in /metrics (jobs.spend_metrics): each tenant with a spend alert's cost this month so
far, as its alert counts it, and the alert, labelled with the tenant and the currency;
computed at most once a minute whatever the scrape rate, shared through the shared cache,
each reader given its own tenants' figures."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext
from redis.exceptions import ConnectionError as RedisDown

from jobs import budgets, metrics, spend_metrics
from tests.factories import TenantFactory
from tests.jobs.test_budget_alerts import NOW, used
from tests.jobs.test_metrics import calls_to
from tests.jobs.test_overview import section
from tests.jobs.test_spend_alerts import alert
from tests.jobs.test_usage_cost import card

pytestmark = pytest.mark.django_db


def spend_of(figures) -> dict[str, float]:
    """mlsched_tenant_spend_month's samples, by tenant."""
    (month,) = (m for m in figures if m.name == "mlsched_tenant_spend_month")
    return {labels["tenant"]: value for labels, value in month.samples}


@pytest.fixture
def priced(alpha, gamma):
    """Alpha spent 812.40 of its 1,000.00 alert this month; gamma has no alert."""
    card(gpu_A100="10.00")
    alert(alpha, "1000")
    used(alpha, 81.24)
    used(gamma, 5)


@pytest.fixture
def computed(monkeypatch):
    """The times the month's spend was priced (each still priced)."""
    return calls_to(monkeypatch, budgets, "spent_money")


@pytest.mark.usefixtures("priced")
def test_metrics_give_each_alerted_tenants_spend_this_month_and_its_alert(scrape, monkeypatch):
    monkeypatch.setattr(metrics, "timezone", SimpleNamespace(now=lambda: NOW))

    lines = scrape()

    assert 'mlsched_tenant_spend_month{tenant="alpha",currency="USD"} 812.4' in lines
    assert 'mlsched_tenant_spend_alert{tenant="alpha",currency="USD"} 1000' in lines
    assert not any(line.startswith("mlsched_tenant_spend") and "gamma" in line for line in lines)


@pytest.mark.usefixtures("priced")
def test_the_spend_is_priced_once_a_minute_whatever_the_scrape_rate(alpha, computed):
    first = [spend_of(metrics.collect(NOW + timedelta(seconds=s))) for s in (0, 20, 40)]
    used(alpha, 10)  # 100.00 more
    within = spend_of(metrics.collect(NOW + timedelta(seconds=59)))
    later = spend_of(metrics.collect(NOW + timedelta(seconds=60)))

    assert len(computed) == 2
    assert first == [{"alpha": 812.4}] * 3 and within == {"alpha": 812.4}
    assert later == {"alpha": 912.4}


@pytest.mark.usefixtures("priced")
def test_with_the_metrics_cache_off_the_spend_is_priced_at_every_read(computed, settings):
    settings.MLSCHED_METRICS_CACHE_S = 0  # as every other figure then is

    for s in (0, 20):
        metrics.collect(NOW + timedelta(seconds=s))

    assert len(computed) == 2


@pytest.mark.usefixtures("priced")
def test_without_redis_the_spend_is_priced_at_every_read(computed, monkeypatch):
    def down(*args, **kwargs):
        raise RedisDown("Connection refused")

    monkeypatch.setattr(caches["shared"], "get", down)
    monkeypatch.setattr(caches["shared"], "set", down)

    figures = [spend_of(metrics.collect(NOW)), spend_of(metrics.collect(NOW))]

    assert figures == [{"alpha": 812.4}] * 2
    assert len(computed) == 2


def test_a_member_sees_only_their_own_tenants_spend_on_the_overview(alpha, gamma, client, alice):
    alert(alpha, "1000")
    alert(gamma, "50")
    client.force_login(alice)

    spend = section(client.get("/overview/").content.decode(), "mlsched_tenant_spend_alert")

    assert "<td>alpha</td>" in spend and "<td>gamma</td>" not in spend


def alerted(tenants: int) -> None:
    for _ in range(tenants):
        TenantFactory(spend_alert_per_month=Decimal("100"))


def pricing_queries() -> int:
    with CaptureQueriesContext(connection) as seen:
        spend_metrics.compute(NOW)
    return len(seen)


def test_pricing_every_tenants_month_costs_the_same_queries_for_six_tenants_as_for_one():
    card(gpu_A100="1.00")
    alerted(1)
    one = pricing_queries()
    alerted(5)

    assert pricing_queries() == one


@pytest.mark.usefixtures("priced")
def test_a_new_month_is_not_given_the_last_months_spend_shared_within_the_minute(computed):
    month_end = datetime(2027, 1, 1, tzinfo=UTC)
    last = spend_of(metrics.collect(month_end - timedelta(seconds=10)))

    first = spend_of(metrics.collect(month_end + timedelta(seconds=10)))

    assert last == {"alpha": 812.4}
    assert first == {"alpha": 0.0}  # January has cost nothing yet
    assert len(computed) == 2

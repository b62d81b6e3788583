"""The rate card (quotas.Rate): platform admins (superusers) alone add, change and delete rates
in the admin, each change in its history; tenant admins look; a price is 0 or more, to six
places, one per flavor and day (a new rate's day today, UTC, unless set), its GPU type spelled
as the nodes spell it; every signed-in user reads the card in force on a day and the changes
scheduled after it at GET /api/v1/rates/; its currency is MLSCHED_CURRENCY, three capital
letters or the server refuses to start; the rates written before they had days hold from the
start."""

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from jobs import reports
from quotas.models import FROM_THE_START, Rate, utc_today
from tests import test_settings
from tests.factories import NodeFactory
from tests.jobs.test_usage_report import H, run
from tests.quotas.admin_pages import tenant_admin_of
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

RATES = "/admin/quotas/rate/"
DAY = "2027-01-01"  # the day the rates the admin adds hold from
BEFORE, AFTER = [("quotas", "0038_tenant_spend_alert")], [("quotas", "0039_rate_since")]
SHOW_CURRENCY = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.MLSCHED_CURRENCY)"
)


@pytest.fixture
def tenant_admin(alice):
    """Alice, owner of alpha, as staff holding every right on rates Django's model has."""
    return tenant_admin_of(alice, "rate")


def test_a_platform_admin_adds_a_rate_kept_in_the_admins_history(platform_admin):
    added = platform_admin.post(
        f"{RATES}add/", {"flavor": "gpu:A100", "price": "2.5", "since": DAY}
    )

    assert added.status_code == 302, added.text
    assert (Rate.objects.get().price, Rate.objects.get().since) == (
        Decimal("2.500000"), date(2027, 1, 1))  # fmt: skip
    (entry,) = LogEntry.objects.filter(content_type__model="rate")
    assert (entry.action_flag, entry.user, entry.object_repr) == (
        ADDITION, platform_admin.user, "gpu:A100: 2.5 USD an hour from 2027-01-01")  # fmt: skip


def test_a_platform_admin_changes_a_price_and_the_history_says_so(platform_admin):
    rate = Rate.objects.create(flavor="cpu", price=Decimal("0.04"))

    changed = platform_admin.post(
        f"{RATES}{rate.pk}/change/", {"flavor": "cpu", "price": "0.05", "since": "2000-01-01"}
    )

    assert changed.status_code == 302, changed.text
    (entry,) = LogEntry.objects.filter(content_type__model="rate")
    assert (entry.action_flag, entry.get_change_message()) == (CHANGE, "Changed Price.")


def test_a_tenant_admin_sees_the_rates_and_adds_changes_or_deletes_none(tenant_admin):
    rate = Rate.objects.create(flavor="cpu", price=Decimal("0.04"))

    listing = tenant_admin.get(RATES)
    add_page = tenant_admin.get(f"{RATES}add/")
    added = tenant_admin.post(f"{RATES}add/", {"flavor": "gpu:A100", "price": "0"})
    changed = tenant_admin.post(f"{RATES}{rate.pk}/change/", {"flavor": "cpu", "price": "0"})
    deleted = tenant_admin.post(f"{RATES}{rate.pk}/delete/", {"post": "yes"})

    assert listing.status_code == 200 and "USD a core-hour" in listing.text
    assert (add_page.status_code, added.status_code, deleted.status_code) == (403, 403, 403)
    assert changed.status_code == 403
    assert list(Rate.objects.values_list("flavor", "price")) == [("cpu", Decimal("0.04"))]


@pytest.mark.parametrize(
    ("price", "said"),
    [
        pytest.param("-0.01", "greater than or equal to 0", id="negative"),
        pytest.param("0.0000001", "no more than 6 decimal places", id="seven places"),
    ],
)
def test_a_price_below_zero_or_past_six_places_is_refused_naming_the_price(
    platform_admin, price, said
):
    refused = platform_admin.post(f"{RATES}add/", {"flavor": "cpu", "price": price, "since": DAY})

    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert list(errors) == ["price"] and said in errors["price"][0]
    assert not Rate.objects.exists()


def test_the_database_refuses_a_negative_price_too():
    rate = Rate.objects.create(flavor="cpu", price=Decimal("1"))

    with pytest.raises(IntegrityError), transaction.atomic():
        Rate.objects.filter(pk=rate.pk).update(price=Decimal("-1"))


@pytest.mark.parametrize(
    ("flavor", "said"),
    [
        pytest.param("disk", "is not a flavor", id="no flavor"),
        pytest.param("gpu:a100", "The nodes report this GPU type as 'A100'", id="misspelled"),
    ],
)
def test_a_flavor_that_would_price_nothing_is_refused_naming_the_flavor(
    platform_admin, flavor, said
):
    NodeFactory(gpu_type="A100")
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))

    refused = platform_admin.post(f"{RATES}add/", {"flavor": flavor, "price": "1", "since": DAY})

    errors = refused.context["adminform"].form.errors
    assert list(errors) == ["flavor"] and said in errors["flavor"][0]
    assert Rate.objects.count() == 1


def test_a_second_price_of_a_flavor_from_the_same_day_is_refused_naming_the_day(platform_admin):
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"), since=date(2027, 1, 1))

    refused = platform_admin.post(f"{RATES}add/", {"flavor": "cpu", "price": "1", "since": DAY})

    errors = refused.context["adminform"].form.errors
    assert list(errors) == ["since"]
    assert errors["since"] == [
        "cpu has a price from 2027-01-01 already: change that rate, or pick another day."
    ]
    assert Rate.objects.count() == 1


def test_a_platform_admin_schedules_a_price_change_with_a_later_day(platform_admin):
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))

    added = platform_admin.post(f"{RATES}add/", {"flavor": "cpu", "price": "0.05", "since": DAY})

    assert added.status_code == 302, added.text
    assert list(Rate.objects.values_list("since", "price")) == [
        (FROM_THE_START, Decimal("0.04")), (date(2027, 1, 1), Decimal("0.05"))]  # fmt: skip


def test_the_database_keeps_one_price_of_a_flavor_a_day():
    Rate.objects.create(flavor="cpu", price=Decimal("1"), since=date(2027, 1, 1))
    Rate.objects.create(flavor="cpu", price=Decimal("2"), since=date(2027, 1, 2))

    with pytest.raises(IntegrityError), transaction.atomic():
        Rate.objects.create(flavor="cpu", price=Decimal("3"), since=date(2027, 1, 2))


def test_a_new_rate_in_the_admin_holds_from_today_in_utc(platform_admin, monkeypatch):
    # 00:30 in Berlin on 1 March is still 28 February in UTC.
    berlin = datetime(2027, 3, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    monkeypatch.setattr("quotas.models.timezone", SimpleNamespace(now=lambda: berlin))

    page = platform_admin.get(f"{RATES}add/")

    assert page.context["adminform"].form["since"].value() == date(2027, 2, 28)
    assert "a correction of history" in page.text  # changing a past rate's price reprices


def test_the_admin_lists_each_rates_day_and_filters_by_flavor(platform_admin):
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))
    Rate.objects.create(flavor="cpu", price=Decimal("0.05"), since=date(2027, 1, 1))
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))

    listing = platform_admin.get(RATES, {"flavor": "cpu"})

    shown = [(r.flavor, r.since) for r in listing.context["cl"].result_list]
    assert shown == [("cpu", FROM_THE_START), ("cpu", date(2027, 1, 1))]
    assert "column-since" in listing.text and "By flavor" in listing.text


def test_every_signed_in_user_reads_the_card_in_force_today_and_the_changes_scheduled(charlie):
    today = utc_today()
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2"), since=today)
    Rate.objects.create(flavor="gpu:A100", price=Decimal("3"), since=today + timedelta(days=30))
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))
    Rate.objects.create(flavor="memory", price=Decimal("0.01"), since=today + timedelta(days=1))
    client = APIClient()
    client.force_authenticate(charlie)  # of gamma alone: the card is the platform's

    answer = client.get("/api/v1/rates/")

    assert answer.status_code == 200
    assert answer.json() == {
        "currency": "USD",
        "at": f"{today}",
        "rates": [
            {"flavor": "cpu", "price": "0.040000", "since": "2000-01-01"},
            {"flavor": "gpu:A100", "price": "2.000000", "since": f"{today}"},
        ],
        "upcoming": [
            {"flavor": "memory", "price": "0.010000", "since": f"{today + timedelta(days=1)}"},
            {"flavor": "gpu:A100", "price": "3.000000", "since": f"{today + timedelta(days=30)}"},
        ],
    }


def test_at_a_day_it_gives_the_card_then_and_the_changes_after_it(alice):
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))
    Rate.objects.create(flavor="cpu", price=Decimal("0.05"), since=date(2026, 6, 1))
    client = APIClient()
    client.force_authenticate(alice)

    before = client.get("/api/v1/rates/", {"at": "2026-05-31"}).json()
    on_the_day = client.get("/api/v1/rates/", {"at": "2026-06-01"}).json()

    assert (before["at"], before["rates"], before["upcoming"]) == (
        "2026-05-31",
        [{"flavor": "cpu", "price": "0.040000", "since": "2000-01-01"}],
        [{"flavor": "cpu", "price": "0.050000", "since": "2026-06-01"}],
    )
    assert on_the_day["rates"] == [{"flavor": "cpu", "price": "0.050000", "since": "2026-06-01"}]
    assert on_the_day["upcoming"] == []


@pytest.mark.parametrize("at", ["2026-02-30", "tomorrow", "2026-1-5", "0999-01-01"])
def test_at_that_is_no_date_is_a_400_naming_at(alice, at):
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/rates/", {"at": at})

    assert (answer.status_code, answer.json()) == (400, {"at": ["A date: YYYY-MM-DD."]})


def test_the_rate_card_gives_the_platforms_currency_and_needs_a_sign_in(alice, settings):
    settings.MLSCHED_CURRENCY = "EUR"
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/rates/").json()
    anonymous = APIClient().get("/api/v1/rates/")

    assert answer == {"currency": "EUR", "at": f"{utc_today()}", "rates": [], "upcoming": []}
    assert anonymous.status_code in (401, 403)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_a_rate_from_before_rates_had_days_holds_from_the_start_and_prices_everything(alpha):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("quotas", "Rate")
    old.objects.create(flavor="gpu:A100", price=Decimal("2.5"))

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    assert list(Rate.objects.values_list("flavor", "since")) == [("gpu:A100", date(2000, 1, 1))]
    start = datetime(2001, 3, 1, tzinfo=UTC)  # long ago: priced all the same
    run(alpha, start, start + 2 * H, gpus=1, cpu_milli=0)
    (usage,) = reports.usage([alpha], start, start + 24 * H, start + 48 * H).tenants
    assert usage.total_cost().used == Decimal("5.00")


@pytest.mark.parametrize("written", ["usd", "US", "EURO", "U5D", "€"])
def test_a_currency_that_is_not_three_capital_letters_refuses_to_start(written):
    run = load_settings(MLSCHED_CURRENCY=written)

    assert run.returncode != 0
    assert "ImproperlyConfigured: MLSCHED_CURRENCY" in run.stderr


def test_the_currency_is_usd_unless_set(monkeypatch):
    monkeypatch.setattr(test_settings, "LOAD", SHOW_CURRENCY)

    unset, euros = load_settings(MLSCHED_CURRENCY=""), load_settings(MLSCHED_CURRENCY="EUR")

    assert (unset.stdout.strip(), euros.stdout.strip()) == ("USD", "EUR")

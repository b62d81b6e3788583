"""The rate card (quotas.Rate): platform admins (superusers) alone add, change and delete rates
in the admin, each change in its history; tenant admins look; a price is 0 or more, to six
places, one per flavor, its GPU type spelled as the nodes spell it; every signed-in user reads
the card at GET /api/v1/rates/; its currency is MLSCHED_CURRENCY, three capital letters or the
server refuses to start."""

from decimal import Decimal

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.db import IntegrityError, transaction
from rest_framework.test import APIClient

from quotas.models import Rate
from tests import test_settings
from tests.factories import NodeFactory
from tests.quotas.admin_pages import tenant_admin_of
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

RATES = "/admin/quotas/rate/"
SHOW_CURRENCY = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.MLSCHED_CURRENCY)"
)


@pytest.fixture
def tenant_admin(alice):
    """Alice, owner of alpha, as staff holding every right on rates Django's model has."""
    return tenant_admin_of(alice, "rate")


def test_a_platform_admin_adds_a_rate_kept_in_the_admins_history(platform_admin):
    added = platform_admin.post(f"{RATES}add/", {"flavor": "gpu:A100", "price": "2.5"})

    assert added.status_code == 302, added.text
    assert Rate.objects.get().price == Decimal("2.500000")
    (entry,) = LogEntry.objects.filter(content_type__model="rate")
    assert (entry.action_flag, entry.user, entry.object_repr) == (
        ADDITION, platform_admin.user, "gpu:A100: 2.5 USD an hour")  # fmt: skip


def test_a_platform_admin_changes_a_price_and_the_history_says_so(platform_admin):
    rate = Rate.objects.create(flavor="cpu", price=Decimal("0.04"))

    changed = platform_admin.post(f"{RATES}{rate.pk}/change/", {"flavor": "cpu", "price": "0.05"})

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
    refused = platform_admin.post(f"{RATES}add/", {"flavor": "cpu", "price": price})

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
        pytest.param("cpu", "already exists", id="a second rate"),
    ],
)
def test_a_flavor_that_would_price_nothing_or_twice_is_refused_naming_the_flavor(
    platform_admin, flavor, said
):
    NodeFactory(gpu_type="A100")
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))

    refused = platform_admin.post(f"{RATES}add/", {"flavor": flavor, "price": "1"})

    errors = refused.context["adminform"].form.errors
    assert list(errors) == ["flavor"] and said in errors["flavor"][0]
    assert Rate.objects.count() == 1


def test_every_signed_in_user_reads_the_rate_card_prices_as_strings(charlie):
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"))
    client = APIClient()
    client.force_authenticate(charlie)  # of gamma alone: the card is the platform's

    answer = client.get("/api/v1/rates/")

    assert answer.status_code == 200
    assert answer.json() == {
        "currency": "USD",
        "rates": [
            {"flavor": "cpu", "price": "0.040000"},
            {"flavor": "gpu:A100", "price": "2.500000"},
        ],
    }


def test_the_rate_card_gives_the_platforms_currency_and_needs_a_sign_in(alice, settings):
    settings.MLSCHED_CURRENCY = "EUR"
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/rates/").json()
    anonymous = APIClient().get("/api/v1/rates/")

    assert answer == {"currency": "EUR", "rates": []}
    assert anonymous.status_code in (401, 403)


@pytest.mark.parametrize("written", ["usd", "US", "EURO", "U5D", "€"])
def test_a_currency_that_is_not_three_capital_letters_refuses_to_start(written):
    run = load_settings(MLSCHED_CURRENCY=written)

    assert run.returncode != 0
    assert "ImproperlyConfigured: MLSCHED_CURRENCY" in run.stderr


def test_the_currency_is_usd_unless_set(monkeypatch):
    monkeypatch.setattr(test_settings, "LOAD", SHOW_CURRENCY)

    unset, euros = load_settings(MLSCHED_CURRENCY=""), load_settings(MLSCHED_CURRENCY="EUR")

    assert (unset.stdout.strip(), euros.stdout.strip()) == ("USD", "EUR")

"""CLI `rates` against a live server: the rate card in force today a flavor to a line, its price
to the cent or beyond and what it is per in the platform's currency; "No prices are set."
without a rate; a line for each change scheduled; the API's JSON with --json."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest

from quotas.models import Rate, utc_today
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db(transaction=True)

cli = test_cli.cli  # the command line against a live server, as Alice


def test_it_prints_each_flavor_its_price_and_what_it_is_per(cli):
    for flavor, price in (("gpu:A100", "2.5"), ("cpu", "0.0125"), ("memory", "0.01")):
        Rate.objects.create(flavor=flavor, price=Decimal(price))

    done = cli("rates")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "flavor     price  per",
        "cpu       0.0125  USD a core-hour",
        "gpu:A100    2.50  USD a GPU-hour",
        "memory      0.01  USD a GiB-hour",
    ]


def test_without_a_rate_it_says_no_prices_are_set(cli):
    done = cli("rates")

    assert (done.returncode, done.stdout) == (0, "No prices are set.\n"), done.stderr


def test_with_json_it_prints_the_apis_answer(cli):
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))

    done = cli("rates", "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "currency": "USD", "at": f"{utc_today()}", "upcoming": [],
        "rates": [{"flavor": "gpu:A100", "price": "2.500000", "since": "2000-01-01"}],
    }  # fmt: skip


def test_it_prints_a_line_for_each_change_scheduled(cli):
    later = utc_today() + timedelta(days=10)
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))
    Rate.objects.create(flavor="gpu:A100", price=Decimal("3"), since=later)
    Rate.objects.create(flavor="cpu", price=Decimal("0.0125"), since=later)

    done = cli("rates")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "flavor    price  per",
        "gpu:A100   2.50  USD a GPU-hour",
        f"scheduled: cpu 0.0125 USD a core-hour from {later}",
        f"scheduled: gpu:A100 3.00 USD a GPU-hour from {later}",
    ]


def test_with_only_changes_scheduled_it_says_no_prices_are_set_then_them(cli):
    later = utc_today() + timedelta(days=10)
    Rate.objects.create(flavor="cpu", price=Decimal("0.04"), since=later)

    done = cli("rates")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "No prices are set.",
        f"scheduled: cpu 0.04 USD a core-hour from {later}",
    ]

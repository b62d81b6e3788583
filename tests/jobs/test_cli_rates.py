"""CLI `rates` against a live server: the rate card a flavor to a line, its price to the cent or
beyond and what it is per in the platform's currency; "No prices are set." without a rate;
the API's JSON with --json."""

import json
from decimal import Decimal

import pytest

from quotas.models import Rate
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
        "currency": "USD", "rates": [{"flavor": "gpu:A100", "price": "2.500000"}],
    }  # fmt: skip

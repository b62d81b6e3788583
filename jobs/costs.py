"""The usage reports' costs (chargeback in money): their hours priced at the rate card
(quotas.Rate), read once per report.

A row's cost is its GPU-hours at its GPU type's price (`gpu:<type>`) plus its CPU core-hours
at the core-hour's (`cpu`), rounded to the cent (half to even) once; its wasted cost, its
wasted GPU-hours at its type's price, the same way. Wasted time is shown apart and never added
to the cost: part of it (work lost to preemption) is in the GPU-hours already. A total is the
sum of its rows' costs, so a bill's lines add up to it. The report computes no memory used
(only memory asked beyond the peak, for right-sizing): a `memory` rate prices nothing yet.

Prices as they stand now: the whole window is priced at today's card, whenever its hours were
used (no effective dates). A flavor used without a rate costs nothing, and the report names
it (`Card.unpriced`); `"gpu"` stands for GPU-hours of an unknown type (an attempt placed
before the type was recorded, its allocation rows deleted), which no rate prices.

The quotas page lists the card itself (`Card.listed`): each flavor for people, its price with
the currency, to the cent or to every place it has beyond it.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

from django.conf import settings

from jobs.cli.client import price_written, rate_named
from jobs.usage_queries import TypeUsage
from quotas.models import Rate

CENT = Decimal("0.01")
ZERO = Decimal("0.00")


@dataclass(frozen=True)
class Cost:
    """What a row's hours cost, to the cent: the GPU- and core-hours used, and the GPU-hours
    wasted."""

    used: Decimal = ZERO
    wasted: Decimal = ZERO

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.used + other.used, self.wasted + other.wasted)


def total(costs) -> Cost:
    return sum(costs, Cost())


@dataclass(frozen=True)
class Price:
    """A line of the rate card as the quotas page lists it: the flavor, an hour of it for
    people ("A100 GPU-hour") and its price with the currency ("2.50 USD"; "": none)."""

    flavor: str
    named: str
    price: str


@dataclass
class Card:
    """The rate card as it stands now, by flavor, pricing a report's rows; it keeps the flavors
    it was asked to price and has no rate for."""

    prices: dict[str, Decimal]
    currency: str
    missing: set[str] = field(default_factory=set)

    @classmethod
    def read(cls) -> "Card":
        """The card: one query."""
        return cls(dict(Rate.objects.values_list("flavor", "price")), settings.MLSCHED_CURRENCY)

    def cost(self, usage: TypeUsage) -> Cost:
        """What one GPU type's hours (`usage.gpu_type` a GPU type, "" for none) cost."""
        gpu = self.price(gpu_flavor(usage.gpu_type), usage.gpu_hours + usage.wasted_gpu_hours)
        cpu = self.price("cpu", usage.cpu_core_hours)
        used = exact(usage.gpu_hours) * gpu + exact(usage.cpu_core_hours) * cpu
        return Cost(cents(used), cents(exact(usage.wasted_gpu_hours) * gpu))

    def price(self, flavor: str | None, hours: float) -> Decimal:
        """An hour of `flavor` (None: nothing to price), 0 without a rate: kept as missing
        when hours of it were used."""
        if flavor is None:
            return ZERO
        if flavor not in self.prices and hours:
            self.missing.add(flavor)
        return self.prices.get(flavor, ZERO)

    def listed(self, named: Iterable[str] = ()) -> list[Price]:
        """The card as the quotas page lists it, by flavor: each rate, and each flavor of
        `named` (the teams' quota rows) that has none, without a price. None at all where no
        rate is set: then nothing is charged, and no flavor lacks a price more than another."""
        if not self.prices:
            return []
        return [Price(flavor, rate_named(flavor), self.written(flavor))
                for flavor in sorted(set(self.prices) | set(named))]  # fmt: skip

    def written(self, flavor: str) -> str:
        """An hour of `flavor`'s price with the currency, "" without a rate."""
        if flavor not in self.prices:
            return ""
        return f"{price_written(self.prices[flavor], grouped=True)} {self.currency}"

    @property
    def unpriced(self) -> list[str]:
        """The flavors used that have no rate, sorted."""
        return sorted(self.missing)


def gpu_flavor(gpu_type: str | None) -> str | None:
    """The flavor a GPU type's hours are priced as; None for work without GPUs."""
    if gpu_type == "":
        return None
    return "gpu" if gpu_type is None else f"gpu:{gpu_type}"


def exact(amount: float | Decimal) -> Decimal:
    """An amount (hours, money) as the decimal it prints as (0.1, not 0.1000000000000000055...),
    so a tie at half a cent is one; a decimal as it is."""
    return amount if isinstance(amount, Decimal) else Decimal(repr(amount))


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def written(amount: Decimal, currency: str) -> str:
    """An amount as the portal shows it: "1,234.50 USD"."""
    return f"{amount:,.2f} {currency}"

"""The usage reports' costs (chargeback in money): their hours priced at the rate card
(quotas.Rate), read once per report.

A row's cost is its GPU-hours at its GPU type's price (`gpu:<type>`) plus its CPU core-hours
at the core-hour's (`cpu`), rounded to the cent (half to even) once per stretch (below); its
wasted cost, its wasted GPU-hours at its type's price, the same way. Wasted time is shown apart
and never added to the cost: part of it (work lost to preemption) is in the GPU-hours already.
A total is the sum of its rows' costs, so a bill's lines add up to it. The report computes no
memory used (only memory asked beyond the peak, for right-sizing): a `memory` rate prices
nothing yet.

Effective-dated, as cloud billing prices usage at the price in force when it was used: each
rate holds from its UTC day until its flavor's next rate's day (`RateCard`). A report's window
is cut at each midnight inside it from which a price changes into stretches (`Stretch`), and
each stretch's hours are priced at the prices in force over it (`Card`): a row's cost is the
sum of its stretches' costs, each rounded as a row's is. Where no price changes inside the
window it is one stretch, priced from the report's own figures. A flavor used where no rate
was in force costs nothing, and the report names it (`RateCard.unpriced`); `"gpu"` stands for
GPU-hours of an unknown type (an attempt placed before the type was recorded, its allocation
rows deleted), which no rate prices.

The quotas page lists the card itself (`RateCard.listed`): each flavor for people, its price
in force today with the currency, to the cent or to every place it has beyond it, and the
changes scheduled after today.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import pairwise

from django.conf import settings

from jobs.cli.client import price_written, rate_named
from jobs.usage_queries import TypeUsage
from quotas.models import Rate

CENT = Decimal("0.01")
ZERO = Decimal("0.00")
ONE_DAY = timedelta(days=1)


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


# A report's usage as its rows are priced, by table (its GPU types, a split's values), tenant
# id and row (a GPU type, a value): each row's hours by GPU type, so each is priced by its type.
Tables = dict[str, dict[int, dict]]


@dataclass(frozen=True)
class Price:
    """A line of the rate card as the quotas page lists it: the flavor, an hour of it for
    people ("A100 GPU-hour"), its price in force with the currency ("2.50 USD"; "": none) and
    the changes scheduled ("3.00 USD from 2027-01-01")."""

    flavor: str
    named: str
    price: str
    changes: tuple[str, ...] = ()


@dataclass
class Card:
    """The prices in force over a stretch of a report's window, by flavor, pricing its rows; it
    keeps the flavors it was asked to price and has no rate for (in `missing`, which the
    stretches of one report share)."""

    prices: dict[str, Decimal]
    currency: str
    missing: set[str] = field(default_factory=set)

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

    def written(self, flavor: str) -> str:
        """An hour of `flavor`'s price with the currency, "" without a rate."""
        if flavor not in self.prices:
            return ""
        return price_shown(self.prices[flavor], self.currency)


@dataclass
class Stretch:
    """A stretch of a report's window over which no price changes: its prices, and its usage
    as the report's rows are priced."""

    card: Card
    tables: Tables


@dataclass
class RateCard:
    """The rate card through time: every rate, each holding from its UTC day until its
    flavor's next rate's day. It keeps the flavors a report used where no rate was in force."""

    rates: list[Rate]  # by flavor, then day
    currency: str
    missing: set[str] = field(default_factory=set)

    @classmethod
    def read(cls) -> "RateCard":
        """The card: one query."""
        return cls(list(Rate.objects.order_by("flavor", "since")), settings.MLSCHED_CURRENCY)

    def in_force(self, day: date) -> list[Rate]:
        """The rates in force on `day`, by flavor: each flavor's last from that day or before
        (none for a flavor whose first rate is later)."""
        latest = {rate.flavor: rate for rate in self.rates if rate.since <= day}
        return list(latest.values())

    def upcoming(self, day: date) -> list[Rate]:
        """The rates dated after `day` (the changes scheduled), by day, then flavor."""
        return sorted((r for r in self.rates if r.since > day), key=lambda r: (r.since, r.flavor))

    def on(self, day: date) -> Card:
        """The prices in force on `day`, keeping what they miss with the card's."""
        return Card({r.flavor: r.price for r in self.in_force(day)}, self.currency, self.missing)

    def changes(self, since: datetime, until: datetime) -> list[datetime]:
        """The midnights (UTC) inside (since, until) from which a price differs from the day
        before's, in order: a rate of the same price as the one before it changes nothing."""
        days = sorted({rate.since for rate in self.rates})
        return [midnight(day) for day in days if since < midnight(day) < until
                and self.on(day).prices != self.on(day - ONE_DAY).prices]  # fmt: skip

    def stretches(
        self, since: datetime, until: datetime, whole: Tables,
        read: Callable[[datetime, datetime], Tables],
    ) -> list[Stretch]:  # fmt: skip
        """The window [since, until) as the stretches over which no price changes, each with
        its prices and its usage: one, with the window's own `whole`, where none changes inside
        it (nothing more read); else each stretch's usage as `read` gives it."""
        cuts = [since, *self.changes(since, until), until]
        if len(cuts) == 2:
            return [Stretch(self.on(day_of(since)), whole)]
        return [Stretch(self.on(day_of(start)), read(start, end)) for start, end in pairwise(cuts)]

    def listed(self, today: date, named: Iterable[str] = ()) -> list[Price]:
        """The card as the quotas page lists it, by flavor: each flavor with a rate, and each
        of `named` (the teams' quota rows) without one, its price in force `today` ("": none)
        and the changes scheduled after it. None at all where no rate is set: then nothing is
        charged, and no flavor lacks a price more than another."""
        if not self.rates:
            return []
        now = self.on(today)
        changes: dict[str, list[str]] = {}
        for rate in self.upcoming(today):
            shown = f"{price_shown(rate.price, self.currency)} from {rate.since:%Y-%m-%d}"
            changes.setdefault(rate.flavor, []).append(shown)
        flavors = sorted({rate.flavor for rate in self.rates} | set(named))
        return [Price(f, rate_named(f), now.written(f), tuple(changes.get(f, ())))
                for f in flavors]  # fmt: skip

    @property
    def priced(self) -> bool:
        """Whether any rate is set (the usage page links to the card)."""
        return bool(self.rates)

    @property
    def unpriced(self) -> list[str]:
        """The flavors used where no rate was in force, sorted."""
        return sorted(self.missing)


def row_costs(stretches: list[Stretch], table: str, tenant: int, rows: Iterable) -> dict:
    """What each of a tenant's rows of `table` cost (`rows` their keys: GPU types, a split's
    values): its hours in each stretch at that stretch's prices, each stretch's cost rounded
    as a row's, summed. A row no stretch has hours of costs 0."""
    costs = dict.fromkeys(rows, Cost())
    for stretch in stretches:
        for key, usages in stretch.tables.get(table, {}).get(tenant, {}).items():
            costs[key] = costs.get(key, Cost()) + total(map(stretch.card.cost, usages))
    return costs


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def day_of(moment: datetime) -> date:
    """The UTC day of `moment`."""
    return moment.astimezone(UTC).date()


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


def price_shown(price: Decimal, currency: str) -> str:
    """An hour's price with the currency, to the cent or to every place it has beyond it, as
    the portal writes prices: "2.50 USD", "1,200.00 USD", "0.0125 USD"."""
    return f"{price_written(price, grouped=True)} {currency}"


def written(amount: Decimal, currency: str) -> str:
    """An amount as the portal shows it: "1,234.50 USD"."""
    return f"{amount:,.2f} {currency}"

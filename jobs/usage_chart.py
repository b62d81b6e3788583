"""The usage page's chart of GPU-hours per day as stacked bars: days and series (a value per
day each) in, the rectangles, the axes' ticks and the legend out, in the SVG's units. The
server draws it (templates/portal/usage_chart.html writes the SVG): the portal's
Content-Security-Policy allows no inline script, and a chart library would be one more thing
to ship for one picture.

Pure: no Django, no database, no clock.
"""

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 720, 260
# The plot's margins: room for the y axis's figures and title at the left, the days below.
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 10, 40
# Told apart with colour blindness (Okabe and Ito); grey for the series merged as "other".
PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442",
           "#000000"]  # fmt: skip
OTHER = "#999999"
Y_TICKS = 4  # lines across the plot, above zero
X_LABELS = 8  # days labelled at most


@dataclass(frozen=True)
class Bar:
    """One series' part of one day's stack, and what its title says."""

    x: float
    y: float
    width: float
    height: float
    colour: str
    name: str
    day: str
    value: float


@dataclass(frozen=True)
class Tick:
    at: float  # on the axis: y for the figures, x (a bar's middle) for the days
    label: str


@dataclass(frozen=True)
class Key:
    name: str
    colour: str


@dataclass
class Chart:
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    legend: list[Key]
    series: list[tuple[str, list[float]]]  # those drawn, the legend's: "other" merged
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def middle(self) -> float:
        """Half way up the plot: where the y axis's title stands."""
        return (self.top + self.bottom) / 2

    @property
    def centre(self) -> float:
        """Half way across the plot: where the x axis's title stands."""
        return (self.left + self.right) / 2


def stacked(days: list[str], series: list[tuple[str, list[float]]], other: str) -> Chart:
    """The stacked bars of `series` (name, a value per day of `days`), in their order from the
    bottom up; the series beyond the palette's colours merged into one named `other`, last.
    A bar for each series and day with a value above zero."""
    kept = merged(series, other)
    colours = PALETTE[: len(kept)]
    if len(kept) < len(series):
        colours[-1] = OTHER
    totals = [sum(values[d] for _, values in kept) for d in range(len(days))]
    step = nice_step(max(totals, default=0.0))
    scale = (HEIGHT - BOTTOM - TOP) / (step * Y_TICKS)
    slot = (WIDTH - RIGHT - LEFT) / max(len(days), 1)
    bars = []
    for d, day in enumerate(days):
        y = float(HEIGHT - BOTTOM)
        for (name, values), colour in zip(kept, colours, strict=True):
            if values[d] <= 0:
                continue
            height = values[d] * scale
            y -= height
            bars.append(Bar(round(LEFT + d * slot + slot * 0.1, 2), round(y, 2),
                            round(slot * 0.8, 2), round(height, 2), colour, name, day,
                            values[d]))  # fmt: skip
    y_ticks = [Tick(round(HEIGHT - BOTTOM - n * step * scale, 2), figure(n * step))
               for n in range(Y_TICKS + 1)]  # fmt: skip
    every = math.ceil(len(days) / X_LABELS) if days else 1
    x_ticks = [Tick(round(LEFT + (d + 0.5) * slot, 2), day)
               for d, day in enumerate(days) if d % every == 0]  # fmt: skip
    legend = [Key(name, colour) for (name, _), colour in zip(kept, colours, strict=True)]
    return Chart(bars, y_ticks, x_ticks, legend, kept)


def merged(series: list[tuple[str, list[float]]], other: str) -> list[tuple[str, list[float]]]:
    """The series a colour each can tell apart: all of them if the palette has enough colours,
    else the largest (by their sum) in their order, the rest summed as `other`, last."""
    if len(series) <= len(PALETTE):
        return series
    ranked = sorted(range(len(series)), key=lambda n: -sum(series[n][1]))
    kept = sorted(ranked[: len(PALETTE) - 1])
    rest = [values for n, (_, values) in enumerate(series) if n not in kept]
    return [series[n] for n in kept] + [(other, [sum(day) for day in zip(*rest, strict=True)])]


def nice_step(most: float) -> float:
    """The step between the y axis's lines: 1, 2, 2.5 or 5 times a power of ten, the least
    whose Y_TICKS steps reach `most` (1 for nothing)."""
    if most <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(most / Y_TICKS))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * power * Y_TICKS >= most:
            return factor * power
    raise AssertionError("unreachable: 10 x power x Y_TICKS > most")


def figure(value: float) -> str:
    """An axis figure, as short as it reads: 2.5, 40, 1,500."""
    value = round(value, 6)  # 3 x 0.1 is 0.30000000000000004
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"

"""The usage page's chart drawn (jobs.usage_chart: days x series in, rectangles out) and a
group of runs laid out over its days (jobs.daily_usage.spread): pure, no database."""

from datetime import date

import pytest

from jobs.daily_usage import DAY_S, spread
from jobs.usage_chart import BOTTOM, HEIGHT, LEFT, OTHER, PALETTE, TOP, merged, nice_step, stacked

FLOOR = HEIGHT - BOTTOM  # the plot's baseline, in the SVG's units (y grows downwards)
PLOT = HEIGHT - BOTTOM - TOP


def test_each_days_bars_stack_from_the_baseline_in_the_series_order():
    chart = stacked(["d1", "d2"], [("alpha", [3.0, 0.0]), ("gamma", [1.0, 2.0])], "other")

    # 4 at most: 1 a line, the top line at 4.
    assert [tick.label for tick in chart.y_ticks] == ["0", "1", "2", "3", "4"]
    wants = [("alpha", "d1", 3.0, FLOOR - PLOT * 3 / 4, PLOT * 3 / 4),
             ("gamma", "d1", 1.0, FLOOR - PLOT, PLOT / 4),
             ("gamma", "d2", 2.0, FLOOR - PLOT / 2, PLOT / 2)]  # fmt: skip
    assert [(b.name, b.day, b.value, b.y, b.height) for b in chart.bars] == [
        (name, day, value, pytest.approx(y, abs=0.01), pytest.approx(h, abs=0.01))
        for name, day, value, y, h in wants
    ]
    assert [b.colour for b in chart.bars] == [PALETTE[0], PALETTE[1], PALETTE[1]]
    assert chart.bars[0].x == chart.bars[1].x < chart.bars[2].x  # a day's bars one above another


def test_a_zero_is_no_bar_and_nothing_at_all_draws_none():
    empty = stacked(["d1", "d2"], [("alpha", [0.0, 0.0])], "other")

    assert empty.bars == [] and [t.label for t in empty.y_ticks][-1] == "4"


def test_the_bars_stay_inside_the_plot_whatever_the_days():
    days = [f"d{n}" for n in range(366)]

    chart = stacked(days, [("alpha", [float(n % 7) for n in range(366)])], "other")

    assert len(chart.bars) == 366 - 53  # every seventh day is 0
    assert all(LEFT <= b.x and b.x + b.width <= 720 for b in chart.bars)
    assert all(b.y >= TOP - 0.01 and b.y + b.height <= FLOOR + 0.01 for b in chart.bars)
    assert len(chart.x_ticks) <= 8 and chart.x_ticks[0].label == "d0"


def test_series_beyond_the_palettes_colours_are_merged_as_other():
    series = [(f"team-{n}", [float(n), 1.0]) for n in range(12)]

    kept = merged(series, "other teams")
    chart = stacked(["d1", "d2"], series, "other teams")

    # The seven largest, in their order, then the five smallest summed.
    assert [name for name, _ in kept] == [f"team-{n}" for n in range(5, 12)] + ["other teams"]
    assert kept[-1][1] == [0 + 1 + 2 + 3 + 4, 5.0]
    assert [key.colour for key in chart.legend] == [*PALETTE[:7], OTHER]


@pytest.mark.parametrize(
    ("most", "want"),
    [(0.0, 1.0), (0.3, 0.1), (3.9, 1.0), (4.0, 1.0), (4.1, 2.0), (9.0, 2.5), (10.5, 5.0),
     (37.0, 10.0), (41.0, 20.0), (1234.0, 500.0)],
)  # fmt: skip
def test_the_y_axis_steps_are_round_figures_whose_four_reach_the_highest_day(most, want):
    assert nice_step(most) == pytest.approx(want)


D1, D2, D3, D4 = (date(2025, 3, n) for n in (1, 2, 3, 4))


@pytest.mark.parametrize(
    ("first", "last", "held", "before", "to_end", "want"),
    [
        # Two GPUs from 20:00 to 23:00 on one day.
        (D1, D1, 2, 2 * 20 * 3600, 2 * 23 * 3600, [(D1, 2 * 3 * 3600)]),
        # From 20:00 across midnight to 03:00: 4 h, then 3 h.
        (D1, D2, 1, 20 * 3600, 3 * 3600, [(D1, 4 * 3600), (D2, 3 * 3600)]),
        # Over two whole days between.
        (D1, D4, 1, 12 * 3600, 6 * 3600,
         [(D1, 12 * 3600), (D2, DAY_S), (D3, DAY_S), (D4, 6 * 3600)]),
        # Ended at the midnight: nothing on the last day (daily_usage.daily leaves it out).
        (D1, D2, 1, 0, 0, [(D1, DAY_S), (D2, 0)]),
    ],
)  # fmt: skip
def test_a_group_of_runs_is_spread_over_its_days(first, last, held, before, to_end, want):
    assert list(spread(first, last, held, before, to_end)) == want

"""The panels' sparklines: made from kept levels in one run where every value is above the baseline, else by
:func:`~nvtopy.render.chart.block_chart` -- the same line either way (render/chart.py's ``sparkline``)."""

from __future__ import annotations

import math
import random
from array import array

from nvtopy.render import chart
from nvtopy.render.chart import block_chart, sparkline


def _values(rng: random.Random, count: int) -> list[float | None]:
    """Whole percents (NVML's utilisation), float32 fractions (GPM's SM activity), out-of-range values,
    gaps (None, NaN) and zeros, in runs like a history's."""
    kinds = [
        lambda: float(rng.randint(1, 100)),
        lambda: array("f", [rng.uniform(0.0, 100.0)])[0],
        lambda: rng.choice([6.25, 18.75, 0.0625 * 100 / 8, 106.0, 250.0]),
        lambda: rng.choice([None, math.nan, 0.0, -3.0, 0.4]),
    ]
    busy = rng.random() < 0.6  # most histories: every value above the baseline (the fast way)
    return [kinds[rng.randrange(3 if busy else 4)]() for _ in range(count)]


def test_a_sparkline_is_the_block_chart_line_on_many_cases() -> None:
    rng = random.Random(27)
    fast = 0
    for _ in range(3000):
        values = _values(rng, rng.randint(0, 40))
        width = rng.randint(1, 36)
        style_name = rng.choice(["cyan", "green", "bold red", ""])
        line = sparkline(values, width, style_name)
        expected = block_chart(values, width, 1, 100.0, style_name)[0]
        assert line.parts == expected.parts, (values, width)
        assert line.cells == expected.cells == width
        fast += bool(values) and all(v is not None and not math.isnan(v) and v >= 6.25 for v in values[-width:])
    assert fast > 500, "the cases must take the one-run way often"


def test_the_kept_levels_are_bounded_and_keep_no_nan(monkeypatch) -> None:
    levels = chart._Levels(100.0, 8)
    monkeypatch.setattr(chart, "_SPARK_LEVELS", levels)
    monkeypatch.setattr(chart, "MOST_LEVELS", 50)
    sparkline([math.nan, None, *(float(v) / 3 for v in range(300))], 400)
    assert len(levels) == 50
    assert not any(isinstance(k, float) and math.isnan(k) for k in levels)
    assert levels[math.nan] == -1 and levels[None] == -1 and levels[50.0] == 4

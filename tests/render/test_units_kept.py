"""fmt_bytes is kept per value (render/units.py): what it gives kept is what it makes, for ints, floats and bools
(only whole numbers are kept: -0.0 equals 0 as a key), and with another precision."""

from __future__ import annotations

import math
import random

from nvtopy.render import units
from nvtopy.render.units import fmt_bytes


def test_a_kept_size_is_the_size_made_fresh():
    made = units._bytes
    rng = random.Random(3)
    values: list[int | float | None] = [None, 0, 1, 1.0, True, False, -0.0, math.inf, 1023, 1024, 2**40 * 1100]
    values += [rng.randint(0, 2**45) for _ in range(500)] + [rng.uniform(-1e12, 1e15) for _ in range(500)]
    for _ in range(2):
        for value in values:
            for precision in (1, 0, 2):
                assert fmt_bytes(value, precision=precision) == made(value, precision), (value, precision)
            assert fmt_bytes(value) == made(value, 1)
    assert units._kept_bytes.cache_info().maxsize == 2048
    assert units._kept_bytes.cache_info().hits > 500, "whole numbers must be kept"

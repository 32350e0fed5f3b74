"""``width_of``: terminal cells of a text, with a bounded memory of the texts past ASCII it has measured."""

from __future__ import annotations

import pytest

from nvtopy.render import units
from nvtopy.render.units import width_of

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("text", "cells"),
    [
        ("", 0),
        ("GPU 0", 5),
        ("37°C", 4),
        ("─" * 200, 200),
        ("process_api/a7fe347e…", 21),
        ("漢字", 4),  # wide: two cells each
        ("ｶﾅ", 2),  # halfwidth katakana: one each
        ("e\u0301", 1),  # a combining mark takes none
        ("\uff21", 2),  # fullwidth A
    ],
)
def test_cells_of_a_text(text, cells):
    assert width_of(text) == cells
    assert width_of(text) == cells, "the same answer the second time (remembered)"


def test_the_memory_of_measured_texts_is_bounded():
    for i in range(3000):
        width_of(f"{i}°")
    info = units._cells.cache_info()
    assert info.maxsize is not None and info.currsize <= info.maxsize <= 4096

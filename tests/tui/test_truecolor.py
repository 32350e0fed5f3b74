"""The app's cheaper ANSI-to-truecolor filter gives Textual's lines, segment for segment (nvtopy/tui/truecolor.py)."""

from __future__ import annotations

import random

from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import MONOKAI
from textual.color import Color
from textual.filter import ANSIToTruecolor, Monochrome

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.truecolor import FastTruecolor, fast_filters

_COLOURS = [None, "red", "bright_black", "cyan", "color(3)", "color(200)", "#56B4E9", "default", "bright_white"]


def _random_style(rng: random.Random) -> Style | None:
    if rng.random() < 0.2:
        return None
    return Style(
        color=rng.choice(_COLOURS),
        bgcolor=rng.choice(_COLOURS),
        bold=rng.choice([None, True, False]),
        dim=rng.choice([None, True, False]),
        reverse=rng.choice([None, True]),
        italic=rng.choice([None, True]),
    )


def test_each_line_is_the_one_textuals_filter_gives():
    rng = random.Random(27)
    original = ANSIToTruecolor(MONOKAI)
    fast = FastTruecolor(original)
    styles = [_random_style(rng) for _ in range(60)]  # repeated across lines: the kept conversions are used
    backgrounds = [Color(0, 0, 0), Color(30, 30, 46), Color(255, 255, 255)]  # (Textual's own fails on an ANSI one)
    for _ in range(500):
        segments = [Segment(rng.choice(["x", "ab", "⣿⡀", " "]), rng.choice(styles)) for _ in range(rng.randint(0, 30))]
        background = rng.choice(backgrounds)
        expected = original.apply(segments, background)
        got = fast.apply(segments, background)
        assert got == expected
        assert all(type(segment) is Segment for segment in got)


def test_only_textuals_truecolor_filter_is_wrapped_and_the_wrapper_is_kept_while_it_lives():
    wrappers: dict[int, FastTruecolor] = {}
    truecolor, other = ANSIToTruecolor(MONOKAI), Monochrome()
    first = fast_filters([truecolor, other], wrappers)
    assert isinstance(first[0], FastTruecolor) and first[0].original is truecolor and first[1] is other
    assert fast_filters([truecolor, other], wrappers)[0] is first[0]  # one object: lines' filtered copies stay cached
    replaced = ANSIToTruecolor(MONOKAI)  # a new theme: Textual makes a new filter
    again = fast_filters([replaced], wrappers)
    assert again[0] is not first[0] and again[0].original is replaced  # type: ignore[attr-defined]
    assert list(wrappers.values()) == [again[0]]  # the old wrapper went with its filter


async def test_the_app_draws_through_the_wrapper(sim):
    app = NvtopyApp.for_backend(sim(gpus=1, seed=1), poll=False)
    async with app.run_test(size=(100, 30)):
        filters = app.screen.get_line_filters()
        assert any(isinstance(f, FastTruecolor) for f in filters)
        assert not any(type(f) is ANSIToTruecolor for f in filters)

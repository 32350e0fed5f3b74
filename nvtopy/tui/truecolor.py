"""Textual's ANSI-to-truecolor line filter, the same output for less work: a dict look-up a segment.

Why: Textual passes every line it draws through ``ANSIToTruecolor`` (the theme's colours for the
terminal's 16), which makes a new segment for every segment of the line through a per-call
``lru_cache`` keyed by (style, background) and ``Segment``'s Python-level constructor. The monitor
changes most of a 200x50 screen every second, with dozens of segments a line (panels, the process
table's cells), and that filter was about a quarter of Textual's compositor on the UI thread.

:class:`FastTruecolor` wraps the app's filter: each (background, style) is converted once by the very
filter it wraps (``truecolor_style``) and kept, and segments are made as plain tuples. The lines
are the ones Textual's filter gives, segment for segment (tests/tui/test_truecolor.py). The app
hands it out from ``get_line_filters`` in place of the filter it wraps, so a new theme (which makes
Textual replace its filter) gets a new wrapper.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import ANSIToTruecolor, LineFilter

__all__ = ["MOST_STYLES", "FastTruecolor", "fast_filters"]

MOST_STYLES = 4096
"""Converted styles kept per background; past that the look-up starts afresh (a bound, never reached in use)."""

_new_tuple = tuple.__new__


class FastTruecolor(LineFilter):
    """``original``'s conversion with each style's result kept per background."""

    def __init__(self, original: ANSIToTruecolor) -> None:
        super().__init__(enabled=original.enabled)
        self.original = original
        self._converted: dict[Color, dict[Style, Style]] = {}

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        converted = self._converted.get(background)
        if converted is None or len(converted) > MOST_STYLES:
            if len(self._converted) > 64:
                self._converted.clear()
            converted = self._converted[background] = {}
        look_up = converted.get
        out: list[Segment] = []
        add = out.append
        for text, style, _ in segments:
            if style is not None:
                new = look_up(style)
                if new is None:
                    new = converted[style] = self.original.truecolor_style(style, background.rich_color)
                style = new
            add(_new_tuple(Segment, (text, style, None)))
        return out


def fast_filters(filters: list[LineFilter], wrappers: dict[int, FastTruecolor]) -> list[LineFilter]:
    """``filters`` with each ``ANSIToTruecolor`` (exactly that class) replaced by its :class:`FastTruecolor`,
    kept in ``wrappers`` by the wrapped filter's id, so that a line's cached filtered copy stays valid
    between frames (Textual keys it by filter object); a wrapper whose filter went is dropped."""
    out: list[LineFilter] = []
    live = set()
    for line_filter in filters:
        if type(line_filter) is ANSIToTruecolor:
            wrapper = wrappers.get(id(line_filter))
            if wrapper is None or wrapper.original is not line_filter:
                wrapper = wrappers[id(line_filter)] = FastTruecolor(line_filter)
            live.add(id(line_filter))
            out.append(wrapper)
        else:
            out.append(line_filter)
    if len(wrappers) > len(live):
        for key in [key for key in wrappers if key not in live]:
            del wrappers[key]
    return out

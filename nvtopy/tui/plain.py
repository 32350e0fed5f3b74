"""The monitor on a terminal without colour (``NO_COLOR``) or without anything (``TERM=dumb``).

``NO_COLOR`` (no-color.org): Textual reads it when the app is made and draws
through its ``Monochrome`` filter, every colour turned into the grey of its
brightness. Alone, that hid states told by colour: magenta and the header's
blue became the same grey (``[simulated]`` vanished into the header), and a
colour that was readable against another hue was not against its grey. So:

- nvtopy's cells take the ``monochrome`` palette (:data:`~nvtopy.render.cells.PALETTES`):
  an alert in reverse video, a warning, an error or a lost GPU's details in bold,
  each with its words ("FAIL", "LOST", "not responding");
- the filter (:class:`ReadableMonochrome`) keeps every text at least
  :data:`MIN_CONTRAST` against the grey behind it: a grey too close to its
  background is moved away from it until it reads (WCAG's ratio for text);
- the process table's cursor out of focus, a grey bar in colour, is underlined too.

Textual's own filter also fails on a segment without a style (what nvtopy's
Line-API widgets draw for plain text); the filter here takes such a segment as plain.

``TERM=dumb`` (:func:`~nvtopy.render.terminal.dumb_terminal`): Textual knows no
colour system there and falls back to 24-bit colour. The monitor writes no
colour at all instead (only the attributes), takes the monochrome palette, and
draws in ASCII (:func:`~nvtopy.render.terminal.ascii_drawing`): the braille
charts, borders, bars and symbols become ``'-._|+#``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.app import App
from textual.color import Color
from textual.filter import LineFilter, Monochrome, NoColor

from ..render.terminal import ascii_drawing, dumb_terminal

__all__ = ["MIN_CONTRAST", "PlainTerminal", "ReadableMonochrome", "contrast", "honour_terminal", "readable_grey"]

MIN_CONTRAST = 4.5
"""The least contrast ratio of a text against its background under NO_COLOR (WCAG 2's minimum for text)."""

_PLAIN = Style()


def _luminance(value: int) -> float:
    """The relative luminance (WCAG 2) of the grey ``value`` (0-255)."""
    c = value / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _grey(luminance: float) -> int:
    """The grey (0-255) of a relative luminance: :func:`_luminance`'s inverse."""
    c = 12.92 * luminance if luminance <= 0.0031308 else 1.055 * luminance ** (1 / 2.4) - 0.055
    return max(0, min(255, round(c * 255)))


def contrast(first: int, second: int) -> float:
    """WCAG 2's contrast ratio of two greys (1 to 21)."""
    a, b = sorted((_luminance(first), _luminance(second)))
    return (b + 0.05) / (a + 0.05)


@lru_cache(maxsize=1024)
def readable_grey(text: int, background: int) -> int:
    """The grey nearest ``text`` that reads on ``background``: ``text`` itself when it does (:data:`MIN_CONTRAST`),
    else the one just far enough from the background, on the side ``text`` is on if there is room there."""
    if contrast(text, background) >= MIN_CONTRAST:
        return text
    behind = _luminance(background) + 0.05
    lighter = MIN_CONTRAST * behind - 0.05
    darker = behind / MIN_CONTRAST - 0.05
    sides = (lighter, darker) if text >= background else (darker, lighter)
    target = next((side for side in sides if 0 <= side <= 1), sides[-1])  # one side always has room (4.5 < 4.58)
    grey = _grey(max(0.0, min(1.0, target)))
    # Rounding to a whole grey may land a hair short: step outwards until it reads.
    step = 1 if target == lighter else -1
    while contrast(grey, background) < MIN_CONTRAST and 0 < grey < 255:
        grey += step
    return grey


@lru_cache(maxsize=4096)
def _readable_style(style: Style, background: Color) -> Style:
    """``style`` greyed (Textual's rule), its text moved off the grey of its background when too close to it."""
    fg, bg = style.color, style.bgcolor
    grey_fg = None if fg is None else Color.from_rich_color(fg).monochrome
    grey_bg = (background if bg is None else Color.from_rich_color(bg)).monochrome
    new_bg = None if bg is None else grey_bg.rich_color
    if grey_fg is not None:
        fixed = readable_grey(grey_fg.r, grey_bg.r)
        grey_fg = Color(fixed, fixed, fixed)
    return style + Style.from_color(None if grey_fg is None else grey_fg.rich_color, new_bg)


class ReadableMonochrome(Monochrome):
    """Textual's monochrome filter that keeps text readable (:func:`readable_grey`) and takes plain segments."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [
            Segment(text, _readable_style(_PLAIN if style is None else style, background), None)
            for text, style, _ in segments
        ]


class PlainTerminal(LineFilter):
    """A dumb terminal: no colour (the attributes stay: bold, reverse, underline), drawing in ASCII."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [
            Segment(ascii_drawing(text), None if style is None else _colourless(style), None)
            for text, style, _ in segments
        ]


@lru_cache(maxsize=1024)
def _colourless(style: Style) -> Style:
    return style.without_color


def honour_terminal(app: App[Any]) -> None:
    """Fit ``app``'s drawing to the terminal: under NO_COLOR (which Textual has read: ``app.no_color``) the
    readable monochrome filter; on a dumb terminal no colour and ASCII, and ``app.no_color`` set (the views
    take the monochrome palette from it)."""
    if dumb_terminal():
        app.no_color = True
        app._filters = [f for f in app._filters if not isinstance(f, (Monochrome, NoColor))]
        app._filters.append(PlainTerminal())
    elif app.no_color:
        app._filters = [ReadableMonochrome() if type(f) is Monochrome else f for f in app._filters]

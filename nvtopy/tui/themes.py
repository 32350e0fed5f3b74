"""The monitor's themes: Textual's own, and a colour-blind-safe one that also recolours nvtopy's cells.

Textual's themes colour Textual's parts (header, footer, dialogs, notifications).
nvtopy's own cells -- OK/WARN/FAIL, bars, temperatures, alerts -- keep their
category colours (:data:`~nvtopy.render.cells.RICH_STYLES`) under every theme
but one: ``colorblind`` is Okabe and Ito's palette for both, blue and orange where
the others have green and red (:data:`~nvtopy.render.cells.PALETTES`).

``NO_COLOR`` (no-color.org): Textual reads it when the app is made and draws
through its ``Monochrome`` filter, which fails on a segment without a style --
what nvtopy's Line-API widgets draw for plain text (padding, separators).
:func:`honour_no_color` puts a filter in its place that treats such a segment
as plain, so ``NO_COLOR=1 nvtopy`` draws in grey instead of crashing.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.app import App
from textual.color import Color
from textual.filter import Monochrome
from textual.theme import Theme

from ..config import COLORBLIND_THEME, DEFAULT_THEME
from ..render.cells import use_palette

__all__ = ["COLORBLIND", "apply_palette", "honour_no_color", "known_theme", "palette_for", "register_themes"]

# Okabe & Ito (2008), "Color Universal Design": blue, sky blue, orange, vermillion, reddish purple.
COLORBLIND = Theme(
    name=COLORBLIND_THEME,
    primary="#0072B2",
    secondary="#56B4E9",
    accent="#E69F00",
    warning="#E69F00",
    error="#D55E00",
    success="#56B4E9",
    foreground="#E6E6E6",
    background="#121212",
    surface="#1E1E1E",
    panel="#26323D",
    dark=True,
)


def register_themes(app: App[object]) -> None:
    """Make ``colorblind`` one of ``app``'s themes (the command palette's "Change theme" lists it)."""
    app.register_theme(COLORBLIND)


def palette_for(theme: str) -> str:
    """The cell palette (:data:`~nvtopy.render.cells.PALETTES`) that goes with Textual theme ``theme``."""
    return "colorblind" if theme == COLORBLIND_THEME else "default"


def apply_palette(theme: str) -> None:
    """Draw nvtopy's cells in the palette of ``theme`` from now on."""
    use_palette(palette_for(theme))


def known_theme(app: App[object], theme: str | None) -> str:
    """``theme`` if ``app`` has it, else the default (a Textual older or newer than the names in config.py)."""
    return theme if theme is not None and theme in app.available_themes else DEFAULT_THEME


_PLAIN = Style()


class _Monochrome(Monochrome):
    """Textual's monochrome filter, for segments with no style too (plain text)."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return super().apply(
            [segment if segment.style is not None else Segment(segment.text, _PLAIN) for segment in segments],
            background,
        )


def honour_no_color(app: App[object]) -> None:
    """Under ``NO_COLOR`` (which Textual has read by now: ``app.no_color``), draw in grey without failing on
    plain segments (see the module's docstring)."""
    if app.no_color:
        app._filters = [_Monochrome() if type(f) is Monochrome else f for f in app._filters]

"""The monitor's themes: Textual's own, and a colour-blind-safe one that also recolours nvtopy's cells.

Textual's themes colour Textual's parts (header, footer, dialogs, notifications).
nvtopy's own cells -- OK/WARN/FAIL, bars, temperatures, alerts -- keep their
category colours (:data:`~nvtopy.render.cells.RICH_STYLES`) under every theme
but one: ``colorblind`` is Okabe and Ito's palette for both, blue and orange where
the others have green and red (:data:`~nvtopy.render.cells.PALETTES`).

Without colour (``NO_COLOR``, ``TERM=dumb``) every theme draws nvtopy's cells in the
``monochrome`` palette: states by attributes and words (:mod:`.plain`).
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.theme import Theme

from ..config import COLORBLIND_THEME, DEFAULT_THEME
from ..render.cells import use_palette

__all__ = ["COLORBLIND", "apply_palette", "known_theme", "palette_for", "register_themes"]

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


def register_themes(app: App[Any]) -> None:
    """Make ``colorblind`` one of ``app``'s themes (the command palette's "Change theme" lists it)."""
    app.register_theme(COLORBLIND)


def palette_for(theme: str, *, monochrome: bool = False) -> str:
    """The cell palette (:data:`~nvtopy.render.cells.PALETTES`) that goes with Textual theme ``theme``;
    ``monochrome`` (no colour on this terminal): the one that says everything without colour, whatever the theme."""
    if monochrome:
        return "monochrome"
    return "colorblind" if theme == COLORBLIND_THEME else "default"


def apply_palette(theme: str, *, monochrome: bool = False) -> None:
    """Draw nvtopy's cells in the palette of ``theme`` (``monochrome``: without colour) from now on."""
    use_palette(palette_for(theme, monochrome=monochrome))


def known_theme(app: App[Any], theme: str | None) -> str:
    """``theme`` if ``app`` has it, else the default (a Textual older or newer than the names in config.py)."""
    return theme if theme is not None and theme in app.available_themes else DEFAULT_THEME

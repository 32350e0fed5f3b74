"""Sending a Line-API widget's changed lines to Textual: one ``refresh`` call a redraw, not one a line.

Why: each ``Widget.refresh`` call clears the widget's layout, dimension and style caches and
checks for idle again, whatever the region; a chart area whose plot scrolls changed a dozen
lines a second, a call each. :func:`changed_lines` compares the lines drawn last with the new
ones, and :func:`refresh_lines` marks them dirty in a single call (a region per line, so the
compositor still redraws only those lines).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from textual.geometry import Region
from textual.widget import Widget

__all__ = ["changed_lines", "refresh_lines"]


def changed_lines(old: Sequence[object], new: Sequence[object]) -> list[int]:
    """The line numbers of ``new`` that differ from ``old`` (or that ``old`` did not have).

    Compared by identity first: a line kept from the last redraw (a cached panel or chart) is not
    compared segment by segment.
    """
    kept = len(old)
    return [y for y, line in enumerate(new) if y >= kept or (old[y] is not line and old[y] != line)]


def refresh_lines(widget: Widget, lines: Iterable[int], width: int) -> None:
    """Mark ``lines`` of ``widget`` (``width`` cells wide) dirty, in one ``refresh`` call; nothing when none."""
    regions = [Region(0, y, width, 1) for y in lines]
    if regions:
        widget.refresh(*regions)

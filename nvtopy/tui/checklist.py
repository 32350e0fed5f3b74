"""A selection list whose rows say in their text whether they are ticked: ``[x]`` or ``[ ]``.

Why: Textual's :class:`~textual.widgets.SelectionList` draws the same ``X`` on
every row and tells ticked from unticked by colour only, so without colour
(``NO_COLOR``, a monochrome terminal, a screenshot in grey) every column of the
column chooser and every GPU of the picker read as chosen. Here the mark is a
character, and the colour stays as a second cue.
"""

from __future__ import annotations

from typing import TypeVar

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets.option_list import OptionDoesNotExist

__all__ = ["TICKED", "UNTICKED", "CheckList"]

TICKED = "[x]"
UNTICKED = "[ ]"

Value = TypeVar("Value")


class CheckList(SelectionList[Value]):
    """:class:`SelectionList` drawing ``[x]`` on a ticked row and ``[ ]`` on the others."""

    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        _, scroll_y = self.scroll_offset
        try:
            selection = self.get_option_at_index(scroll_y + y)
        except OptionDoesNotExist:
            return line
        segments = list(line)
        if len(segments) < 3:
            return line
        # Textual's button is three one-cell segments (left edge, mark, right edge); the mark's style carries the
        # option's index (clicks) and the ticked/highlighted colours.
        mark = TICKED if selection.value in self._selected else UNTICKED
        return Strip([Segment(mark, segments[1].style), *segments[3:]], line.cell_length)

"""The column chooser: which process-table columns to show, and in which order.

Every column is listed, the shown ones first in their order, then the hidden
ones in their default order. ``space`` shows or hides the highlighted column,
``shift+up`` / ``shift+down`` (or ``[`` / ``]``) move it, ``d`` brings back the
defaults, ``enter`` applies and ``esc`` or ``q`` cancels. A ticked row reads
``[x]``, an unticked one ``[ ]`` (:class:`~.checklist.CheckList`), with or without colour. HOST, MIG and FLAGS appear in
the table only while there is something to show (GPUs of other hosts, a GPU with
MIG instances, a flagged process) even when chosen; COMMAND takes the width that is left.

The screen returns the chosen columns (or None when cancelled); the app applies
them and remembers them in the config file (:func:`nvtopy.config.save_columns`); the defaults
remove the file's ``columns`` entry instead (:func:`~.preferences.chosen_columns`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static
from textual.widgets.selection_list import Selection

from ..columns import COLUMN_IDS, TABLE_COLUMNS
from .checklist import CheckList

__all__ = ["ColumnsScreen"]

_BY_KEY = {c.key: c for c in TABLE_COLUMNS}  # titles and descriptions: nvtopy.columns


class ColumnsScreen(ModalScreen["tuple[str, ...] | None"]):
    """Show, hide and reorder the process table's columns; returns the shown ones in order (None: cancelled)."""

    # Compact (no padding above or below, one-line buttons): it fits a 80x24 terminal whole.
    DEFAULT_CSS = """
    ColumnsScreen { align: center middle; background: $background 60%; }
    ColumnsScreen > Vertical {
        width: auto;
        min-width: 64;
        max-width: 90%;
        height: auto;
        max-height: 100%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    ColumnsScreen SelectionList { height: auto; max-height: 15; width: auto; min-width: 60; }
    ColumnsScreen #columns-hint { color: $text-muted; }
    ColumnsScreen .buttons { height: 1; width: 100%; align-horizontal: right; }
    ColumnsScreen Button { margin-left: 2; }
    """

    BINDINGS = [
        Binding("enter", "apply", "Apply", show=False, priority=True),
        Binding("escape,q", "cancel", "Cancel", show=False),
        Binding("shift+up,left_square_bracket", "move(-1)", "Move up", show=False),
        Binding("shift+down,right_square_bracket", "move(1)", "Move down", show=False),
        Binding("d", "defaults", "Defaults", show=False),
    ]

    def __init__(self, shown: Sequence[str] | None) -> None:
        """``shown``: the columns the table shows now, in order (None: the defaults)."""
        super().__init__()
        chosen = [key for key in (COLUMN_IDS if shown is None else shown) if key in _BY_KEY]
        self.order: list[str] = [*chosen, *(key for key in COLUMN_IDS if key not in chosen)]
        self.initially: set[str] = set(chosen)

    def _selections(self, checked: set[str]) -> list[Selection[str]]:
        return [
            Selection(Content(f"{_BY_KEY[key].title:<9} {_BY_KEY[key].description}"), key, key in checked)
            for key in self.order
        ]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("Process table columns", style="bold"))
            yield CheckList[str](*self._selections(self.initially), id="columns")
            yield Static(Text("space shows/hides · shift+↑↓ or [ ] move · d defaults"), id="columns-hint")
            with Horizontal(classes="buttons"):
                yield Button("Apply (enter)", variant="primary", id="apply", compact=True)
                yield Button("Cancel (esc, q)", id="cancel", compact=True)

    def on_mount(self) -> None:
        chooser = self._chooser()
        chooser.highlighted = 0
        chooser.focus()

    def _chooser(self) -> CheckList[str]:
        return self.query_one("#columns", CheckList)

    @property
    def chosen(self) -> tuple[str, ...]:
        """The columns ticked, in the listed order."""
        checked = set(self._chooser().selected)
        return tuple(key for key in self.order if key in checked)

    def _relist(self, checked: set[str], highlighted: int) -> None:
        chooser = self._chooser()
        chooser.clear_options()
        chooser.add_options(self._selections(checked))
        chooser.highlighted = highlighted

    def action_move(self, step: int) -> None:
        """Move the highlighted column up (-1) or down (1) the list."""
        chooser = self._chooser()
        index = chooser.highlighted
        if index is None:
            return
        target = index + step
        if not 0 <= target < len(self.order):
            return
        checked = set(chooser.selected)
        self.order[index], self.order[target] = self.order[target], self.order[index]
        self._relist(checked, target)

    def action_defaults(self) -> None:
        self.order = list(COLUMN_IDS)
        self._relist(set(COLUMN_IDS), 0)

    def action_apply(self) -> None:
        chosen = self.chosen
        if not chosen:
            self.notify("choose at least one column", severity="warning", timeout=3)
            return
        self.dismiss(chosen)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "apply":
            self.action_apply()
        else:
            self.action_cancel()

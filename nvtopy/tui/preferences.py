"""The config file in the monitor: its starting view from :class:`~nvtopy.config.Config`, columns remembered.

:func:`configure` runs before ``app.run()`` (the CLI's merge of file and flags
is done by then): the sort, group-by, columns and the history charts' window go
into the app's :class:`~nvtopy.tui.view_state.ViewState` (:func:`configured_view`),
the theme is set, and where the column chooser writes its choice is recorded.
The app is a :class:`Configurable` (a Protocol: ``nvtopy.tui.app`` imports this
module). :func:`remember_columns` is what the chooser's *Apply* writes: only the
``columns`` entry of the file changes (the defaults remove it:
:func:`chosen_columns`); a file that cannot be written (a read-only home) is said
in one notification, and the choice still applies until nvtopy quits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from ..columns import COLUMN_IDS
from ..config import Config, ConfigWriteError, config_path, parse_sort, save_columns
from ..render.processes import COLUMNS, FLAGS_COLUMN, HOST_COLUMN, MIG_COLUMN, SortOrder
from .view_state import ViewState

__all__ = [
    "CHART_WINDOW_SECONDS",
    "Configurable",
    "chosen_columns",
    "configure",
    "configured_view",
    "remember_columns",
    "sort_order",
]

# The config's chart windows in seconds (the history charts' windows, nvtopy.sources.timeline.WINDOWS).
CHART_WINDOW_SECONDS = {"1m": 60.0, "10m": 600.0, "1h": 3600.0, "24h": 86400.0}

_DESCENDING_FIRST = {c.key: c.descending_first for c in (*COLUMNS, HOST_COLUMN, MIG_COLUMN, FLAGS_COLUMN)}


def sort_order(text: str) -> SortOrder:
    """The config's ``sort`` (``"gpu_memory"``, ``"pid desc"``) as the table's order; a column alone sorts its own
    way (numbers biggest first)."""
    column, descending = parse_sort(text)
    return SortOrder(column, _DESCENDING_FIRST[column] if descending is None else descending)


class Configurable(Protocol):
    """What :func:`configure` sets on the monitor (:class:`~nvtopy.tui.app.NvtopyApp`)."""

    config_path: Path | None

    @property
    def view(self) -> ViewState: ...

    def change_view(self, view: ViewState) -> None: ...

    def use_theme(self, name: str | None) -> None: ...


def configured_view(view: ViewState, config: Config) -> ViewState:
    """``view`` as ``config`` starts it: sort, group-by, columns, the charts' window (if it names one)."""
    view = replace(
        view, order=sort_order(config.sort), group_by=config.group_mode, columns=chosen_columns(config.columns)
    )
    if config.chart_window is not None:
        view = replace(view, chart_window=CHART_WINDOW_SECONDS[config.chart_window])
    return view


def configure(app: Configurable, config: Config, path: str | os.PathLike[str] | None = None) -> None:
    """Start ``app`` (not yet running) as ``config`` says; the column chooser remembers its choice in ``path``."""
    app.change_view(configured_view(app.view, config))
    app.use_theme(config.theme)
    if path is not None:
        app.config_path = Path(path)


def chosen_columns(columns: Sequence[str]) -> tuple[str, ...] | None:
    """What the column chooser applied, as the app keeps it: None when it is the defaults (every column in its
    default place), as :func:`configure` reads a config file without ``columns``."""
    return None if tuple(columns) == COLUMN_IDS else tuple(columns)


def remember_columns(columns: Sequence[str] | None, path: Path | None) -> tuple[str, bool]:
    """Write ``columns`` into the config file (``path``, default the XDG one), or remove the entry for the
    defaults (None): a message for the user, and whether it worked."""
    target = path if path is not None else config_path()
    if target is None:
        return "columns applied (not remembered: no home directory for a config file)", False
    try:
        save_columns(target, columns)
    except ConfigWriteError as exc:
        return f"columns applied, not remembered: {exc}", False
    if columns is None:
        return f"default columns: removed 'columns' from {target}", True
    return f"columns remembered in {target}", True

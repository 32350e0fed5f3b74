"""The config file in the monitor: its starting state from :class:`~nvtopy.config.Config`, columns remembered.

:func:`configure` runs before ``app.run()`` (the CLI's merge of file and flags
is done by then): sort, group-by, columns, theme, the history charts' window
(:func:`apply_chart_window`, once the charts exist) and where the column chooser
writes its choice. :func:`remember_columns` is what the chooser's
*Apply* writes: only the ``columns`` entry of the file changes (the defaults
remove it: :func:`chosen_columns`); a file that
cannot be written (a read-only home) is said in one notification, and the
choice still applies until nvtopy quits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import COLUMN_IDS, Config, ConfigWriteError, config_path, parse_sort, save_columns
from ..render.processes import COLUMNS, FLAGS_COLUMN, HOST_COLUMN, MIG_COLUMN, SortOrder
from .themes import known_theme

__all__ = [
    "CHART_WINDOW_SECONDS",
    "apply_chart_window",
    "chosen_columns",
    "configure",
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


def configure(app: Any, config: Config, path: str | os.PathLike[str] | None = None) -> None:
    """Start ``app`` (an :class:`~nvtopy.tui.app.NvtopyApp`, not yet running) as ``config`` says; the column
    chooser remembers its choice in ``path``."""
    app.order = sort_order(config.sort)
    app.group_by = config.group_mode
    app.columns = chosen_columns(config.columns)
    app.theme = known_theme(app, config.theme)
    if path is not None:
        app.config_path = Path(path)
    if config.chart_window is not None:
        app.chart_window = CHART_WINDOW_SECONDS[config.chart_window]  # the charts take it when mounted


def apply_chart_window(app: Any) -> None:
    """On mount: the history charts (``#charts``) start with the config's window, if it named one."""
    seconds = getattr(app, "chart_window", None)
    if seconds is None:
        return
    for view in app.query("#charts"):
        if hasattr(view, "window"):
            view.window = seconds


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

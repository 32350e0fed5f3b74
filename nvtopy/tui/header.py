"""The monitor's header, host line and key footer: each one line that shortens by priority.

Why here and not in app.py: what the header says is the monitor's state (the source,
filters, modes, the clock), and the footer the keys; the app only tells them to
redraw. The layout itself is :func:`nvtopy.render.header.fit` (pure, tested without
Textual): at 80 columns the least important parts go whole; the clock and the GPU
count stay, and the footer never stops mid-word.

Modes are said here, where they stay visible, not in a notification over the
process table: grouping, tree, view, the charts' mode and window, filters (``f``
included), the refresh interval or the replay's speed. Notifications are for events
(a signal sent, an error, a file written).
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import Static

from ..model import Severity, Snapshot
from ..render.cells import ALERT, RICH_STYLES, WARN
from ..render.header import Part, Piece, choose, fit, host_usage_parts
from ..render.health import health_counts
from ..render.processes import GROUP_TITLES
from ..render.units import NA
from ..textsafe import safe_text
from .charts import CHART_MODES, DEFAULT_WINDOW, ChartView, window_label

# The app is typed ``Any`` here: nvtopy.tui.app imports this module (no import cycle, even for types).
__all__ = ["FOOTER_KEEP", "HeaderBar", "HostBar", "KeyFooter", "footer_parts", "header_text"]

# The footer's keys that stay at any width (the rest go from the end of the bindings' list).
FOOTER_KEEP = frozenset({"quit", "help"})
CHART_WORDS = {"metric": "per metric", "gpu": "per GPU", "off": "off"}


class HeaderBar(Static):
    """Host, source state, modes and filters, GPU count, driver, clock: one line (:func:`header_text`)."""

    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $primary-background; color: $text; }
    """


class HostBar(Static):
    """The host's CPU, load, memory and swap: one line under the GPUs, where a blank line was (as nvitop has it)."""

    DEFAULT_CSS = """
    HostBar { height: 1; }
    """

    def show(self, snapshot: Snapshot, width: int) -> None:
        """Draw the host line of ``snapshot`` (N/A with why where its source has no such figures)."""
        text = Text.assemble(*host_usage_parts(snapshot.host_usage, width))
        if text != getattr(self, "_shown", None):
            self._shown = text
            self.update(text, layout=False)  # one line, always


def _part(text: str, style: str = "", rank: int = 0) -> Part:
    return Part(((text, style),), rank)


def _charts_part(charts: ChartView) -> Part | None:
    """``charts per GPU · 10 min`` once the user changed them from the defaults (``c``, ``z``)."""
    if charts.mode == CHART_MODES[0] and charts.window == DEFAULT_WINDOW:
        return None
    words = f"charts {CHART_WORDS[charts.mode]}"
    if charts.mode != "off":
        words += f" · {window_label(charts.window)}" + (" (no room)" if charts.no_room() else "")
    return _part(words, "cyan", rank=3)


def _health_part(app: Any) -> Part | None:
    """``1 FAIL · 2 WARN (H)`` when some shown GPU is not OK."""
    counts = health_counts(app.visible_gpus())
    fail, warn = counts[Severity.FAIL], counts[Severity.WARN]
    if not fail and not warn:
        return None
    pieces: list[Piece] = []
    if fail:
        pieces.append((f"{fail} FAIL", RICH_STYLES[ALERT]))  # the theme's palette (colorblind: no red)
        if warn:
            pieces.append((" · ", ""))
    if warn:
        pieces.append((f"{warn} WARN", f"bold {RICH_STYLES[WARN]}"))
    pieces.append((" (H)", "dim"))
    return Part(tuple(pieces), rank=1)


def header_text(app: Any, snapshot: Snapshot, counts: tuple[int, int, int], width: int) -> Text:
    """The header line: what is kept at any width (host, GPU count, clock) and the rest by rank.

    ``counts``: GPUs shown, process rows shown, all process rows. Ranks: 1 what changes what the
    user sees (pause, health, filters), 2 the table's modes,
    3 view modes, 4 the refresh interval, 5 backend and driver versions.
    """
    shown_gpus, shown_rows, all_rows = counts
    host = snapshot.host
    source = app.source
    parts: list[Part | None] = [
        # Host, backend, status and driver strings come from outside (driver, recording, peers): safe_text.
        _part(safe_text(host.hostname), "bold"),
        _part(f"[{safe_text(host.backend)}]", "magenta", rank=5) if host.backend != "nvml" else None,
    ]
    status = source.status_line()
    if status is not None:  # a replay or remote hosts describe themselves (the replay's speed too)
        parts.append(_part(safe_text(status), "bold magenta", rank=1))
    elif source.paused:
        parts.append(_part("⏸ PAUSED", "bold yellow", rank=1))
    else:
        parts.append(_part(f"⟳ {source.interval:g}s", rank=4))
    parts.append(_health_part(app))
    labels = app.row_filter.describe()
    if labels:
        pieces = (("filter: ", "bold yellow"), (" ".join(labels), "yellow"), (f" ({shown_rows}/{all_rows})", "yellow"))
        parts.append(Part(pieces, rank=1))
    if app.tree_view:
        parts.append(_part("tree", "bold cyan", rank=2))
    if app.group_by is not None:
        parts.append(_part(f"grouped by {GROUP_TITLES[app.group_by]}", "bold cyan", rank=2))
    if app.tags.keys:
        parts.append(_part(f"{len(app.tags.keys)} tagged", "yellow", rank=2))
    if app.readonly:
        parts.append(_part("read-only", "cyan", rank=3))
    if app.layout_mode != "auto":
        parts.append(_part(f"view {app.layout_mode}", rank=3))
    charts = app.query(ChartView)
    if charts:
        parts.append(_charts_part(charts.first()))
    parts.append(_part(f"GPUs {shown_gpus}/{len(snapshot.gpus)}"))
    driver = f"driver {host.driver_version or NA} · CUDA {host.cuda_driver_version or NA}"
    parts.append(_part(safe_text(driver), rank=5))
    clock = _part(time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp)))
    lead = ((" nvtopy ", "bold reverse"), (" ", ""))
    return Text.assemble(*fit([p for p in parts if p is not None], width, lead=lead, right=clock))


def footer_parts(app: Any, width: int) -> tuple[list[Piece], list[tuple[int, int, str]]]:
    """The shown bindings as ``key Description`` items, and each one's (start, end, action) for clicks.

    In the bindings' order; the keys in :data:`FOOTER_KEEP` stay, the others go whole from the end.
    """
    items: list[tuple[Part, str]] = []
    for order, binding in enumerate(b for b in app.BINDINGS if isinstance(b, Binding) and b.show):
        key = app.get_key_display(Binding(binding.key.split(",")[0], ""))
        action = binding.action.split("(")[0]
        rank = 0 if action in FOOTER_KEEP else order + 1
        part = Part(((f" {key} ", "bold reverse"), (f" {binding.description}", "")), rank)
        items.append((part, binding.action))
    shown = {id(p) for p in choose([p for p, _ in items], width, separator=("  ", ""))}
    pieces: list[Piece] = []
    spans: list[tuple[int, int, str]] = []
    at = 0
    for part, action in items:
        if id(part) not in shown:
            continue
        if pieces:
            pieces.append(("  ", ""))
            at += 2
        pieces.extend(part.pieces)
        spans.append((at, at + part.cells, action))
        at += part.cells
    return pieces, spans


class KeyFooter(Static):
    """The main screen's keys in one line that drops whole keys (least important first), never a word.

    Replaces Textual's ``Footer``, which cut its last key mid-word at 80 columns. A click on a key runs it.
    """

    DEFAULT_CSS = """
    KeyFooter { height: 1; dock: bottom; background: $footer-background; color: $footer-foreground; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._spans: list[tuple[int, int, str]] = []
        self._width = -1

    def on_resize(self, event: events.Resize) -> None:
        self.redraw()

    def on_mount(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        width = self.size.width or self.app.size.width
        if width == self._width:
            return
        self._width = width
        pieces, self._spans = footer_parts(self.app, width)
        self.update(Text.assemble(*pieces), layout=False)

    async def on_click(self, event: events.Click) -> None:
        for start, end, action in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action)
                return

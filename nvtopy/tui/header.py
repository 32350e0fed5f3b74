"""The monitor's header, host line and key footer: each one line that shortens by priority.

Why here and not in app.py: what the header says is the monitor's state (the source,
filters, modes, the clock), and the footer the keys; the app only tells them to
redraw. The layout itself is :func:`nvtopy.render.header.fit` (pure, tested without
Textual): at 80 columns the least important parts go whole; the clock and the GPU
count stay, and the footer never stops mid-word.

The app is read through :class:`Monitor` and :class:`KeyHolder` (Protocols:
``nvtopy.tui.app`` imports this module, so it cannot be imported back, even for
types). What the header says while the driver keeps the monitor waiting
(:func:`waiting_text`, :func:`with_stall_notice`) is drawn here too; the app
only measures how long.

Modes are said here, where they stay visible, not in a notification over the
process table: grouping, tree, view, the charts' mode and window, filters (``f``
included), the refresh interval or the replay's speed. Notifications are for events
(a signal sent, an error, a file written).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar, Protocol

from rich.cells import cell_len
from rich.control import strip_control_codes
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import RenderResult
from textual.binding import Binding, BindingType
from textual.strip import Strip
from textual.widgets import Static

from ..alerts.catalog import AlertSeverity
from ..alerts.events import AlertEvent
from ..model import GpuState, Severity, Snapshot
from ..render.cells import RICH_STYLES, SEVERITY_CATEGORY
from ..render.header import Part, Piece, choose, fit, host_usage_parts
from ..render.health import health_counts
from ..render.processes import GROUP_TITLES, Tags
from ..render.units import NA
from ..sources.base import SnapshotSource
from ..textsafe import safe_text
from .charts import CHART_MODES, DEFAULT_WINDOW, window_label
from .view_state import ViewState

__all__ = [
    "FOOTER_KEEP",
    "STARTING",
    "HeaderBar",
    "HostBar",
    "KeyFooter",
    "KeyHolder",
    "Monitor",
    "TextLine",
    "footer_parts",
    "header_pieces",
    "header_text",
    "waiting_text",
    "with_stall_notice",
]

# The footer's keys that stay at any width (the rest go from the end of the bindings' list).
FOOTER_KEEP = frozenset({"quit", "help"})
CHART_WORDS = {"metric": "per metric", "gpu": "per GPU", "off": "off"}
STARTING = Text(" nvtopy  starting...", style="bold")
"""The header before anything else is known."""


class Monitor(Protocol):
    """What the header reads of the monitor (:class:`~nvtopy.tui.app.NvtopyApp`)."""

    @property
    def view(self) -> ViewState: ...

    @property
    def source(self) -> SnapshotSource: ...

    @property
    def tags(self) -> Tags: ...

    @property
    def readonly(self) -> bool: ...

    def visible_gpus(self) -> tuple[GpuState, ...]: ...

    def firing_alerts(self) -> tuple[AlertEvent, ...]: ...


class KeyHolder(Protocol):
    """What the footer reads of the app: its bindings and how Textual writes a key."""

    BINDINGS: ClassVar[list[BindingType]]

    def get_key_display(self, binding: Binding) -> str: ...


class TextLine(Static):
    """A one-line Static whose text changes every second (the clock, the host's CPU), drawn cheaply.

    Why not ``Static.update``: each update turns the rich ``Text`` into Textual's ``Content`` and
    renders that again (about half a millisecond a line, twice a second for the header and the
    host line). Here :meth:`show_text` keeps the text's pieces (one a span, and the plain runs
    between them, as the Static splits them) and :meth:`render_line` makes them segments over the
    widget's own colours; an unchanged text draws nothing. A text this does not cover (a style of
    its own, overlapping spans, two touching spans of one style) goes the Static's way, as does
    what the Static was created with.
    """

    _shown: Text | None = None
    _given: tuple[Piece, ...] | None = None  # the pieces last given to show_pieces (None: a Text was given)
    _pieces: list[tuple[str, Style | None]] | None = None
    _strip: Strip | None = None
    _strip_key: object = None

    def show_text(self, text: Text) -> None:
        """Draw ``text`` (one line) unless it is what is drawn already (rich Text compares text and spans)."""
        if text == self._shown:
            return
        self._shown = text
        self._given = None
        self._strip = None
        self._pieces = _pieces(text)
        if self._pieces is None:
            self.update(text, layout=False)  # one line, always: no layout pass
        else:
            self.refresh()

    def show_pieces(self, pieces: Sequence[Piece]) -> None:
        """Draw ``Text.assemble(*pieces)`` without making it: the same runs straight from the (text, style)
        pieces (:func:`_runs`); nothing when they are the pieces drawn already. The header and the host line
        change every second (the clock, the host's CPU), and a rich ``Text`` of their twenty-odd pieces cost
        about as much again as laying them out."""
        given = tuple(pieces)
        if given == self._given:
            return
        runs = _runs(given)
        if runs is None:  # what the Static draws (two touching pieces of one style): as a Text
            self.show_text(Text.assemble(*given))
            self._given = given
            return
        self._given, self._shown = given, None
        self._strip = None
        self._pieces = runs
        self.refresh()

    def render(self) -> RenderResult:
        """What is shown: the text last given to :meth:`show_text` or :meth:`show_pieces` (drawn by
        :meth:`render_line`), else the Static's."""
        if self._pieces is not None:
            if self._shown is None and self._given is not None:
                self._shown = Text.assemble(*self._given)
            if self._shown is not None:
                return self._shown
        return super().render()

    def render_line(self, y: int) -> Strip:
        pieces = self._pieces
        if pieces is None:
            return super().render_line(y)
        if y:
            return Strip([])
        width = self.size.width
        base = self.visual_style.rich_style
        key = (width, base)
        if self._strip is None or self._strip_key != key:
            if sum(cell_len(text) for text, _ in pieces) >= width:  # a full line: wrapping drops its end's blanks
                pieces = _without_trailing_blanks(pieces)
            segments = [Segment(text, base if piece is None else base + piece) for text, piece in pieces]
            self._strip = Strip(segments).crop(0, width)  # Textual pads it with the background, as the Static's
            self._strip_key = key
        return self._strip


def _pieces(text: Text) -> list[tuple[str, Style | None]] | None:
    """``text`` as (text, style) runs split where the Static splits it: at each span's ends, plain runs between;
    None when it has a style of its own or overlapping spans (the Static draws those)."""
    if text.style:
        return None
    plain = text.plain
    pieces: list[tuple[str, Style | None]] = []
    at = 0
    for span in sorted(text.spans, key=lambda span: span.start):
        if span.start < at:
            return None
        if span.start > at:
            pieces.append((plain[at : span.start], None))
        if span.end > span.start:
            span_style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
            if pieces and span.start == at and pieces[-1][1] == span_style:
                return None  # two touching spans of one style: the Static keeps them apart, not reproduced here
            pieces.append((plain[span.start : span.end], span_style))
        at = max(at, span.end)
    if at < len(plain):
        pieces.append((plain[at:], None))
    return pieces


def _runs(pieces: Sequence[Piece]) -> list[tuple[str, Style | None]] | None:
    """:func:`_pieces` of ``Text.assemble(*pieces)``, without the Text: an empty piece adds nothing, control codes
    go as ``Text.append`` drops them, unstyled pieces in a row are one plain run, each styled piece a run of its
    parsed style; None where two styled pieces of one style touch (the Static draws those)."""
    runs: list[tuple[str, Style | None]] = []
    plain: list[str] = []
    for text, style_name in pieces:
        if not text:
            continue
        text = strip_control_codes(text)
        if not style_name:
            plain.append(text)
            continue
        if plain and "".join(plain):  # a span ends the plain run before it (even an empty span: see below)
            runs.append(("".join(plain), None))
        plain = []
        if not text:  # control codes only: an empty span, drawn as nothing, yet it parts the plain runs around it
            continue
        piece_style = Style.parse(style_name)
        if runs and runs[-1][1] == piece_style:
            return None
        runs.append((text, piece_style))
    if "".join(plain):
        runs.append(("".join(plain), None))
    return runs


def _without_trailing_blanks(pieces: list[tuple[str, Style | None]]) -> list[tuple[str, Style | None]]:
    kept = list(pieces)
    while kept:
        text, piece_style = kept[-1]
        stripped = text.rstrip()
        if stripped:
            kept[-1] = (stripped, piece_style)
            break
        kept.pop()
    return kept


class HeaderBar(TextLine):
    """Host, source state, modes and filters, GPU count, driver, clock: one line (:func:`header_text`)."""

    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $primary-background; color: $text; }
    """

    def show(self, text: Text) -> None:
        """Draw ``text`` unless it is what is drawn already."""
        self.show_text(text)

    def restyle(self) -> None:
        """Draw again with the widget's colours now (a new theme)."""
        self._strip = None
        self.refresh()


def waiting_text(waiting: str) -> Text:
    """The header before the first snapshot while the driver keeps the monitor ``waiting`` ("waiting for ...")."""
    return Text.assemble((" nvtopy ", "bold reverse"), (f"  {waiting}", "bold yellow"))


def with_stall_notice(text: Text, waiting_for: str, seconds: float, width: int) -> Text:
    """``text`` led by how long the driver has kept the poll (or every shown GPU) waiting, cut to ``width``."""
    notice = Text(f" waiting for {waiting_for}: {int(seconds)} s ", style="bold black on yellow")
    text = Text.assemble(notice, text)
    text.truncate(max(1, width), overflow="ellipsis")
    return text


class HostBar(TextLine):
    """The host's CPU, load, memory and swap: one line under the GPUs, where a blank line was (as nvitop has it)."""

    DEFAULT_CSS = """
    HostBar { height: 1; }
    """

    def show(self, snapshot: Snapshot, width: int) -> None:
        """Draw the host line of ``snapshot`` (N/A with why where its source has no such figures)."""
        self.show_pieces(host_usage_parts(snapshot.host_usage, width))


def _part(text: str, style: str = "", rank: int = 0) -> Part:
    return Part(((text, style),), rank)


def _charts_part(view: ViewState, no_room: bool) -> Part | None:
    """``charts per GPU · 10 min`` once the user changed them from the defaults (``c``, ``z``)."""
    if view.chart_mode == CHART_MODES[0] and view.chart_window == DEFAULT_WINDOW:
        return None
    words = f"charts {CHART_WORDS[view.chart_mode]}"
    if view.chart_mode != "off":
        words += f" · {window_label(view.chart_window)}" + (" (no room)" if no_room else "")
    return _part(words, "cyan", rank=3)


def _health_part(app: Monitor) -> Part | None:
    """``1 FAIL · 2 WARN (H)`` when some shown GPU is not OK."""
    counts = health_counts(app.visible_gpus())
    fail, warn = counts[Severity.FAIL], counts[Severity.WARN]
    if not fail and not warn:
        return None
    pieces: list[Piece] = []
    if fail:
        # The theme's palette, read now (colorblind: no red).
        pieces.append((f"{fail} FAIL", RICH_STYLES[SEVERITY_CATEGORY[Severity.FAIL]]))
        if warn:
            pieces.append((" · ", ""))
    if warn:
        pieces.append((f"{warn} WARN", f"bold {RICH_STYLES[SEVERITY_CATEGORY[Severity.WARN]]}"))
    pieces.append((" (H)", "dim"))
    return Part(tuple(pieces), rank=1)


def _alerts_part(app: Monitor) -> Part | None:
    """``2 alerts (a)`` while alerts fire (the alerts screen's key), in red when one is critical."""
    firing = app.firing_alerts()
    if not firing:
        return None
    critical = any(e.severity is AlertSeverity.CRITICAL for e in firing)
    style = RICH_STYLES[SEVERITY_CATEGORY[Severity.FAIL if critical else Severity.WARN]]
    words = f"{len(firing)} alert{'s' if len(firing) != 1 else ''}"
    return Part(((words, style if critical else f"bold {style}"), (" (a)", "dim")), rank=1)


def header_text(
    app: Monitor, snapshot: Snapshot, counts: tuple[int, int, int], width: int, *, no_chart_room: bool = False
) -> Text:
    """:func:`header_pieces` as a rich ``Text``."""
    return Text.assemble(*header_pieces(app, snapshot, counts, width, no_chart_room=no_chart_room))


def header_pieces(
    app: Monitor, snapshot: Snapshot, counts: tuple[int, int, int], width: int, *, no_chart_room: bool = False
) -> list[Piece]:
    """The header line: what is kept at any width (host, GPU count, clock) and the rest by rank.

    ``counts``: GPUs shown, process rows shown, all process rows; ``no_chart_room``: the charts are on but
    have no rows here (:meth:`~nvtopy.tui.charts.ChartView.no_room`). Ranks: 1 what changes what the
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
    parts.append(_alerts_part(app))
    view = app.view
    labels = view.row_filter.describe()
    if labels:
        pieces = (("filter: ", "bold yellow"), (" ".join(labels), "yellow"), (f" ({shown_rows}/{all_rows})", "yellow"))
        parts.append(Part(pieces, rank=1))
    if view.tree_view:
        parts.append(_part("tree", "bold cyan", rank=2))
    if view.group_by is not None:
        parts.append(_part(f"grouped by {GROUP_TITLES[view.group_by]}", "bold cyan", rank=2))
    if app.tags.keys:
        parts.append(_part(f"{len(app.tags.keys)} tagged", "yellow", rank=2))
    if app.readonly:
        parts.append(_part("read-only", "cyan", rank=3))
    if view.layout_mode != "auto":
        parts.append(_part(f"view {view.layout_mode}", rank=3))
    parts.append(_charts_part(view, no_chart_room))
    gpus = sum(not gpu.stands_for_host for gpu in snapshot.gpus)  # a fleet's lines for hosts are no GPUs
    parts.append(_part(f"GPUs {shown_gpus}/{gpus}"))
    driver = f"driver {host.driver_version or NA} · CUDA {host.cuda_driver_version or NA}"
    parts.append(_part(safe_text(driver), rank=5))
    clock = _part(time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp)))
    lead = ((" nvtopy ", "bold reverse"), (" ", ""))
    return fit([p for p in parts if p is not None], width, lead=lead, right=clock)


def footer_parts(app: KeyHolder, width: int) -> tuple[list[Piece], list[tuple[int, int, str]]]:
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

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
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

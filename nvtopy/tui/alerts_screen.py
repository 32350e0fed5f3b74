"""The alerts screen: what fires now, and the transitions that fired and cleared, newest first.

Why a screen: a toast says an alert happened and goes; this keeps it. Each firing alert
shows its severity, title, subject (host, GPU, process, Xid), since when, its value, its
summary and what to do; under them, the history of transitions (:data:`~.alert_feed.HISTORY`
at most), each with its time.

Drawn from what the app's :class:`~.alert_feed.AlertFeed` holds already: opening, scrolling
and closing never wait on the source. The app hands it the feed after each snapshot
(:meth:`AlertsScreen.show`); the text is replaced only when it changed. Outside text in the
alerts' words (command lines, user and host names, driver strings) goes through
:func:`~nvtopy.textsafe.safe_text` and into rich ``Text`` pieces, never markup: a process
named ``[bold]x`` is shown as ``[bold]x``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from ..alerts.catalog import AlertSeverity
from ..alerts.events import AlertEvent, Transition
from ..render.cells import ALERT, DIM, GOOD, HOT, RICH_STYLES, WARN
from ..render.units import fmt_age
from ..textsafe import safe_text
from .alert_feed import HISTORY, subject

__all__ = ["AlertsScreen", "HistoryLines", "firing_text", "history_text"]

INDENT = "    "
"""A summary or an action under its alert's line: wrapped lines keep it (:func:`_indented`)."""
_SEVERITY_CATEGORY = {AlertSeverity.CRITICAL: ALERT, AlertSeverity.WARNING: WARN}


def _day(at: float | None) -> str:
    """The local date of ``at`` (None: today's)."""
    return time.strftime("%Y-%m-%d", time.localtime(at))


def _clock(at: float, now: float | None) -> str:
    """``12:03:04``, with the date when it is not the day of ``now`` (the latest snapshot's time: a replay's
    day is its recording's; None: today)."""
    if _day(at) == _day(now):
        return time.strftime("%H:%M:%S", time.localtime(at))
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _ago(at: float, now: float | None) -> str:
    if now is None or not now >= at:
        return ""
    return f" ({fmt_age(now - at)} ago)"


def _severity(text: Text, severity: AlertSeverity) -> None:
    text.append(f" {severity.value.upper()} ", RICH_STYLES[_SEVERITY_CATEGORY[severity]])


def _firing_lines(text: Text, event: AlertEvent, now: float | None) -> None:
    _severity(text, event.severity)
    text.append(" ")
    text.append(safe_text(event.title), "bold")
    text.append(f"  {subject(event)}")
    text.append(f"  since {_clock(event.at, now)}{_ago(event.at, now)}", RICH_STYLES[DIM])
    if event.value is not None:
        text.append("  value ", RICH_STYLES[DIM])
        text.append(safe_text(event.value))
    text.append("\n" + INDENT)
    text.append(safe_text(event.summary))
    if event.action:
        text.append("\n" + INDENT + "do: ", RICH_STYLES[DIM])
        text.append(safe_text(event.action))
    text.append("\n")


def _history_line(text: Text, event: AlertEvent, now: float | None) -> None:
    text.append(f" {_clock(event.at, now)}  ")
    if event.transition is Transition.FIRING:
        text.append("FIRING ", RICH_STYLES[HOT if event.severity is AlertSeverity.CRITICAL else WARN])
        text.append(f"{event.severity.value:<8} ", RICH_STYLES[DIM])
    else:
        text.append("cleared", RICH_STYLES[GOOD])
        text.append(" " * 9)  # under "FIRING warning  "
    text.append(safe_text(event.title), "bold")
    text.append(f"  {subject(event)}", RICH_STYLES[DIM])
    text.append("\n" + INDENT)
    text.append(safe_text(event.summary))
    text.append("\n")


def firing_text(firing: Sequence[AlertEvent], now: float | None) -> Text:
    """The firing alerts, critical ones first (else in the catalog's order); ``now``: the latest snapshot's
    time, for "since 12:03:04 (5 min ago)"."""
    text = Text(end="")
    text.append("Firing now\n", "bold underline")
    if not firing:
        text.append(" nothing fires\n", RICH_STYLES[DIM])
    worst_first = sorted(firing, key=lambda e: e.severity is not AlertSeverity.CRITICAL)  # stable: rule order
    for event in worst_first:
        _firing_lines(text, event, now)
    text.rstrip()
    return text


def history_heading() -> Text:
    text = Text(end="")
    text.append("History", "bold underline")
    text.append(f"  newest first, the last {HISTORY} kept", RICH_STYLES[DIM])
    return text


def history_entry(event: AlertEvent, now: float | None) -> Text:
    """One transition: its time, FIRING (with severity) or cleared, title, subject; its summary under it."""
    text = Text(end="")
    _history_line(text, event, now)
    text.rstrip()
    return text


def history_text(history: Sequence[AlertEvent], now: float | None) -> Text:
    """The transitions, newest first, each with its time (and date, when not the day of ``now``), as one Text."""
    text = history_heading()
    text.append("\n")
    if not history:
        text.append(" nothing fired or cleared yet", RICH_STYLES[DIM])
    for i, event in enumerate(history):
        text.append_text(history_entry(event, now))
        if i < len(history) - 1:
            text.append("\n")
    return text


class HistoryLines(Widget):
    """The history, drawn line by line (Textual's Line API): only the lines in view are drawn.

    Why not one Static: 500 transitions are 1,000 lines, and a Static wraps and converts all of them at
    every change -- half a second a new transition on a loaded machine, with the screen open. Here each
    transition is wrapped once for the width (cached by the event object), and a new one costs its own
    lines only.
    """

    DEFAULT_CSS = """
    HistoryLines { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._events: tuple[AlertEvent, ...] = ()
        self._now: float | None = None
        self._wrapped: dict[int, tuple[AlertEvent, list[Strip]]] = {}
        self._key: tuple[object, ...] | None = None
        self._lines: list[Strip] = []

    def show(self, events: Sequence[AlertEvent], now: float | None) -> None:
        self._events, self._now = tuple(events), now
        self._relayout()

    def on_resize(self) -> None:
        self._relayout()

    def _relayout(self) -> None:
        width = self.size.width or max(1, self.app.size.width - 3)
        key = (width, _day(self._now), tuple(RICH_STYLES.values()))
        if key != self._key:
            self._key = key
            self._wrapped.clear()
        console = self.app.console
        options = console.options.update_width(width)
        wrapped: dict[int, tuple[AlertEvent, list[Strip]]] = {}
        lines: list[Strip] = []
        if not self._events:
            empty = Text(" nothing fired or cleared yet", RICH_STYLES[DIM], end="")
            lines = [Strip(segments) for segments in console.render_lines(empty, options, pad=False)]
        for event in self._events:
            cached = self._wrapped.get(id(event))
            if cached is None or cached[0] is not event:
                text = history_entry(event, self._now)
                cached = (event, [Strip(segments) for segments in console.render_lines(text, options, pad=False)])
            wrapped[id(event)] = cached
            lines.extend(cached[1])
        self._wrapped = wrapped  # the events that left the history go from the cache too
        self._lines = lines
        if self.styles.height is None or self.styles.height.value != len(lines):
            self.styles.height = len(lines)
        self.refresh()

    @property
    def plain(self) -> str:
        """The lines drawn, as text (one transition may wrap onto several)."""
        return "\n".join(strip.text for strip in self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        return self._lines[y].apply_style(self.rich_style).extend_cell_length(width, self.rich_style)


def _indented(text: Text) -> RenderableType:
    """``text`` with each line that starts with :data:`INDENT` wrapped under itself, not at the left edge
    (a summary or an action longer than the terminal is wide stays in its alert's column)."""
    parts: list[RenderableType] = []
    for line in text.split("\n", allow_blank=True):
        if line.plain.startswith(INDENT):
            parts.append(Padding(line[len(INDENT) :], (0, 0, 0, len(INDENT))))
        else:
            parts.append(line)
    return Group(*parts)


class AlertsScreen(ModalScreen[None]):
    """The firing alerts and the history of transitions, updated live; scrolls; esc, q or a closes it.

    Modal and opaque, as the health screen: the monitor's keys do not reach past it.
    """

    CSS_PATH = "screens.tcss"
    BINDINGS = [
        Binding("escape,q,a", "close", "Close", show=False),
        Binding("home", "scroll('home')", "Top", show=False),
        Binding("end", "scroll('end')", "Bottom", show=False),
    ]

    def __init__(
        self, firing: Sequence[AlertEvent], history: Sequence[AlertEvent], now: float | None, *, live: bool = True
    ) -> None:
        super().__init__()
        self._firing = tuple(firing)
        self._history = tuple(history)
        self._now = now
        self._live = live
        self._signatures: dict[str, tuple[object, ...]] = {}
        self.texts: dict[str, Text] = {}  # what the firing part shows, as text (tests read it)

    def compose(self) -> ComposeResult:
        yield Static(Text(" Alerts", style="bold reverse"), id="alerts-title")
        with VerticalScroll(id="alerts-body"):
            yield Static(Text(""), id="alerts-firing")  # changes with every snapshot ("5 s ago")
            yield Static(history_heading(), id="alerts-history-title")
            yield HistoryLines(id="alerts-history")  # only with a new transition; only the lines in view
        yield Static(Text(" ↑ ↓ PgUp PgDn Home End scroll · esc, q or a closes", style="dim"), id="alerts-hint")

    def on_mount(self) -> None:
        self.query_one("#alerts-body", VerticalScroll).focus()
        self._draw()

    def show(self, firing: Sequence[AlertEvent], history: Sequence[AlertEvent], now: float | None) -> None:
        """What the feed holds after a new snapshot: redrawn only where the text changed."""
        self._firing, self._history, self._now = tuple(firing), tuple(history), now
        if self.is_mounted:
            self._draw()

    def _draw(self) -> None:
        try:
            firing = self.query_one("#alerts-firing", Static)
            history = self.query_one("#alerts-history", HistoryLines)
            title = self.query_one("#alerts-title", Static)
        except NoMatches:  # a snapshot came between the push and the compose: on_mount draws it
            return
        styles = tuple(RICH_STYLES.values())  # a theme change recolours it
        text = firing_text(self._firing, self._now)
        if self._changed("firing", (text.plain, tuple(text.spans), styles)):
            self.texts["firing"] = text
            firing.update(_indented(text))
        # The history only grows at its head (and drops its tail): its length and newest entry (the object: an
        # equal event can come again, a replay stepped back) say whether it changed.
        newest = id(self._history[0]) if self._history else None
        if self._changed("history", (len(self._history), newest, _day(self._now), styles)):
            history.show(self._history, self._now)
        if self._changed("title", (len(self._firing), len(self._history), self._firing, styles)):
            title.update(self._title(), layout=False)

    def _changed(self, part: str, signature: tuple[object, ...]) -> bool:
        if self._signatures.get(part) == signature:
            return False
        self._signatures[part] = signature
        return True

    def _title(self) -> Text:
        """`` Alerts  2 firing (1 critical) · 14 transitions``, and whether they are a recording's."""
        text = Text(" Alerts ", style="bold reverse", end="")
        critical = sum(1 for e in self._firing if e.severity is AlertSeverity.CRITICAL)
        text.append(f"  {len(self._firing)} firing")
        if critical:
            text.append(" (")
            text.append(f"{critical} critical", RICH_STYLES[ALERT])
            text.append(")")
        text.append(f" · {len(self._history)} transition{'s' if len(self._history) != 1 else ''}")
        if not self._live:
            text.append(" · a recording's: shown, not sent", RICH_STYLES[DIM])
        return text

    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll(self, where: str) -> None:
        body = self.query_one("#alerts-body", VerticalScroll)
        if where == "home":
            body.scroll_home(animate=False)
        else:
            body.scroll_end(animate=False)

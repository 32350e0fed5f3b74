"""The health screen: every GPU's verdict, findings with their fix, and the evidence.

Why a screen of its own: a panel has room for one verdict and one reason; this
shows all of it (:func:`nvtopy.render.health.health_lines`): the findings and
their fixes, the Xid timeline, memory, PCIe and NVLink readings, throttling,
idle-held memory and a suspected hang -- N/A with the reason for whatever is
missing.

It is drawn from snapshots the app already has: opening it, scrolling it and
closing it never wait on the source, whatever the driver does. The app hands it
each new snapshot (:meth:`HealthScreen.show`); the text is replaced only when
it changed, so an idle screen costs nothing. All text is rich ``Text`` built from
lines whose outside text was made safe (never markup).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Static

from ..model import GpuState, Severity, Snapshot
from ..render.cells import RICH_STYLES, SEVERITY_CATEGORY
from ..render.health import health_counts, health_sections
from ..render.styled import Line

__all__ = ["HealthScreen"]

SECTION_WIDTH = 96
"""Cells a GPU's section wants before two sit side by side (a wide terminal shows two or more GPUs at once)."""


def section_columns(width: int, sections: int) -> int:
    """GPU sections side by side in ``width`` cells: as many of :data:`SECTION_WIDTH` as fit (at least one)."""
    return max(1, min(sections, width // SECTION_WIDTH))


def _body(overview: Sequence[Line], sections: Sequence[Sequence[Line]], columns: int) -> RenderableType:
    """The overview, then the sections in rows of ``columns`` (each wraps in its own column)."""
    if columns <= 1:
        lines = list(overview)
        for section in sections:
            lines.append(Line())
            lines.extend(section)
        return _text(lines)
    grid = Table.grid(padding=(0, 2), expand=True)
    for _ in range(columns):
        grid.add_column(ratio=1, overflow="fold")
    for start in range(0, len(sections), columns):
        row = [_text(section) for section in sections[start : start + columns]]
        grid.add_row(*row, *([Text("")] * (columns - len(row))))
        grid.add_row(*([Text("")] * columns))
    return Group(_text(overview), Text(""), grid)


def _text(lines: Sequence[Line]) -> Text:
    """Lines as one rich Text (wrapped by the Static at the screen's width)."""
    text = Text(end="")
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        for piece, piece_style in line.parts:
            text.append(piece, piece_style)
    return text


class HealthScreen(ModalScreen[None]):
    """Every shown GPU's health, updated live; scrolls; esc, q or H closes it.

    Modal (though it fills the terminal, opaque): the monitor's keys do not reach
    past it, so a ``K`` here cannot signal a process the user does not see.
    """

    CSS_PATH = "screens.tcss"
    BINDINGS = [
        Binding("escape,q,H", "close", "Close", show=False),
        Binding("home", "scroll('home')", "Top", show=False),
        Binding("end", "scroll('end')", "Bottom", show=False),
    ]

    def __init__(self, snapshot: Snapshot | None, gpus: Sequence[GpuState]) -> None:
        super().__init__()
        self._snapshot = snapshot
        self._gpus = tuple(gpus)
        self._signature: tuple[object, ...] | None = None
        self._title_signature: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(" GPU health", style="bold reverse"), id="health-title")
        with VerticalScroll(id="health-body"):
            yield Static(Text("waiting for the first sample...", style="dim"), id="health-text")
        yield Static(Text(" ↑ ↓ PgUp PgDn Home End scroll · esc, q or H closes", style="dim"), id="health-hint")

    def on_mount(self) -> None:
        self.query_one("#health-body", VerticalScroll).focus()
        self._draw()

    def on_resize(self) -> None:
        self._draw()  # wider or narrower: the sections side by side or not

    def show(self, snapshot: Snapshot, gpus: Sequence[GpuState]) -> None:
        """A new snapshot: redraw what changed (nothing, for a GPU whose health and readings stayed)."""
        self._snapshot = snapshot
        self._gpus = tuple(gpus)
        if self.is_mounted:
            self._draw()

    def _draw(self) -> None:
        snapshot = self._snapshot
        if snapshot is None:
            return
        try:
            body = self.query_one("#health-text", Static)
            title = self.query_one("#health-title", Static)
        except NoMatches:  # a snapshot came between the push and the compose: on_mount draws it
            return
        overview, sections = health_sections(snapshot, self._gpus)
        columns = section_columns(self.size.width - 2, len(sections))
        signature = (
            columns,
            tuple(tuple(line.parts) for line in overview),
            tuple(tuple(tuple(line.parts) for line in section) for section in sections),
        )
        if signature != self._signature:
            self._signature = signature
            body.update(_body(overview, sections, columns))
        counts = health_counts(self._gpus)
        title_signature = (
            tuple(counts.items()),
            len(self._gpus),
            len(snapshot.gpus),
            tuple(RICH_STYLES[c] for c in SEVERITY_CATEGORY.values()),  # a theme change recolours it
        )
        if title_signature != self._title_signature:
            self._title_signature = title_signature
            title.update(self._title(counts, len(snapshot.gpus)), layout=False)

    def _title(self, counts: dict[Severity, int], total: int) -> Text:
        """`` GPU health  4 GPUs: 1 FAIL · 1 WARN · 2 OK``, worst first."""
        text = Text(" GPU health ", style="bold reverse", end="")
        shown = len(self._gpus)
        text.append(f"  {shown} GPU{'s' if shown != 1 else ''}" + (f" of {total}" if shown != total else "") + ": ")
        worst_first = (Severity.FAIL, Severity.WARN, Severity.OK)
        # Categories, not styles: RICH_STYLES is read when the title is drawn, so the theme's palette applies
        # (copying the styles at import time kept the default red and green under "colorblind").
        parts = [(f"{counts[s]} {s.value}", RICH_STYLES[SEVERITY_CATEGORY[s]]) for s in worst_first]
        parts.append((f"{shown - sum(counts.values())} N/A", "dim"))  # lines that are no reading: a host unread
        for i, (words, style) in enumerate(p for p in parts if not p[0].startswith("0 ")):
            if i:
                text.append(" · ", style="dim")
            text.append(words, style=style)
        return text

    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll(self, where: str) -> None:
        body = self.query_one("#health-body", VerticalScroll)
        if where == "home":
            body.scroll_home(animate=False)
        else:
            body.scroll_end(animate=False)

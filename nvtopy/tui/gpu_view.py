"""The GPU area: full panels in a grid, or one compact line per GPU.

One Line-API widget draws every GPU instead of one widget per GPU: no layout
work per refresh, and lines whose text did not change are not sent to the
terminal again. Which form is used depends on the number of GPUs and the
terminal size (``auto``), or on the user's choice (``full`` / ``compact``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ..gpu_render import PANEL_HEIGHT, PANEL_MIN_WIDTH, compact_line, panel_lines, panel_title
from ..model import GpuState

__all__ = ["MODES", "GpuView", "LayoutPlan", "plan_layout"]

MODES = ("auto", "full", "compact")
COMPACT_MIN_WIDTH = 38


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    kind: str  # "full" or "compact"
    columns: int
    lines: int


def plan_layout(count: int, width: int, height: int, mode: str = "auto") -> LayoutPlan:
    """How to show ``count`` GPUs in a ``width`` x ``height`` terminal.

    ``auto`` uses full panels while they take at most ~45% of the height (the
    process table needs the rest), else compact lines, several per row when wide.
    """
    if count == 0:
        return LayoutPlan("compact", 1, 1)
    full_cols = max(1, min(count, width // PANEL_MIN_WIDTH))
    full_rows = math.ceil(count / full_cols)
    full_cols = math.ceil(count / full_rows)  # balance: 4 GPUs in 3 columns -> 2x2
    full = LayoutPlan("full", full_cols, full_rows * PANEL_HEIGHT)
    if mode == "full" or (mode == "auto" and full.lines <= 0.45 * height):
        return full
    cols = max(1, min(count, width // 60))
    if math.ceil(count / cols) > 0.4 * height:
        cols = max(1, min(count, width // COMPACT_MIN_WIDTH))
    return LayoutPlan("compact", cols, math.ceil(count / cols))


class GpuView(Widget):
    """Draws the selected GPUs; the app sets its height from :func:`plan_layout`."""

    DEFAULT_CSS = """
    GpuView { height: 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._gpus: tuple[GpuState, ...] = ()
        self._plan = LayoutPlan("compact", 1, 1)
        self._lines: list[Strip] = []
        self.message = "waiting for the first sample..."

    @property
    def plan(self) -> LayoutPlan:
        return self._plan

    def show(self, gpus: tuple[GpuState, ...], plan: LayoutPlan) -> None:
        """Draw ``gpus`` with ``plan``; only lines whose content changed are refreshed."""
        self._gpus = gpus
        self._plan = plan
        self._rebuild()

    def on_resize(self) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        width = self.size.width
        if width <= 0:
            return
        console = self.app.console
        if not self._gpus:
            text = Text(self.message if self.message else "No GPUs to show", style="dim")
            text.truncate(width, pad=True)
            lines = [_strip(text, console)]
        elif self._plan.kind == "full":
            lines = self._full_lines(width, console)
        else:
            lines = self._compact_lines(width, console)
        old = self._lines
        self._lines = lines
        for y, strip in enumerate(lines):
            if y >= len(old) or old[y] != strip:
                self.refresh(Region(0, y, width, 1))
        if len(old) > len(lines):
            self.refresh()

    def _full_lines(self, width: int, console: Console) -> list[Strip]:
        cols = self._plan.columns
        gap = 1
        panel_width = (width - gap * (cols - 1)) // cols
        lines: list[Strip] = []
        for start in range(0, len(self._gpus), cols):
            panels = [_panel(gpu, panel_width, console) for gpu in self._gpus[start : start + cols]]
            for y in range(PANEL_HEIGHT):
                parts: list[Strip] = []
                for i, panel in enumerate(panels):
                    if i:
                        parts.append(Strip.blank(gap))
                    parts.append(panel[y])
                lines.append(Strip.join(parts).adjust_cell_length(width))
        return lines

    def _compact_lines(self, width: int, console: Console) -> list[Strip]:
        cols = self._plan.columns
        gap = 2
        cell = (width - gap * (cols - 1)) // cols
        lines = []
        rows = math.ceil(len(self._gpus) / cols)
        for r in range(rows):
            parts: list[Strip] = []
            for c in range(cols):
                index = r * cols + c  # row by row, like the panel grid
                if index >= len(self._gpus):
                    break
                if c:
                    parts.append(Strip.blank(gap))
                parts.append(_strip(compact_line(self._gpus[index], cell), console))
            lines.append(Strip.join(parts).adjust_cell_length(width))
        return lines

    def render_line(self, y: int) -> Strip:
        if y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.size.width)


def _strip(text: Text, console: Console) -> Strip:
    return Strip(list(text.render(console)), text.cell_len)


def _panel(gpu: GpuState, width: int, console: Console) -> list[Strip]:
    """A bordered panel, ``PANEL_HEIGHT`` strips of exactly ``width`` cells."""
    border = Style.parse("bold red" if gpu.lost else "bright_black")
    inner = width - 4
    title = panel_title(gpu)
    if gpu.lost:
        title.stylize("red")
    title.truncate(max(0, width - 4), overflow="ellipsis")
    top = [
        Segment("╭─", border),
        *title.render(console),
        Segment("─" * max(0, width - 3 - title.cell_len) + "╮", border),
    ]
    lines = [Strip(top).adjust_cell_length(width)]
    for text in panel_lines(gpu, inner):
        segments = [Segment("│ ", border), *text.render(console), Segment(" │", border)]
        lines.append(Strip(segments).adjust_cell_length(width))
    lines.append(Strip([Segment("╰" + "─" * (width - 2) + "╯", border)]))
    return lines

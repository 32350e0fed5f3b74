"""The GPU area: full panels in a grid, or one compact line per GPU.

One Line-API widget draws every GPU instead of one widget per GPU: no layout
work per refresh, and lines whose text did not change are not sent to the
terminal again. Which form is used depends on the number of GPUs and the
terminal size (``auto``), or on the user's choice (``full`` / ``compact``).
Full panels get a fifth line (PCIe and NVLink) only where the height allows
it: that line is the first thing a small terminal gives up.

A MIG-enabled GPU adds a line per instance under its panel (or its compact
line), and a GPU with GPM figures (Hopper and newer) a real-work line to its
panel: a row of the grid is as tall as its tallest GPU, and the shorter panels
beside it stretch their borders to match.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.segment import Segment
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ..model import SAMPLE_FIELDS, GpuState
from ..render.cells import BAD, HOT, RICH_STYLES
from ..render.gpu import PANEL_MIN_WIDTH, compact_lines, panel_extra_rows, panel_height, panel_lines, panel_title
from ..render.styled import Line, style

__all__ = ["MODES", "GpuView", "LayoutPlan", "plan_layout"]

MODES = ("auto", "full", "compact")
COMPACT_MIN_WIDTH = 38


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    kind: str  # "full" or "compact"
    columns: int
    lines: int
    links: bool = False  # full panels: with the interconnect line (PCIe, NVLink)

    @property
    def panel_height(self) -> int:
        return panel_height(self.links)


COMPACT_NARROW_GAIN = 0.75
"""With MIG instances, compact lines go to narrower columns only if that saves a quarter of the lines."""
FULL_SHARE = 0.45
"""The most of the terminal's height full panels take in ``auto`` (the process table needs the rest)."""


def _grid_lines(extra: Sequence[int], count: int, cols: int, base: int) -> int:
    """Lines of ``count`` GPUs in rows of ``cols``: each row ``base`` lines plus its tallest GPU's ``extra``."""
    return sum(base + max(extra[start : start + cols], default=0) for start in range(0, count, cols))


def plan_layout(
    count: int,
    width: int,
    height: int,
    mode: str = "auto",
    *,
    links: bool = False,
    extra: Sequence[int] = (),
    panel_extra: Sequence[int] | None = None,
) -> LayoutPlan:
    """How to show ``count`` GPUs in a ``width`` x ``height`` terminal.

    ``auto`` uses full panels while they take at most ~45% of the height (the
    process table needs the rest), else compact lines, several per row when wide.
    ``links``: the GPUs have interconnect readings; full panels show them on a
    fifth line when that still fits the same share of the height (dropped first).
    ``extra``: the lines each GPU adds under it, in order (its MIG instances:
    :func:`~nvtopy.render.gpu.mig_rows`); a row is as tall as its tallest GPU.
    ``panel_extra``: the lines each GPU's full panel adds (its real-work line too:
    :func:`~nvtopy.render.gpu.panel_extra_rows`); default ``extra``.
    """
    if count == 0:
        return LayoutPlan("compact", 1, 1)
    extra = tuple(extra) + (0,) * (count - len(extra))
    tall = extra if panel_extra is None else tuple(panel_extra) + (0,) * (count - len(panel_extra))
    full_cols = max(1, min(count, width // PANEL_MIN_WIDTH))
    full_rows = math.ceil(count / full_cols)
    full_cols = math.ceil(count / full_rows)  # balance: 4 GPUs in 3 columns -> 2x2
    if mode != "compact":
        with_links = _grid_lines(tall, count, full_cols, panel_height(True))
        if links and with_links <= FULL_SHARE * height:
            return LayoutPlan("full", full_cols, with_links, links=True)
        full = LayoutPlan("full", full_cols, _grid_lines(tall, count, full_cols, panel_height(False)))
        if mode == "full" or full.lines <= FULL_SHARE * height:
            return full
    cols = max(1, min(count, width // 60))
    lines = _grid_lines(extra, count, cols, 1)
    if lines > 0.4 * height:
        narrow = max(1, min(count, width // COMPACT_MIN_WIDTH))
        narrow_lines = _grid_lines(extra, count, narrow, 1)
        # Narrower columns cut the lines; with MIG instances (a tall GPU) they may save little: not worth it then.
        if not any(extra) or narrow_lines <= COMPACT_NARROW_GAIN * lines:
            cols, lines = narrow, narrow_lines
    return LayoutPlan("compact", cols, lines)


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
        self._panels: dict[int, tuple[tuple[object, ...], list[list[Segment]]]] = {}
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
        if not self._gpus:
            lines = [_strip(Line(self.message or "No GPUs to show", "dim").fit(width).segments(), width)]
        elif self._plan.kind == "full":
            lines = self._full_lines(width)
        else:
            lines = self._compact_lines(width)
        old = self._lines
        self._lines = lines
        for y, strip in enumerate(lines):
            if y >= len(old) or old[y] != strip:
                self.refresh(Region(0, y, width, 1))
        if len(old) > len(lines):
            self.refresh()

    def _full_lines(self, width: int) -> list[Strip]:
        cols = self._plan.columns
        panel_width = (width - (cols - 1)) // cols
        lines: list[Strip] = []
        links = self._plan.links
        for start in range(0, len(self._gpus), cols):
            row = self._gpus[start : start + cols]
            height = self._plan.panel_height + max(panel_extra_rows(gpu) for gpu in row)
            panels = [self._cached_panel(gpu, panel_width, links, height) for gpu in row]
            for y in range(height):
                segments: list[Segment] = []
                for i, panel in enumerate(panels):
                    if i:
                        segments.append(_GAP)
                    segments.extend(panel[y])
                lines.append(_strip(segments, width))
        return lines

    def _compact_lines(self, width: int) -> list[Strip]:
        """Row by row, like the panel grid; a GPU's MIG instances follow it in its own column."""
        cols = self._plan.columns
        gap = 2
        cell = (width - gap * (cols - 1)) // cols
        lines = []
        blank = Line().fit(cell)
        for start in range(0, len(self._gpus), cols):
            blocks = [compact_lines(gpu, cell) for gpu in self._gpus[start : start + cols]]
            for y in range(max(len(block) for block in blocks)):
                segments: list[Segment] = []
                for c, block in enumerate(blocks):
                    if c:
                        segments.append(Segment(" " * gap))
                    segments.extend((block[y] if y < len(block) else blank).segments())
                lines.append(_strip(segments, width))
        return lines

    def _cached_panel(self, gpu: GpuState, width: int, links: bool, height: int) -> list[list[Segment]]:
        """The panel's rows, redrawn only when something it shows changed (an idle GPU costs nothing)."""
        key = (links, height, *_signature(gpu, width))
        cached = self._panels.get(gpu.index)
        if cached is not None and cached[0] == key:
            return cached[1]
        rows = _panel(gpu, width, links, height)
        self._panels[gpu.index] = (key, rows)
        return rows

    def render_line(self, y: int) -> Strip:
        if y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.size.width)


_GAP = Segment(" ")


def _signature(gpu: GpuState, width: int) -> tuple[object, ...]:
    """Everything a panel shows: values (not their timestamp), the visible history, identity, width, health,
    and how many processes each MIG instance runs."""
    sample = gpu.sample
    return (
        width,
        gpu.static,
        sample.lost,
        gpu.note,
        tuple(getattr(sample, name) for name in SAMPLE_FIELDS),
        gpu.history.utilization_gpu_percent[-width:],
        gpu.history.sm_active_percent[-width:],
        gpu.health,
        gpu.processes_unavailable,
        tuple(len(state.processes) for state in gpu.mig),
    )


def _strip(segments: list[Segment], width: int) -> Strip:
    """One strip of exactly ``width`` cells (every piece is already measured: pad the rest)."""
    used = sum(segment.cell_length for segment in segments)
    if used < width:
        segments.append(Segment(" " * (width - used)))
    elif used > width:
        return Strip(segments, used).crop(0, width)
    return Strip(segments, width)


def _panel(gpu: GpuState, width: int, links: bool = False, height: int | None = None) -> list[list[Segment]]:
    """A bordered panel of ``height`` rows (default: its own, :func:`~nvtopy.render.gpu.panel_height` plus its
    MIG instances), each exactly ``width`` cells; a shorter panel's border stretches to a taller neighbour's."""
    border = style(RICH_STYLES[HOT] if gpu.lost else "bright_black")
    title = panel_title(gpu, max(0, width - 4))
    if gpu.lost:
        title.restyle(RICH_STYLES[BAD])
    if title.cells > width - 4:
        title.fit(max(0, width - 4))
    rows = [[Segment("╭─", border), *title.segments(), Segment("─" * max(0, width - 3 - title.cells) + "╮", border)]]
    left, right = Segment("│ ", border), Segment(" │", border)
    content = panel_lines(gpu, width - 4, links=links)
    if height is not None:
        content.extend(Line().fit(width - 4) for _ in range(height - 2 - len(content)))
    for line in content:
        rows.append([left, *line.segments(), right])
    rows.append([Segment("╰" + "─" * (width - 2) + "╯", border)])
    return rows

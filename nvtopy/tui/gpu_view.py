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

Many hosts (``--remote``, ``--prometheus``): compact lines are grouped under a
one-line header per host -- its name, how many GPUs it has, and whether it
answers (reachable, stale with the age of its newest sample, unreachable). Its
GPUs stay in the source's order; the global index and ``host/index`` lead each
line as before. Full panels name their host in the title and get no header.

Hundreds of GPUs: the view takes at most :data:`SCROLL_SHARE` of the terminal
(the process table needs the rest) and scrolls with the mouse wheel, its last
line saying which GPUs are shown. Only the compact lines in view are built: at
512 GPUs a refresh draws the ~100 in view, not 512.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from rich.segment import Segment
from textual import events
from textual.strip import Strip
from textual.widget import Widget

from ..model import SAMPLE_FIELDS, GpuState
from ..render.cells import BAD, DIM, HOT, REMOTE, RICH_STYLES, WARN
from ..render.gpu import (
    PANEL_MIN_WIDTH,
    compact_columns,
    compact_header,
    compact_legend,
    compact_lines,
    mig_rows,
    panel_extra_rows,
    panel_height,
    panel_lines,
    panel_title,
)
from ..render.styled import Line, style
from ..render.units import fmt_age
from ..textsafe import safe_text
from .redraw import changed_lines, refresh_lines

__all__ = [
    "MODES",
    "SCROLL_SHARE",
    "GpuView",
    "HostGroup",
    "LayoutPlan",
    "host_groups",
    "host_header",
    "host_state",
    "plan_layout",
]

MODES = ("auto", "full", "compact")
COMPACT_MIN_WIDTH = 38


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    kind: str  # "full" or "compact"
    columns: int
    lines: int  # the lines the view takes on the screen
    links: bool = False  # full panels: with the interconnect line (PCIe, NVLink)
    content: int | None = None  # the lines there are when more than fit (the view scrolls); None: all fit
    hosts: bool = False  # compact lines grouped under a header line per host

    @property
    def scrolls(self) -> bool:
        return self.content is not None

    @property
    def panel_height(self) -> int:
        return panel_height(self.links)


COMPACT_NARROW_GAIN = 0.75
"""With MIG instances, compact lines go to narrower columns only if that saves a quarter of the lines."""
FULL_SHARE = 0.45
"""The most of the terminal's height full panels take in ``auto`` (the process table needs the rest)."""
SCROLL_SHARE = 0.6
"""The most of the terminal's height the GPU view takes: with more GPUs than fit, it scrolls."""


def _grid_lines(extra: Sequence[int], count: int, cols: int, base: int) -> int:
    """Lines of ``count`` GPUs in rows of ``cols``: each row ``base`` lines plus its tallest GPU's ``extra``."""
    return sum(base + max(extra[start : start + cols], default=0) for start in range(0, count, cols))


def _compact_total(extra: Sequence[int], groups: Sequence[int], count: int, cols: int) -> int:
    """Compact lines of ``count`` GPUs in rows of ``cols`` under their column labels (one line); with ``groups``
    (GPUs per host, in order), each host starts a row of its own under a header line."""
    if not groups:
        return 1 + _grid_lines(extra, count, cols, 1)
    total, start = 1, 0
    for size in groups:
        total += 1 + _grid_lines(extra[start : start + size], size, cols, 1)
        start += size
    return total


def _capped(plan: LayoutPlan, height: int) -> LayoutPlan:
    """``plan`` within :data:`SCROLL_SHARE` of ``height``: taller, it keeps that many lines and scrolls."""
    cap = max(3, int(SCROLL_SHARE * height))
    if plan.lines <= cap:
        return plan
    return LayoutPlan(plan.kind, plan.columns, cap, plan.links, content=plan.lines, hosts=plan.hosts)


def plan_layout(
    count: int,
    width: int,
    height: int,
    mode: str = "auto",
    *,
    links: bool = False,
    extra: Sequence[int] = (),
    panel_extra: Sequence[int] | None = None,
    groups: Sequence[int] = (),
) -> LayoutPlan:
    """How to show ``count`` GPUs in a ``width`` x ``height`` terminal.

    ``auto`` uses full panels while they take at most ~45% of the height (the
    process table needs the rest), else compact lines, several per row when wide.
    ``links``: the GPUs have interconnect readings; full panels show them on a
    fifth line when that still fits the same share of the height (dropped first).
    ``extra``: the lines each GPU adds under it, in order (its MIG instances:
    :func:`~nvtopy.render.gpu.mig_rows`); a row is as tall as its tallest GPU.
    ``panel_extra``: the lines each GPU's full panel adds (its real-work line too:
    :func:`~nvtopy.render.gpu.panel_extra_rows`); default ``extra``. ``groups``: how many GPUs each host
    has, in order (:func:`host_groups`), when the GPUs are several hosts': compact lines get a header per
    host. A plan taller than :data:`SCROLL_SHARE` of the height scrolls (``content``: all its lines).
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
            return _capped(full, height)
    groups = tuple(groups) if sum(groups) == count else ()
    cols = max(1, min(count, width // 60))
    lines = _compact_total(extra, groups, count, cols)
    if lines > 0.4 * height:
        narrow = max(1, min(count, width // COMPACT_MIN_WIDTH))
        narrow_lines = _compact_total(extra, groups, count, narrow)
        # Narrower columns cut the lines; with MIG instances (a tall GPU) they may save little: not worth it then.
        if not any(extra) or narrow_lines <= COMPACT_NARROW_GAIN * lines:
            cols, lines = narrow, narrow_lines
    return _capped(LayoutPlan("compact", cols, lines, hosts=bool(groups)), height)


# ----------------------------------------------------------------- hosts


@dataclass(frozen=True, slots=True)
class HostGroup:
    """GPUs of one host that follow each other in the view (None: local GPUs)."""

    host: str | None
    gpus: tuple[GpuState, ...]


def host_groups(gpus: Sequence[GpuState]) -> list[HostGroup]:
    """``gpus`` in runs of the same ``static.host``, in their order (a source lists a host's GPUs together)."""
    groups: list[HostGroup] = []
    start = 0
    for i in range(1, len(gpus) + 1):
        if i == len(gpus) or gpus[i].static.host != gpus[start].static.host:
            groups.append(HostGroup(gpus[start].static.host, tuple(gpus[start:i])))
            start = i
    return groups


def host_state(group: HostGroup, now: float | None = None, stale_after: float | None = None) -> tuple[str, str]:
    """Whether a host answers, in words, and its style category: ``reachable``; ``stale 45 s`` when its newest
    reading is older than ``stale_after`` seconds at ``now``, or ``stale`` when its source said so in its lines
    (``--prometheus``: a host that stopped reporting); ``unreachable`` when nothing of it could be read (its
    lines are notes saying why); ``connecting`` for an ``--ssh`` session on its way; ``see below`` for lines
    that are only remarks (a partial answer)."""
    readings = [gpu for gpu in group.gpus if not gpu.note]
    if not readings:
        if any(gpu.lost for gpu in group.gpus):
            return ("unreachable", HOT)
        if any((gpu.note or "").startswith("stale") for gpu in group.gpus):
            return ("stale", WARN)
        if any((gpu.note or "").startswith(("connecting", "connected", "waiting")) for gpu in group.gpus):
            return ("connecting", WARN)  # --ssh: a session on its way (the line below says how long)
        return ("see below", WARN)
    if now is not None and stale_after is not None:
        age = now - max(gpu.sample.timestamp for gpu in readings)
        if age > stale_after:
            return (f"stale {fmt_age(age)}", WARN)
    return ("reachable", DIM)


def host_header(group: HostGroup, width: int, now: float | None = None, stale_after: float | None = None) -> Line:
    """``── node3 · 8 GPUs · reachable ─────``: the line over a host's compact lines (its name is outside text)."""
    count = sum(1 for gpu in group.gpus if gpu.static.host_index is not None)  # its GPUs, read or stale
    words, category = host_state(group, now, stale_after)
    line = Line("── ", "bright_black").add(safe_text(group.host or "local"), f"bold {RICH_STYLES[REMOTE]}")
    if count:
        line.add(f" · {count} GPU{'s' if count != 1 else ''}")
    line.add(" · ").add(words, RICH_STYLES[category]).add(" ")
    return line.add("─" * max(0, width - line.cells), "bright_black").fit(width)


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
        self._now: float | None = None
        self._stale_after: float | None = None
        self.top = 0  # the first line shown when the view scrolls (more GPUs than fit)
        self.message = "waiting for the first sample..."

    @property
    def plan(self) -> LayoutPlan:
        return self._plan

    def show(
        self,
        gpus: tuple[GpuState, ...],
        plan: LayoutPlan,
        *,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> None:
        """Draw ``gpus`` with ``plan``; only lines whose content changed are refreshed.

        ``now`` and ``stale_after``: a host whose newest reading is older than ``stale_after``
        seconds at ``now`` (the snapshot's time) is said to be stale in its header.
        """
        self._gpus = gpus
        self._plan = plan
        self._now = now
        self._stale_after = stale_after
        self._rebuild()

    def on_resize(self) -> None:
        self._rebuild()

    def scroll_lines(self, step: int) -> None:
        """Scroll a view with more GPUs than fit by ``step`` lines (negative: up)."""
        if self._plan.content is None:
            return
        self.top += step
        self._rebuild()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if self._plan.scrolls:
            event.stop()
            self.scroll_lines(3)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self._plan.scrolls:
            event.stop()
            self.scroll_lines(-3)

    def _rebuild(self) -> None:
        width = self.size.width
        if width <= 0:
            return
        plan = self._plan
        rows = max(1, plan.lines - 1) if plan.scrolls else None  # a scrolling view says what it shows last
        fixed = 1 if plan.kind == "compact" and self._gpus else 0  # the column labels stay when it scrolls
        if rows is not None:
            self.top = max(0, min(self.top, (plan.content or 0) - rows))
            rows = max(1, rows - fixed)
        else:
            self.top = 0
        if not self._gpus:
            lines = [_strip(Line(self.message or "No GPUs to show", "dim").fit(width).segments(), width)]
        elif plan.kind == "full":
            lines = self._full_lines(width)
            if rows is not None:
                lines = lines[self.top : self.top + rows]
                lines.append(_strip(self._position_line(width, *self._full_shown(rows)).segments(), width))
        else:
            lines = [self._compact_header(width), *self._compact_lines(width, rows)]
        old = self._lines
        self._lines = lines
        if len(old) > len(lines):
            self.refresh()
        else:
            refresh_lines(self, changed_lines(old, lines), width)

    def _full_lines(self, width: int) -> list[Strip]:
        cols = self._plan.columns
        panel_width = (width - (cols - 1)) // cols
        lines: list[Strip] = []
        links = self._plan.links
        for start in range(0, len(self._gpus), cols):
            row = self._gpus[start : start + cols]
            height = self._plan.panel_height + max(panel_extra_rows(gpu) for gpu in row)
            panels = [self._cached_panel(gpu, panel_width, links, height) for gpu in row]
            used = len(panels) * (panel_width + 1) - 1  # every panel row is exactly its width: no measuring
            pad = [Segment(" " * (width - used))] if used < width else []
            for y in range(height):
                segments: list[Segment] = []
                for i, panel in enumerate(panels):
                    if i:
                        segments.append(_GAP)
                    segments.extend(panel[y])
                segments.extend(pad)
                strip = Strip(segments, max(used, width))
                lines.append(strip.crop(0, width) if used > width else strip)
        return lines

    def _compact_rows(self) -> list[tuple[HostGroup | None, tuple[GpuState, ...], int]]:
        """The compact view's rows, none drawn yet: a host's header (with its group), or up to ``columns`` GPUs
        side by side, each with how many lines it takes (a GPU's MIG instances add theirs)."""
        cols = self._plan.columns
        groups = host_groups(self._gpus) if self._plan.hosts else [HostGroup(None, self._gpus)]
        rows: list[tuple[HostGroup | None, tuple[GpuState, ...], int]] = []
        for group in groups:
            if self._plan.hosts:
                rows.append((group, (), 1))
            gpus = group.gpus
            for start in range(0, len(gpus), cols):
                chunk = gpus[start : start + cols]
                rows.append((None, chunk, 1 + max(mig_rows(gpu) for gpu in chunk)))
        return rows

    def _compact_lines(self, width: int, rows_shown: int | None = None) -> list[Strip]:
        """Row by row, like the panel grid; a GPU's MIG instances follow it in its own column; a host's header
        over its GPUs. ``rows_shown``: the view scrolls, and only the lines from :attr:`top` that fit are built
        (the last line then says which GPUs are shown)."""
        cols = self._plan.columns
        gap = 2
        cell = (width - gap * (cols - 1)) // cols
        lines: list[Strip] = []
        blank = Line().fit(cell)
        first = self.top if rows_shown is not None else 0
        end = first + rows_shown if rows_shown is not None else None
        y0 = 0  # the line the row starts at
        shown: list[int] = []
        for group, chunk, height in self._compact_rows():
            if end is not None and y0 >= end:
                break
            if y0 + height <= first:
                y0 += height
                continue
            if group is not None:
                block_lines = [_strip(host_header(group, width, self._now, self._stale_after).segments(), width)]
            else:
                blocks = [compact_lines(gpu, cell) for gpu in chunk]
                block_lines = []
                for y in range(height):
                    segments: list[Segment] = []
                    for c, block in enumerate(blocks):
                        if c:
                            segments.append(Segment(" " * gap))
                        segments.extend((block[y] if y < len(block) else blank).segments())
                    block_lines.append(_strip(segments, width))
                if y0 >= first:
                    shown.extend(gpu.index for gpu in chunk)
            lines.extend(block_lines[max(0, first - y0) :])
            y0 += height
        if rows_shown is None:
            return lines
        lines = lines[:rows_shown]
        return [*lines, _strip(self._position_line(width, shown[:1], shown[-1:]).segments(), width)]

    def _compact_header(self, width: int) -> Strip:
        """The labels over the compact lines' figures (``GPU  MEM used  UTIL now``), over every column, and
        what a sign in view means (``⚠ clocks slowed``) where the last column's labels leave room, else in
        place of the labels after the first column's (the columns are alike)."""
        cols = self._plan.columns
        gap = 2
        cell = (width - gap * (cols - 1)) // cols
        model = next((gpu for gpu in self._gpus if compact_columns(gpu, cell) is not None), None)
        labels = compact_header(model, cell).plain  # labels only, in one style: cut as text
        text = (" " * gap).join([labels] * cols)
        legend = compact_legend(self._gpus, width)
        if legend.cells and len(text.rstrip()) + gap + legend.cells <= width:
            text = text[: width - legend.cells]
        elif legend.cells:  # the labels after the first column's make room
            used = len(labels.rstrip())
            legend = compact_legend(self._gpus, max(0, width - used - gap))
            text = text[:used].ljust(width - legend.cells)
        line = Line(text, RICH_STYLES[DIM]).extend(legend)
        return _strip(line.fit(width).segments(), width)

    def _full_shown(self, rows: int) -> tuple[list[int], list[int]]:
        """The first and last GPU whose panel starts in the lines shown (full panels that scroll)."""
        cols = self._plan.columns
        starts: list[int] = []
        y = 0
        for start in range(0, len(self._gpus), cols):
            row = self._gpus[start : start + cols]
            if self.top <= y < self.top + rows:
                starts.extend(gpu.index for gpu in row)
            y += self._plan.panel_height + max(panel_extra_rows(gpu) for gpu in row)
        return starts[:1], starts[-1:]

    def _position_line(self, width: int, first: list[int], last: list[int]) -> Line:
        """The last line of a view that scrolls: which GPUs it shows of how many, and how to see the rest."""
        where = f"GPUs {first[0]}-{last[0]}" if first and last else "GPUs"
        below = self.top + max(1, self._plan.lines - 1) < (self._plan.content or 0)
        arrows = ("↑" if self.top else " ") + ("↓" if below else " ")
        return Line(f" {arrows} {where} of {len(self._gpus)} · the mouse wheel scrolls", RICH_STYLES[DIM]).fit(width)

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


_sample_values = attrgetter(*SAMPLE_FIELDS)
"""A sample's every field, as a tuple, in one C call (the signature is made for every panel every refresh)."""


def _signature(gpu: GpuState, width: int) -> tuple[object, ...]:
    """Everything a panel shows: values (not their timestamp), the visible history, identity, width, health,
    and how many processes each MIG instance runs."""
    sample = gpu.sample
    return (
        width,
        gpu.static,
        sample.lost,
        gpu.note,
        _sample_values(sample),
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

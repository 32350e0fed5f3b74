"""The history charts: the rows the GPU area and the process table leave, filled with braille charts.

What is drawn: GPU utilisation, memory used, power, and where the GPUs report
them SM activity (GPM), PCIe and NVLink throughput, over a window of 1 min,
10 min, 1 h or 24 h (``z`` / ``Z``) ending at the snapshot's time. Two ways
(``c``): one chart per metric with the shown GPUs overlaid, each in its own colour
(the legend gives each GPU's value now), or one chart per GPU with its metrics
overlaid on a 0-100 % scale (power as a share of its limit); ``c`` again hides
them. The value axes are fixed: 0-100 %, 0 to the memory size (GiB, when every
GPU has the same), 0 to the highest power limit; throughput, which has no useful
fixed top, is scaled to a 1-2-5 step above the window's peak.

Many GPUs: more than :data:`OVERLAID` lines in one chart are a tangle, and the
colours that tell them apart run out. A chart per metric then draws the
:data:`OVERLAID` GPUs that bound the spread -- the highest and the lowest lately
(:func:`spread`): the busiest and the straggler, the ones a user looks for -- and
its legend says how many more there are and what they read now ("+12 more
42% to 91%"). A narrow chart draws fewer lines, never one its legend does not
name; a legend never loses an entry silently: what does not fit is counted in
its "+N more" (:func:`~nvtopy.render.chart.legend_line`). One chart per GPU
(``c``) shows every GPU, as many as fit.

Where: between the GPU area and the process table, only when rows are spare
(:func:`chart_rows`): the table keeps the rows its processes need, at least
:data:`TABLE_MIN`, and the charts still get :data:`CHART_SHARE` of the room when
the processes would take it all. Under :data:`CHART_MIN_HEIGHT` rows they are
hidden: at 80x24 the monitor looks as it did without them. As the terminal
narrows, the charts of lower priority go first (utilisation, memory and power
stay longest).

When: the app calls :meth:`ChartView.show` on every refresh; the charts are
drawn again only when a new snapshot, the window, the mode, the size or the GPUs
shown changed -- no timer. The data comes from each GPU's
:class:`~nvtopy.sources.timeline.Timeline`, read as of the snapshot's time, so a
replay draws what was recorded up to the snapshot it shows. A chart whose dots
did not move keeps its lines (:class:`~nvtopy.render.chart.ChartMemo`), and only
terminal lines that changed are sent.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from textual.strip import Strip
from textual.widget import Widget

from ..model import ChartSeries, GpuState, Snapshot
from ..render.chart import GPU_COLORS, ChartMemo, Trace, braille_chart, legend_line, rate_ceiling, short_rate
from ..render.styled import Line
from ..render.units import short_name
from ..sources.timeline import EMPTY_SERIES, METRICS, Timeline, metric_values
from .redraw import changed_lines, refresh_lines

__all__ = [
    "CHART_MIN_HEIGHT",
    "CHART_MIN_WIDTH",
    "CHART_MODES",
    "CHART_SHARE",
    "DEFAULT_WINDOW",
    "TABLE_MIN",
    "ChartView",
    "chart_rows",
    "spare_rows",
    "window_label",
]

CHART_MODES = ("metric", "gpu", "off")
"""``c`` cycles: one chart per metric (GPUs overlaid), one chart per GPU (metrics overlaid), none."""
MODE_WORDS = {"metric": "one chart per metric, GPUs overlaid", "gpu": "one chart per GPU", "off": "off"}
DEFAULT_WINDOW = 60.0
CHART_MIN_WIDTH = 36  # cells: a narrower chart is not drawn (a narrow terminal gets fewer charts)
CHART_MIN_HEIGHT = 7  # rows: title, 5 rows of plot, time axis
TABLE_MIN = 8  # rows the process table always keeps: its header and 7 processes
CHART_SHARE = 1 / 3  # of the room under the GPU area, the charts' share when the processes would take it all
GROW_STEP = 3  # the charts grow only by this many rows or more, so a process coming and going never flickers
MARGIN = 1  # the blank line between the charts and the table
GAP = 2  # cells between two charts side by side
_CHROME = 3  # the header line, the footer, and the blank line under the GPU area


def window_label(window: float) -> str:
    """``1 min``, ``10 min``, ``1 h``, ``24 h``."""
    return f"{window / 3600:g} h" if window >= 3600 else f"{window / 60:g} min"


def chart_rows(spare: int, table_rows: int, current: int = 0) -> int:
    """Rows for the charts out of ``spare`` (what the GPU area and the app's chrome leave), 0: none.

    The table keeps ``table_rows`` (its header and its processes) but at least :data:`TABLE_MIN`,
    yet the charts get :data:`CHART_SHARE` of the room in any case; below :data:`CHART_MIN_HEIGHT`
    they are hidden. ``current``: what they have now -- they shrink at once, but grow only by
    :data:`GROW_STEP` rows or more.
    """
    room = spare - MARGIN
    wanted = room - max(TABLE_MIN, table_rows)
    rows = max(wanted, min(room - TABLE_MIN, int(room * CHART_SHARE)))
    if rows < CHART_MIN_HEIGHT:
        return 0
    if current and current <= rows < current + GROW_STEP:
        return current
    return rows


@dataclass(frozen=True, slots=True)
class _Spec:
    metric: str
    title: str
    kind: str  # "percent", "memory", "power" or "rate"
    always: bool = False  # drawn even while no GPU reports it (N/A is worth seeing)


SPECS: tuple[_Spec, ...] = (
    _Spec("utilization", "GPU util", "percent", always=True),
    _Spec("memory", "memory used", "memory", always=True),
    _Spec("power", "power", "power", always=True),
    _Spec("sm_active", "SM active", "percent"),
    _Spec("pcie_rx", "PCIe RX", "rate"),
    _Spec("pcie_tx", "PCIe TX", "rate"),
    _Spec("nvlink_rx", "NVLink RX", "rate"),
    _Spec("nvlink_tx", "NVLink TX", "rate"),
)
"""One chart per metric, most important first: a narrow terminal keeps the first ones."""

# One chart per GPU: its metrics on a 0-100 % scale, each in its own colour.
GPU_TRACES: tuple[tuple[str, str, str], ...] = (
    ("utilization", "util", GPU_COLORS[0]),
    ("memory", "mem", GPU_COLORS[1]),
    ("power", "pwr", GPU_COLORS[5]),
    ("sm_active", "SM", GPU_COLORS[2]),
)
_INDEX = {name: i for i, name in enumerate(METRICS)}
_GIB = 2**30
OVERLAID = 4
"""The most GPUs one chart per metric overlays (each in a colour of its own): more are a tangle."""
RECENT_BUCKETS = 120
"""Buckets of the window's end that rank GPUs for :func:`spread` (a 24-hour window ranks by its last two hours):
the rank follows what is happening now, yet does not flip with one sample."""


def _recent_mean(values: Sequence[float]) -> float | None:
    """The mean of the last :data:`RECENT_BUCKETS` values that are numbers; None when there are none."""
    window = values[-RECENT_BUCKETS:]
    total = sum(window)
    if window and math.isfinite(total):  # no NaN (a missed sample) nor infinity among them: every one counts
        return total / len(window)
    recent = [v for v in window if math.isfinite(v)]
    return sum(recent) / len(recent) if recent else None


def spread(means: Sequence[tuple[int, float | None]], count: int = OVERLAID) -> list[int]:
    """Which of ``(index, recent mean)`` to draw when there are more than ``count``: the highest half and the
    lowest half of ``count`` (a GPU with no value ranks last: nothing to draw), in index order."""
    if len(means) <= count:
        return sorted(index for index, _ in means)
    known = sorted((mean, index) for index, mean in means if mean is not None)
    high = count - count // 2
    top = [index for _, index in known[-high:]] if known else []
    rest = [index for _, index in known if index not in top]
    bottom = rest[: count - len(top)]
    chosen = set(top) | set(bottom)
    if len(chosen) < count:  # too few with values: fill in index order
        chosen |= set(sorted(index for index, _ in means if index not in chosen)[: count - len(chosen)])
    return sorted(chosen)


def _grid(count: int, width: int, height: int) -> tuple[int, int]:
    """(columns, rows) of charts for ``count`` of them: as few rows as show them all, then balanced columns."""
    if count <= 0:
        return 1, 1
    most_columns = max(1, (width + GAP) // (CHART_MIN_WIDTH + GAP))
    most_rows = max(1, height // CHART_MIN_HEIGHT)
    rows = min(most_rows, math.ceil(count / most_columns))
    columns = math.ceil(min(count, rows * most_columns) / rows)
    return columns, rows


def _split(total: int, parts: int, gap: int = 0) -> list[int]:
    """``total`` cells in ``parts`` near-equal sizes (the first ones a cell larger), ``gap`` between them."""
    room = total - gap * (parts - 1)
    base, extra = divmod(room, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _percent(value: float) -> str:
    return f"{value:.0f}%"


def _watts(value: float) -> str:
    return f"{value:.0f}W"


def _gib(value: float) -> str:
    return f"{value:.0f}G"


def _gib_of(percent: float, *, total: int, digits: int) -> str:
    """A share of ``total`` bytes in GiB (the memory chart's traces are a share of the memory): ``61.2G``."""
    return f"{percent * total / 100 / _GIB:.{digits}f}G"


class ChartView(Widget):
    """The history charts; the app gives it the snapshot and the rows to spare (:meth:`show`)."""

    DEFAULT_CSS = """
    ChartView { height: 0; display: none; margin: 0 0 1 0; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.window = DEFAULT_WINDOW
        self.mode = CHART_MODES[0]
        self.rows = 0  # rows given to the charts now (0: hidden)
        self.draws = 0  # times the charts were drawn (the tests count them: no data, no drawing)
        self._lines: list[Strip] = []
        self._signature: object = None
        self._memos: dict[object, ChartMemo] = {}
        self._snapshot: Snapshot | None = None
        self._gpus: tuple[GpuState, ...] = ()
        self._room = (0, 0)  # the last (spare rows, table rows) the app gave
        self._width = 0  # the width last drawn at

    # ----------------------------------------------------------------- the app's controls

    def show(self, snapshot: Snapshot, gpus: tuple[GpuState, ...], spare: int, table_rows: int) -> None:
        """Give the charts what ``spare`` rows allow (:func:`chart_rows`) and draw ``gpus`` as of ``snapshot``.

        Nothing is drawn when nothing they show changed since the last call.
        """
        charted = any(isinstance(g.timeline, Timeline) for g in gpus)  # a hand-made snapshot may have none
        rows = chart_rows(spare, table_rows, self.rows) if self.mode != "off" and charted else 0
        if rows != self.rows:
            self.rows = rows
            if rows:
                self.styles.height = rows
            self.display = bool(rows)
        if not rows:
            self._signature = None
            return
        width = self.size.width or self.app.size.width  # not laid out yet: the screen's width
        signature = (
            snapshot.timestamp,
            snapshot.sequence,
            tuple((g.index, id(g.timeline), g.static) for g in gpus),
            width,
            rows,
            self.window,
            self.mode,
        )
        if signature == self._signature:
            return
        self._signature = signature
        self._snapshot, self._gpus, self._room, self._width = snapshot, gpus, (spare, table_rows), width
        self._draw(width, rows)

    def no_room(self) -> str:
        """`` (no room for them here: ...)`` when the charts are on but the terminal has no rows to spare."""
        if self.mode == "off" or self.rows:
            return ""
        return " (no rows to spare for them here: a taller terminal or fewer processes shows them)"

    def on_resize(self) -> None:
        """The terminal's width changed (the app's own resize handler ran before the layout)."""
        width = self.size.width
        if self._snapshot is None or not self.rows or not width or width == self._width:
            return
        self._signature = None
        self.show(self._snapshot, self._gpus, *self._room)

    # ----------------------------------------------------------------- drawing

    def _draw(self, width: int, height: int) -> None:
        self.draws += 1
        charts = self._charts()
        columns, grid_rows = _grid(len(charts), width, height)
        hidden = len(charts) - columns * grid_rows
        charts = charts[: columns * grid_rows]
        if hidden > 0 and isinstance(charts[-1], _GpuChart):
            charts[-1].more = hidden  # say so: "+3 GPUs (c: per metric)"
        heights = _split(height, grid_rows)
        lines: list[Strip] = []
        for r, chart_height in enumerate(heights):
            row = charts[r * columns : (r + 1) * columns]
            if not row:
                lines.extend(Strip.blank(width) for _ in range(chart_height))
                continue
            widths = _split(width, columns, gap=GAP)
            drawn = [chart(w, chart_height) for chart, w in zip(row, widths, strict=False)]
            used = sum(widths[: len(row)]) + GAP * (len(row) - 1)  # every chart line is exactly its width
            pad = [Segment(" " * (width - used))] if width > used else []
            for y in range(chart_height):
                segments: list[Segment] = []
                for i, chart_lines_ in enumerate(drawn):
                    if i:
                        segments.append(_GAP)
                    segments.extend(chart_lines_[y].segments())
                lines.append(Strip([*segments, *pad], width))
        old = self._lines
        self._lines = lines
        if len(old) > len(lines):
            self.refresh()
        else:
            refresh_lines(self, changed_lines(old, lines), width)

    def _charts(self) -> list[_Chart]:
        snapshot, gpus = self._snapshot, [g for g in self._gpus if isinstance(g.timeline, Timeline)]
        if snapshot is None or not gpus:
            return []
        if self.mode == "gpu":
            return [_GpuChart(self, g, snapshot.timestamp) for g in gpus]
        values = {g.index: metric_values(g.static, g.sample) for g in gpus}
        shown = [s for s in SPECS if s.always or any(v[_INDEX[s.metric]] is not None for v in values.values())]
        return [_MetricChart(self, spec, gpus, values, snapshot.timestamp) for spec in shown]

    def memo(self, key: object) -> ChartMemo:
        memo = self._memos.get(key)
        if memo is None:
            memo = self._memos[key] = ChartMemo()
        return memo

    def render_line(self, y: int) -> Strip:
        if y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.size.width)


class _Chart:
    """One chart of the grid, drawn at the size the grid gives it."""

    def __call__(self, width: int, height: int) -> list[Line]:
        raise NotImplementedError


class _MetricChart(_Chart):
    """One metric, every GPU overlaid in its colour; the legend gives each GPU's value now."""

    def __init__(
        self,
        view: ChartView,
        spec: _Spec,
        gpus: Sequence[GpuState],
        values: dict[int, tuple[float | None, ...]],
        end: float,
    ) -> None:
        self.view, self.spec, self.gpus, self.values, self.end = view, spec, gpus, values, end

    def __call__(self, width: int, height: int) -> list[Line]:
        spec, view, end = self.spec, self.view, self.end
        window = view.window
        metric = spec.metric
        series = [(g, _series_of(g, metric, window, end)) for g in self.gpus]
        scale, top = 1.0, 100.0
        axis: Callable[[float], str] = _percent
        now: Callable[[float], str] = _percent
        total = None
        if spec.kind == "memory":
            totals = {g.static.memory_total_bytes for g in self.gpus}
            total = totals.pop() if len(totals) == 1 else None
            if total:
                scale, top, axis = total / _GIB / 100, total / _GIB, _gib
                now = functools.partial(_gib_of, total=total, digits=1)
        elif spec.kind == "power":
            limits = [
                g.sample.power_limit_w or g.static.power_max_limit_w or g.static.power_default_limit_w
                for g in self.gpus
            ]
            known = [limit for limit in limits if limit]
            top = max(known) if known else _peak(s for _, s in series)
            top = top if top > 0 else 1.0
            axis = now = _watts
        elif spec.kind == "rate":
            top = rate_ceiling(_peak(s for _, s in series))
            axis = now = short_rate
        short = functools.partial(_gib_of, total=total, digits=0) if spec.kind == "memory" and total else now
        title = Line(f" {spec.title} ", "bold")
        entries, traces, others, now = self._legend(series, title, width, scale, (now, short))
        note = f"{now(min(others))} to {now(max(others))}" if others else ""
        title = legend_line(title, entries, width, hidden=len(series) - len(traces), note=note)
        memo = view.memo(("metric", metric))
        return braille_chart(title, traces, width, height, window=window, end=end, top=top, axis=axis, memo=memo)

    def _legend(
        self,
        series: Sequence[tuple[GpuState, ChartSeries]],
        title: Line,
        width: int,
        scale: float,
        formats: Sequence[Callable[[float], str]],
    ) -> tuple[list[Line], list[Trace], list[float], Callable[[float], str]]:
        """The GPUs to draw, their legend entries and traces, the values now of those left out, and the
        format used: as many GPUs as the legend names in ``width`` (at most :data:`OVERLAID`, the spread:
        :func:`spread`), each value in its long format, else its short one, before a GPU is left out."""
        metric = self.spec.metric
        k = _INDEX[metric]
        indices = [gpu.index for gpu, _ in series]
        means = [(index, _recent_mean(s.mean)) for index, (_, s) in zip(indices, series, strict=True)]
        values = [self.values[index][k] for index in indices]
        texts: dict[tuple[int, float | None], str] = {}  # (format, value): its text, made once
        # Each GPU's entry, `` 3:61%``, measured once a format, not once for every count of GPUs tried.
        cells_of: list[list[int]] = []
        for f, form in enumerate(formats):
            sizes: list[int] = []
            for index, value in zip(indices, values, strict=True):
                text = texts.get((f, value))
                if text is None:
                    text = texts[(f, value)] = "N/A" if value is None else form(value)
                sizes.append(len(f" {index}:") + cell_len(text))
            cells_of.append(sizes)
        count, fmt = 1, formats[-1]  # what is drawn when nothing fits: one GPU, its value short
        # Which GPUs and format fit, measured from the texts alone: the lines and traces are made once, below.
        chosen: dict[int, set[int]] = {}  # spread's GPUs by how many were tried
        for tried in range(min(OVERLAID, len(series)), 0, -1):  # only lines the legend can name
            drawn = chosen[tried] = set(spread(means, tried))
            more = len(f" +{len(series) - tried} more") if tried < len(series) else 0
            for form, sizes in zip(formats, cells_of, strict=True):
                shown = [size for index, size in zip(indices, sizes, strict=True) if index in drawn]
                if title.cells + more + sum(shown) <= width:
                    count, fmt = tried, form
                    break
            else:
                continue
            break
        drawn = chosen[count] if count in chosen else set(spread(means, count))
        entries: list[Line] = []
        traces: list[Trace] = []
        others: list[float] = []
        for (gpu, s), value in zip(series, values, strict=True):
            if gpu.index not in drawn:
                if value is not None:
                    others.append(value)
                continue
            color = GPU_COLORS[len(traces) % len(GPU_COLORS)]  # a colour each: at most OVERLAID lines
            entries.append(Line(f" {gpu.index}:", color).add("N/A" if value is None else fmt(value), color))
            key = (id(gpu.timeline), metric)
            traces.append(Trace(color, s.step, s.buckets, s.lo, s.mean, s.hi, scale, key))
        return entries, traces, others, fmt


class _GpuChart(_Chart):
    """One GPU, its metrics overlaid on 0-100 % (power as a share of its limit)."""

    def __init__(self, view: ChartView, gpu: GpuState, end: float) -> None:
        self.view, self.gpu, self.end = view, gpu, end
        self.more = 0  # GPUs after this one that found no room

    def __call__(self, width: int, height: int) -> list[Line]:
        gpu, view, end = self.gpu, self.view, self.end
        window = view.window
        values = metric_values(gpu.static, gpu.sample)
        limit = gpu.sample.power_limit_w or gpu.static.power_max_limit_w or gpu.static.power_default_limit_w
        title = Line(f" GPU {gpu.index} ", "bold")
        entries, traces = [], []
        for metric, label, color in GPU_TRACES:
            value = values[_INDEX[metric]]
            if metric == "sm_active" and value is None:
                continue
            scale = 1.0
            if metric == "power":
                if not limit:
                    continue
                scale = 100.0 / limit
            entries.append(Line(f" {label} ", color).add("N/A" if value is None else f"{value * scale:.0f}%", color))
            s = _series_of(gpu, metric, window, end)
            traces.append(Trace(color, s.step, s.buckets, s.lo, s.mean, s.hi, scale, (id(gpu.timeline), metric)))
        keep = Line()
        if self.more:  # GPUs that found no room: said whole, with the key to see them where it fits
            gpus = f"  +{self.more} GPU{'s' if self.more > 1 else ''}"
            listed = title.cells + sum(entry.cells for entry in entries)
            hint = " (c: per metric)" if listed + len(gpus) + 16 <= width else ""
            keep.add(gpus + hint, "bold")
        named = Line().extend(keep).add(f"  {short_name(gpu.static.name)}", "dim")
        if title.cells + sum(entry.cells for entry in entries) + named.cells <= width:
            keep = named  # the model's name where the whole legend leaves room
        title = legend_line(title, entries, width, keep=keep)
        memo = view.memo(("gpu", gpu.index))
        return braille_chart(title, traces, width, height, window=window, end=end, top=100.0, axis=_percent, memo=memo)


def _peak(series: object) -> float:
    """The highest value of some series (0 when they have none)."""
    return max((max(filter(math.isfinite, s.hi), default=0.0) for s in series), default=0.0)  # type: ignore[attr-defined]


_GAP = Segment(" " * GAP)


def spare_rows(screen_height: int, gpu_lines: int, filter_shown: bool = False) -> int:
    """The rows under the GPU area that the charts and the table share (header, footer, margins and the
    filter box taken off)."""
    return screen_height - gpu_lines - _CHROME - (2 if filter_shown else 0)


def _series_of(gpu: GpuState, metric: str, window: float, end: float) -> ChartSeries:
    """A charted GPU's series of ``metric`` (a chart holds GPUs with a timeline; one without reads as empty)."""
    return EMPTY_SERIES if gpu.timeline is None else gpu.timeline.series(metric, window, end)

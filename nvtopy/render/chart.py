"""History charts in braille: a fixed value axis, a time axis ending at "now", several traces.

Headless like the rest of ``render/``: a chart is a list of :class:`~nvtopy.render.styled.Line`,
one per terminal row, from plain numbers (the min / mean / max buckets of
:mod:`nvtopy.sources.timeline`, handed over by the view). Each cell is a braille
character, 2 dots wide and 4 tall, so a chart of 50 x 8 cells draws 100 x 32 dots.

A dot column covers ``window / dots`` seconds, aligned to the clock (not to the
time of drawing), so as time passes the picture moves in whole columns and the
newest column is the one that changes. The line is each column's mean (the mean of
its buckets' means), joined column to column; where the highest value of its
buckets stands well above the line (:data:`PEAK_SHARE`) a dot marks it: a
one-second spike still shows at the 24-hour zoom. A gap in the data (no sample)
stays empty unless it is shorter than :data:`HOLD` seconds (a slow poll interval),
which is drawn as the last value held.

Where traces cross in one cell the one drawn last colours it (the legend says which is which).

The other kind of chart here draws one value a column, in eighth blocks (``▁▂▃▄▅▆▇█``), newest on
the right: :func:`block_chart`. It has no time axis -- a column is a refresh, not a span of the
clock -- and serves the short histories: the GPU panels' sparklines (:func:`sparkline`, one line
tall) and the process screen's charts (several lines tall).
"""

from __future__ import annotations

import functools
import itertools
import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .styled import Line, style

__all__ = [
    "AXIS_STYLE",
    "GPU_COLORS",
    "HOLD",
    "PEAK_SHARE",
    "ChartMemo",
    "Trace",
    "block_chart",
    "braille_chart",
    "legend_line",
    "nice_ceiling",
    "rate_ceiling",
    "short_rate",
    "sparkline",
    "time_label",
]

HOLD = 25.0
"""Seconds without data that a trace bridges (the longest poll interval is 10 s; a lost GPU's gap shows)."""

PEAK_SHARE = 5
"""A column's peak is drawn as a dot when it stands at least 1/PEAK_SHARE of the axis above the line."""

# Okabe and Ito's colour-blind-safe palette (sky blue, orange, bluish green, yellow, reddish purple,
# vermillion, blue) and a light grey: told apart under every kind of colour blindness and every theme.
GPU_COLORS: tuple[str, ...] = ("#56B4E9", "#E69F00", "#009E73", "#F0E442", "#CC79A7", "#D55E00", "#0072B2", "#C8C8C8")
AXIS_STYLE = "bright_black"

# Braille dot bits by (dot column in the cell, dot row counted from the cell's bottom).
_BITS = ((0x40, 0x04, 0x02, 0x01), (0x80, 0x20, 0x10, 0x08))
_BRAILLE = (" ", *(chr(0x2800 + bits) for bits in range(1, 256)))  # an empty cell is a space
# Lower eighth blocks by height in eighths of a cell: nothing to a full cell.
_BLOCKS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True, slots=True)
class Trace:
    """One line of a chart: buckets of ``step`` seconds (bucket ``b`` starts at ``b * step``), oldest first.

    ``lo``, ``mean`` and ``hi`` are the buckets' lowest, mean and highest values (NaN: no value),
    each multiplied by ``scale`` when drawn (power as a share of its limit, say). ``key`` names the
    trace in a :class:`ChartMemo` (a GPU and a metric): its finished columns are kept there.
    """

    color: str
    step: float
    buckets: Sequence[int]
    lo: Sequence[float]
    mean: Sequence[float]
    hi: Sequence[float]
    scale: float = 1.0
    key: object = None


class _Columns:
    """A trace's finished dot columns, by their number since the epoch: (lowest, highest, sum of means, buckets).

    A column is finished when every bucket in it is older than the trace's newest bucket (only
    the newest bucket of a timeline still changes), so a redraw aggregates only the buckets of
    the last column or two instead of the whole window: 1,440 buckets at the 24-hour zoom.
    """

    __slots__ = ("done", "factor", "from_", "shape", "values", "ys")

    def __init__(self, shape: tuple[float, float]) -> None:
        self.shape = shape  # (column seconds, bucket seconds): another zoom or width starts afresh
        self.from_ = 0  # ``values`` holds columns from_ .. done - 1, in order (None: no data)
        self.done = 0
        self.values: list[tuple[float, float, float, int] | None] = []
        self.factor = 0.0  # the scale ``ys`` were drawn at
        self.ys: list[tuple[int, int, int] | None] = []  # the first len(ys) of ``values`` as dot rows at ``factor``

    def reset(self, column: int) -> None:
        self.from_ = self.done = column
        self.values.clear()
        self.ys.clear()


class ChartMemo:
    """What a view keeps of one chart between redraws: each trace's finished columns, and the last picture.

    A redraw whose every column lands on the same dots as before returns the same lines without
    drawing them again (an idle GPU, or a long zoom between two of its columns).
    """

    __slots__ = ("columns", "lines", "signature")

    def __init__(self) -> None:
        self.columns: dict[object, _Columns] = {}
        self.signature: object = None
        self.lines: list[Line] = []


def legend_line(
    title: Line, entries: Sequence[Line], width: int, *, hidden: int = 0, note: str = "", keep: Line | None = None
) -> Line:
    """A chart's title line of ``width`` cells: ``title``, as many ``entries`` (one a trace: ``3:93%``) as
    fit, then `` +N more`` for the entries left out and the ``hidden`` series not drawn at all, with
    ``note`` (what those hidden ones read now: ``42-91%``) where it fits, then ``keep`` (a part that must
    stay, e.g. how to see the rest).

    Never cut silently: an entry does not fit whole, it is counted in the "+N more" instead (the chart
    says there is more than its legend lists).
    """
    keep = keep if keep is not None else Line()
    for shown in range(len(entries), -1, -1):
        more = hidden + len(entries) - shown
        suffix = Line()
        if more:
            suffix = Line(f" +{more} more", "bold")
            if note and shown == len(entries):  # the note is about the hidden ones only
                with_note = Line().extend(suffix).add(f" {note}", "dim")
                used = title.cells + sum(e.cells for e in entries) + keep.cells
                if used + with_note.cells <= width:
                    suffix = with_note
        used = title.cells + sum(e.cells for e in entries[:shown]) + suffix.cells + keep.cells
        if used <= width or shown == 0:
            line = Line().extend(title)
            for entry in entries[:shown]:
                line.extend(entry)
            return line.extend(suffix).extend(keep).fit(width)
    raise AssertionError("unreachable")


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at or above ``value`` (at least 1): an axis that does not jitter."""
    if not value > 1:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if value <= factor * power * (1 + 1e-9):
            return factor * power
    return 10.0 * power


def rate_ceiling(value: float) -> float:
    """A rate axis's top: 1, 2, 5 x 10^n of the binary unit the peak is counted in (200M, 1G, 20G)."""
    for size in (2**40, 2**30, 2**20, 2**10, 1):
        if value >= size or size == 1:
            top = nice_ceiling(value / size)
            return (nice_ceiling(value / size / 1024) * 1024 if top >= 1024 else top) * size
    return 1.0


def short_rate(value: float) -> str:
    """A rate in bytes per second in at most 5 cells, binary prefixes: ``0``, ``512``, ``1.5K``, ``20G``."""
    for unit, size in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if value >= size:
            scaled = value / size
            return f"{scaled:.1f}{unit}" if scaled < 10 and scaled != int(scaled) else f"{scaled:.0f}{unit}"
    return f"{value:.0f}"


def time_label(seconds: float) -> str:
    """How long before now, as the time axis writes it: ``now``, ``-45s``, ``-10m``, ``-1h``, ``-24h``."""
    whole = round(seconds)
    if whole <= 0:
        return "now"
    if whole >= 3600 and whole % 3600 == 0:
        return f"-{whole // 3600}h"
    if whole >= 3600 and whole % 60 == 0:
        return f"-{whole // 3600}h{whole % 3600 // 60:02d}"
    if whole >= 60 and whole % 60 == 0:
        return f"-{whole // 60}m"
    if whole >= 60:
        return f"-{whole // 60}m{whole % 60:02d}"
    return f"-{whole}s"


_TICKS = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@functools.lru_cache(maxsize=64)
def _time_axis(window: float, width: int) -> str:
    """``-10m    -8m    -6m    -4m    -2m    now`` in ``width`` cells: ticks as dense as the width allows."""
    cells = [" "] * width
    step = next((t for t in _TICKS if window / t <= max(1, width // 9)), window)
    ticks = [window - k * step for k in range(int(window // step) + 1)]
    if ticks[-1] > 0:
        ticks.append(0.0)
    taken = -1  # the last cell a label (and its gap) took
    for ago in ticks:
        label = time_label(ago)
        x = (width - 1) * (1 - ago / window)
        if ago >= window:
            start = 0
        elif ago <= 0:
            start = width - len(label)
        else:
            start = round(x - len(label) / 2)
        start = max(0, min(width - len(label), start))
        if start <= taken or start + len(label) > width:
            continue
        if ago > 0 and width - start - len(label) < 4:  # crowding "now"
            continue
        cells[start : start + len(label)] = label
        taken = start + len(label)
    return "".join(cells)


def _aggregate(
    trace: Trace, dots: int, window: float, end: float, memo: _Columns | None
) -> tuple[dict[int, tuple[float, float, float, int]], int]:
    """The trace's columns that are not finished yet (all of them without a ``memo``), by column number:
    (lowest, highest, sum of means, buckets); and the first of them (the ones before are in ``memo``)."""
    dt = window / dots
    last_column = math.floor(end / dt)  # the last column holds ``end``: columns are aligned to the clock
    first_column = last_column - dots + 1
    buckets, step = trace.buckets, trace.step
    if memo is not None and (memo.from_ > first_column or not first_column <= memo.done <= last_column + 1):
        memo.reset(first_column)
    start = first_column if memo is None else memo.done
    columns: dict[int, tuple[float, float, float, int]] = {}
    lo_values, means, hi_values = trace.lo, trace.mean, trace.hi
    per_dot = 1.0 / dt
    span = step * per_dot
    first = bisect_left(buckets, math.floor(start * dt / step)) if start > first_column else 0
    for i in range(first, len(buckets)):
        mean = means[i]
        if math.isnan(mean):  # the bucket had no value of this metric
            continue
        begin = buckets[i] * step * per_dot
        j0 = max(math.floor(begin), start)
        j1 = min(math.ceil(begin + span) - 1, last_column)
        low, high = lo_values[i], hi_values[i]
        for j in range(j0, j1 + 1):
            old = columns.get(j)
            if old is None:
                columns[j] = (low, high, mean, 1)
            else:
                columns[j] = (
                    low if low < old[0] else old[0],
                    high if high > old[1] else old[1],
                    old[2] + mean,
                    old[3] + 1,
                )
    if memo is not None and buckets:
        done = max(start, min(last_column, math.floor(buckets[-1] * step * per_dot)))
        if first_column - memo.from_ > dots:  # columns gone off the left edge
            cut = first_column - memo.from_
            del memo.values[:cut], memo.ys[:cut]
            memo.from_ = first_column
        memo.values.extend(columns.pop(j, None) for j in range(start, done))
        memo.done = done
        return columns, done
    return columns, start


def _dots(value: tuple[float, float, float, int], factor: float, top_dot: int) -> tuple[int, int, int]:
    """A column's (lowest, mean, highest) as dot rows from 0 to ``top_dot``."""
    low, high, total, count = value
    y_low = int(low * factor + 0.5)
    y_mean = int(total / count * factor + 0.5)
    y_high = int(high * factor + 0.5)
    return (
        0 if y_low < 0 else top_dot if y_low > top_dot else y_low,
        0 if y_mean < 0 else top_dot if y_mean > top_dot else y_mean,
        0 if y_high < 0 else top_dot if y_high > top_dot else y_high,
    )


def _columns(
    trace: Trace, dots: int, *, window: float, end: float, scale_y: float, top_dot: int, memo: _Columns | None = None
) -> list[tuple[int, int, int] | None]:
    """Per dot column, the (lowest, mean, highest) dot rows of the buckets it covers; None where there are none."""
    dt = window / dots
    first_column = math.floor(end / dt) - dots + 1
    fresh, start = _aggregate(trace, dots, window, end, memo)
    columns: list[tuple[int, int, int] | None] = [None] * dots
    factor = scale_y * trace.scale
    if memo is not None:
        if memo.factor != factor:
            memo.factor = factor
            memo.ys.clear()
        ys = memo.ys
        ys.extend(None if v is None else _dots(v, factor, top_dot) for v in memo.values[len(ys) :])
        base = memo.from_
        columns[: start - first_column] = ys[first_column - base : start - base]
    for j, value in fresh.items():
        columns[j - first_column] = _dots(value, factor, top_dot)
    # A short gap (a slow poll interval, a late sample): the last value, held.
    filled = [j for j, column in enumerate(columns) if column is not None]
    if filled and filled[-1] - filled[0] + 1 != len(filled):
        hold = max(1, int(HOLD / dt))
        for before, after in itertools.pairwise(filled):
            if 1 < after - before <= hold + 1:
                held = columns[before][1]  # type: ignore[index]
                columns[before + 1 : after] = [(held, held, held)] * (after - before - 1)
    return columns


@functools.lru_cache(maxsize=8192)
def _cell(
    rows: int, left: tuple[int, int, int] | None, right: tuple[int, int, int] | None
) -> tuple[tuple[int, int], ...]:
    """The (row, braille bits) of a column of cells whose two dot columns draw ``left`` and ``right``:
    (low, high, peak) dot rows, 0 at the bottom -- a line from low to high and a dot at peak (-1: none);
    None: nothing."""
    cells: dict[int, int] = {}
    for side, span in zip(_BITS, (left, right), strict=True):
        if span is None:
            continue
        low, high, peak = span
        for y in (*range(low, high + 1), peak) if peak >= 0 else range(low, high + 1):
            row = rows - 1 - (y >> 2)
            cells[row] = cells.get(row, 0) | side[y & 3]
    return tuple(cells.items())


def braille_chart(
    title: Line,
    traces: Sequence[Trace],
    width: int,
    height: int,
    *,
    window: float,
    end: float,
    top: float,
    axis: Callable[[float], str],
    memo: ChartMemo | None = None,
) -> list[Line]:
    """A chart of ``width`` x ``height`` cells: ``title`` (its legend), the plot with a value axis from 0 to
    ``top`` (labelled with ``axis``), and a time axis over the ``window`` seconds up to ``end`` (Unix time).

    Values above ``top`` are drawn at the top, below 0 at the bottom. Fewer than 3 rows: the title only.
    ``memo``: what this chart kept from its last redraw (finished columns, the last picture): the same
    lines come back, unchanged objects, when nothing lands on other dots.
    """
    rows = height - 2
    if rows < 1 or width < 12:
        return [Line().extend(title).fit(width)] + [Line().fit(width) for _ in range(height - 1)]
    dots_y = 4 * rows
    labels = {0: axis(top), rows - 1: axis(0.0)}
    middle = rows - 1 - int((dots_y - 1) / 2 + 0.5) // 4  # the row where a value of top / 2 is drawn
    if rows >= 4 and 0 < middle < rows - 1:
        labels[middle] = axis(top / 2)
    gutter = max(len(text) for text in labels.values()) + 1
    plot = width - gutter
    dots_x = 2 * plot
    scale_y = (dots_y - 1) / top if top > 0 else 0.0
    every = []
    for trace in traces:
        kept = None
        if memo is not None:
            shape = (window / dots_x, trace.step)
            kept = memo.columns.get(trace.key)
            if kept is None or kept.shape != shape:
                kept = memo.columns[trace.key] = _Columns(shape)
        every.append(_columns(trace, dots_x, window=window, end=end, scale_y=scale_y, top_dot=dots_y - 1, memo=kept))
    signature = (width, height, window, tuple(labels.items()), title.parts, [t.color for t in traces], every)
    if memo is not None:
        if memo.signature == signature:
            return memo.lines
        if len(memo.columns) > 2 * len(traces) + 8:  # traces that went (a GPU deselected)
            wanted = {trace.key for trace in traces}
            memo.columns = {k: v for k, v in memo.columns.items() if k in wanted}
    peak_gap = max(2, dots_y // PEAK_SHARE)
    bits = [[0] * plot for _ in range(rows)]
    owner = [[-1] * plot for _ in range(rows)]
    for k, columns in enumerate(every):
        # Each dot column draws its mean, joined to the previous column's, and a dot at its peak (the highest
        # value of its buckets) where that stands well above the line: (low, high, peak or -1) per column.
        # One comprehension (no per-column statements): the previous column's mean, -1 after a gap (a list
        # comprehension, not a generator unpacked: a resumed frame a column, five charts a second).
        previous = [-1] + [-1 if column is None else column[1] for column in columns[:-1]]
        spans: list[tuple[int, int, int] | None] = [
            None
            if c is None
            else (p if 0 <= p < c[1] else c[1], hi := (p if p > c[1] else c[1]), c[2] if c[2] - hi >= peak_gap else -1)
            for c, p in zip(columns, previous, strict=True)
        ]
        # Each cell's dots at once (cached by its two dot columns: a flat or idle stretch repeats them).
        for cell, dots in enumerate(map(functools.partial(_cell, rows), spans[0::2], spans[1::2])):
            for row, mask in dots:
                bits[row][cell] |= mask
                owner[row][cell] = k
    colors = [style(trace.color) for trace in traces]
    lines = [Line().extend(title).fit(width)]
    for r in range(rows):
        label = labels.get(r)
        line = Line(f"{label:>{gutter - 1}}┤" if label is not None else " " * (gutter - 1) + "│", AXIS_STYLE)
        row_bits = bits[r]
        parts = line.parts
        if not any(row_bits):  # nothing drawn on this row: one blank run
            parts.append((" " * plot, None))
        else:
            text = "".join(map(_BRAILLE.__getitem__, row_bits))
            x = 0
            for k, run in itertools.groupby(owner[r]):  # a cell has an owner only where it has dots
                size = len(list(run))  # braille is one cell a character: no measuring
                parts.append((text[x : x + size], colors[k] if k >= 0 else None))
                x += size
        line.cells += plot
        lines.append(line)
    lines.append(Line(" " * (gutter - 1) + "└", AXIS_STYLE).add(_time_axis(window, plot), AXIS_STYLE))
    if memo is not None:
        memo.signature, memo.lines = signature, lines
    return lines


def _block_cell(level: int, base: int, bottom: bool, style_name: str) -> tuple[str, str]:
    """The (character, style) of a block chart's cell ``base`` eighths above the baseline, for a column
    ``level`` eighths tall (-1: no value); ``bottom``: the cell is on the baseline."""
    if level < 0:
        return ("·", "dim") if bottom else (" ", "")
    fill = level - base
    if fill > 0:
        return (_BLOCKS[fill if fill < 8 else 8], style_name)
    return ("▁", AXIS_STYLE) if bottom and level == 0 else (" ", "")


def block_chart(values: Sequence[float | None], width: int, height: int, top: float, style_name: str) -> list[Line]:
    """The last ``width`` values as columns ``height`` lines tall on a fixed 0..``top`` scale, right-aligned.

    Eighth-cell precision; a missing value (None or NaN) is a dim dot on the baseline, a zero
    the dim baseline itself (so an idle process still shows a line). Top line first.

    Drawn a line at a time from each column's height in eighths: a line's cells take few distinct
    values (nine heights at most), each worked out once, and a run of one style is one piece.
    """
    if width <= 0 or height <= 0:
        return []
    recent = values[-width:]
    eighths = height * 8
    levels = [
        -1
        if value is None or math.isnan(value)
        else round(min(1.0, max(0.0, value / top if top > 0 else 0.0)) * eighths)
        for value in recent
    ]
    pad = " " * (width - len(levels))
    lines = []
    for row in range(height):
        base = (height - 1 - row) * 8
        bottom = row == height - 1
        known: dict[int, tuple[str, str]] = {}
        line = Line(pad)
        run: list[str] = []
        run_style = ""
        for level in levels:
            cell = known.get(level)
            if cell is None:
                cell = known[level] = _block_cell(level, base, bottom, style_name)
            char, char_style = cell
            if char_style != run_style and run:
                line.add("".join(run), run_style)
                run = []
            run_style = char_style
            run.append(char)
        if run:
            line.add("".join(run), run_style)
        lines.append(line)
    return lines


class _Levels(dict[float | None, int]):
    """Each value's height in eighths of one line on a fixed 0..``top`` scale, as :func:`block_chart` works it
    out (-1: missing), kept per value: the panels' sparklines are made again every second (16 of them for 8
    GPUs), and their values are few (NVML's utilisation is a whole percent). A NaN is worked out each time (no
    NaN finds itself in a dict); past :data:`MOST_LEVELS` values, new ones are no longer kept."""

    __slots__ = ("eighths", "top")

    def __init__(self, top: float, eighths: int) -> None:
        super().__init__()
        self.top, self.eighths = top, eighths

    def __missing__(self, value: float | None) -> int:
        top = self.top
        if value is None:
            level = -1
        elif math.isnan(value):
            return -1
        else:
            level = round(min(1.0, max(0.0, value / top if top > 0 else 0.0)) * self.eighths)
        if len(self) < MOST_LEVELS:
            self[value] = level
        return level


_SPARK_CHARS = ("▁", *_BLOCKS[1:], "·")
"""A sparkline's character by level (-1, the last, for a missing value): the baseline, the eighth blocks, a dot."""
MOST_LEVELS = 4096
"""Values a sparkline's level table keeps (a bound, about the whole percents and the float32 SM figures seen)."""
_SPARK_LEVELS = _Levels(100.0, 8)


def sparkline(values: Sequence[float | None], width: int, style_name: str = "cyan") -> Line:
    """The last ``width`` values on a fixed 0-100 scale (gaps for missing values), right-aligned: a block
    chart one line tall.

    Made here from the kept levels in C calls, the very line :func:`block_chart` draws one line tall: every value
    above the baseline (the common case: a GPU at work) is one run of blocks in one style; else a run a style
    (a missing value a dim dot, a zero the dim baseline)."""
    if width <= 0:
        return Line()
    levels = list(map(_SPARK_LEVELS.__getitem__, values[-width:]))
    line = Line(" " * (width - len(levels)))
    if not levels:
        return line
    if min(levels) > 0:
        return line.add("".join(map(_SPARK_CHARS.__getitem__, levels)), style_name)
    styles = (AXIS_STYLE, *(style_name,) * 8, "dim")  # by level, as _SPARK_CHARS: 0, 1-8, then -1 (missing)
    for run_style, run in itertools.groupby(levels, styles.__getitem__):
        line.add("".join(map(_SPARK_CHARS.__getitem__, run)), run_style)
    return line

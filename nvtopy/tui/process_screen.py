"""The process screen: one process in full, opened with Enter on its row.

What it shows: GPU memory and SM % history beside host CPU % and RSS history
(:class:`ProcessHistory`, kept by the app from the snapshots it gets anyway: no
extra backend call), the full command line, executable, working directory, start
time, status, user, owner (container, pod, Slurm job, service), its GPUs, its
``CUDA_VISIBLE_DEVICES`` and which GPUs that means
(:func:`~nvtopy.selection.parse_cuda_visible_devices` on the snapshot's GPUs), the
parent chain and the children.

Facts the snapshot lacks (cwd, argv, executable, parents, children, threads) are
read by the backend on the source's thread (:meth:`SnapshotSource.process_details
<nvtopy.sources.base.SnapshotSource.process_details>`), once when the screen opens
and every :data:`DETAILS_EVERY` seconds while it stays, one request at a time: a
backend stuck in the driver gets no pile of requests, and the screen says so after
:data:`DETAILS_DEADLINE` seconds instead of waiting (the UI never blocks on it).

``T``, ``K``, ``I`` signal the process through the app's confirmation (same dialog,
same start-time check, read-only respected). A process that exits while shown is
marked so, with its last figures. All outside text (argv, paths, names) is made
safe (:func:`~nvtopy.textsafe.safe_text`) and drawn as rich ``Text``, never markup.
"""

from __future__ import annotations

import asyncio
import io
import math
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Static

from ..history import SampleRing
from ..model import GpuProcess, OwnerKind, ProcessDetails, ProcessOwner, ProcessRelative, Snapshot
from ..render.cells import NOT_VISIBLE, plural
from ..render.chart import block_chart
from ..render.styled import Line
from ..render.units import NA, fmt_bytes, fmt_duration, short_name
from ..selection import parse_cuda_visible_devices
from ..textsafe import safe_text

__all__ = [
    "DETAILS_DEADLINE",
    "DETAILS_EVERY",
    "ProcessHistory",
    "ProcessScreen",
    "ProcessSeries",
]

DETAILS_DEADLINE = 3.0
"""Seconds the screen waits for the backend's answer before it says the backend is slow (it keeps waiting)."""
DETAILS_EVERY = 5.0
"""Seconds between two reads of the details while the screen stays open (children and cwd change)."""
POINTS = 300
"""Points kept per process (five minutes at the default 1 s interval): the charts' width at most."""
TRACKED = 128
"""Processes whose history is kept at once; past that only the one on screen (a node with thousands of
processes pays nothing for the others)."""
CHART_HEIGHT = 4
_NAN = float("nan")

ProcessKey = tuple[int, float | None]  # pid and start time: one process, whatever GPUs it is on


def process_key(process: GpuProcess) -> ProcessKey:
    return (process.pid, process.create_time)


# --------------------------------------------------------------------- history


@dataclass(frozen=True, slots=True)
class ProcessSeries:
    """One process's recent figures, oldest first; NaN where a value was missing."""

    timestamps: tuple[float, ...]
    gpu_memory: tuple[float, ...]  # bytes, summed over its GPUs
    gpu_total: tuple[float, ...]  # the memory of those GPUs (the chart's top)
    sm: tuple[float, ...]  # SM %, summed over its GPUs
    cpu: tuple[float, ...]  # host CPU % (100 = one core)
    rss: tuple[float, ...]  # bytes


def _figure(value: float | None) -> float:
    return _NAN if value is None else float(value)


class ProcessHistory:
    """Per-process figures from every snapshot the app gets (view-side state, bounded).

    Keeps up to ``tracked`` live processes (a new one is not tracked past that) and,
    whatever the count, the pinned ones -- the process on screen -- even after they
    exit (their last figures stay on screen). A process that is gone and not pinned
    is forgotten at the next snapshot.
    """

    def __init__(self, points: int = POINTS, tracked: int = TRACKED) -> None:
        self.points = max(1, points)
        self.tracked = max(0, tracked)
        self._series: dict[ProcessKey, SampleRing[float]] = {}
        self._pinned: dict[ProcessKey, int] = {}
        self._last: tuple[int, float] | None = None  # the snapshot added last: the same one again adds nothing

    def __len__(self) -> int:
        return len(self._series)

    def pin(self, key: ProcessKey) -> None:
        self._pinned[key] = self._pinned.get(key, 0) + 1
        if key not in self._series:
            self._series[key] = self._ring()

    def unpin(self, key: ProcessKey) -> None:
        count = self._pinned.get(key, 0) - 1
        if count > 0:
            self._pinned[key] = count
        else:
            self._pinned.pop(key, None)

    def add(self, snapshot: Snapshot) -> None:
        """Append each process's figures of ``snapshot`` (a process on several GPUs: GPU figures summed)."""
        if self._last == (snapshot.sequence, snapshot.timestamp):
            return
        self._last = (snapshot.sequence, snapshot.timestamp)
        totals = {gpu.index: gpu.static.memory_total_bytes for gpu in snapshot.gpus}
        present = {(p.pid, p.create_time) for gpu in snapshot.gpus for p in gpu.processes}
        series = self._series
        for key in [key for key in series if key not in present and key not in self._pinned]:
            del series[key]
        room = self.tracked - sum(1 for key in series if key not in self._pinned)  # the pinned come on top
        rows: dict[ProcessKey, list[GpuProcess]] = {}  # the tracked ones' rows (one a GPU)
        for gpu in snapshot.gpus:
            for process in gpu.processes:
                key = (process.pid, process.create_time)
                members = rows.get(key)
                if members is not None:
                    members.append(process)
                elif key in series or room > 0:
                    if key not in series:
                        room -= 1
                        series[key] = self._ring()
                    rows[key] = [process]
        when = snapshot.timestamp
        for key, members in rows.items():
            entry = series[key]
            if len(members) == 1:  # a process on one GPU (nearly all): its figures as they are, no lists
                only = members[0]
                used, sm_percent, total_bytes = only.gpu_memory_bytes, only.sm_percent, totals.get(only.gpu_index)
                entry.append(
                    when,
                    (
                        _NAN if used is None else float(0 + used),  # 0 + : what sum() of one gives (-0.0 too)
                        float(0 + total_bytes) if total_bytes else _NAN,
                        _NAN if sm_percent is None else float(0 + sm_percent),
                        _figure(only.cpu_percent),
                        _figure(only.host_memory_bytes),
                    ),
                )
                continue
            memory = [p.gpu_memory_bytes for p in members if p.gpu_memory_bytes is not None]
            sm = [p.sm_percent for p in members if p.sm_percent is not None]
            total = [totals.get(p.gpu_index) for p in members]
            first = members[0]
            entry.append(
                when,
                (
                    float(sum(memory)) if memory else _NAN,
                    float(sum(t for t in total if t)) if all(total) else _NAN,
                    float(sum(sm)) if sm else _NAN,
                    _figure(first.cpu_percent),
                    _figure(first.host_memory_bytes),
                ),
            )

    def nbytes(self) -> int:
        """Bytes the kept figures take (the arrays, over-allocation included)."""
        return sum(entry.nbytes() for entry in self._series.values())

    def series(self, key: ProcessKey) -> ProcessSeries | None:
        entry = self._series.get(key)
        if entry is None:
            return None
        timestamps, figures = entry.window()
        return ProcessSeries(timestamps, *figures)

    def _ring(self) -> SampleRing[float]:
        """A process's figures: :class:`ProcessSeries`' five after its time, as float32 (300 points cost
        8.2 KiB, at most 10.3 KiB between two trims: 64 processes about 0.6 MiB)."""
        return SampleRing(5, self.points)


# --------------------------------------------------------------------- charts


def _present(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _nice_top(peak: float, floor: float) -> float:
    """A round scale above ``peak``: 100, 200, 400 ... for CPU %; at least ``floor``."""
    top = floor
    while top < peak:
        top *= 2
    return top


def _last(values: Sequence[float]) -> float | None:
    if values and not math.isnan(values[-1]):
        return values[-1]
    return None


CHART_MAX_HEIGHT = 16
"""Lines a process chart grows to where the screen has rows to spare (below the facts)."""
_AXIS = "bright_black"


def _chart(
    title: str,
    figure: str,
    values: Sequence[float],
    *,
    width: int,
    top: float,
    style_name: str,
    axis: Callable[[float], str],
    height: int = CHART_HEIGHT,
) -> list[Line]:
    """A titled chart with its value axis: the top of the scale on its first line, 0 on its last, the middle
    on a chart tall enough (a reader sees what a full column means without reading the title)."""
    head = Line(title, "bold").add("  ").add(figure)
    labels = {0: axis(top), height - 1: axis(0.0)}
    if height >= 5:
        labels[(height - 1) // 2] = axis(top / 2)
    gutter = max(len(text) for text in labels.values()) + 1
    plot = block_chart(values, max(1, width - gutter), height, top, style_name)
    lines = [head.fit(width)]
    for row, line in enumerate(plot):
        label = labels.get(row)
        mark = f"{label:>{gutter - 1}}┤" if label is not None else " " * (gutter - 1) + "│"
        lines.append(Line(mark, _AXIS).extend(line).fit(width))
    return lines


def _percent_axis(value: float) -> str:
    return f"{value:.0f}%"


def _bytes_axis(value: float) -> str:
    return "0" if value <= 0 else fmt_bytes(value, precision=0)


def history_lines(series: ProcessSeries | None, width: int, height: int = CHART_HEIGHT) -> list[Line]:
    """The four charts: GPU memory and SM % beside (or above) host CPU % and RSS, for ``width`` cells,
    each ``height`` lines of plot (the rows the screen spares them, :meth:`ProcessScreen.chart_height`)."""
    if series is None or not series.timestamps:
        return [Line("no history yet: it grows with each refresh", "dim")]
    two = width >= 90
    chart_width = max(10, (width - 3) // 2 if two else width)
    memory, totals = series.gpu_memory, series.gpu_total
    total = _last(totals)
    used = _last(memory)
    peak_memory = max(_present(memory), default=0.0)
    memory_top = total or peak_memory or 1.0
    if used is None:
        memory_figure = NA
    elif total:
        memory_figure = f"{fmt_bytes(used)} of {fmt_bytes(total)} ({100 * used / total:.0f} %)"
    else:
        memory_figure = fmt_bytes(used)
    if peak_memory:
        memory_figure += f" · peak {fmt_bytes(peak_memory)}"
    sm = _last(series.sm)
    cpu_values = _present(series.cpu)
    cpu = _last(series.cpu)
    cpu_top = _nice_top(max(cpu_values, default=0.0), 100.0)
    rss_values = _present(series.rss)
    rss = _last(series.rss)
    rss_peak = max(rss_values, default=0.0)
    rss_top = 2.0 ** math.ceil(math.log2(rss_peak)) if rss_peak >= 1 else 1.0  # a round size: 16 GiB, 32 GiB...
    gpu = [
        _chart(
            "GPU memory",
            memory_figure,
            memory,
            width=chart_width,
            top=memory_top,
            style_name="green",
            axis=_bytes_axis,
            height=height,
        ),
        _chart(
            "SM",
            NA if sm is None else f"{sm:.0f} %",
            series.sm,
            width=chart_width,
            top=_nice_top(max(_present(series.sm), default=0.0), 100.0),
            style_name="cyan",
            axis=_percent_axis,
            height=height,
        ),
    ]
    host = [
        _chart(
            "CPU",
            NA if cpu is None else f"{cpu:.1f} %",
            series.cpu,
            width=chart_width,
            top=cpu_top,
            style_name="yellow",
            axis=_percent_axis,
            height=height,
        ),
        _chart(
            "Host memory (RSS)",
            NA if rss is None else f"{fmt_bytes(rss)} · peak {fmt_bytes(rss_peak)}",
            series.rss,
            width=chart_width,
            top=rss_top,
            style_name="blue",
            axis=_bytes_axis,
            height=height,
        ),
    ]
    lines: list[Line] = []
    if two:
        for left, right in zip(gpu, host, strict=True):
            for a, b in zip(left, right, strict=True):
                lines.append(Line().extend(a).add("   ").extend(b))
            lines.append(Line())
    else:
        for chart in (*gpu, *host):
            lines.extend(chart)
            lines.append(Line())
    span = series.timestamps[-1] - series.timestamps[max(0, len(series.timestamps) - chart_width)]
    lines.append(Line(f"the last {fmt_duration(span)} (one column a refresh)", "dim"))
    return lines


def _text(lines: Sequence[Line]) -> Text:
    text = Text(end="")
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        for piece, piece_style in line.parts:
            text.append(piece, piece_style)
    return text


# --------------------------------------------------------------------- facts


def _relative(relative: ProcessRelative) -> str:
    name = safe_text(relative.name) if relative.name else "?"
    user = f", {safe_text(relative.user)}" if relative.user else ""
    return f"{name} ({relative.pid}{user})"


def _owner_words(owner: ProcessOwner | None) -> Text:
    if owner is None:
        return Text(f"{NA} (not known)", style="dim")
    if owner.kind is OwnerKind.HOST:
        return Text("the host (no container, job or service)")
    text = Text(f"{owner.kind.value}: ", style="bold")
    text.append(safe_text(owner.label))
    extra = []
    for name, value in (
        ("namespace", owner.namespace),
        ("pod", owner.pod),
        ("container", owner.container),
        ("job", owner.job),
        ("step", owner.step),
        ("name", owner.name),
        ("project", owner.project),
    ):
        if value and value not in owner.label:
            extra.append(f"{name} {safe_text(value)}")
    if extra:
        text.append("  " + " · ".join(extra), style="dim")
    if owner.cgroup:
        text.append(f"\ncgroup {safe_text(owner.cgroup)}", style="dim")
    return text


def _missing(details: ProcessDetails | None, name: str, pending: str) -> Text:
    """N/A and why: no permission, not read yet, or not available."""
    if details is None:
        return Text(pending, style="dim")
    reason = details.unavailable.get(name)
    return Text(f"{NA} ({reason})" if reason is not None else NA, style="dim")


class ProcessScreen(ModalScreen[None]):
    """One process in full, updated live; esc or q closes it.

    Modal (though it fills the terminal, opaque): the monitor's keys do not reach
    past it, so its own ``T``/``K``/``I`` act on this process only.
    """

    DEFAULT_CSS = """
    ProcessScreen { layout: vertical; overflow-y: hidden; background: $background; }
    ProcessScreen #process-title { height: 1; background: $primary-background; }
    ProcessScreen #process-body { height: 1fr; padding: 0 1; scrollbar-size-vertical: 1; }
    ProcessScreen #process-facts { margin-bottom: 1; }
    ProcessScreen #process-hint { height: 1; }
    """
    BINDINGS = [
        Binding("escape,q", "close", "Close", show=False),
        Binding("T", "signal('SIGTERM')", "Term", show=False),
        Binding("K", "signal('SIGKILL')", "Kill", show=False),
        Binding("I", "signal('SIGINT')", "Interrupt", show=False),
        Binding("home", "scroll('home')", "Top", show=False),
        Binding("end", "scroll('end')", "Bottom", show=False),
    ]

    def __init__(
        self, process: GpuProcess, snapshot: Snapshot, history: ProcessHistory, *, readonly: bool = False
    ) -> None:
        super().__init__()
        self.key: ProcessKey = process_key(process)
        self.process = process  # its latest row (the last one seen, once it exited)
        self.rows: tuple[GpuProcess, ...] = (process,)
        self.snapshot = snapshot
        self.history = history
        self.readonly = readonly
        self.exited = False
        self.details: ProcessDetails | None = None
        self.details_note: str | None = None  # why there are no details (yet)
        self.details_requests = 0
        self._pending: Future[ProcessDetails | None] | None = None  # the request in flight
        self._requested_at: float | None = None
        self._signature: tuple[object, ...] | None = None
        self._ready = False  # mounted: draws and asks for details (a snapshot may come before)
        self._chart_height = CHART_HEIGHT  # the charts' height last drawn
        history.pin(self.key)

    def compose(self) -> ComposeResult:
        yield Static(id="process-title")
        with VerticalScroll(id="process-body"):
            yield Static(id="process-facts")
            yield Static(id="process-charts")
        yield Static(id="process-hint")

    def on_mount(self) -> None:
        self.query_one("#process-body", VerticalScroll).focus()
        self._ready = True
        self.show(self.snapshot)

    def on_unmount(self) -> None:
        self.history.unpin(self.key)

    def on_resize(self) -> None:
        self._signature = None
        self._draw()

    # ----------------------------------------------------------------- data in

    def show(self, snapshot: Snapshot) -> None:
        """A new snapshot: the process's rows in it (or that it exited), details when due, redraw."""
        self.snapshot = snapshot
        rows = tuple(p for p in snapshot.processes if process_key(p) == self.key)
        if rows:
            self.rows, self.process, self.exited = rows, rows[0], False
        else:
            self.exited = True
        if self._ready:
            self._request_details()
            self._draw()

    def _request_details(self) -> None:
        """Ask the source for the details when due: at once, then every DETAILS_EVERY s; one request at a time."""
        if self.exited or self.process.foreign:
            return
        pending = self._pending
        if pending is not None and not pending.done():
            return
        now = time.monotonic()
        if self._requested_at is not None and now - self._requested_at < DETAILS_EVERY:
            return
        source = self.app.source  # type: ignore[attr-defined]
        if not source.can_inspect:
            self.details_note = "not available: this view has no host to ask (a recording or remote hosts)"
            return
        self._requested_at = now
        self.details_requests += 1
        future = source.process_details(self.process.pid, self.process.create_time)
        self._pending = future
        self.run_worker(self._wait_for(future), group="process-details", exit_on_error=False)

    async def _wait_for(self, future: Future[ProcessDetails | None]) -> None:
        waiting = asyncio.wrap_future(future)
        try:
            try:
                details = await asyncio.wait_for(asyncio.shield(waiting), DETAILS_DEADLINE)
            except TimeoutError:
                self.details_note = f"the backend has not answered in {DETAILS_DEADLINE:g} s (a driver call is stuck?)"
                self._signature = None
                self._draw()
                details = await waiting  # keeps waiting, holding nothing up
        except Exception as exc:  # noqa: BLE001 - said on the screen, never a crash
            self.details_note = f"could not read the details: {safe_text(str(exc))}"
            details = None
        else:
            if details is None:
                self.details_note = (
                    "not available: the process exited, or it is not one this host can read"
                    if self.details is None
                    else self.details_note
                )
        if details is not None:
            self.details, self.details_note = details, None
        self._signature = None
        self._draw()

    # ----------------------------------------------------------------- drawing

    def _draw(self) -> None:
        try:
            title = self.query_one("#process-title", Static)
            facts = self.query_one("#process-facts", Static)
            charts = self.query_one("#process-charts", Static)
            hint = self.query_one("#process-hint", Static)
        except NoMatches:  # before compose: on_mount draws
            return
        width = max(20, self.size.width - 3)
        series = self.history.series(self.key)
        height = self.chart_height(width)
        signature = (
            self.rows,
            self.exited,
            self.details,
            self.details_note,
            series,
            width,
            height,
            self.snapshot.timestamp,
        )
        if signature == self._signature:
            return
        self._signature = signature
        title.update(self._title(), layout=False)
        facts.update(self._facts())
        charts.update(_text(history_lines(series, width, height)))
        hint.update(self._hint(), layout=False)
        self._chart_height = height
        self.call_after_refresh(self._fit_charts)  # once laid out, the facts' height may give other rows

    def chart_height(self, width: int) -> int:
        """Lines of plot each chart gets: what the screen has under the facts, shared by the charts stacked
        (two rows of two side by side at 90 cells or more, else four), between :data:`CHART_HEIGHT` and
        :data:`CHART_MAX_HEIGHT` (a tall terminal shows the history, not blank rows)."""
        try:
            body = self.query_one("#process-body", VerticalScroll).size.height
            facts = self.query_one("#process-facts", Static).size.height
        except NoMatches:
            return CHART_HEIGHT
        if not body or not facts:
            return CHART_HEIGHT
        stacked = 2 if width >= 90 else 4
        spare = body - facts - 1 - 1  # the facts' margin, the span line under the charts
        return max(CHART_HEIGHT, min(CHART_MAX_HEIGHT, spare // stacked - 2))  # a title and a blank each

    def _fit_charts(self) -> None:
        """Draw the charts again when the laid-out screen gives them other rows (once: then they agree)."""
        if self.is_mounted and self.chart_height(max(20, self.size.width - 3)) != self._chart_height:
            self._signature = None
            self._draw()

    def plain_text(self, width: int = 120) -> str:
        """Everything the screen holds, scrolled out of view or not, as plain text (tests, bug reports)."""
        from rich.console import Console

        console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        console.print(self._title())
        console.print(self._facts())
        console.print(_text(history_lines(self.history.series(self.key), width - 3, self.chart_height(width - 3))))
        console.print(self._hint())
        return console.export_text()

    def _title(self) -> Text:
        process = self.process
        text = Text(f" Process {process.pid} ", style="bold reverse", end="")
        name = process.name or (process.command or "").split(" ", 1)[0]
        if name:
            text.append(f" {safe_text(name)} ", style="bold")
        if self.exited:
            text.append(" EXITED ", style="bold white on red")
            text.append(" (its last figures)", style="dim")
        elif process.status == "zombie":
            text.append(" <defunct> ", style="red")
        gpus = ", ".join(str(p.gpu_index) for p in self.rows)
        text.append(f"  GPU {gpus}" if len(self.rows) == 1 else f"  GPUs {gpus}")
        text.truncate(max(1, self.size.width), overflow="ellipsis")
        return text

    def _hint(self) -> Text:
        keys = "T K I signal (asks first) · " if not self.readonly else "read-only · "
        return Text(f" {keys}↑ ↓ PgUp PgDn scroll · esc or q closes", style="dim")

    def _facts(self) -> Group:
        process, details = self.process, self.details
        pending = "reading..." if self.details_note is None else self.details_note
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(overflow="fold")

        pid = Text(str(process.pid))
        if process.ns_pid is not None:
            pid.append(f"  (pid {process.ns_pid} in its own PID namespace)", style="dim")
        if process.host_pid is not None:
            pid.append(f"  (host pid {process.host_pid})", style="dim")
        if process.foreign:
            pid.append(f"  {NOT_VISIBLE}: nothing more can be read here", style="dim")
        table.add_row("PID", pid)
        if details is not None and details.cmdline:
            table.add_row("Command", Text(safe_text(shlex.join(details.cmdline))))
        elif process.command:
            table.add_row("Command", Text(safe_text(process.command)))
        else:
            table.add_row("Command", Text(f"{NA} ({process.unavailable.get('command', '?')})", style="dim"))
        table.add_row(
            "Executable", Text(safe_text(details.exe)) if details and details.exe else _missing(details, "exe", pending)
        )
        table.add_row(
            "Working directory",
            Text(safe_text(details.cwd)) if details and details.cwd else _missing(details, "cwd", pending),
        )
        table.add_row("Started", self._started())
        status = Text(process.status if not self.exited else "exited", style="red" if self.exited else "")
        if details is not None and details.threads is not None:
            status.append(f" · {plural(details.threads, 'thread')}")
        table.add_row("Status", status)
        user = Text(safe_text(process.user) if process.user else NA, style="" if process.user else "dim")
        if process.uid is not None:
            user.append(f" (uid {process.uid})", style="dim")
        table.add_row("User", user)
        table.add_row("Owner", _owner_words(process.owner))
        table.add_row("GPUs", self._gpus())
        table.add_row("CUDA_VISIBLE_DEVICES", self._visible())
        table.add_row("Parents", self._parents())
        table.add_row("Children", self._children(pending))
        if process.flags:
            table.add_row("Flags", Text(", ".join(process.flags), style="yellow"))
        rows: list[object] = [table]
        if self.details_note is not None and details is not None:
            rows.append(Text(self.details_note, style="dim"))
        return Group(*rows)  # type: ignore[arg-type]

    def _started(self) -> Text:
        process = self.process
        if process.create_time is None:
            return Text(f"{NA} ({process.unavailable.get('running_seconds', 'unknown')})", style="dim")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(process.create_time))
        text = Text(when)
        age = self.snapshot.timestamp - process.create_time
        if age >= 0:
            text.append(f"  (running {fmt_duration(age)})", style="dim")
        return text

    def _gpus(self) -> Text:
        text = Text(end="")
        for i, row in enumerate(self.rows):
            if i:
                text.append("\n")
            gpu = self.snapshot.gpu(row.gpu_index)
            name = short_name(gpu.static.name) if gpu is not None else NA
            text.append(f"GPU {row.gpu_index}", style="bold")
            text.append(f" {name}")
            if row.instance_label:
                text.append(f" · MIG {row.instance_label}")
            text.append(f" · {row.type.value}")
            text.append(f" · {fmt_bytes(row.gpu_memory_bytes)}")
            text.append(f" · SM {NA if row.sm_percent is None else f'{row.sm_percent} %'}")
            if row.idle_seconds:
                text.append(f" · idle {fmt_duration(row.idle_seconds)}", style="yellow")
        return text

    def _visible(self) -> Text:
        """The variable as the process has it, and the GPUs (NVML indices) CUDA gives it, by CUDA ordinal."""
        process, details = self.process, self.details
        value = details.cuda_visible_devices if details is not None else process.cuda_visible_devices
        readable = details.environ_readable if details is not None else process.cuda_visible_devices is not None
        if process.foreign:
            return Text(f"{NA} ({NOT_VISIBLE})", style="dim")
        if value is None and not readable:
            reason = details.unavailable.get("cuda_visible_devices") if details is not None else None
            why = f"{reason}: another user's environment" if reason is not None else "not read"
            return Text(f"{NA} ({why})", style="dim")
        gpus = [g for g in self.snapshot.gpus if g.static.host is None]
        text = Text("unset" if value is None else f'"{safe_text(value)}"', style="" if value is not None else "dim")
        indices = sorted(g.index for g in gpus)
        if not gpus or indices != list(range(len(indices))):
            text.append("  (which GPUs it means is known only when every GPU is shown)", style="dim")
            return text
        visible = parse_cuda_visible_devices(value, [g.static for g in gpus])
        devices = visible.process_devices
        if not devices:
            text.append("  → no GPU", style="yellow")
        else:
            names = []
            for device in devices:
                name = f"GPU {device.nvml_index}"
                if device.mig_uuid:
                    name += f" {safe_text(device.mig_uuid)[:20]}…"
                names.append(name if value is None else f"{device.cuda_index}={name}")
            lead = "  → every GPU: " if value is None else "  → CUDA "
            text.append(lead + ", ".join(names))
        for warning in visible.warnings:
            text.append(f"\n{safe_text(warning)}", style="yellow")
        return text

    def _parents(self) -> Text:
        details = self.details
        chain = details.parents if details is not None else self.process.parents
        if not chain:
            if self.process.ppid is not None:
                return Text(f"pid {self.process.ppid}")
            return Text(NA, style="dim")
        text = Text(end="")
        gpu_pids = {p.pid for p in self.snapshot.processes}
        for i, relative in enumerate(chain):
            if i:
                text.append(" ← ", style="dim")
            text.append(_relative(relative), style="bold" if relative.pid in gpu_pids else "")
        return text

    def _children(self, pending: str) -> Text:
        details = self.details
        if details is None:
            return Text(pending, style="dim")
        if not details.children:
            return Text("none", style="dim")
        gpu_pids = {p.pid for p in self.snapshot.processes}
        text = Text(end="")
        for i, child in enumerate(details.children):
            if i:
                text.append(" · ", style="dim")
            text.append(_relative(child), style="bold" if child.pid in gpu_pids else "")
            if child.pid in gpu_pids:
                text.append(" GPU", style="green")
        more = details.children_count - len(details.children)
        if more > 0:
            text.append(f" … and {more} more", style="dim")
        return text

    # ----------------------------------------------------------------- keys

    def action_close(self) -> None:
        self.dismiss(None)

    def action_signal(self, name: str) -> None:
        """Signal this process, through the app's confirmation (read-only, foreign pids, start time: all checked)."""
        if self.exited:
            self.app.notify(f"pid {self.process.pid} has exited: nothing to signal", severity="warning")
            return
        self.app.confirm_signal([self.process], name)  # type: ignore[attr-defined]

    def action_scroll(self, where: str) -> None:
        body = self.query_one("#process-body", VerticalScroll)
        if where == "home":
            body.scroll_home(animate=False)
        else:
            body.scroll_end(animate=False)

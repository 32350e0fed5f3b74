"""Drawing one GPU as text: the full panel and the compact one-line form.

Pure functions from a :class:`~nvtopy.model.GpuState` to :class:`~nvtopy.render.styled.Line`
objects of an exact cell width: the TUI turns them into strips with no layout
or markup work, and tests and screenshots can check them without a terminal.
Every value's words and colour category come from :mod:`nvtopy.render.cells`,
as in ``nvtopy --once``: this module only lays them out (bars, sparklines,
padding). Colours follow the GPU's own limits (its slowdown temperature, its
enforced power cap), not universal thresholds: 80 °C is fine on one board and
throttling on another.

Health (:mod:`nvtopy.health`, computed by the collector) shows here too: the
verdict in the title -- a quiet green "OK", or WARN/FAIL with its first reason
--, throttling in words, an optional fifth line for the interconnect (PCIe link
and throughput, NVLinks) that the view drops first when space is short, and a
GPU whose driver call is stuck: "not responding (N s)" in its title and its
last values dimmed, so nobody mistakes them for live ones.

The real work (GPM, Hopper and newer): under the utilisation line, ``SM`` charts
how many SMs are active, aligned in time with the utilisation chart, then the
tensor and DRAM activity. A GPU at high utilisation whose SMs barely work (a
deadlocked collective, a starved input pipeline) says "⚠ busy, little work" in
the warning colour there: 100 % busy must not look like 100 % computing. A
board without GPM spends no line on it: its utilisation line ends with a dim
"SM N/A (GPM needs Hopper or newer)" as the width allows. The compact line
shows SM active beside utilisation; MIG instance lines their own SM and tensor
activity, before their SM count and UUID.

MIG: a MIG-enabled GPU says "MIG" in its title ("MIG on after reset" in the
warning colour while a mode change waits for a GPU reset) and gets one line per
instance under its own lines, in the panel and in the compact view
(:func:`mig_lines`): its GPU/GI/CI label, profile, memory bar, SMs, processes
and, where the width allows, its UUID. The driver reports no utilisation under
MIG, so the utilisation line says so once instead of drawing N/A or an empty
chart that would read as an idle GPU.

Text from outside (GPU names, bus ids, remote host names, notes that quote a
peer's error, throttle reasons read from a recording, NVLink peers, MIG profiles
and UUIDs) goes through :func:`~nvtopy.textsafe.safe_text` here or in
:mod:`~nvtopy.render.cells`, before it becomes a :class:`Line`.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import GpuState, MigState, Reason, Severity
from ..textsafe import safe_text
from .cells import (
    ACTIVITY_WORDS,
    ALERT,
    BAD,
    DIM,
    GPM_NOT_SUPPORTED_SHORT,
    MIG_UTILIZATION_NOTE,
    NO_FRAMEBUFFER_NOTE,
    REMOTE,
    RICH_STYLES,
    WARN,
    Cell,
    activity_cell,
    activity_reason,
    activity_shown,
    ecc_cell,
    gpu_little_work,
    health_summary_cell,
    host_label,
    load_category,
    lost_cell,
    memory_cell,
    memory_percent_text,
    mig_activity_cell,
    mig_activity_shown,
    mig_hides_utilization,
    mig_memory_cell,
    mig_mode_cell,
    mig_processes_cell,
    mig_profile_cell,
    mig_sm_cell,
    mig_uuid_cell,
    name_cell,
    no_framebuffer,
    note_cell,
    percent_cell,
    power_cell,
    pstate_cell,
    sm_active_cell,
    stalled_text,
    temperature_cell,
    throttle_cell,
    used_of_total,
    verdict_cell,
)
from .chart import sparkline
from .styled import Line
from .units import NA, fmt_rate, short_name

__all__ = [
    "COMPACT_MARKERS",
    "PANEL_HEIGHT",
    "PANEL_LINKS_HEIGHT",
    "PANEL_MIN_WIDTH",
    "CompactColumns",
    "activity_line",
    "activity_rows",
    "bar",
    "compact_columns",
    "compact_header",
    "compact_legend",
    "compact_line",
    "compact_lines",
    "compact_markers",
    "has_interconnect",
    "interconnect_line",
    "mig_lines",
    "mig_rows",
    "panel_extra_rows",
    "panel_height",
    "panel_lines",
    "panel_title",
]

PANEL_HEIGHT = 6  # 4 lines of content inside a border
PANEL_LINKS_HEIGHT = 7  # and the interconnect line, where space allows
PANEL_MIN_WIDTH = 52
_EIGHTHS = " ▏▎▍▌▋▊▉█"


def _put(line: Line, cell: Cell, emphasis: str = "") -> Line:
    """Add a shared cell (:mod:`~nvtopy.render.cells`) in its category's style; ``emphasis`` for a plain one."""
    text, category = cell
    return line.add(text, RICH_STYLES[category] if category else emphasis)


def _load(fraction: float | None) -> str:
    return RICH_STYLES[load_category(fraction or 0)]


def bar(fraction: float | None, width: int, style_name: str) -> Line:
    """A horizontal bar with eighth-cell precision; a dim track shows the empty part."""
    line = Line()
    if width <= 0:
        return line
    if fraction is None:
        return line.add("·" * width, "dim")
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part and full < width else "")
    line.add(filled, style_name)
    return line.add("░" * (width - len(filled)), "bright_black")


def _na(line: Line) -> Line:
    return line.add(NA, RICH_STYLES[DIM])


def _memory_label(gpu: GpuState) -> Line:
    label = _put(Line(), memory_cell(gpu))
    percent = memory_percent_text(gpu)
    return label.add(f" {percent:>4}" if percent is not None else "     ")


def _temperature(gpu: GpuState, *, with_limit: bool = True) -> Line:
    line = _put(Line(), temperature_cell(gpu))
    slowdown = gpu.static.temperature_slowdown_c
    if slowdown and with_limit and gpu.sample.temperature_c is not None:
        line.add(f"/{slowdown}", "dim")
    return line


def _harmful_throttle(gpu: GpuState) -> bool:
    """Whether the health layer counted the throttling against the GPU (heat, HW slowdown, power brake)."""
    return any(finding.code == "throttle" for finding in gpu.health.findings)


def _throttle_warns(gpu: GpuState) -> bool:
    """Whether throttling earns the warning sign: when the health layer counted it against the GPU (not a
    power cap under full load, which is benign), or, for a GPU without its words (a recording, a peer), any
    reason but idle -- as the panel's info line draws it."""
    if gpu.health.throttle is None:
        return throttle_cell(gpu.sample)[1] == WARN
    return gpu.health.throttle != "idle" and _harmful_throttle(gpu)


def _throttle(gpu: GpuState) -> Line:
    """Throttling in words: ``⚠ HW slowdown: SM at 45 % of max`` when it hurts, dim when it is benign.

    The words are the health layer's (``health.throttle``); a GPU without them (a
    recording or a peer that has no health) falls back to the reason labels.
    Idle alone is normal at rest and not shown.
    """
    words = gpu.health.throttle
    if words is None:
        text, category = throttle_cell(gpu.sample)
        return Line("⚠ " + text, RICH_STYLES[category]) if text and category == WARN else Line()
    if words == "idle":
        return Line()
    if _harmful_throttle(gpu):
        return Line("⚠ " + safe_text(words), RICH_STYLES[WARN])
    return Line(safe_text(words), RICH_STYLES[DIM])


def _host(gpu: GpuState) -> str:
    """``host/index `` of a remote host's GPU (the host name is outside text)."""
    return f"{host_label(gpu.static)} "


def _health_title(gpu: GpuState) -> Line:
    """The title's health part: "not responding (N s)", a quiet green OK, or the verdict with its first reason."""
    stalled = stalled_text(gpu)
    if stalled is not None:
        return Line(f" {stalled} ", RICH_STYLES[ALERT])
    if gpu.health.verdict is Severity.OK:
        text, category = verdict_cell(gpu)
        return Line(f" {text} ", RICH_STYLES[category])
    text, category = health_summary_cell(gpu)
    return Line(f" {text} ", RICH_STYLES[category])


def panel_title(gpu: GpuState, width: int | None = None) -> Line:
    """Index, name and bus id, then the health verdict; ``width``: the most cells it may take.

    When it does not fit, the bus id goes first, then the reason is cut: the
    verdict (and "not responding") is what a glance at the panel must catch.
    """
    static = gpu.static
    # A fleet's line for a host (connecting, lost, a remark) has no GPU index: its host alone names it.
    title = Line(" ") if gpu.stands_for_host else Line(f" {static.index} ", "bold")
    if static.host is not None:  # a remote host's GPU: its host and own index
        title.add(_host(gpu), RICH_STYLES[REMOTE])
        if gpu.note:
            return title
    _put(title, name_cell(static), "bold")
    mig = _mig_title(gpu)
    title.extend(mig)
    health = _health_title(gpu)
    bus = Line(f" · {safe_text(static.short_bus_id)}", "dim") if static.short_bus_id else Line()
    if width is not None and title.cells + bus.cells + health.cells > width:
        bus = Line()
        if title.cells + health.cells > width:
            health.fit(max(6, width - title.cells))
    return title.extend(bus).extend(health)


def _mig_title(gpu: GpuState) -> Line:
    """`` · MIG`` on a MIG-enabled GPU, `` · MIG on after reset`` while a mode change waits (nothing when off)."""
    cell = mig_mode_cell(gpu.static)
    if cell is None:
        return Line()
    text, category = cell
    return Line(" · ", "dim").add(text, RICH_STYLES[category] if category else "bold cyan")


def _value(line: Line, cell: Cell, width: int = 0, emphasis: str = "") -> Line:
    """A number right-aligned in ``width`` cells; N/A as it is."""
    text, category = cell
    return _put(line, (text.rjust(width) if category != DIM else text, category), emphasis)


def panel_height(links: bool) -> int:
    """Rows of a full panel, border included: with the interconnect line or without."""
    return PANEL_LINKS_HEIGHT if links else PANEL_HEIGHT


def has_interconnect(gpu: GpuState) -> bool:
    """Whether the GPU has any interconnect reading worth a line (a recording without them has none)."""
    sample = gpu.sample
    return any(
        value is not None
        for value in (
            sample.pcie_link_gen,
            sample.pcie_link_width,
            sample.pcie_rx_bytes_per_s,
            sample.pcie_tx_bytes_per_s,
            sample.nvlinks,
        )
    )


def _rates(rx: int | None, tx: int | None) -> Line:
    line = Line(" RX ", "dim").add(fmt_rate(rx), RICH_STYLES[DIM] if rx is None else "")
    return line.add(" TX ", "dim").add(fmt_rate(tx), RICH_STYLES[DIM] if tx is None else "")


def _pcie_link(gpu: GpuState) -> Line:
    """``Gen5 x16``; a downgrade the health layer flagged in the warning colour, with the maximum."""
    sample, static = gpu.sample, gpu.static
    gen, width = sample.pcie_link_gen, sample.pcie_link_width
    if gen is None and width is None:
        return Line(f" {NA}", RICH_STYLES[DIM])
    text = f" {'Gen?' if gen is None else f'Gen{gen}'} {'x?' if width is None else f'x{width}'}"
    if any(finding.code == "pcie-downgrade" for finding in gpu.health.findings):
        wanted = f"Gen{static.pcie_link_gen_max or '?'} x{static.pcie_link_width_max or '?'}"
        return Line(f"{text} ⚠ max {wanted}", RICH_STYLES[WARN])
    return Line(text)


def _nvlink_count(gpu: GpuState) -> Line:
    """``NVLink 18/18``: links up of links the board has; fewer up (or errors growing) in the warning colour."""
    links = gpu.sample.nvlinks
    if links is None:
        count = gpu.static.nvlink_count
        return Line("  NVLink ", "bold").add(NA, RICH_STYLES[DIM]) if count else Line()
    if not links:
        return Line()
    up = sum(1 for link in links if link.active)
    flagged = up < len(links) or any(f.code in ("nvlink-down", "nvlink-errors") for f in gpu.health.findings)
    line = Line("  NVLink ", "bold").add(f"{up}/{len(links)}", RICH_STYLES[WARN] if flagged else "")
    if any(f.code == "nvlink-errors" for f in gpu.health.findings):
        line.add(" errors", RICH_STYLES[WARN])
    return line


def interconnect_line(gpu: GpuState, width: int) -> Line:
    """``PCIe Gen5 x16 RX 1.2GiB/s TX 412MiB/s  NVLink 18/18 RX .. TX ..``, exactly ``width`` cells.

    What does not fit is left out whole, least useful first: NVLink throughput,
    then PCIe throughput; the link state (a downgrade, links down) stays.
    """
    sample = gpu.sample
    pcie = Line("PCIe", "bold").extend(_pcie_link(gpu))
    nvlink = _nvlink_count(gpu)
    pcie_rates = _rates(sample.pcie_rx_bytes_per_s, sample.pcie_tx_bytes_per_s)
    if sample.pcie_rx_bytes_per_s is None and sample.pcie_tx_bytes_per_s is None:
        pcie_rates = Line()
    nvlink_rates = Line()
    if nvlink.cells and (sample.nvlink_rx_bytes_per_s is not None or sample.nvlink_tx_bytes_per_s is not None):
        nvlink_rates = _rates(sample.nvlink_rx_bytes_per_s, sample.nvlink_tx_bytes_per_s)
    parts = [pcie, pcie_rates, nvlink, nvlink_rates]
    # Keep the most useful pieces that fit, then draw them in reading order.
    kept = {0}
    used = pcie.cells
    for index in (2, 1, 3):
        if parts[index].cells and used + parts[index].cells <= width:
            kept.add(index)
            used += parts[index].cells
    if 3 in kept and 2 not in kept:
        kept.discard(3)
    line = Line()
    for index, part in enumerate(parts):
        if index in kept:
            line.extend(part)
    return line.fit(width)


def _info_line(gpu: GpuState, width: int) -> Line:
    """P-state, clocks, ECC, codecs in use, throttling; the clocks give way to the throttling words."""
    sample = gpu.sample
    info = _put(Line(), pstate_cell(sample), "bold")
    clocks = Line("  SM ")
    if sample.clock_sm_mhz is None:
        _na(clocks)
    else:
        clocks.add(str(sample.clock_sm_mhz))
    clocks.add("  MEM ")
    if sample.clock_mem_mhz is None:
        _na(clocks)
    else:
        clocks.add(str(sample.clock_mem_mhz))
    clocks.add(" MHz")
    rest = _put(Line("  ECC "), ecc_cell(sample))
    if sample.encoder_percent or sample.decoder_percent:
        rest.add(f"  ENC {sample.encoder_percent or 0}% DEC {sample.decoder_percent or 0}%")
    throttle = _throttle(gpu)
    if throttle.cells:
        rest.add("  ").extend(throttle)
        if info.cells + clocks.cells + rest.cells > width:
            clocks = Line()  # the SM share in the words says what the clocks would
    return info.extend(clocks).extend(rest)


# ----------------------------------------------------------------- real work (GPM)

ACTIVITY_MIN_SPARK = 16
"""Cells the utilisation chart keeps before a board without GPM gives up saying why its SM figure is N/A."""
_SM_SPARK_STYLE = "cyan"


def activity_rows(gpu: GpuState) -> int:
    """Lines the real-work figures add to a full panel: one on a GPU that has them (Hopper and newer, or a
    reason worth a line), none on a board without GPM (its utilisation line says "SM N/A"), lost or noted."""
    return 0 if gpu.note or gpu.lost or not activity_shown(gpu.sample) else 1


def panel_extra_rows(gpu: GpuState) -> int:
    """Lines a full panel has beyond :func:`panel_height`'s: its real-work line and its MIG instances."""
    return activity_rows(gpu) + mig_rows(gpu)


def _activity_tail(gpu: GpuState) -> Line:
    """`` 52%  TNS  26%  DRAM  31%``: SM active (warning colour when busy with little work), tensor, DRAM."""
    sample = gpu.sample
    tail = _value(Line(" "), sm_active_cell(sample), 4, "bold")
    _value(tail.add("  TNS ", "dim"), activity_cell(sample.tensor_active_percent), 4)
    return _value(tail.add("  DRAM ", "dim"), activity_cell(sample.dram_active_percent), 4)


def _utilisation_tail(gpu: GpuState) -> Line:
    """`` 85%  BW  48%``: utilisation now and memory bandwidth busy time (NVML's figures)."""
    sample = gpu.sample
    tail = _value(Line(" "), percent_cell(sample.utilization_gpu_percent), 4, "bold")
    return _value(tail.add("  BW "), percent_cell(sample.utilization_memory_percent), 4)


def _no_activity_note(gpu: GpuState, room: int) -> Line:
    """``  SM N/A (GPM needs Hopper or newer)`` (dim) after the utilisation figures of a board without GPM,
    as long as ``room`` allows (then ``(pre-Hopper)``, then no reason, then no note). Nothing from a source that
    does not carry the fields at all (an old recording): no reason, nothing to explain."""
    reason = gpu.sample.why("sm_active_percent")
    if reason is None:
        return Line()
    texts = [f"  SM {NA} ({activity_reason(reason)})", f"  SM {NA}"]
    if reason is Reason.NOT_SUPPORTED:
        texts.insert(1, f"  SM {NA} ({GPM_NOT_SUPPORTED_SHORT})")
    for text in texts:
        if len(text) <= room:
            return Line(text, RICH_STYLES[DIM])
    return Line()


def _activity_missing(gpu: GpuState) -> bool:
    """Whether SM, tensor and DRAM activity are all N/A (no permission, not measured yet): one reason says it."""
    sample = gpu.sample
    return all(v is None for v in (sample.sm_active_percent, sample.tensor_active_percent, sample.dram_active_percent))


def activity_line(gpu: GpuState, width: int, spark_width: int | None = None) -> Line:
    """``SM  ▃▄▄▅▅  52%  TNS  26%  DRAM  31%``, exactly ``width`` cells: SM active over time and now, tensor
    and DRAM activity.

    A busy GPU whose SMs barely work (:func:`~nvtopy.render.cells.little_work`) says
    "⚠ busy, little work" where the oldest part of its chart would be, and its SM
    chart and figure turn to the warning colour: at a glance it must not look like a
    GPU that computes. ``spark_width``: the chart's cells (the utilisation chart's, so
    that both time axes line up); default: what the figures leave. With no figure at
    all (no permission, not measured yet) the line is ``SM  N/A (why)``: no empty chart.
    """
    if _activity_missing(gpu):
        return (
            Line("SM  ", "bold").add(f"{NA} ({activity_reason(gpu.sample.why('sm_active_percent'))})", "dim").fit(width)
        )
    tail = _activity_tail(gpu)
    chart = width - 4 - tail.cells if spark_width is None else spark_width
    line = Line("SM  ", "bold")
    style_name = _SM_SPARK_STYLE
    if gpu_little_work(gpu.sample):
        style_name = RICH_STYLES[WARN]
        words = Line(f"⚠ {ACTIVITY_WORDS} ", RICH_STYLES[WARN])
        if chart - words.cells >= 4:
            line.extend(words)
            chart -= words.cells
    line.extend(sparkline(gpu.history.sm_active_percent, max(0, chart), style_name))
    return line.extend(tail).fit(width)


def utilisation_lines(gpu: GpuState, width: int) -> tuple[Line, list[Line]]:
    """The utilisation line, and the real-work line under it where the GPU has one (:func:`activity_rows`).

    Both charts get the same cells and end in the same column, so that "100 % busy"
    sits right above "3 % SM active" and the two histories line up in time (the
    shorter utilisation figures leave the end of their line blank).
    """
    shown = activity_rows(gpu) > 0
    if mig_hides_utilization(gpu):
        utl = _na(Line("UTL ", "bold")).add(f"  {MIG_UTILIZATION_NOTE}", "dim")
        return utl.fit(width), [activity_line(gpu, width)] if shown else []
    if not shown or _activity_missing(gpu):
        tail = _utilisation_tail(gpu)
        if not shown:  # else the line under it says why
            tail.extend(_no_activity_note(gpu, width - 4 - tail.cells - ACTIVITY_MIN_SPARK))
        utl = Line("UTL ", "bold").extend(sparkline(gpu.history.utilization_gpu_percent, width - 4 - tail.cells))
        return utl.extend(tail).fit(width), [activity_line(gpu, width)] if shown else []
    tail = _utilisation_tail(gpu)
    chart = max(0, width - 4 - max(_activity_tail(gpu).cells, tail.cells))
    utl = Line("UTL ", "bold").extend(sparkline(gpu.history.utilization_gpu_percent, chart)).extend(tail)
    return utl.fit(width), [activity_line(gpu, width, chart)]


def panel_lines(gpu: GpuState, width: int, *, links: bool = False) -> list[Line]:
    """The content lines of a full panel (four; five with ``links``; one more for the real work where
    :func:`activity_rows` says so), each exactly ``width`` cells, then :func:`mig_rows` lines, one per MIG instance.

    A GPU that is not responding keeps its last values, all dimmed: they are
    not live, and the title says how long the driver has been stuck.
    """
    sample = gpu.sample
    blank = [Line().fit(width)] if links else []
    if gpu.note:
        # A host that could not be read is asked again; a note on a host that answered (capped) is not an error.
        # The note is wrapped over the panel's lines (ssh's reasons are long: what failed, and what to do); a
        # source that says when it asks again (``--ssh``'s "reconnecting in 8 s") needs no line of ours saying so.
        text, category = note_cell(gpu)
        wrapped = textwrap.wrap(text, max(8, width), max_lines=3, placeholder="…") or [""]
        lines = [Line(part, RICH_STYLES[category]) for part in wrapped]
        if gpu.lost and "reconnecting" not in text:
            lines.append(Line("retrying at every refresh", "dim"))
        lines += [Line()] * (4 - len(lines))
        return [line.fit(width) for line in lines[:4]] + blank
    if gpu.lost:
        word, category = lost_cell()
        lost = Line(f"GPU {word}", RICH_STYLES[category])
        lost.add("  fell off the bus or stopped answering (GpuIsLost)", RICH_STYLES[BAD])
        retry = Line("retrying in the background; the other GPUs keep updating", "dim")
        return [lost.fit(width), retry.fit(width), Line().fit(width), Line().fit(width), *blank]

    # Line 1: memory.
    label = _memory_label(gpu)
    percent = gpu.memory_used_percent
    mem = Line("MEM ", "bold")
    fraction = None if percent is None else percent / 100
    if no_framebuffer(gpu):  # unified memory: words where an empty bar would look like a broken reading
        mem.add(f"{NA}: {NO_FRAMEBUFFER_NOTE}", RICH_STYLES[DIM])
    else:
        mem.extend(bar(fraction, width - 4 - label.cells - 1, _load(fraction)))
        mem.add(" ").extend(label)

    # Line 2: utilisation sparkline on a fixed 0-100 scale, current value, bandwidth (under MIG: why there is none).
    # Then, on Hopper and newer, the real-work line (SM active, tensor, DRAM), its chart aligned under it.
    utl, activity = utilisation_lines(gpu, width)

    # Line 3: power against the enforced cap, temperature against slowdown, fan.
    right = Line("  ").extend(_temperature(gpu)).add("  FAN ")
    _put(right, percent_cell(sample.fan_percent))
    draw, cap = sample.power_draw_w, sample.power_limit_w
    watts = _put(Line(" "), power_cell(sample))
    power_fraction = draw / cap if draw is not None and cap else None
    pwr = Line("PWR ", "bold")
    pwr.extend(bar(power_fraction, max(4, width - 4 - watts.cells - right.cells), _load(power_fraction)))
    pwr.extend(watts).extend(right)

    # Line 4: P-state, clocks, ECC, codecs in use, throttling. Line 5 (optional): PCIe and NVLink.
    # Then one line per MIG instance.
    lines = [mem, utl, *activity, pwr, _info_line(gpu, width)]
    if links:
        lines.append(interconnect_line(gpu, width))
    lines = [line.fit(width) for line in lines]
    lines.extend(mig_lines(gpu, width, head=Line("MIG ", "bold")))
    if not gpu.health.responding:
        for line in lines:
            line.restyle("dim")
    return lines


# ----------------------------------------------------------------- MIG instances

MIG_MIN_BAR = 8
"""Cells an instance's memory bar keeps before its UUID is cut, then left out."""
MIG_SHORT_UUID = 13
"""``MIG-1a2b3c4d…``: the shortest UUID worth showing (enough to tell instances apart and find the rest)."""
_MIG_UTILIZATION_SHORT = ("not reported under MIG", "under MIG")


def mig_rows(gpu: GpuState) -> int:
    """Lines the GPU's MIG instances add under it (panel and compact alike): one each; none when lost
    or when a note stands for the GPU's readings."""
    return 0 if gpu.note or gpu.lost else len(gpu.static.mig_instances)


@dataclass(frozen=True, slots=True)
class _MigColumns:
    """Widths a GPU's instance lines share, so their bars and figures line up under each other."""

    label: int
    profile: int
    memory: int
    sms: int  # 0: left out (too narrow, and the instance's activity says more)
    processes: int
    bar: int
    uuid: int  # 0: left out (too narrow)
    activity: tuple[str, ...] = ()  # the GPM figures shown (MIG_ACTIVITY, or its first, or none)


MIG_ACTIVITY: tuple[tuple[str, str], ...] = (("SM", "sm_active_percent"), ("TNS", "tensor_active_percent"))
"""An instance's own real-work figures, most useful first: what its line shows where the width allows."""
_MIG_ACTIVITY_CELLS = 10  # "  SM   45%", "  TNS  19%": two spaces, the label in 3 cells, a space, the value in 4


def _sms_text(state: MigState) -> str:
    return mig_sm_cell(state.instance)[0]


def _processes_text(gpu: GpuState, state: MigState) -> str:
    return mig_processes_cell(gpu, state)[0]


def _mig_columns(gpu: GpuState, states: tuple[MigState, ...], width: int, head: int) -> _MigColumns:
    """Fit label, profile, memory and processes first; then, while the bar keeps half of
    :data:`MIG_MIN_BAR`, the instances' own SM activity (Hopper and newer) and their SM count; then, while it
    keeps all of it, their tensor activity and the UUID (whole, else cut to :data:`MIG_SHORT_UUID`, else left
    out: the picker and ``--once`` show it). The bar takes what is left.

    Why this order: the bar repeats the memory figure, the SM count is the profile's,
    and the UUID is a copy-paste target; the activity is the one thing only this line
    says about the instance now. Without GPM figures the SM count is always there.
    """
    label = max(len(s.label) for s in states)
    profile = max(Line(mig_profile_cell(s.instance)[0]).cells for s in states)
    memory = max(len(mig_memory_cell(s)[0]) for s in states)
    sms = max(len(_sms_text(s)) for s in states)
    processes = max(len(_processes_text(gpu, s)) for s in states)
    # head, label, profile, bar, memory, "N procs", single spaces between
    rest = width - (head + label + 1 + profile + 1 + 1 + memory + 1 + processes + 6)
    shown = mig_activity_shown(gpu)
    activity: tuple[str, ...] = ()
    if shown and rest - _MIG_ACTIVITY_CELLS >= MIG_MIN_BAR // 2:
        activity, rest = ("sm_active_percent",), rest - _MIG_ACTIVITY_CELLS
    if not shown or rest - (sms + 5) >= MIG_MIN_BAR // 2:  # " N SMs"
        rest -= sms + 5
    else:
        sms = 0
    if activity and rest - _MIG_ACTIVITY_CELLS >= MIG_MIN_BAR:
        activity, rest = (*activity, "tensor_active_percent"), rest - _MIG_ACTIVITY_CELLS
    fixed = (label, profile, memory, sms, processes)
    uuid = max(Line(mig_uuid_cell(s.instance)[0]).cells for s in states)
    if rest >= MIG_MIN_BAR + 2 + uuid:
        return _MigColumns(*fixed, rest - 2 - uuid, uuid, activity)
    if uuid > MIG_SHORT_UUID and rest >= MIG_MIN_BAR + 2 + MIG_SHORT_UUID:
        return _MigColumns(*fixed, rest - 2 - MIG_SHORT_UUID, MIG_SHORT_UUID, activity)
    return _MigColumns(*fixed, rest, 0, activity)


def _mig_line(gpu: GpuState, state: MigState, columns: _MigColumns, head: Line) -> Line:
    """``MIG 1/2/0 3g.40gb ███░░░ 20.3/39.8GiB 60 SMs 2 procs  SM  45% TNS 19%  MIG-1a2b…``: one instance
    in the columns given."""
    line = head.add(state.label.ljust(columns.label), "bold").add(" ")
    text, category = mig_profile_cell(state.instance)
    _put(line, (text + " " * (columns.profile - Line(text).cells), category), "cyan")
    percent = state.memory_used_percent
    fraction = None if percent is None else percent / 100
    line.add(" ").extend(bar(fraction, columns.bar, _load(fraction)))
    text, category = mig_memory_cell(state)
    _put(line.add(" "), (text.rjust(columns.memory), category))
    if columns.sms:
        text, category = mig_sm_cell(state.instance)
        _put(line.add(" "), (text.rjust(columns.sms), category)).add(" SMs", "dim")
    text, category = mig_processes_cell(gpu, state)
    word = " proc " if text == "1" else " procs"
    _put(line.add(" "), (text.rjust(columns.processes), category)).add(word, "dim")
    for label, name in MIG_ACTIVITY:
        if name in columns.activity:
            text, category = mig_activity_cell(state.usage, name)
            _put(
                line.add(f"  {label:<3} ", "dim"),
                (text.rjust(4), category),
                "bold" if name == "sm_active_percent" else "",
            )
    if columns.uuid:
        line.add("  ").extend(_put(Line(), mig_uuid_cell(state.instance)).fit(columns.uuid))
    return line


def mig_lines(gpu: GpuState, width: int, *, head: Line | None = None, tree: bool = False) -> list[Line]:
    """One line per MIG instance of ``gpu`` (:func:`mig_rows` of them), each exactly ``width`` cells.

    ``head`` starts each line (the panel's ``MIG ``); ``tree``: a ``├``/``└`` branch instead, indented
    under the GPU's index (the compact view). A GPU that is not responding has its instance lines dimmed.
    """
    if not mig_rows(gpu):
        return []
    states = gpu.mig
    heads = [Line(" └ " if i == len(states) - 1 else " ├ ", "dim") for i in range(len(states))] if tree else []
    head_cells = 3 if tree else (head.cells if head is not None else 0)
    columns = _mig_columns(gpu, states, width, head_cells)
    if columns.bar < MIG_MIN_BAR // 2 and head_cells:  # too narrow: the head gives the bar its cells
        heads, head = [Line(" ") for _ in states] if tree else [], None
        columns = _mig_columns(gpu, states, width, 1 if tree else 0)
    columns = dataclasses.replace(columns, bar=max(MIG_MIN_BAR // 2, columns.bar))
    lines = []
    for i, state in enumerate(states):
        start = heads[i] if tree else Line().extend(head) if head is not None else Line()
        line = _mig_line(gpu, state, columns, start).fit(width)
        lines.append(line.restyle("dim") if not gpu.health.responding else line)
    return lines


def _mig_utilization(width: int) -> Line:
    """Where a MIG GPU's compact sparkline would be: why there is none, as long as ``width`` allows,
    right-aligned so that it leads into the N/A after it."""
    for text in (MIG_UTILIZATION_NOTE, *_MIG_UTILIZATION_SHORT):
        if len(text) + 1 <= width:
            return Line(text.rjust(width), "dim")
    return Line().fit(width)


COMPACT_WORD_WIDTH = 50
"""Below this many cells a compact line shows its verdict as one sign (✓ ! ✗) instead of the word."""
_VERDICT_SIGNS = {Severity.OK: "✓", Severity.WARN: "!", Severity.FAIL: "✗"}


def _compact_verdict(gpu: GpuState, width: int) -> Line:
    """The verdict in a fixed four cells (one sign on a narrow line), so the compact lines' columns stay aligned."""
    text, category = verdict_cell(gpu)
    if width < COMPACT_WORD_WIDTH:
        return Line(_VERDICT_SIGNS[gpu.health.verdict], RICH_STYLES[category])
    return Line(f"{text:<4} ", RICH_STYLES[category])


def _compact_extras(gpu: GpuState) -> list[Line]:
    """What may end a compact line, longest first: the model and bus id (or the model alone) when all
    is well, "busy, little work" for a busy GPU whose SMs barely work, else the first reason, or how long
    the GPU has not responded."""
    stalled = stalled_text(gpu)
    if stalled is not None:
        return [Line(f"  {stalled}", RICH_STYLES[ALERT]), Line(f" {stalled}", RICH_STYLES[ALERT])]
    if gpu.health.verdict is not Severity.OK and gpu.health.findings:
        text, category = health_summary_cell(gpu)
        reason = text.partition(" ")[2]  # the verdict is already at the start of the line
        return [Line(f"  {reason}", RICH_STYLES[category])]
    name = short_name(gpu.static.name)
    extras = [Line(f"  {name} {safe_text(gpu.static.short_bus_id)}", "dim"), Line(f"  {name}", "dim")]
    if gpu_little_work(gpu.sample):  # busy, little work: the words say why SM active is in the warning colour
        words = (f"  ⚠ {ACTIVITY_WORDS}", "  ⚠ little work", "  ⚠ SMs idle", "  ⚠")
        extras = [Line(text, RICH_STYLES[WARN]) for text in words]
    mig = mig_mode_cell(gpu.static)
    if mig is not None and mig[1] == WARN:  # a MIG mode change waiting for a reset: kept before the name
        marker = Line(f"  {mig[0]}", RICH_STYLES[WARN])
        return [Line().extend(marker).extend(extra) for extra in extras] + [marker]
    return extras


COMPACT_MIN_BARS = 24
"""Cells the two bars of a compact line keep before the name (or the reason) at its end is cut."""
_COMPACT_MIN_EXTRA = 12
COMPACT_EXTRA_MAX = 40
"""Cells a compact line's end (the name, or the reason) takes at most -- or half of what the bars leave
on a very wide line: the bars get the rest."""


def _compact_activity(gpu: GpuState) -> Line:
    """`` SM  52%`` after a compact line's utilisation, in the warning colour when the GPU is busy with little
    work; nothing on a board without GPM (no room to say why: the panel and ``--once`` do)."""
    if not activity_shown(gpu.sample):
        return Line()
    text, category = sm_active_cell(gpu.sample)
    return _put(Line(" SM ", "dim"), (text.rjust(4), category), "bold")


def _compact_tail(gpu: GpuState, room: int) -> list[Line]:
    """`` 85% SM  52%``, `` 65°C``, ``  494W``, `` P0 ``: the figures after the sparkline, as pieces that fit
    in ``room`` cells.

    On a narrow line the least telling go first -- the P-state, then the power, then
    the temperature -- and SM active goes where it does not fit whole beside the
    utilisation (never ``SM 8…``), so that what stays is whole rather than the
    line ending cut. The widths do not depend on the values: lines of one width keep
    the same pieces, and their bars line up.
    """
    sample = gpu.sample
    text, category = percent_cell(sample.utilization_gpu_percent)
    utilization = _put(Line(" "), (text.rjust(4), category), "bold")
    activity = _compact_activity(gpu)
    if utilization.cells + activity.cells > room:  # SM active whole or not at all: never ``SM 8…``
        activity = Line()
    pieces = [utilization.extend(activity)]
    pieces.append(Line(" ").extend(_temperature(gpu, with_limit=False).fit(5)))
    draw = sample.power_draw_w
    pieces.append(Line(f" {NA:>5}", "dim") if draw is None else Line(f" {draw:4.0f}W"))
    text, category = pstate_cell(sample)
    pieces.append(_put(Line(), (" " + text.ljust(3), category)))
    while len(pieces) > 1 and sum(piece.cells for piece in pieces) > room:
        pieces.pop()
    return pieces


def _with_markers(pieces: list[Line], markers: Line, end: int) -> tuple[Line, int, int]:
    """The tail with its markers (`` ⚠``, `` ECC!``), the cells left for the end, and the cells the bars give.

    The markers take the end's cells first, then those of the last figures (the
    P-state, the power, the temperature: dropped whole, the spare cells going to the
    end), and only then the bars': the bars of a marked GPU still line up with the others'.
    """
    need = markers.cells - end
    kept = list(pieces)
    while need > 0 and len(kept) > 1:
        need -= kept.pop().cells
    tail = Line()
    for piece in kept:
        tail.extend(piece)
    tail.extend(markers)
    if end == 0 and need < 0:  # no end on this width: the spare cells stay blank (no two-cell name)
        return tail.add(" " * -need), 0, 0
    return tail, max(0, -need), max(0, need)


COMPACT_GIB_CELLS = 15
"""Cells of a compact line's memory in GiB (`` 56.8/79.6GiB``, right-aligned): shown where the bars keep
:data:`COMPACT_MIN_BARS` and the end :data:`COMPACT_END_KEEPS` after it."""
COMPACT_END_KEEPS = 24
"""Cells the end of a compact line keeps before the GiB figure is shown: a reason ("⚠ busy, little work")
outranks the GiB, which outranks the model's name and bus id (the panel and the health screen have them)."""


@dataclass(frozen=True, slots=True)
class CompactColumns:
    """Where a compact line's unlabelled figures sit, in cells: what its header line labels
    (:func:`compact_header`). Every line of one width has the same, so one header serves them all."""

    head: int  # the index, a remote host, the verdict
    bar: int  # the memory bar
    memory: int  # the GiB figure (where it fits) and the percentage
    spark: int  # the utilisation chart, then its figure now


def compact_line(gpu: GpuState, width: int) -> Line:
    """One line per GPU: index, verdict, memory bar, GiB (where it fits) and percentage, utilisation sparkline
    and SM active (Hopper and newer), temperature, power, then the name.

    A GPU with a finding ends with its first reason instead of its name; one that
    is not responding ends with how long, and its last values are dimmed. The
    figures carry no labels (:func:`compact_header` draws them once, above the lines).
    """
    return _compact(gpu, width)[0]


def compact_columns(gpu: GpuState, width: int) -> CompactColumns | None:
    """Where ``gpu``'s compact line of ``width`` cells puts its figures; None for a line that has none
    (a note, a lost GPU, one not responding)."""
    return _compact(gpu, width)[1]


def _gib_cell(gpu: GpuState) -> Line:
    """`` 56.8/79.6GiB`` right-aligned in :data:`COMPACT_GIB_CELLS` (dim N/A when the driver did not say)."""
    text, category = memory_cell(gpu)
    if gpu.sample.memory_used_bytes is not None and gpu.static.memory_total_bytes is not None:
        text = used_of_total(gpu.sample.memory_used_bytes, gpu.static.memory_total_bytes)
    return _put(Line(" "), (text.rjust(COMPACT_GIB_CELLS - 1), category)).fit(COMPACT_GIB_CELLS)


def _compact(gpu: GpuState, width: int) -> tuple[Line, CompactColumns | None]:
    static = gpu.static
    line = Line("  ") if gpu.stands_for_host else Line(f"{static.index:>2}", "bold")  # a host's line: no index
    if static.host is not None:
        line.add(" ").add(_host(gpu).rstrip(), RICH_STYLES[REMOTE])
    if gpu.note:
        return _put(line.add(" "), note_cell(gpu)).fit(width), None
    bus = safe_text(static.short_bus_id)
    if gpu.lost:
        _put(line.add(" "), lost_cell())
        line.add(f" {short_name(static.name)} {bus} (GpuIsLost)", RICH_STYLES[BAD])
        return line.fit(width), None
    verdict = _compact_verdict(gpu, width)
    line.add(" " if verdict.cells > 1 or static.host is not None else "").extend(verdict)
    percent = memory_percent_text(gpu)
    memory = Line(f" {percent:>4} ") if percent is not None else Line(f" {NA:>4} ", "dim")
    markers = Line()
    for sign in compact_markers(gpu):
        markers.add(f" {sign}", RICH_STYLES[_MARKER_CATEGORY[sign]])
    pieces = _compact_tail(gpu, width - line.cells - memory.cells - 8)
    fraction = None if gpu.memory_used_percent is None else gpu.memory_used_percent / 100
    budget = width - line.cells - memory.cells - sum(piece.cells for piece in pieces)
    # The end (name or reason) gets the same cells on every line of a width, so the bars line up;
    # the memory in GiB comes first where the bars keep their cells after it.
    room = budget - COMPACT_MIN_BARS
    if room >= COMPACT_GIB_CELLS + COMPACT_END_KEEPS:
        memory = _gib_cell(gpu).extend(memory)
        room -= COMPACT_GIB_CELLS
        budget -= COMPACT_GIB_CELLS
    extra_width = min(room, max(COMPACT_EXTRA_MAX, room // 2)) if room >= _COMPACT_MIN_EXTRA else 0
    budget -= extra_width
    tail, extra_width, given = _with_markers(pieces, markers, extra_width)
    budget -= given
    extras = _compact_extras(gpu)
    fitting = next((candidate for candidate in extras if candidate.cells <= extra_width), None)
    if not gpu.health.responding and fitting is None:  # "not responding" is never cut: the values make room
        return line.extend(_stalled_values(gpu, budget, extra_width, memory, tail)).fit(width), None
    extra = (fitting or extras[-1]).fit(extra_width) if extra_width else Line()
    mem_width = max(4, budget // 2)
    spark_width = max(4, budget - mem_width)
    columns = CompactColumns(line.cells, mem_width, memory.cells, spark_width)
    values = bar(fraction, mem_width, _load(fraction)).extend(memory)
    if mig_hides_utilization(gpu):
        values.extend(_mig_utilization(spark_width)).extend(tail)
    else:
        values.extend(sparkline(gpu.history.utilization_gpu_percent, spark_width)).extend(tail)
    if not gpu.health.responding:
        values.restyle("dim")  # its last values: not live
    return line.extend(values).extend(extra).fit(width), columns


COMPACT_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("⚠", ("⚠ clocks slowed (heat, HW slowdown, power brake)", "⚠ clocks slowed", "⚠ slowed")),
    ("ECC!", ("ECC! uncorrected memory errors", "ECC! uncorrected errors", "ECC! errors")),
)
"""The signs a compact line may end its figures with (in place of the temperature on a narrow line), and
what the header line says they mean when one is in view, longest first."""
_MARKER_CATEGORY = {"⚠": WARN, "ECC!": ALERT}


def compact_markers(gpu: GpuState) -> tuple[str, ...]:
    """The signs of :data:`COMPACT_MARKERS` that ``gpu``'s compact line shows (none on a line without figures)."""
    if gpu.note or gpu.lost:
        return ()
    sample = gpu.sample
    shown = []
    if _throttle_warns(gpu):
        shown.append("⚠")
    if ecc_cell(sample)[1] == ALERT:  # uncorrected errors: the panel's count, as a marker
        shown.append("ECC!")
    return tuple(shown)


def compact_legend(gpus: Sequence[GpuState], width: int) -> Line:
    """What the signs in view mean (``⚠ clocks slowed (heat, HW slowdown, power brake)``), in at most ``width``
    cells: the words shorten (``⚠ clocks slowed``) before they are cut; empty when no line shows a sign."""
    shown = {sign for gpu in gpus for sign in compact_markers(gpu)}
    entries = [words for sign, words in COMPACT_MARKERS if sign in shown]
    if not entries:
        return Line()
    for level in range(max(len(words) for words in entries)):
        text = " · ".join(words[min(level, len(words) - 1)] for words in entries)
        if len(text) <= width:
            return Line(text, RICH_STYLES[WARN])
    return Line(" · ".join(words[-1] for words in entries), RICH_STYLES[WARN]).fit(width)


def compact_header(gpu: GpuState | None, width: int) -> Line:
    """The labels over a column of compact lines of ``width`` cells, laid out as ``gpu``'s line (any GPU with
    figures: the lines of one width share their columns): ``GPU`` over the index, ``MEM used`` over the memory
    bar and its figures, ``UTIL`` over the utilisation chart and its figure now. Exactly ``width`` cells
    (blank for a column of notes or lost GPUs). The temperature, power and SM active carry their units."""
    columns = None if gpu is None else compact_columns(gpu, width)
    line = Line()
    if columns is None:
        return line.fit(width)
    line.add(("GPU" if columns.head >= 4 else " #").ljust(columns.head), "dim")  # " 0✓": over the index
    memory = columns.bar + columns.memory
    line.add(("MEM used" if memory >= 12 else "MEM").ljust(memory)[:memory], "dim")
    line.add(("UTIL now" if columns.spark >= 9 else "UTIL").ljust(columns.spark + 5)[: columns.spark + 5], "dim")
    return line.fit(width)


def compact_lines(gpu: GpuState, width: int) -> list[Line]:
    """A GPU's compact line, then one line per MIG instance, indented under it (:func:`mig_lines`)."""
    return [compact_line(gpu, width), *mig_lines(gpu, width, tree=True)]


def _stalled_values(gpu: GpuState, bars: int, extra_width: int, memory: Line, tail: Line) -> Line:
    """A not-responding GPU's compact values, dimmed, then "not responding (N s)" whole.

    ``bars`` and ``extra_width``: the cells the two bars and the end have on the other
    GPUs' lines. The memory bar keeps its width (the lines stay aligned) while the
    sparkline gives the stall its room; then the stale figures (utilisation,
    temperature, power) and the sparkline go, and at last the memory bar shrinks.
    """
    stalled = _compact_extras(gpu)[-1]
    mem_width = max(4, bars // 2)
    spark_width = bars - mem_width - (stalled.cells - extra_width)
    fraction = None if gpu.memory_used_percent is None else gpu.memory_used_percent / 100
    if spark_width >= 4:
        values = bar(fraction, mem_width, _load(fraction)).extend(memory)
        values.extend(sparkline(gpu.history.utilization_gpu_percent, spark_width)).extend(tail)
    else:
        room = bars + tail.cells + extra_width - stalled.cells  # for the memory bar alone
        values = bar(fraction, max(4, min(mem_width, room)), _load(fraction)).extend(memory)
    return values.restyle("dim").extend(stalled)

"""Drawing one GPU as text: the full panel and the compact one-line form.

Pure functions from a :class:`~nvtopy.model.GpuState` to :class:`~nvtopy.render.styled.Line`
objects of an exact cell width: the TUI turns them into strips with no layout
or markup work, and tests and screenshots can check them without a terminal.
Every value's words and colour category come from :mod:`nvtopy.render.cells`,
as in ``nvtopy --once``: this module only lays them out (bars, sparklines,
padding). Colours follow the GPU's own limits (its slowdown temperature, its
enforced power cap), not universal thresholds: 80 °C is fine on one board and
throttling on another.

Text from outside (GPU names, bus ids, remote host names, notes that quote a
peer's error, throttle reasons read from a recording) goes through
:func:`~nvtopy.textsafe.safe_text` here, before it becomes a :class:`Line`.
"""

from __future__ import annotations

from ..model import GpuState
from ..textsafe import safe_text
from .cells import (
    ALERT,
    BAD,
    DIM,
    REMOTE,
    RICH_STYLES,
    WARN,
    Cell,
    ecc_cell,
    host_label,
    load_category,
    lost_cell,
    memory_cell,
    memory_percent_text,
    name_cell,
    note_cell,
    percent_cell,
    power_cell,
    pstate_cell,
    temperature_cell,
    throttle_cell,
)
from .styled import Line
from .units import NA, short_name

__all__ = ["PANEL_HEIGHT", "PANEL_MIN_WIDTH", "bar", "compact_line", "panel_lines", "panel_title", "sparkline"]

PANEL_HEIGHT = 6  # 4 lines of content inside a border
PANEL_MIN_WIDTH = 52
_SPARK = " ▁▂▃▄▅▆▇█"
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


def sparkline(values: tuple[float | int | None, ...], width: int, style_name: str = "cyan") -> Line:
    """The last ``width`` values on a fixed 0-100 scale (gaps for missing values), right-aligned."""
    line = Line()
    if width <= 0:
        return line
    recent = values[-width:]
    line.add(" " * (width - len(recent)))
    run: list[str] = []
    run_style = style_name
    for value in recent:
        if value is None:
            char, char_style = "·", "dim"
        else:
            level = round(min(100.0, max(0.0, float(value))) / 100 * 8)
            char, char_style = (_SPARK[level], style_name) if level else ("▁", "bright_black")
        if char_style != run_style and run:
            line.add("".join(run), run_style)
            run = []
        run_style = char_style
        run.append(char)
    if run:
        line.add("".join(run), run_style)
    return line


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


def _throttle(gpu: GpuState) -> Line:
    text, category = throttle_cell(gpu.sample)
    return Line("⚠ " + text, RICH_STYLES[category]) if text and category == WARN else Line()


def _host(gpu: GpuState) -> str:
    """``host/index `` of a remote host's GPU (the host name is outside text)."""
    return f"{host_label(gpu.static)} "


def panel_title(gpu: GpuState) -> Line:
    static = gpu.static
    title = Line(f" {static.index} ", "bold")
    if static.host is not None:  # a remote host's GPU: its host and own index
        title.add(_host(gpu), RICH_STYLES[REMOTE])
        if gpu.note:
            return title
    _put(title, name_cell(static), "bold")
    if static.short_bus_id:
        title.add(f" · {safe_text(static.short_bus_id)} ", "dim")
    return title


def _value(line: Line, cell: Cell, width: int = 0, emphasis: str = "") -> Line:
    """A number right-aligned in ``width`` cells; N/A as it is."""
    text, category = cell
    return _put(line, (text.rjust(width) if category != DIM else text, category), emphasis)


def panel_lines(gpu: GpuState, width: int) -> list[Line]:
    """The four content lines of a full panel, each exactly ``width`` cells."""
    sample = gpu.sample
    if gpu.note:
        # A host that could not be read is asked again; a note on a host that answered (capped) is not an error.
        retry = Line("retrying at every refresh", "dim") if gpu.lost else Line()
        lines = [_put(Line(), note_cell(gpu)), retry]
        return [line.fit(width) for line in lines] + [Line().fit(width), Line().fit(width)]
    if gpu.lost:
        word, category = lost_cell()
        lost = Line(f"GPU {word}", RICH_STYLES[category])
        lost.add("  fell off the bus or stopped answering (GpuIsLost)", RICH_STYLES[BAD])
        retry = Line("retrying in the background; the other GPUs keep updating", "dim")
        return [lost.fit(width), retry.fit(width), Line().fit(width), Line().fit(width)]

    # Line 1: memory.
    label = _memory_label(gpu)
    percent = gpu.memory_used_percent
    mem = Line("MEM ", "bold")
    fraction = None if percent is None else percent / 100
    mem.extend(bar(fraction, width - 4 - label.cells - 1, _load(fraction)))
    mem.add(" ").extend(label)

    # Line 2: utilisation sparkline on a fixed 0-100 scale, current value, bandwidth.
    tail = _value(Line(" "), percent_cell(sample.utilization_gpu_percent), 4, "bold")
    _value(tail.add("  BW "), percent_cell(sample.utilization_memory_percent), 4)
    utl = Line("UTL ", "bold")
    utl.extend(sparkline(gpu.history.utilization_gpu_percent, width - 4 - tail.cells)).extend(tail)

    # Line 3: power against the enforced cap, temperature against slowdown, fan.
    right = Line("  ").extend(_temperature(gpu)).add("  FAN ")
    _put(right, percent_cell(sample.fan_percent))
    draw, cap = sample.power_draw_w, sample.power_limit_w
    watts = _put(Line(" "), power_cell(sample))
    power_fraction = draw / cap if draw is not None and cap else None
    pwr = Line("PWR ", "bold")
    pwr.extend(bar(power_fraction, max(4, width - 4 - watts.cells - right.cells), _load(power_fraction)))
    pwr.extend(watts).extend(right)

    # Line 4: P-state, clocks, ECC, codecs in use, throttle reasons.
    info = _put(Line(), pstate_cell(sample), "bold")
    info.add("  SM ")
    if sample.clock_sm_mhz is None:
        _na(info)
    else:
        info.add(str(sample.clock_sm_mhz))
    info.add("  MEM ")
    if sample.clock_mem_mhz is None:
        _na(info)
    else:
        info.add(str(sample.clock_mem_mhz))
    _put(info.add(" MHz  ECC "), ecc_cell(sample))
    if sample.encoder_percent or sample.decoder_percent:
        info.add(f"  ENC {sample.encoder_percent or 0}% DEC {sample.decoder_percent or 0}%")
    throttle = _throttle(gpu)
    if throttle.cells:
        info.add("  ").extend(throttle)
    return [mem.fit(width), utl.fit(width), pwr.fit(width), info.fit(width)]


def compact_line(gpu: GpuState, width: int) -> Line:
    """One line per GPU: index, memory bar, utilisation sparkline, temperature, power, name."""
    sample, static = gpu.sample, gpu.static
    line = Line(f"{static.index:>2} ", "bold")
    if static.host is not None:
        line.add(_host(gpu), RICH_STYLES[REMOTE])
    if gpu.note:
        return _put(line, note_cell(gpu)).fit(width)
    bus = safe_text(static.short_bus_id)
    if gpu.lost:
        _put(line, lost_cell())
        line.add(f" {short_name(static.name)} {bus} (GpuIsLost)", RICH_STYLES[BAD])
        return line.fit(width)
    percent = memory_percent_text(gpu)
    draw = sample.power_draw_w
    tail = Line(" ")
    text, category = percent_cell(sample.utilization_gpu_percent)
    _put(tail, (text.rjust(4), category), "bold")
    tail.add(" ").extend(_temperature(gpu, with_limit=False).fit(5))
    if draw is None:
        tail.add(f" {NA:>5}", "dim")
    else:
        tail.add(f" {draw:4.0f}W")
    text, category = pstate_cell(sample)
    _put(tail, (" " + text.ljust(3), category))
    if throttle_cell(sample)[1] == WARN:
        tail.add(" ⚠", RICH_STYLES[WARN])
    if ecc_cell(sample)[1] == ALERT:  # uncorrected errors: the panel's count, as a marker
        tail.add(" ECC!", RICH_STYLES[ALERT])
    extra = Line(f"  {short_name(static.name)} {bus}", "dim")
    memory = Line(f" {percent:>4} ") if percent is not None else Line(f" {NA:>4} ", "dim")
    budget = width - line.cells - memory.cells - tail.cells
    if budget >= 24 + extra.cells:
        budget -= extra.cells
    else:
        extra = Line()
    mem_width = max(4, budget // 2)
    spark_width = max(4, budget - mem_width)
    fraction = None if gpu.memory_used_percent is None else gpu.memory_used_percent / 100
    line.extend(bar(fraction, mem_width, _load(fraction))).extend(memory)
    line.extend(sparkline(gpu.history.utilization_gpu_percent, spark_width)).extend(tail).extend(extra)
    return line.fit(width)

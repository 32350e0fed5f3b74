"""Drawing one GPU as text: the full panel and the compact one-line form.

Pure functions from a :class:`~nvtopy.model.GpuState` to :class:`~nvtopy.render.styled.Line`
objects of an exact cell width: the TUI turns them into strips with no layout
or markup work, and tests and screenshots can check them without a terminal.
Colours follow the GPU's own limits (its slowdown temperature, its enforced
power cap), not universal thresholds: 80 °C is fine on one board and
throttling on another.

Text from outside (GPU names, bus ids, remote host names, notes that quote a
peer's error, throttle reasons read from a recording) goes through
:func:`~nvtopy.textsafe.safe_text` here, before it becomes a :class:`Line`.
"""

from __future__ import annotations

from ..model import GpuState
from ..textsafe import safe_text
from .styled import Line
from .units import NA, fmt_bytes, short_name

__all__ = ["PANEL_HEIGHT", "PANEL_MIN_WIDTH", "bar", "compact_line", "panel_lines", "panel_title", "sparkline"]

PANEL_HEIGHT = 6  # 4 lines of content inside a border
PANEL_MIN_WIDTH = 52
_SPARK = " ▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉█"
_THROTTLE_LABELS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal",
    "sw_thermal_slowdown": "thermal",
    "hw_power_brake_slowdown": "power brake",
    "sync_boost": "sync boost",
    "applications_clocks_setting": "app clocks",
    "display_clock_setting": "display clocks",
}


def load_style(fraction: float) -> str:
    return "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "bold red"


def temperature_style(celsius: int, slowdown: int | None) -> str:
    if slowdown is None:
        return ""
    if celsius >= slowdown:
        return "bold white on red"
    if celsius >= slowdown - 5:
        return "bold red"
    if celsius >= slowdown - 15:
        return "yellow"
    return "green"


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
    return line.add(NA, "dim")


def _memory_label(gpu: GpuState) -> Line:
    used, total = gpu.sample.memory_used_bytes, gpu.static.memory_total_bytes
    label = Line()
    if used is None:
        _na(label)
    else:
        label.add(fmt_bytes(used))
    label.add(f"/{fmt_bytes(total)}")
    percent = gpu.memory_used_percent
    return label.add(f" {percent:3.0f}%" if percent is not None else "     ")


def _temperature(gpu: GpuState, *, with_limit: bool = True) -> Line:
    value, slowdown = gpu.sample.temperature_c, gpu.static.temperature_slowdown_c
    if value is None:
        return _na(Line())
    line = Line(f"{value}°C", temperature_style(value, slowdown))
    if slowdown and with_limit:
        line.add(f"/{slowdown}", "dim")
    return line


def _throttle(gpu: GpuState) -> Line:
    reasons = set(gpu.sample.throttle_reasons or ()) - {"gpu_idle"}
    if "hw_thermal_slowdown" in reasons:
        reasons.discard("sw_thermal_slowdown")  # one thermal warning is enough; the HW one is the serious one
    labels = [label for name, label in _THROTTLE_LABELS.items() if name in reasons]
    labels += sorted(safe_text(r) for r in reasons if r not in _THROTTLE_LABELS)  # a recording's or a peer's
    return Line("⚠ " + ", ".join(labels), "yellow") if labels else Line()


def _ecc(gpu: GpuState) -> Line:
    sample = gpu.sample
    if sample.ecc_mode is None:
        return _na(Line())
    if not sample.ecc_mode:
        return Line("off")
    errors = sample.ecc_uncorrected_volatile
    if errors is None:
        return Line("on")
    return Line(str(errors), "bold white on red" if errors else "")


def _host(gpu: GpuState) -> str:
    """``host/index `` of a remote host's GPU (the host name is outside text)."""
    static = gpu.static
    return safe_text(static.host) + ("" if static.host_index is None else f"/{static.host_index}") + " "


def panel_title(gpu: GpuState) -> Line:
    static = gpu.static
    title = Line(f" {static.index} ", "bold")
    if static.host is not None:  # a remote host's GPU: its host and own index
        title.add(_host(gpu), "magenta")
        if gpu.note:
            return title
    title.add(short_name(static.name) if static.name else NA, "bold")
    if static.short_bus_id:
        title.add(f" · {safe_text(static.short_bus_id)} ", "dim")
    return title


def panel_lines(gpu: GpuState, width: int) -> list[Line]:
    """The four content lines of a full panel, each exactly ``width`` cells."""
    sample = gpu.sample
    if gpu.note:
        # A host that could not be read is asked again; a note on a host that answered (capped) is not an error.
        retry = Line("retrying at every refresh", "dim") if gpu.lost else Line()
        lines = [Line(safe_text(gpu.note), "bold red" if gpu.lost else "yellow"), retry]
        return [line.fit(width) for line in lines] + [Line().fit(width), Line().fit(width)]
    if gpu.lost:
        lost = Line("GPU LOST", "bold white on red")
        lost.add("  fell off the bus or stopped answering (GpuIsLost)", "red")
        retry = Line("retrying in the background; the other GPUs keep updating", "dim")
        return [lost.fit(width), retry.fit(width), Line().fit(width), Line().fit(width)]

    # Line 1: memory.
    label = _memory_label(gpu)
    percent = gpu.memory_used_percent
    mem = Line("MEM ", "bold")
    fraction = None if percent is None else percent / 100
    mem.extend(bar(fraction, width - 4 - label.cells - 1, load_style(fraction or 0)))
    mem.add(" ").extend(label)

    # Line 2: utilisation sparkline on a fixed 0-100 scale, current value, bandwidth.
    util = sample.utilization_gpu_percent
    tail = Line(" ")
    if util is None:
        _na(tail)
    else:
        tail.add(f"{util:3d}%", "bold")
    tail.add("  BW ")
    if sample.utilization_memory_percent is None:
        _na(tail)
    else:
        tail.add(f"{sample.utilization_memory_percent:3d}%")
    utl = Line("UTL ", "bold")
    utl.extend(sparkline(gpu.history.utilization_gpu_percent, width - 4 - tail.cells)).extend(tail)

    # Line 3: power against the enforced cap, temperature against slowdown, fan.
    right = Line("  ").extend(_temperature(gpu)).add("  FAN ")
    if sample.fan_percent is None:
        _na(right)
    else:
        right.add(f"{sample.fan_percent}%")
    draw, cap = sample.power_draw_w, sample.power_limit_w
    watts = Line(" ")
    if draw is None:
        _na(watts)
    else:
        watts.add(f"{draw:.0f}")
    watts.add("/" + (NA if cap is None else f"{cap:.0f}") + "W")
    power_fraction = draw / cap if draw is not None and cap else None
    pwr = Line("PWR ", "bold")
    pwr.extend(bar(power_fraction, max(4, width - 4 - watts.cells - right.cells), load_style(power_fraction or 0)))
    pwr.extend(watts).extend(right)

    # Line 4: P-state, clocks, ECC, codecs in use, throttle reasons.
    info = Line(NA if sample.pstate is None else f"P{sample.pstate}", "bold")
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
    info.add(" MHz  ECC ").extend(_ecc(gpu))
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
        line.add(_host(gpu), "magenta")
    if gpu.note:
        return line.add(safe_text(gpu.note), "bold red").fit(width)
    bus = safe_text(static.short_bus_id)
    if gpu.lost:
        line.add("LOST", "bold white on red")
        line.add(f" {short_name(static.name)} {bus} (GpuIsLost)", "red")
        return line.fit(width)
    percent = gpu.memory_used_percent
    util = sample.utilization_gpu_percent
    draw = sample.power_draw_w
    tail = Line(" ")
    if util is None:
        tail.add(f"{NA:>4}", "dim")
    else:
        tail.add(f"{util:3d}%", "bold")
    tail.add(" ").extend(_temperature(gpu, with_limit=False).fit(5))
    if draw is None:
        tail.add(f" {NA:>5}", "dim")
    else:
        tail.add(f" {draw:4.0f}W")
    tail.add(" " + (NA if sample.pstate is None else f"P{sample.pstate:<2d}"))
    if any(r != "gpu_idle" for r in (sample.throttle_reasons or ())):
        tail.add(" ⚠", "yellow")
    if sample.ecc_uncorrected_volatile:
        tail.add(" ECC!", "bold white on red")
    extra = Line(f"  {short_name(static.name)} {bus}", "dim")
    memory = Line(f" {percent:3.0f}% " if percent is not None else f" {NA:>4} ")
    budget = width - line.cells - memory.cells - tail.cells
    if budget >= 24 + extra.cells:
        budget -= extra.cells
    else:
        extra = Line()
    mem_width = max(4, budget // 2)
    spark_width = max(4, budget - mem_width)
    fraction = None if percent is None else percent / 100
    line.extend(bar(fraction, mem_width, load_style(fraction or 0))).extend(memory)
    line.extend(sparkline(gpu.history.utilization_gpu_percent, spark_width)).extend(tail).extend(extra)
    return line.fit(width)

"""Drawing one GPU as text: the full panel and the compact one-line form.

Pure functions from a :class:`~nvtopy.model.GpuState` to rich ``Text`` lines of
an exact cell width, so the TUI can turn them into strips without layout work,
and tests and screenshots can check them without a terminal. Colours follow the
GPU's own limits (its slowdown temperature, its enforced power cap), not
universal thresholds: 80 °C is fine on one board and throttling on another.
"""

from __future__ import annotations

from rich.text import Text

from .formatting import NA, fmt_bytes, short_name
from .model import GpuState

__all__ = ["PANEL_HEIGHT", "PANEL_MIN_WIDTH", "bar", "compact_line", "panel_lines", "sparkline"]

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


def _na(text: Text) -> Text:
    return text.append(NA, style="dim")


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


def bar(fraction: float | None, width: int, style: str) -> Text:
    """A horizontal bar with eighth-cell precision; a dim track shows the empty part."""
    if width <= 0:
        return Text()
    if fraction is None:
        return Text("·" * width, style="dim")
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part and full < width else "")
    text = Text(filled, style=style)
    text.append("░" * (width - len(filled)), style="bright_black")
    return text


def sparkline(values: tuple[float | int | None, ...], width: int, style: str = "cyan") -> Text:
    """The last ``width`` values on a fixed 0-100 scale (gaps for missing values), right-aligned."""
    if width <= 0:
        return Text()
    recent = values[-width:]
    text = Text(" " * (width - len(recent)))
    for value in recent:
        if value is None:
            text.append("·", style="dim")
        else:
            level = round(min(100.0, max(0.0, float(value))) / 100 * 8)
            text.append(_SPARK[level] if level else "▁", style=style if level else "bright_black")
    return text


def _fit(text: Text, width: int) -> Text:
    """Exactly ``width`` cells: pad, or cut with an ellipsis."""
    text.truncate(width, overflow="ellipsis", pad=True)
    return text


def _memory_label(gpu: GpuState) -> Text:
    used, total = gpu.sample.memory_used_bytes, gpu.static.memory_total_bytes
    label = Text()
    if used is None:
        _na(label)
    else:
        label.append(fmt_bytes(used))
    label.append(f"/{fmt_bytes(total)}")
    percent = gpu.memory_used_percent
    label.append(f" {percent:3.0f}%" if percent is not None else "     ")
    return label


def _temperature(gpu: GpuState) -> Text:
    value, slowdown = gpu.sample.temperature_c, gpu.static.temperature_slowdown_c
    if value is None:
        return _na(Text())
    text = Text(f"{value}°C", style=temperature_style(value, slowdown))
    if slowdown:
        text.append(f"/{slowdown}", style="dim")
    return text


def _throttle(gpu: GpuState) -> Text:
    reasons = set(gpu.sample.throttle_reasons or ()) - {"gpu_idle"}
    if "hw_thermal_slowdown" in reasons:
        reasons.discard("sw_thermal_slowdown")  # one thermal warning is enough; the HW one is the serious one
    labels = [label for name, label in _THROTTLE_LABELS.items() if name in reasons]
    labels += sorted(r for r in reasons if r not in _THROTTLE_LABELS)
    if not labels:
        return Text()
    return Text("⚠ " + ", ".join(labels), style="yellow")


def panel_title(gpu: GpuState) -> Text:
    static = gpu.static
    title = Text(f" {static.index} ", style="bold")
    title.append(short_name(static.name) if static.name else NA, style="bold")
    if static.short_bus_id:
        title.append(f" · {static.short_bus_id} ", style="dim")
    return title


def panel_lines(gpu: GpuState, width: int) -> list[Text]:
    """The four content lines of a full panel, each exactly ``width`` cells."""
    sample, _static = gpu.sample, gpu.static
    if gpu.lost:
        lost = Text("GPU LOST", style="bold white on red")
        lost.append("  fell off the bus or stopped answering (GpuIsLost)", style="red")
        retry = Text("retrying in the background; the other GPUs keep updating", style="dim")
        return [_fit(lost, width), _fit(retry, width), _fit(Text(), width), _fit(Text(), width)]

    # Line 1: memory.
    label = _memory_label(gpu)
    mem = Text("MEM ", style="bold")
    percent = gpu.memory_used_percent
    mem.append_text(bar(None if percent is None else percent / 100, width - 4 - label.cell_len - 1, ""))
    if percent is not None:
        mem.stylize(load_style(percent / 100), 4, 4 + width)
    mem.append(" ").append_text(label)

    # Line 2: utilisation sparkline on a fixed 0-100 scale, current value, bandwidth.
    util = sample.utilization_gpu_percent
    tail = Text(" ")
    if util is None:
        _na(tail)
    else:
        tail.append(f"{util:3d}%", style="bold")
    tail.append("  BW ")
    if sample.utilization_memory_percent is None:
        _na(tail)
    else:
        tail.append(f"{sample.utilization_memory_percent:3d}%")
    utl = Text("UTL ", style="bold")
    utl.append_text(sparkline(gpu.history.utilization_gpu_percent, width - 4 - tail.cell_len))
    utl.append_text(tail)

    # Line 3: power against the enforced cap, temperature against slowdown, fan.
    right = Text("  ")
    right.append_text(_temperature(gpu))
    right.append("  FAN ")
    if sample.fan_percent is None:
        _na(right)
    else:
        right.append(f"{sample.fan_percent}%")
    draw, cap = sample.power_draw_w, sample.power_limit_w
    watts = Text(" ")
    watts.append(NA if draw is None else f"{draw:.0f}", style="dim" if draw is None else "")
    watts.append("/" + (NA if cap is None else f"{cap:.0f}") + "W")
    pwr = Text("PWR ", style="bold")
    fraction = draw / cap if draw is not None and cap else None
    pwr.append_text(bar(fraction, max(4, width - 4 - watts.cell_len - right.cell_len), load_style(fraction or 0)))
    pwr.append_text(watts).append_text(right)

    # Line 4: P-state, clocks, ECC, codecs in use, throttle reasons.
    info = Text()
    info.append(NA if sample.pstate is None else f"P{sample.pstate}", style="bold")
    info.append("  SM ")
    info.append(
        NA if sample.clock_sm_mhz is None else f"{sample.clock_sm_mhz}", style="" if sample.clock_sm_mhz else "dim"
    )
    info.append("  MEM ")
    info.append(NA if sample.clock_mem_mhz is None else f"{sample.clock_mem_mhz}")
    info.append(" MHz  ECC ")
    info.append_text(_ecc(gpu))
    if sample.encoder_percent or sample.decoder_percent:
        info.append(f"  ENC {sample.encoder_percent or 0}% DEC {sample.decoder_percent or 0}%")
    throttle = _throttle(gpu)
    if throttle:
        info.append("  ").append_text(throttle)
    return [_fit(mem, width), _fit(utl, width), _fit(pwr, width), _fit(info, width)]


def _ecc(gpu: GpuState) -> Text:
    sample = gpu.sample
    if sample.ecc_mode is None:
        return _na(Text())
    if not sample.ecc_mode:
        return Text("off")
    errors = sample.ecc_uncorrected_volatile
    if errors is None:
        return Text("on")
    return Text(str(errors), style="bold white on red" if errors else "")


def compact_line(gpu: GpuState, width: int) -> Text:
    """One line per GPU: index, memory bar, utilisation sparkline, temperature, power, name."""
    sample, static = gpu.sample, gpu.static
    line = Text(f"{static.index:>2} ", style="bold")
    if gpu.lost:
        line.append("LOST", style="bold white on red")
        line.append(f" {short_name(static.name)} {static.short_bus_id or ''} (GpuIsLost)", style="red")
        return _fit(line, width)
    percent = gpu.memory_used_percent
    util = sample.utilization_gpu_percent
    temp = _temperature(gpu)
    temp.truncate(temp.plain.find("/") if "/" in temp.plain else temp.cell_len)
    draw = sample.power_draw_w
    tail = Text(" ")
    tail.append(f"{util:3d}%" if util is not None else f"{NA:>4}", style="bold" if util is not None else "dim")
    tail.append(" ").append_text(_fit(temp, 5))
    tail.append(f" {draw:4.0f}W" if draw is not None else f" {NA:>5}", style="" if draw is not None else "dim")
    tail.append(" " + (NA if sample.pstate is None else f"P{sample.pstate:<2d}"))
    warnings = Text()
    if any(r != "gpu_idle" for r in (sample.throttle_reasons or ())):
        warnings.append(" ⚠", style="yellow")
    if sample.ecc_uncorrected_volatile:
        warnings.append(" ECC!", style="bold white on red")
    tail.append_text(warnings)
    extra = Text(f"  {short_name(static.name)} {static.short_bus_id or ''}", style="dim")
    mem_text = Text(f" {percent:3.0f}% " if percent is not None else f" {NA:>4} ")
    budget = width - line.cell_len - mem_text.cell_len - tail.cell_len
    if budget >= 24 + extra.cell_len:
        budget -= extra.cell_len
    else:
        extra = Text()
    mem_width = max(4, budget // 2)
    spark_width = max(4, budget - mem_width)
    line.append_text(bar(None if percent is None else percent / 100, mem_width, load_style((percent or 0) / 100)))
    line.append_text(mem_text)
    line.append_text(sparkline(gpu.history.utilization_gpu_percent, spark_width))
    line.append_text(tail)
    line.append_text(extra)
    return _fit(line, width)

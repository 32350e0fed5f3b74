"""``nvtopy --once``: a snapshot as two rich tables (GPUs, then their processes).

Plain text -- no escape codes at all -- when stdout is not a terminal or with
``--no-color``, so the output can be grepped, diffed and pasted into issues.
Untrusted text (commands, user names) is wrapped in ``Text`` and never parsed
as markup.
"""

from __future__ import annotations

import shutil
from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..formatting import NA, fmt_bytes, fmt_celsius, fmt_duration, fmt_percent, fmt_pstate, short_name
from ..model import GpuState, Snapshot
from .json_view import iso_timestamp

__all__ = ["make_console", "render_snapshot"]


def make_console(file: IO[str], *, color: bool) -> Console:
    """A console that writes styles only to a terminal, and only when colour is wanted."""
    is_tty = file.isatty()
    width = shutil.get_terminal_size((160, 40)).columns if is_tty else 160
    if not color or not is_tty:
        return Console(file=file, force_terminal=False, no_color=True, color_system=None, width=width, highlight=False)
    return Console(file=file, width=width, highlight=False)


def _temperature(gpu: GpuState) -> Text:
    value = gpu.sample.temperature_c
    if value is None:
        return Text(NA, style="dim")
    slowdown = gpu.static.temperature_slowdown_c
    style = ""
    if slowdown:
        style = "bold red" if value >= slowdown else "yellow" if value >= slowdown - 10 else "green"
    return Text(fmt_celsius(value), style=style)


def _memory(gpu: GpuState) -> str:
    used, total = gpu.sample.memory_used_bytes, gpu.static.memory_total_bytes
    if used is None:
        return NA if total is None else f"{NA}/{fmt_bytes(total)}"
    percent = gpu.memory_used_percent
    suffix = f" ({percent:.0f}%)" if percent is not None else ""
    return f"{fmt_bytes(used)}/{fmt_bytes(total)}{suffix}"


def _power(gpu: GpuState) -> str:
    draw, limit = gpu.sample.power_draw_w, gpu.sample.power_limit_w
    if draw is None and limit is None:
        return NA
    left = NA if draw is None else f"{draw:.0f}"
    right = NA if limit is None else f"{limit:.0f}"
    return f"{left}/{right}W"


def _ecc(gpu: GpuState) -> Text:
    sample = gpu.sample
    if sample.ecc_mode is None:
        return Text(NA, style="dim")
    if not sample.ecc_mode:
        return Text("Off")
    errors = sample.ecc_uncorrected_volatile
    if errors is None:
        return Text("On")
    return Text(str(errors), style="bold red" if errors else "")


def _gpu_table(snapshot: Snapshot) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header, justify in (
        ("GPU", "right"),
        ("Name", "left"),
        ("Bus", "left"),
        ("Temp", "right"),
        ("Fan", "right"),
        ("Util", "right"),
        ("Memory", "right"),
        ("Power", "right"),
        ("P", "left"),
        ("ECC", "right"),
        ("Throttle", "left"),
    ):
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for gpu in snapshot.gpus:
        static, sample = gpu.static, gpu.sample
        name = Text(short_name(static.name))
        if gpu.lost:
            name = Text(f"{short_name(static.name)} [LOST]", style="bold red")
        elif static.unavailable.get("name") is not None:
            name = Text(f"N/A ({static.unavailable['name']})", style="dim")
        throttle = sample.throttle_reasons
        table.add_row(
            str(static.index),
            name,
            static.short_bus_id or NA,
            _temperature(gpu),
            fmt_percent(sample.fan_percent),
            fmt_percent(sample.utilization_gpu_percent),
            _memory(gpu),
            _power(gpu),
            fmt_pstate(sample.pstate),
            _ecc(gpu),
            NA if throttle is None else (", ".join(r for r in throttle if r != "gpu_idle") or "-"),
        )
    return table


def _process_table(snapshot: Snapshot) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header, justify in (
        ("GPU", "right"),
        ("PID", "right"),
        ("Type", "left"),
        ("User", "left"),
        ("GPU Mem", "right"),
        ("SM", "right"),
        ("CPU", "right"),
        ("Host Mem", "right"),
        ("Time", "right"),
        ("Command", "left"),
    ):
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    me = snapshot.host.user
    for gpu in snapshot.gpus:
        for proc in gpu.processes:
            if proc.foreign:
                user, command = Text("?", style="dim"), Text("(other PID namespace)", style="dim")
            else:
                user = Text(proc.user or NA, style="" if proc.user == me else "dim")
                command = Text(proc.command or f"N/A ({proc.unavailable.get('command', 'unknown')})")
                if proc.status == "zombie":
                    command = Text(f"{proc.command or ''} <defunct>".strip())
            table.add_row(
                str(proc.gpu_index),
                str(proc.pid),
                proc.type.value,
                user,
                fmt_bytes(proc.gpu_memory_bytes),
                fmt_percent(proc.sm_percent),
                fmt_percent(proc.cpu_percent, precision=1),
                fmt_bytes(proc.host_memory_bytes),
                fmt_duration(proc.running_seconds),
                command,
            )
    return table


def render_snapshot(snapshot: Snapshot, console: Console, *, gpu_count: int | None = None) -> None:
    """Print ``snapshot``; ``gpu_count`` (GPUs on the machine) tells "none found" from "none selected"."""
    host = snapshot.host
    header = Text()
    header.append(host.hostname, style="bold")
    header.append(f"  driver {host.driver_version or NA}  CUDA {host.cuda_driver_version or NA}")
    header.append(f"  {iso_timestamp(snapshot.timestamp)}")
    if host.backend != "nvml":
        header.append(f"  [{host.backend}]", style="magenta")
    console.print(header)
    if not snapshot.gpus:
        console.print("No NVIDIA GPU found." if gpu_count == 0 else "No GPUs selected.")
        return
    console.print(_gpu_table(snapshot))
    unavailable = [g for g in snapshot.gpus if g.processes_unavailable is not None]
    if any(g.processes for g in snapshot.gpus):
        console.print(_process_table(snapshot))
    else:
        console.print("No GPU processes.")
    for gpu in unavailable:
        console.print(Text(f"GPU {gpu.index}: process list unavailable ({gpu.processes_unavailable})", style="dim"))

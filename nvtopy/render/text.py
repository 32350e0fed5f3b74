"""``nvtopy --once``: a snapshot as two aligned tables (GPUs, then their processes).

Why not rich: a one-shot command is measured in milliseconds, and importing
rich and laying out its tables cost more than collecting the snapshot (see
benchmarks/README.md). Columns here are measured once and padded with plain
string operations; colour is a handful of ANSI codes, written only to a
terminal and never with ``--no-color``, so piped output can be grepped, diffed
and pasted into issues. Every cell and the header line go through
:func:`~nvtopy.textsafe.safe_text` (commands, user names, GPU names, host names,
driver versions, a remote host's error): outside text cannot move the cursor,
retitle the terminal or restyle anything.
"""

from __future__ import annotations

import shutil
import unicodedata
from collections.abc import Sequence
from typing import IO

from ..formats.contract import iso_timestamp
from ..model import GpuState, Snapshot
from ..textsafe import safe_text
from .units import NA, fmt_bytes, fmt_celsius, fmt_duration, fmt_percent, fmt_pstate, short_name

__all__ = ["render_snapshot"]

RESET = "\x1b[0m"
STYLES = {
    "bold": "\x1b[1m",
    "dim": "\x1b[2m",
    "red": "\x1b[31m",
    "bold red": "\x1b[1;31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "magenta": "\x1b[35m",
    "alert": "\x1b[1;37;41m",
}

Cell = tuple[str, str]  # (text, style name or "")


def width_of(text: str) -> int:
    """Terminal cells of ``text``: wide (East Asian) characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    cells = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        cells += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return cells


def _clip(text: str, width: int) -> str:
    if width_of(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        size = width_of(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


class _Table:
    """Columns of cells, aligned; the last column may be clipped to the terminal width."""

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        self.headers = headers  # (title, "<" or ">")
        self.rows: list[list[Cell]] = []

    def add(self, *cells: Cell | str) -> None:
        """A row; every cell's text is made safe for the terminal here, whatever it holds."""
        self.rows.append(
            [(safe_text(cell[0]), cell[1]) if isinstance(cell, tuple) else (safe_text(cell), "") for cell in cells]
        )

    def render(self, color: bool, max_width: int | None) -> list[str]:
        widths = [width_of(title) for title, _ in self.headers]
        for row in self.rows:
            for i, (text, _) in enumerate(row):
                widths[i] = max(widths[i], width_of(text))
        if max_width is not None:
            fixed = sum(widths[:-1]) + 2 * (len(widths) - 1)
            widths[-1] = max(width_of(self.headers[-1][0]), min(widths[-1], max_width - fixed))
        lines = [self._line([(t, "bold") for t, _ in self.headers], widths, color)]
        lines.append("─" * (sum(widths) + 2 * (len(widths) - 1)))
        lines.extend(self._line(row, widths, color) for row in self.rows)
        return lines

    def _line(self, cells: Sequence[Cell], widths: list[int], color: bool) -> str:
        parts = []
        last = len(cells) - 1
        for i, ((text, style), (_, align)) in enumerate(zip(cells, self.headers, strict=True)):
            text = _clip(text, widths[i])
            pad = " " * (widths[i] - width_of(text))
            if i == last and align == "<":
                pad = ""  # no trailing spaces
            body = pad + text if align == ">" else text + pad
            if color and style:
                body = f"{STYLES[style]}{body}{RESET}" if align == ">" else f"{STYLES[style]}{text}{RESET}{pad}"
            parts.append(body)
        return "  ".join(parts).rstrip()


def _temperature(gpu: GpuState) -> Cell:
    value, slowdown = gpu.sample.temperature_c, gpu.static.temperature_slowdown_c
    if value is None:
        return (NA, "dim")
    if slowdown is None:
        return (fmt_celsius(value), "")
    return (fmt_celsius(value), "alert" if value >= slowdown else "yellow" if value >= slowdown - 10 else "green")


def _memory(gpu: GpuState) -> str:
    used, total = gpu.sample.memory_used_bytes, gpu.static.memory_total_bytes
    if used is None:
        return NA if total is None else f"{NA}/{fmt_bytes(total)}"
    percent = gpu.memory_used_percent
    return f"{fmt_bytes(used)}/{fmt_bytes(total)}" + (f" ({percent:.0f}%)" if percent is not None else "")


def _power(gpu: GpuState) -> str:
    draw, limit = gpu.sample.power_draw_w, gpu.sample.power_limit_w
    if draw is None and limit is None:
        return NA
    return f"{NA if draw is None else f'{draw:.0f}'}/{NA if limit is None else f'{limit:.0f}'}W"


def _ecc(gpu: GpuState) -> Cell:
    sample = gpu.sample
    if sample.ecc_mode is None:
        return (NA, "dim")
    if not sample.ecc_mode:
        return ("Off", "")
    errors = sample.ecc_uncorrected_volatile
    if errors is None:
        return ("On", "")
    return (str(errors), "alert" if errors else "")


def _gpu_table(snapshot: Snapshot) -> _Table:
    table = _Table(
        [
            ("GPU", ">"),
            ("Name", "<"),
            ("Bus", "<"),
            ("Temp", ">"),
            ("Fan", ">"),
            ("Util", ">"),
            ("Memory", ">"),
            ("Power", ">"),
            ("P", "<"),
            ("ECC", ">"),
            ("Throttle", "<"),
        ]
    )
    for gpu in snapshot.gpus:
        static, sample = gpu.static, gpu.sample
        host = "" if static.host is None else f"{static.host}/{'' if static.host_index is None else static.host_index} "
        name: Cell = (host + short_name(static.name), "")
        if gpu.note:
            name = (host + gpu.note, "bold red")
        elif gpu.lost:
            name = (f"{short_name(static.name)} [LOST]", "bold red")
        elif static.unavailable.get("name") is not None:
            name = (f"N/A ({static.unavailable['name']})", "dim")
        throttle = sample.throttle_reasons
        table.add(
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


def _process_table(snapshot: Snapshot) -> _Table:
    table = _Table(
        [
            ("GPU", ">"),
            ("PID", ">"),
            ("Type", "<"),
            ("User", "<"),
            ("GPU Mem", ">"),
            ("SM", ">"),
            ("CPU", ">"),
            ("Host Mem", ">"),
            ("Time", ">"),
            ("Command", "<"),
        ]
    )
    me = snapshot.host.user
    for gpu in snapshot.gpus:
        for proc in gpu.processes:
            if proc.foreign:
                user: Cell = ("?", "dim")
                command: Cell = ("(pid of another PID namespace)", "dim")
            else:
                user = (proc.user or NA, "" if proc.user == me else "dim")  # cells are made safe by _Table.add
                text = proc.command or f"N/A ({proc.unavailable.get('command', '?')})"
                command = (f"{text} <defunct>", "red") if proc.status == "zombie" else (text, "")
            table.add(
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


def render_snapshot(snapshot: Snapshot, out: IO[str], *, color: bool, gpu_count: int | None = None) -> None:
    """Write ``snapshot``; ``gpu_count`` (GPUs on the machine) tells "none found" from "none selected".

    Colour is used only when asked for and ``out`` is a terminal; the command
    column is clipped to the terminal's width there, and left whole in a pipe.
    """
    tty = out.isatty()
    color = color and tty
    max_width = shutil.get_terminal_size((160, 40)).columns if tty else None
    host = snapshot.host
    header = f"{host.hostname}  driver {host.driver_version or NA}  CUDA {host.cuda_driver_version or NA}"
    header = safe_text(header) + f"  {iso_timestamp(snapshot.timestamp)}"
    lines = [f"{STYLES['bold']}{header}{RESET}" if color else header]
    if host.backend != "nvml":
        backend = safe_text(host.backend)
        lines[0] += f"  {STYLES['magenta']}[{backend}]{RESET}" if color else f"  [{backend}]"
    if not snapshot.gpus:
        lines.append("No NVIDIA GPU found." if gpu_count == 0 else "No GPUs selected.")
    else:
        lines.extend(_gpu_table(snapshot).render(color, max_width))
        lines.append("")
        if any(g.processes for g in snapshot.gpus):
            lines.extend(_process_table(snapshot).render(color, max_width))
        else:
            lines.append("No GPU processes.")
        for gpu in snapshot.gpus:
            notes = []
            if gpu.processes_unavailable is not None:
                notes.append(f"GPU {gpu.index}: process list unavailable ({gpu.processes_unavailable})")
            if gpu.processes_hint:
                notes.append(f"GPU {gpu.index}: {safe_text(gpu.processes_hint)}")
            lines.extend(f"{STYLES['dim']}{note}{RESET}" if color else note for note in notes)
    out.write("\n".join(lines) + "\n")

"""The Python API's plain functions: a snapshot, this job's GPUs, a usage line per GPU.

Everything goes through the process-wide state (:mod:`nvtopy.api.state`): one
NVML initialisation, static fields read once, no subprocesses; a collector per
purpose, so repeated calls reuse cached static fields.

GPU selection is :func:`nvtopy.selection.select_gpus`, as in the CLI. Its
warnings (CUDA_DEVICE_ORDER may not match the assumed order) are issued with
:func:`warnings.warn` as :class:`~nvtopy.selection.SelectionWarning`, pointing at
the caller: Python shows each once per call site by default.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import IO

from ..model import GpuStatic, Snapshot
from ..render.units import NA, fmt_bytes, short_name
from ..selection import SelectionWarning, select_gpus
from ..textsafe import safe_text
from .jobgpus import JobGpus, find_job_gpus
from .state import shared_collector
from .torchmem import cuda_torch, torch_memory

__all__ = ["choose_gpus", "job_gpus", "print_usage", "snapshot", "usage_lines"]


def choose_gpus(
    statics: Sequence[GpuStatic],
    gpus: str | Sequence[int | str] | None,
    only_visible: bool,
    *,
    stacklevel: int = 2,
) -> list[int]:
    """The API's GPU selection: :func:`~nvtopy.selection.select_gpus`, its warnings as :class:`SelectionWarning`.

    ``stacklevel`` as for :func:`warnings.warn`, counted from the caller of this function.
    """
    selection = select_gpus(statics, gpus, only_visible)
    for text in selection.warnings:
        warnings.warn(text, SelectionWarning, stacklevel=stacklevel + 1)
    return list(selection.indices)


def snapshot(gpus: str | Sequence[int | str] | None = None, only_visible: bool = False) -> Snapshot:
    """One snapshot of the chosen GPUs (default: all), with their processes.

    ``gpus``: indices, PCI bus ids or UUID prefixes, as a list or a ``--gpus``
    style string. ``only_visible``: only the GPUs CUDA_VISIBLE_DEVICES exposes.
    The same typed model the CLI's ``--json`` comes from.
    """
    with shared_collector("snapshot") as collector:
        collector.select(choose_gpus(collector.statics(), gpus, only_visible, stacklevel=2))
        return collector.collect()


def job_gpus() -> JobGpus:
    """The GPUs this process uses: by torch device identity, else NVML's process lists, else CUDA_VISIBLE_DEVICES."""
    with shared_collector("job") as collector:
        statics = collector.statics()
        pids_by_gpu = None
        if cuda_torch() is None:  # torch decides alone when it is in use; else ask NVML who runs where
            collector.select([g.index for g in statics])
            current = collector.collect(set(), join=False, process_utilization=False)
            pids_by_gpu = {gpu.index: [p.pid for p in gpu.processes] for gpu in current.gpus}
    return find_job_gpus(statics, pids_by_gpu)


def usage_lines() -> list[str]:
    """One line per GPU of this job: memory (the GPU's and this process's), utilisation, torch's view."""
    job = job_gpus()
    snap = snapshot(gpus=list(job.indices)) if job.indices else None
    if snap is None or not snap.gpus:
        return ["nvtopy: this process uses no GPU that NVML reports"]
    torch = cuda_torch()
    me = os.getpid()
    lines = []
    for gpu in snap.gpus:
        static, sample = gpu.static, gpu.sample
        head = f"GPU {static.index} ({short_name(static.name)}, {safe_text(static.short_bus_id) or NA})"
        if gpu.lost:
            lines.append(f"{head}: LOST")
            continue
        percent = gpu.memory_used_percent
        parts = [
            f"{fmt_bytes(sample.memory_used_bytes)}/{fmt_bytes(static.memory_total_bytes)} used"
            + (f" ({percent:.0f}%)" if percent is not None else "")
        ]
        mine = [p.gpu_memory_bytes for p in gpu.processes if p.pid == me]
        if mine:
            parts.append(f"this process {fmt_bytes(mine[0])}")
        util = sample.utilization_gpu_percent
        parts.append(f"util {NA if util is None else f'{util}%'}")
        if sample.temperature_c is not None:
            parts.append(f"{sample.temperature_c}°C")
        if sample.power_draw_w is not None:
            cap = sample.power_limit_w
            parts.append(f"{sample.power_draw_w:.0f}/{NA if cap is None else f'{cap:.0f}'} W")
        line = f"{head}: " + ", ".join(parts)
        ordinal = job.torch_ordinals.get(static.index)
        if torch is not None and ordinal is not None:
            memory = torch_memory(torch, ordinal)
            line += (
                f" | torch cuda:{ordinal}: allocated {fmt_bytes(memory.allocated_bytes)},"
                f" reserved {fmt_bytes(memory.reserved_bytes)}, peak {fmt_bytes(memory.peak_allocated_bytes)}"
            )
        lines.append(line)
    return lines


def print_usage(file: IO[str] | None = None) -> None:
    """Print :func:`usage_lines` -- the correct version of the usual print-GPU-memory helper."""
    out = file if file is not None else sys.stdout
    for line in usage_lines():
        print(line, file=out)

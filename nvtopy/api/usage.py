"""The Python API's plain functions: a snapshot, this job's GPUs, a usage line per GPU.

Everything goes through the process-wide backend (:mod:`nvtopy.api.state`): one
NVML initialisation, static fields read once, no subprocesses. Collectors are
kept per selection so repeated calls reuse cached static fields.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import IO

from ..model import Snapshot
from ..render.units import NA, fmt_bytes, short_name
from ..sources.collector import Collector
from ..textsafe import safe_text
from .jobgpus import JobGpus, find_job_gpus
from .torchmem import cuda_torch, torch_memory

__all__ = ["forget_collectors", "job_gpus", "print_usage", "snapshot", "usage_lines"]

_collectors: dict[tuple[object, ...], Collector] = {}
_collectors_lock = threading.RLock()


def forget_collectors() -> None:
    with _collectors_lock:
        _collectors.clear()


def _collector(key: tuple[object, ...]) -> Collector:
    from .state import shared_backend

    backend = shared_backend()
    with _collectors_lock:
        collector = _collectors.get((id(backend), *key))
        if collector is None:
            collector = _collectors[(id(backend), *key)] = Collector(backend)
        return collector


def _select(collector: Collector, gpus: str | Sequence[int | str] | None, only_visible: bool) -> list[int]:
    statics = collector.statics()
    indices = [g.index for g in statics]
    if gpus is not None:
        from ..selection import resolve_gpu_list

        spec = gpus if isinstance(gpus, str) else ",".join(str(g) for g in gpus)
        indices = resolve_gpu_list(spec, statics)
    if only_visible:
        from ..selection import parse_cuda_visible_devices

        visible = parse_cuda_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), statics, os.environ)
        indices = [i for i in indices if i in visible.nvml_indices]
    return indices


def snapshot(gpus: str | Sequence[int | str] | None = None, only_visible: bool = False) -> Snapshot:
    """One snapshot of the chosen GPUs (default: all), with their processes.

    ``gpus``: indices, PCI bus ids or UUID prefixes, as a list or a ``--gpus``
    style string. ``only_visible``: only the GPUs CUDA_VISIBLE_DEVICES exposes.
    The same typed model the CLI's ``--json`` comes from.
    """
    collector = _collector(("snapshot",))
    with _collectors_lock:
        collector.select(_select(collector, gpus, only_visible))
        return collector.collect()


def job_gpus() -> JobGpus:
    """The GPUs this process uses: by torch device identity, else NVML's process lists, else CUDA_VISIBLE_DEVICES."""
    collector = _collector(("job",))
    with _collectors_lock:
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

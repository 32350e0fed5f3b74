"""The Python API's plain functions: a snapshot, this job's GPUs, a usage line per GPU.

Everything goes through the process-wide state (:mod:`nvtopy.api.state`): one
NVML initialisation, static fields read once, no subprocesses; a collector per
purpose, so repeated calls reuse cached static fields.

GPU selection is :func:`nvtopy.selection.select_gpus`, as in the CLI (MIG
devices included: ``gpus=["MIG-2cd4"]`` shows that slice of its GPU). Its
warnings (CUDA_DEVICE_ORDER may not match the assumed order, CUDA_VISIBLE_DEVICES
exposes several MIG devices) are issued with :func:`warnings.warn` as
:class:`~nvtopy.selection.SelectionWarning`, pointing at the caller: Python
shows each once per call site by default.

A job on a MIG slice is reported as that slice: :func:`job_gpus` names the MIG
device (:attr:`~nvtopy.api.jobgpus.JobGpus.instances`), and :func:`usage_lines`
heads its line ``GPU 1 MIG 1/2/0 3g.40gb`` with the instance's memory, not the
GPU's. Temperature and power are the GPU's: the slices share them.

The real-work figures (Hopper and newer, from NVML's GPM): the share of SMs
active and of tensor pipes active (:func:`activity`), the GPU's or, on a MIG
slice, the instance's own. Where GPM does not measure them (before Hopper, not
permitted, the first interval) they are ``None`` and the usage line leaves them out.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import IO

from ..model import GpuState, GpuStatic, MigState, Snapshot
from ..render.units import NA, fmt_bytes, short_name
from ..selection import Selection, SelectionWarning, select_gpus
from ..textsafe import safe_text
from .jobgpus import JobGpus, find_job_gpus
from .state import shared_collector
from .torchmem import cuda_torch, torch_memory

__all__ = ["activity", "choose_gpus", "job_gpus", "print_usage", "snapshot", "usage_lines"]


def choose_gpus(
    statics: Sequence[GpuStatic],
    gpus: str | Sequence[int | str] | None,
    only_visible: bool,
    *,
    stacklevel: int = 2,
) -> Selection:
    """The API's GPU selection: :func:`~nvtopy.selection.select_gpus`, its warnings as :class:`SelectionWarning`.

    Returns the :class:`~nvtopy.selection.Selection` (GPU indices in order, and the
    MIG devices a GPU is limited to), which ``Collector.select`` takes as it is.
    ``stacklevel`` as for :func:`warnings.warn`, counted from the caller of this function.
    """
    selection = select_gpus(statics, gpus, only_visible)
    for text in selection.warnings:
        warnings.warn(text, SelectionWarning, stacklevel=stacklevel + 1)
    return selection


def snapshot(gpus: str | Sequence[int | str] | None = None, only_visible: bool = False) -> Snapshot:
    """One snapshot of the chosen GPUs (default: all), with their processes.

    ``gpus``: indices, PCI bus ids, UUID prefixes or MIG devices (``MIG-<uuid>``,
    a unique prefix, ``MIG-GPU-<uuid>/<gi>/<ci>``: the GPU limited to them), as a
    list or a ``--gpus`` style string. ``only_visible``: only what
    CUDA_VISIBLE_DEVICES exposes to a CUDA process (one MIG device at most).
    The same typed model the CLI's ``--json`` comes from.
    """
    with shared_collector("snapshot") as collector:
        collector.select(choose_gpus(collector.statics(), gpus, only_visible, stacklevel=2))
        return collector.collect()


def job_gpus() -> JobGpus:
    """The GPUs this process uses: by torch device identity, else NVML's process lists, else CUDA_VISIBLE_DEVICES.

    On a MIG slice, :attr:`~nvtopy.api.jobgpus.JobGpus.instances` names the MIG device
    (UUID, ``1/2/0`` label, profile, memory); ``indices`` holds its parent GPU.
    """
    with shared_collector("job") as collector:
        statics = collector.statics()
        processes = None
        if cuda_torch() is None:  # torch decides alone when it is in use; else ask NVML who runs where
            collector.select([g.index for g in statics])
            current = collector.collect(set(), join=False, process_utilization=False)
            processes = {gpu.index: gpu.processes for gpu in current.gpus}
    return find_job_gpus(statics, processes_by_gpu=processes)


def activity(gpu: GpuState, mig: MigState | None = None) -> tuple[float | None, float | None]:
    """SM active and tensor active (%, GPM) of ``gpu`` or of its MIG device ``mig``; None where not measured."""
    source = gpu.sample if mig is None else mig.usage
    if source is None:
        return None, None
    return source.sm_active_percent, source.tensor_active_percent


def activity_text(sm: float | None, tensor: float | None) -> str | None:
    """``SM 52% tensor 26%``; an explicit N/A for one that is missing; None when neither is measured."""
    if sm is None and tensor is None:
        return None
    return f"SM {NA if sm is None else f'{sm:.0f}%'} tensor {NA if tensor is None else f'{tensor:.0f}%'}"


def _memory(used: int | None, total: int | None, percent: float | None) -> str:
    return f"{fmt_bytes(used)}/{fmt_bytes(total)} used" + (f" ({percent:.0f}%)" if percent is not None else "")


def _line(gpu: GpuState, mig: MigState | None, me: int) -> str:
    """One usage line: the GPU's, or (``mig``) the MIG device's memory and processes with the GPU's readings."""
    static, sample = gpu.static, gpu.sample
    where = f"({short_name(static.name)}, {safe_text(static.short_bus_id) or NA})"
    if mig is None:
        head = f"GPU {static.index} {where}"
    else:
        profile = f" {safe_text(mig.instance.profile)}" if mig.instance.profile else ""
        head = f"GPU {static.index} MIG {mig.label}{profile} {where}"
    if gpu.lost:
        return f"{head}: LOST"
    if mig is None:
        processes = gpu.processes
        parts = [_memory(sample.memory_used_bytes, static.memory_total_bytes, gpu.memory_used_percent)]
    else:
        processes = mig.processes
        parts = [_memory(mig.memory_used_bytes, mig.memory_total_bytes, mig.memory_used_percent)]
    mine = [p.gpu_memory_bytes for p in processes if p.pid == me]
    if mine:
        parts.append(f"this process {fmt_bytes(mine[0])}")
    util = sample.utilization_gpu_percent
    parts.append(f"util {NA if util is None else f'{util}%'}")
    work = activity_text(*activity(gpu, mig))
    if work is not None:
        parts.append(work)
    if sample.temperature_c is not None:
        parts.append(f"{sample.temperature_c}°C")
    if sample.power_draw_w is not None:
        cap = sample.power_limit_w
        parts.append(f"{sample.power_draw_w:.0f}/{NA if cap is None else f'{cap:.0f}'} W")
    return f"{head}: " + ", ".join(parts)


def usage_lines() -> list[str]:
    """One line per GPU of this job: memory (the GPU's and this process's), utilisation, torch's view.

    A job on a MIG slice gets a line for the slice: ``GPU 1 MIG 1/2/0 3g.40gb (...)``
    with the instance's memory (temperature and power stay the GPU's).
    """
    job = job_gpus()
    snap: Snapshot | None = None
    if job.indices:
        with shared_collector("usage") as collector:
            collector.select(job.selection)
            snap = collector.collect()
    if snap is None or not snap.gpus:
        return ["nvtopy: this process uses no GPU that NVML reports"]
    torch = cuda_torch()
    me = os.getpid()
    lines = []
    for gpu in snap.gpus:
        limited = job.selection.instances.get(gpu.index)
        slices: list[MigState | None] = list(gpu.mig) if limited and gpu.mig else [None]
        for mig in slices:
            line = _line(gpu, mig, me)
            ordinal = job.torch_ordinals.get(gpu.index)
            if torch is not None and ordinal is not None and not gpu.lost:
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

"""Which GPUs "this job" uses, matched by identity -- never by position.

The common snippet maps ``torch.cuda.current_device()`` through
CUDA_VISIBLE_DEVICES by position; that is wrong with UUIDs in the variable,
with MIG, and whenever CUDA_DEVICE_ORDER differs from NVML's order. Here:

1. if the job's torch has initialised CUDA: each torch device is matched to an
   NVML GPU by UUID (``GPU-``/``MIG-`` + ``get_device_properties(i).uuid``),
   then by PCI bus id; the devices the job holds memory on (and the current one)
   are "this job's";
2. else the GPUs on whose process lists NVML shows this pid;
3. else the GPUs CUDA_VISIBLE_DEVICES exposes, by CUDA's rules (all if unset).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import GpuStatic
from ..selection import parse_bus_id, parse_cuda_visible_devices
from .torchmem import TorchDevice, cuda_torch, torch_devices

__all__ = ["JobGpus", "find_job_gpus", "map_torch_devices"]


@dataclass(frozen=True, slots=True)
class JobGpus:
    """The NVML indices of this job's GPUs, how they were found, and torch's ordinal for each."""

    indices: tuple[int, ...]
    source: str  # "torch", "nvml", "cuda_visible_devices"
    torch_ordinals: Mapping[int, int] = field(default_factory=dict)  # NVML index -> torch ordinal


def map_torch_devices(devices: Iterable[TorchDevice], statics: Sequence[GpuStatic]) -> dict[int, int]:
    """torch ordinal -> NVML index, by UUID first, then PCI bus id; unmatched ordinals are left out."""
    by_uuid: dict[str, int] = {}
    by_bus: dict[tuple[int, int, int, int], int] = {}
    for gpu in statics:
        if gpu.uuid:
            by_uuid[gpu.uuid.lower()] = gpu.index
        for mig in gpu.mig_devices:
            by_uuid[mig.lower()] = gpu.index  # a MIG instance is shown as its parent GPU
        if gpu.bus_id and (bus := parse_bus_id(gpu.bus_id)) is not None:
            by_bus[bus] = gpu.index
    mapping: dict[int, int] = {}
    for device in devices:
        index = next((by_uuid[u.lower()] for u in device.uuids if u.lower() in by_uuid), None)
        if index is None and device.bus_id is not None:
            index = by_bus.get(device.bus_id)
        if index is not None:
            mapping[device.ordinal] = index
    return mapping


def find_job_gpus(
    statics: Sequence[GpuStatic],
    pids_by_gpu: Mapping[int, Iterable[int]] | None = None,
    *,
    torch: Any | None = None,
    pid: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> JobGpus:
    """This job's GPUs (see the module docstring for the order of evidence)."""
    environ = os.environ if environ is None else environ
    pid = os.getpid() if pid is None else pid
    module = cuda_torch(torch)
    if module is not None:
        mapping = map_torch_devices(torch_devices(module), statics)
        cuda = module.cuda
        used = [o for o in mapping if cuda.memory_reserved(o) > 0 or o == cuda.current_device()]
        if used:
            ordered = sorted(used, key=lambda o: mapping[o])
            return JobGpus(tuple(mapping[o] for o in ordered), "torch", {mapping[o]: o for o in ordered})
    if pids_by_gpu is not None:
        mine = tuple(sorted(index for index, pids in pids_by_gpu.items() if pid in set(pids)))
        if mine:
            return JobGpus(mine, "nvml")
    visible = parse_cuda_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), statics, environ)
    return JobGpus(tuple(visible.nvml_indices), "cuda_visible_devices")

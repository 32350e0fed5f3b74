"""Which GPUs "this job" uses, matched by identity -- never by position.

The common snippet maps ``torch.cuda.current_device()`` through
CUDA_VISIBLE_DEVICES by position; that is wrong with UUIDs in the variable,
with MIG, and whenever CUDA_DEVICE_ORDER differs from NVML's order. Here:

1. if the job's torch has initialised CUDA: each torch device is matched to an
   NVML GPU by UUID (``GPU-``/``MIG-`` + ``get_device_properties(i).uuid``),
   then by PCI bus id; the devices the job holds memory on (and the current one)
   are "this job's";
2. else the GPUs on whose process lists NVML shows this pid;
3. else what CUDA_VISIBLE_DEVICES exposes to a CUDA process, by CUDA's rules
   (all if unset; one MIG device at most: :func:`~nvtopy.selection.parse_cuda_visible_devices`).

MIG: a job on a MIG slice runs on a MIG device, not on the whole GPU. Each way
above names the slice -- torch's device UUID is the MIG device's, NVML's
process list gives the GPU and compute instance the pid runs on, and
CUDA_VISIBLE_DEVICES names the MIG device -- and :attr:`JobGpus.instances` says
which, so views show the slice (its memory, its processes) rather than the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..model import GpuStatic, MigInstance
from ..selection import Selection, parse_bus_id, parse_cuda_visible_devices
from .torchmem import TorchDevice, cuda_torch, torch_devices

__all__ = ["JobGpus", "JobInstance", "find_job_gpus", "map_torch_devices", "match_torch_devices"]


class _Process(Protocol):
    """What :func:`find_job_gpus` reads of a GPU process (:class:`~nvtopy.model.GpuProcess` has it)."""

    @property
    def pid(self) -> int: ...

    @property
    def gpu_instance_id(self) -> int | None: ...

    @property
    def compute_instance_id(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class JobInstance:
    """A MIG device this job runs on: its GPU, its identity and its size."""

    gpu_index: int
    uuid: str | None  # MIG-...: what CUDA_VISIBLE_DEVICES and --gpus take
    label: str  # "1/2/0": GPU, GPU instance, compute instance (nvidia-smi's columns)
    profile: str | None  # "3g.40gb"
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_total_bytes: int | None  # the instance's memory (not the GPU's)

    @classmethod
    def of(cls, gpu_index: int, instance: MigInstance) -> JobInstance:
        return cls(
            gpu_index=gpu_index,
            uuid=instance.uuid,
            label=instance.label(gpu_index),
            profile=instance.profile,
            gpu_instance_id=instance.gpu_instance_id,
            compute_instance_id=instance.compute_instance_id,
            memory_total_bytes=instance.memory_total_bytes,
        )

    def describe(self) -> str:
        """``GPU 1 MIG 1/2/0 3g.40gb``: how usage lines and track reports name it."""
        return f"GPU {self.gpu_index} MIG {self.label}" + (f" {self.profile}" if self.profile else "")


@dataclass(frozen=True, slots=True)
class JobGpus:
    """The NVML indices of this job's GPUs, how they were found, torch's ordinal for each, and its MIG devices.

    ``instances``: the MIG devices the job runs on, in the order of ``indices``;
    a GPU in ``indices`` without an entry here is used whole (no MIG, or the
    instance is unknown).
    """

    indices: tuple[int, ...]
    source: str  # "torch", "nvml", "cuda_visible_devices"
    torch_ordinals: Mapping[int, int] = field(default_factory=dict)  # NVML index -> torch ordinal
    instances: tuple[JobInstance, ...] = ()

    def instances_of(self, index: int) -> tuple[JobInstance, ...]:
        """The MIG devices the job runs on of GPU ``index`` (``()``: the GPU is used whole)."""
        return tuple(i for i in self.instances if i.gpu_index == index)

    @property
    def selection(self) -> Selection:
        """What a view of this job shows: its GPUs, each MIG one limited to the job's MIG devices.

        ``collector.select`` takes it as it is. An instance without a UUID cannot be
        shown alone: its GPU is shown whole.
        """
        pairs = []
        for index in self.indices:
            mine = self.instances_of(index)
            if mine and all(i.uuid for i in mine):
                pairs.append((index, tuple(i.uuid for i in mine if i.uuid)))
        return Selection(self.indices, instance_pairs=tuple(pairs))

    @property
    def gpu_spec(self) -> list[int | str]:
        """The selection as a ``gpus=`` list (:func:`nvtopy.snapshot`): MIG UUIDs where the job is on a slice."""
        limited = self.selection.instances
        spec: list[int | str] = []
        for index in self.indices:
            spec.extend(limited.get(index, (index,)))
        return spec


def match_torch_devices(
    devices: Iterable[TorchDevice], statics: Sequence[GpuStatic]
) -> dict[int, tuple[int, MigInstance | None]]:
    """torch ordinal -> (NVML index, the MIG device it is or None), by UUID first, then PCI bus id.

    A MIG device's UUID names its instance; a PCI bus id names a GPU only (the
    instance is then unknown). Unmatched ordinals are left out.
    """
    by_uuid: dict[str, tuple[int, MigInstance | None]] = {}
    by_bus: dict[tuple[int, int, int, int], int] = {}
    for gpu in statics:
        if gpu.uuid:
            by_uuid[gpu.uuid.lower()] = (gpu.index, None)
        for instance in gpu.mig_instances:
            if instance.uuid:
                by_uuid[instance.uuid.lower()] = (gpu.index, instance)
        if gpu.bus_id and (bus := parse_bus_id(gpu.bus_id)) is not None:
            by_bus[bus] = gpu.index
    mapping: dict[int, tuple[int, MigInstance | None]] = {}
    for device in devices:
        hit = next((by_uuid[u.lower()] for u in device.uuids if u.lower() in by_uuid), None)
        if hit is None and device.bus_id is not None and device.bus_id in by_bus:
            hit = (by_bus[device.bus_id], None)
        if hit is not None:
            mapping[device.ordinal] = hit
    return mapping


def map_torch_devices(devices: Iterable[TorchDevice], statics: Sequence[GpuStatic]) -> dict[int, int]:
    """torch ordinal -> NVML index (a MIG device: its parent GPU), by UUID first, then PCI bus id."""
    return {ordinal: index for ordinal, (index, _) in match_torch_devices(devices, statics).items()}


def _job(
    source: str,
    found: Iterable[tuple[int, MigInstance | None]],
    ordinals: Mapping[int, int] | None = None,
) -> JobGpus:
    """JobGpus from (NVML index, instance or None) pairs, GPUs in NVML order; a GPU used whole stays whole."""
    whole: set[int] = set()
    parts: dict[int, list[MigInstance]] = {}
    for index, instance in found:
        if instance is None:
            whole.add(index)
        elif instance not in parts.setdefault(index, []):
            parts[index].append(instance)
    indices = tuple(sorted(whole | set(parts)))
    instances = tuple(
        JobInstance.of(index, m)
        for index in indices
        if index not in whole
        for m in sorted(parts[index], key=lambda m: m.index)
    )
    return JobGpus(indices, source, dict(ordinals or {}), instances)


def find_job_gpus(
    statics: Sequence[GpuStatic],
    pids_by_gpu: Mapping[int, Iterable[int]] | None = None,
    *,
    torch: Any | None = None,
    pid: int | None = None,
    environ: Mapping[str, str] | None = None,
    processes_by_gpu: Mapping[int, Iterable[_Process]] | None = None,
) -> JobGpus:
    """This job's GPUs and MIG devices (see the module docstring for the order of evidence).

    ``pids_by_gpu``: the pids on each GPU's NVML process list. ``processes_by_gpu``:
    those processes themselves, which also say the MIG device each runs on
    (used instead of ``pids_by_gpu`` when given).
    """
    environ = os.environ if environ is None else environ
    pid = os.getpid() if pid is None else pid
    by_index = {g.index: g for g in statics}
    module = cuda_torch(torch)
    if module is not None:
        mapping = match_torch_devices(torch_devices(module), statics)
        cuda = module.cuda
        used = [o for o in mapping if cuda.memory_reserved(o) > 0 or o == cuda.current_device()]
        if used:
            ordered = sorted(used, key=lambda o: mapping[o][0])
            return _job("torch", (mapping[o] for o in ordered), {mapping[o][0]: o for o in ordered})
    if processes_by_gpu is not None:
        found: list[tuple[int, MigInstance | None]] = []
        for index, processes in processes_by_gpu.items():
            gpu = by_index.get(index)
            for process in processes:
                if process.pid != pid:
                    continue
                instance = None
                if gpu is not None and process.gpu_instance_id is not None:
                    instance = next((m for m in gpu.mig_instances if m.runs(process)), None)
                found.append((index, instance))
        if found:
            return _job("nvml", found)
    elif pids_by_gpu is not None:
        mine = [index for index, pids in pids_by_gpu.items() if pid in set(pids)]
        if mine:
            return _job("nvml", ((index, None) for index in mine))
    visible = parse_cuda_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), statics, environ)
    limited = visible.instances
    instances: list[JobInstance] = []
    for index in visible.nvml_indices:  # CUDA's order, as CUDA numbers them: the first is cuda:0
        gpu = by_index.get(index)
        uuids = {u.lower() for u in limited.get(index, ())}
        if gpu is not None and uuids:
            instances.extend(JobInstance.of(index, m) for m in gpu.mig_instances if m.uuid and m.uuid.lower() in uuids)
    return JobGpus(tuple(visible.nvml_indices), "cuda_visible_devices", {}, tuple(instances))

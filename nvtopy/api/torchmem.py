"""What PyTorch's caching allocator holds, beside what NVML sees -- without importing torch.

Why never import it: ``import nvtopy`` must stay light in every process, and a
job that does not use torch must not pay for it. We look torch up in
``sys.modules``; if the job imported it and initialised CUDA, we read its
per-device figures. We never initialise CUDA ourselves (that would create a
context, which costs GPU memory, in a process that may not want one).

The three numbers and the driver's differ on purpose: *allocated* is what
tensors use, *reserved* is what the caching allocator holds (allocated plus
cached blocks), and NVML's per-process memory adds the CUDA context and
libraries (cuBLAS/cuDNN workspaces) on top.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["TorchDevice", "TorchMemory", "cuda_torch", "torch_devices", "torch_memory"]


@dataclass(frozen=True, slots=True)
class TorchDevice:
    """A CUDA device as torch numbers it, with what identifies it to NVML."""

    ordinal: int
    uuids: tuple[str, ...]  # NVML forms to try: "GPU-<uuid>", "MIG-<uuid>"
    bus_id: tuple[int, int, int, int] | None  # (domain, bus, device, function)
    name: str | None


@dataclass(frozen=True, slots=True)
class TorchMemory:
    """torch.cuda memory figures of one device, in bytes."""

    ordinal: int
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int  # since the last reset_peak_memory_stats of the job


def cuda_torch(module: ModuleType | Any | None = None) -> Any | None:
    """The job's torch module if it has already initialised CUDA, else None (never imports it)."""
    torch = module if module is not None else sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if not cuda.is_available() or not cuda.is_initialized():
            return None
    except Exception:  # noqa: BLE001 - a half-imported or exotic build: act as if absent
        return None
    return torch


def _uuid_forms(raw: Any) -> tuple[str, ...]:
    text = str(raw).strip()
    if text.upper().startswith(("GPU-", "MIG-")):
        return (text,)
    return (f"GPU-{text}", f"MIG-{text}")


def torch_devices(torch: Any) -> list[TorchDevice]:
    """Every CUDA device torch sees, with its UUID and PCI location (CUDA's own order)."""
    devices = []
    for ordinal in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(ordinal)
        uuid = getattr(props, "uuid", None)
        bus = None
        if getattr(props, "pci_bus_id", None) is not None:
            bus = (
                int(getattr(props, "pci_domain_id", 0) or 0),
                int(props.pci_bus_id),
                int(getattr(props, "pci_device_id", 0) or 0),
                0,
            )
        devices.append(
            TorchDevice(
                ordinal=ordinal,
                uuids=_uuid_forms(uuid) if uuid is not None else (),
                bus_id=bus,
                name=getattr(props, "name", None),
            )
        )
    return devices


def torch_memory(torch: Any, ordinal: int) -> TorchMemory:
    cuda = torch.cuda
    return TorchMemory(
        ordinal=ordinal,
        allocated_bytes=int(cuda.memory_allocated(ordinal)),
        reserved_bytes=int(cuda.memory_reserved(ordinal)),
        peak_allocated_bytes=int(cuda.max_memory_allocated(ordinal)),
    )

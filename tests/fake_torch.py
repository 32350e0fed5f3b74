"""A stand-in for the few ``torch.cuda`` functions nvtopy reads (torch is not installed in CI).

``FakeTorch(devices)`` behaves like a job's torch after CUDA was initialised: each
device has a UUID (as ``get_device_properties(i).uuid`` prints it: no ``GPU-``
prefix), a PCI location, and allocator figures a test changes at will.
"""

from __future__ import annotations

import types
import uuid as uuidlib
from dataclasses import dataclass


@dataclass
class FakeDevice:
    uuid: str | None  # NVML form ("GPU-..." / "MIG-..."); torch prints it without the prefix
    bus: tuple[int, int, int] | None = None  # (domain, bus, device)
    name: str = "NVIDIA H100 80GB HBM3"
    allocated: int = 0
    reserved: int = 0
    peak: int = 0


class _Props:
    def __init__(self, device: FakeDevice) -> None:
        self.name = device.name
        self.uuid = None if device.uuid is None else uuidlib.UUID(device.uuid.split("-", 1)[1])
        if device.bus is not None:
            self.pci_domain_id, self.pci_bus_id, self.pci_device_id = device.bus


class FakeCuda:
    def __init__(self, devices: list[FakeDevice], current: int = 0, initialized: bool = True) -> None:
        self.devices = devices
        self.current = current
        self.initialized = initialized

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def device_count(self) -> int:
        return len(self.devices)

    def current_device(self) -> int:
        return self.current

    def get_device_properties(self, index: int) -> _Props:
        return _Props(self.devices[index])

    def memory_allocated(self, index: int) -> int:
        return self.devices[index].allocated

    def memory_reserved(self, index: int) -> int:
        return self.devices[index].reserved

    def max_memory_allocated(self, index: int) -> int:
        return self.devices[index].peak

    def allocate(self, index: int, size: int) -> None:
        """What a tensor allocation does to the allocator's figures."""
        device = self.devices[index]
        device.allocated += size
        device.reserved = max(device.reserved, device.allocated)
        device.peak = max(device.peak, device.allocated)


def fake_torch(devices: list[FakeDevice], **kwargs: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(__name__="torch", cuda=FakeCuda(devices, **kwargs))

"""A fake of NVIDIA's ``pynvml`` module (nvidia-ml-py) for unit tests of the NVML backend.

``FakeNvml()`` instances stand in for the module: pass one as ``NvmlBackend(nvml=fake)``.

- Constants, exception classes and ctypes structures are the REAL ones from ``pynvml``
  (``fake.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost``), so ``except`` clauses
  and ``isinstance`` checks behave exactly as with the real module.
- Real pynvml *functions* are never reached (they would load libnvidia-ml): an ``nvml*``
  function the fake does not implement, or one a test removed with :meth:`FakeNvml.remove`,
  raises the real ``NVMLError_FunctionNotFound``, as a driver lacking that symbol does.
- Every GPU is a :class:`FakeGpu` whose values a test may change at any time.
- :meth:`FakeNvml.fail` makes a call raise any exception (usually a real ``NVMLError``
  subclass), for one GPU or all, forever or a number of times.
- ``fake.calls[name]`` counts calls per function; ``fake.gpu_calls[(name, index)]`` per GPU.

Health (nvtopy.health): row remapping, retired pages, the PCIe link and its replay counter,
NVLinks (:class:`FakeNvLink`: state, version, remote, KiB throughput counters, error
counters) through their dedicated calls and through ``nvmlDeviceGetFieldValues`` (ids or
``(id, scopeId)`` pairs, each entry with its own return code; ``FakeGpu.field_errors`` makes
one field id answer any code). Events: an event set per ``nvmlEventSetCreate``,
:meth:`FakeNvml.post_event` queues an event for every set registered on that GPU, and
``nvmlEventSetWait_v2`` really blocks (a condition variable) until one is queued or the
timeout passes, then raises the real ``NVMLError_Timeout``.

Memory info follows the driver: v1 ``used`` includes the driver-reserved memory, v2
(``version=pynvml.nvmlMemory_v2``, C symbol ``nvmlDeviceGetMemoryInfo_v2``) reports it
apart. Inject failures of v2 alone under the name ``"nvmlDeviceGetMemoryInfo_v2"``.

The calls nvtopy makes through ctypes (``_nvmlGetFunctionPointer``: every process list,
compute, graphics and MPS clients (``FakeGpu.mps_procs``) --
``_v3``, ``_v2``, the unversioned v1 and the 32-byte ``_v3`` of drivers 535.43-535.85 -- and
``nvmlDeviceGetProcessUtilization``) are emulated with the C calling convention, returning
NVML return codes. Failures a test arranges for a function name (:meth:`FakeNvml.fail`)
apply to the C symbol of that name too; an ``NVMLLibraryMismatchError`` there means the
driver lacks the symbol (``NVML_ERROR_FUNCTION_NOT_FOUND``).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
import types
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

__all__ = ["FakeEventSet", "FakeGpu", "FakeHandle", "FakeNvLink", "FakeNvml", "FakeProcess", "FakeSample", "now_us"]

_MISSING = object()
NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE_ulonglong
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId when MIG is off
SCOPE_ALL = 0xFFFFFFFF  # scopeId of the NVLink throughput fields: every link
XID = pynvml.nvmlEventTypeXidCriticalError
DEFAULT_EVENT_TYPES = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
)


def now_us(offset_s: float = 0.0) -> int:
    """Unix time in microseconds (NVML's process-utilisation timestamps), shifted by ``offset_s``."""
    return int((time.time() + offset_s) * 1_000_000)


@dataclass
class FakeProcess:
    """One entry of an NVML running-process list. ``used_memory=None`` = NVML's "not available"."""

    pid: int
    used_memory: int | None = 256 << 20
    gpu_instance_id: int = NO_INSTANCE
    compute_instance_id: int = NO_INSTANCE


@dataclass
class FakeSample:
    """One per-process utilisation sample. ``timestamp_us=None`` means "at the time of the call"."""

    pid: int
    sm: int = 0
    mem: int = 0
    enc: int = 0
    dec: int = 0
    timestamp_us: int | None = None


@dataclass
class FakeNvLink:
    """One NVLink: its state, version, what it reaches, its counters (KiB, monotonic) and errors."""

    active: bool = True
    version: int = 4
    remote: str = "00000000:05:00.0"
    tx_kib: int = 0
    rx_kib: int = 0
    errors: dict[int, int] = field(default_factory=dict)  # NVML_NVLINK_ERROR_DL_* -> count (absent: 0)


@dataclass
class FakeMig:
    """One MIG device of a fake GPU, as NVML reports it through the MIG device's handle."""

    uuid: str
    profile: str = "3g.40gb"
    gpu_instance_id: int = 1
    compute_instance_id: int = 0
    memory_total: int = 40 << 30
    memory_used: int = 5 << 30
    sms: int = 60
    slices: int = 3


@dataclass
class FakeGpu:
    """Everything the fake driver knows of one GPU, in NVML's own units (mW, KB/s, MHz...)."""

    index: int
    uuid: str = ""
    name: str = "NVIDIA A100-SXM4-80GB"
    bus_id: str = ""
    serial: str = ""
    memory_total: int = 80 << 30
    memory_used: int = 10 << 30  # excluding reserved (v2 semantics; v1 adds reserved)
    memory_reserved: int = 512 << 20
    util_gpu: int = 50
    util_memory: int = 20
    encoder: int = 3
    decoder: int = 4
    temperature: int = 45
    threshold_slowdown: int = 87
    threshold_shutdown: int = 92
    fan: int = 30
    num_fans: int = 1
    power_usage_mw: int = 123_456
    power_limit_mw: int = 400_000  # enforced
    power_default_limit_mw: int = 400_000
    power_min_limit_mw: int = 100_000
    power_max_limit_mw: int = 400_000
    energy_mj: int = 9_876_543
    pstate: int = 0
    clock_sm: int = 1410
    clock_mem: int = 1593
    max_clock_sm: int = 1410
    max_clock_mem: int = 1593
    compute_capability: tuple[int, int] = (8, 0)
    ecc_mode: tuple[int, int] = (1, 1)
    ecc_supported: bool = True  # False: a GeForce board (ECC calls and fields NotSupported)
    # (error type, counter type) -> count; error type CORRECTED=0 / UNCORRECTED=1, VOLATILE=0 / AGGREGATE=1
    ecc_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    clock_events: int = 0
    pcie_rx_kb: int = 1000
    pcie_tx_kb: int = 2000
    persistence: int = 1
    compute_mode: int = 0
    mig_mode: tuple[int, int] = (0, 0)
    mig_slots: list[str | FakeMig | None] = field(default_factory=list)  # None = empty slot (NotFound)
    compute_procs: list[FakeProcess] = field(default_factory=list)
    graphics_procs: list[FakeProcess] = field(default_factory=list)
    mps_procs: list[FakeProcess] = field(default_factory=list)  # clients of an MPS server (MPSCompute list)
    samples: list[FakeSample] = field(default_factory=list)
    lost: bool = False  # every call for this GPU (handles included) raises GpuIsLost
    minor: int | None = None  # the N of /dev/nvidiaN (None: the index)
    # Accounting start times (Unix us) per pid; None: accounting mode off (the stats call is NotSupported).
    accounting: dict[int, int] | None = None
    # Health. None: the board does not support it (NotSupported, in the calls and the field values).
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corrected, uncorrected, pending, failure
    retired_pages: tuple[int, int, int] | None = (0, 0, 0)  # single-bit, double-bit, pending
    pcie_gen: int = 4
    pcie_width: int = 16
    pcie_gen_max: int = 4  # nvmlDeviceGetMaxPcieLinkGeneration: the GPU in its slot
    pcie_gpu_gen_max: int = 4  # nvmlDeviceGetGpuMaxPcieLinkGeneration: the GPU alone
    pcie_width_max: int = 16
    pcie_replay: int = 0
    nvlinks: list[FakeNvLink] = field(default_factory=list)  # none: a PCIe board (link count 0)
    field_errors: dict[int, int] = field(default_factory=dict)  # field id -> return code of its entries
    event_types: int = DEFAULT_EVENT_TYPES  # nvmlDeviceGetSupportedEventTypes
    # GPM: whether nvmlGpmQueryDeviceSupport says yes; each metric's value (an id absent: NOT_SUPPORTED),
    # per-metric return codes, and per GPU instance (MIG) their own values.
    gpm: bool = False
    gpm_metrics: dict[int, float] = field(default_factory=dict)
    gpm_codes: dict[int, int] = field(default_factory=dict)
    gpm_mig: dict[int, dict[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        i = self.index
        self.uuid = self.uuid or f"GPU-{i:08x}-1111-2222-3333-{i:012x}"
        self.bus_id = self.bus_id or f"00000000:{0x3B + i:02X}:00.0"
        self.serial = self.serial or f"13240000{i:05d}"
        if not self.ecc_errors:
            self.ecc_errors = {(0, 0): 10 + i, (1, 0): 20 + i, (0, 1): 30 + i, (1, 1): 40 + i}


@dataclass(frozen=True, eq=False)
class FakeHandle:
    """An opaque device handle (a fresh object per acquisition, like NVML's)."""

    index: int
    serial: int
    mig_slot: int | None = None


@dataclass
class _Failure:
    error: Any  # exception class or instance
    gpu: int | None  # None: every GPU (and the global calls)
    times: int | None  # None: forever
    when: Callable[..., bool] | None = None  # predicate on the call's arguments

    def make(self) -> BaseException:
        error = self.error
        if isinstance(error, pynvml.NVMLError):
            return pynvml.NVMLError(error.value)  # a fresh instance of the same subclass
        if isinstance(error, BaseException):
            return error
        return error()


class FakeEventSet:
    """An nvmlEventSet_t: the GPUs registered (with the handle used) and the events queued for it."""

    def __init__(self) -> None:
        self.registered: dict[int, tuple[int, FakeHandle]] = {}  # GPU index -> (event types, handle)
        self.queue: deque[Any] = deque()
        self.freed = False


class FakeNvml:
    """Acts like the ``pynvml`` module for :class:`nvtopy.backends.nvml.backend.NvmlBackend`."""

    def __init__(
        self,
        gpus: int | list[FakeGpu] = 2,
        *,
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        nvml_version: str = "12.550.54.15",
    ) -> None:
        self.gpus: list[FakeGpu] = [FakeGpu(i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.nvml_version = nvml_version
        self.calls: Counter[str] = Counter()
        self.gpu_calls: Counter[tuple[str, int]] = Counter()
        self.init_count = 0  # nvmlInit minus nvmlShutdown, as NVML reference-counts
        self.last_process_utilization_since: int | None = None
        self.uuid_lookups: list[str] = []
        self._failures: dict[str, list[_Failure]] = {}
        self._removed: set[str] = set()
        self._serials = itertools.count(1)
        self.entry_sizes: dict[str, int] = {}  # bytes per entry of the last array passed to a C symbol
        self.field_time_us: Callable[[], int] = now_us  # the timestamp of field-value entries
        self.field_requests: list[list[Any]] = []  # the ids of every nvmlDeviceGetFieldValues call
        self.event_sets: list[FakeEventSet] = []
        self.event_waits: list[int] = []  # the timeout (ms) of every nvmlEventSetWait_v2
        self.gpm_samples: dict[int, tuple[int, int | None] | None] = {}  # buffer address -> (gpu, gi) it holds
        self._gpm_buffers: list[Any] = []  # keeps the buffers' memory alive
        self._events = threading.Condition()

    # ------------------------------------------------------------------ test controls

    def fail(
        self,
        function: str,
        error: Any,
        *,
        gpu: int | None = None,
        times: int | None = None,
        when: Callable[..., bool] | None = None,
    ) -> None:
        """Make ``function`` raise ``error`` (class or instance) for GPU ``gpu`` (None: all).

        ``times`` limits how often (None: until :meth:`heal`); ``when(*args)`` restricts it
        to calls whose arguments after the handle match.
        """
        self._failures.setdefault(function, []).append(_Failure(error, gpu, times, when))

    def heal(self, function: str | None = None, *, gpu: int | None = None) -> None:
        """Undo :meth:`fail` (and :meth:`remove`) for ``function`` (None: all) and ``gpu`` (None: all)."""
        names = [function] if function is not None else list(self._failures)
        for name in names:
            kept = [f for f in self._failures.get(name, []) if gpu is not None and f.gpu != gpu]
            if kept:
                self._failures[name] = kept
            else:
                self._failures.pop(name, None)
        if gpu is None:
            if function is None:
                self._removed.clear()
            else:
                self._removed.discard(function)

    def remove(self, function: str) -> None:
        """The driver lacks this symbol: every call raises ``NVMLError_FunctionNotFound``."""
        self._removed.add(function)

    def gpu_count(self, function: str, index: int) -> int:
        return self.gpu_calls[(function, index)]

    # ------------------------------------------------------------------ module-like attribute lookup

    def __getattr__(self, name: str) -> Any:
        # Only called for names not defined on the fake.
        if name.startswith("__"):
            raise AttributeError(name)
        real = getattr(pynvml, name, _MISSING)
        if real is not _MISSING and not isinstance(real, (types.FunctionType, types.BuiltinFunctionType)):
            return real  # constants, exception classes, ctypes structures: the real ones
        if name.startswith("nvml"):
            return self._function_not_found(name)
        raise AttributeError(f"FakeNvml does not provide pynvml.{name}")

    def _function_not_found(self, name: str) -> Callable[..., Any]:
        def missing(*_args: Any, **_kwargs: Any) -> Any:
            self.calls[name] += 1
            raise pynvml.NVMLError_FunctionNotFound()

        missing.__name__ = name
        return missing

    # ------------------------------------------------------------------ plumbing

    def _check(self, name: str, gpu: int | None, args: tuple[Any, ...] = ()) -> None:
        """Count the call and raise what the test arranged (or the driver state implies)."""
        self.calls[name] += 1
        if gpu is not None:
            self.gpu_calls[(name, gpu)] += 1
        if name in self._removed:
            raise pynvml.NVMLError_FunctionNotFound()
        if name not in ("nvmlInit", "nvmlInitWithFlags", "nvmlShutdown") and self.init_count <= 0:
            raise pynvml.NVMLError_Uninitialized()
        for failure in self._failures.get(name, []):
            if failure.gpu is not None and failure.gpu != gpu:
                continue
            if failure.when is not None and not failure.when(*args):
                continue
            if failure.times is not None:
                if failure.times <= 0:
                    continue
                failure.times -= 1
            raise failure.make()
        if gpu is not None and self.gpus[gpu].lost:
            raise pynvml.NVMLError_GpuIsLost()

    def _device(self, name: str, handle: Any, *args: Any) -> FakeGpu:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            self.calls[name] += 1
            raise pynvml.NVMLError_InvalidArgument()
        self._check(name, handle.index, args)
        return self.gpus[handle.index]

    def _new_handle(self, index: int, mig_slot: int | None = None) -> FakeHandle:
        return FakeHandle(index, next(self._serials), mig_slot)

    # ------------------------------------------------------------------ init and system

    def nvmlInit(self) -> None:
        self._check("nvmlInit", None)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown", None)
        if self.init_count <= 0:
            raise pynvml.NVMLError_Uninitialized()
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion", None)
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion", None)
        return self.cuda_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check("nvmlSystemGetNVMLVersion", None)
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount", None)
        return len(self.gpus)

    # ------------------------------------------------------------------ handles

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < len(self.gpus):
            self._check("nvmlDeviceGetHandleByIndex", None)
            raise pynvml.NVMLError_InvalidArgument()
        self._check("nvmlDeviceGetHandleByIndex", index)
        return self._new_handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        self.uuid_lookups.append(text)
        for gpu in self.gpus:
            if gpu.uuid == text:  # NVML wants the exact UUID
                self._check("nvmlDeviceGetHandleByUUID", gpu.index)
                return self._new_handle(gpu.index)
        self._check("nvmlDeviceGetHandleByUUID", None)
        raise pynvml.NVMLError_NotFound()

    # ------------------------------------------------------------------ static fields

    def _mig(self, gpu: FakeGpu, handle: FakeHandle) -> FakeMig | None:
        """The MIG device a handle names (a string slot gets the defaults), None for a physical handle."""
        if handle.mig_slot is None:
            return None
        slot = gpu.mig_slots[handle.mig_slot]
        assert slot is not None
        return slot if isinstance(slot, FakeMig) else FakeMig(slot, gpu_instance_id=handle.mig_slot + 1)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        gpu = self._device("nvmlDeviceGetUUID", handle)
        mig = self._mig(gpu, handle)
        return gpu.uuid if mig is None else mig.uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        gpu = self._device("nvmlDeviceGetName", handle)
        mig = self._mig(gpu, handle)
        return gpu.name if mig is None else f"{gpu.name} MIG {mig.profile}"

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        mig = self._mig(self._device("nvmlDeviceGetGpuInstanceId", handle), handle)
        if mig is None:
            raise pynvml.NVMLError_InvalidArgument()
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeHandle) -> int:
        mig = self._mig(self._device("nvmlDeviceGetComputeInstanceId", handle), handle)
        if mig is None:
            raise pynvml.NVMLError_InvalidArgument()
        return mig.compute_instance_id

    def nvmlDeviceGetAttributes(self, handle: FakeHandle) -> Any:
        mig = self._mig(self._device("nvmlDeviceGetAttributes", handle), handle)
        if mig is None:
            raise pynvml.NVMLError_NotSupported()  # the driver answers only for MIG device handles
        return types.SimpleNamespace(
            multiprocessorCount=mig.sms,
            sharedCopyEngineCount=mig.slices,
            sharedDecoderCount=1,
            sharedEncoderCount=0,
            sharedJpegCount=1,
            sharedOfaCount=0,
            gpuInstanceSliceCount=mig.slices,
            computeInstanceSliceCount=mig.slices,
            memorySizeMB=mig.memory_total >> 20,
        )

    def nvmlDeviceGetPciInfo_v3(self, handle: FakeHandle) -> Any:
        gpu = self._device("nvmlDeviceGetPciInfo_v3", handle)
        return types.SimpleNamespace(busId=gpu.bus_id, busIdLegacy=gpu.bus_id[4:])

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Any:
        gpu = self._device("nvmlDeviceGetPciInfo", handle)
        return types.SimpleNamespace(busId=gpu.bus_id, busIdLegacy=gpu.bus_id[4:])

    def nvmlDeviceGetSerial(self, handle: FakeHandle) -> str:
        return self._device("nvmlDeviceGetSerial", handle).serial

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle, version)
        mig = self._mig(gpu, handle)
        if mig is not None:
            free = mig.memory_total - mig.memory_used
            return types.SimpleNamespace(
                version=version, total=mig.memory_total, reserved=0, free=free, used=mig.memory_used
            )
        free = gpu.memory_total - gpu.memory_used - gpu.memory_reserved
        if not version:
            return types.SimpleNamespace(total=gpu.memory_total, free=free, used=gpu.memory_used + gpu.memory_reserved)
        # pynvml calls the C symbol nvmlDeviceGetMemoryInfo_v2 when a version is given.
        self._check("nvmlDeviceGetMemoryInfo_v2", handle.index, (version,))
        if version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        return types.SimpleNamespace(
            version=version, total=gpu.memory_total, reserved=gpu.memory_reserved, free=free, used=gpu.memory_used
        )

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetPowerManagementDefaultLimit", handle).power_default_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: FakeHandle) -> list[int]:
        gpu = self._device("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return [gpu.power_min_limit_mw, gpu.power_max_limit_mw]

    def nvmlDeviceGetTemperatureThreshold(self, handle: FakeHandle, threshold: int) -> int:
        gpu = self._device("nvmlDeviceGetTemperatureThreshold", handle, threshold)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return gpu.threshold_slowdown
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return gpu.threshold_shutdown
        raise pynvml.NVMLError_NotSupported()

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._device("nvmlDeviceGetMaxClockInfo", handle, clock_type)
        return {pynvml.NVML_CLOCK_SM: gpu.max_clock_sm, pynvml.NVML_CLOCK_MEM: gpu.max_clock_mem}.get(
            clock_type, gpu.max_clock_sm
        )

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeHandle) -> tuple[int, int]:
        return tuple(self._device("nvmlDeviceGetCudaComputeCapability", handle).compute_capability)

    def nvmlDeviceGetDriverModel(self, handle: FakeHandle) -> list[int]:
        self._device("nvmlDeviceGetDriverModel", handle)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # Windows only: Linux drivers answer so

    def nvmlDeviceGetVirtualizationMode(self, handle: FakeHandle) -> int:
        self._device("nvmlDeviceGetVirtualizationMode", handle)
        return 0  # bare metal

    def nvmlDeviceGetMinorNumber(self, handle: FakeHandle) -> int:
        gpu = self._device("nvmlDeviceGetMinorNumber", handle)
        return gpu.index if gpu.minor is None else gpu.minor

    def nvmlDeviceGetAccountingStats(self, handle: FakeHandle, pid: int) -> Any:
        gpu = self._device("nvmlDeviceGetAccountingStats", handle, pid)
        if gpu.accounting is None:
            raise pynvml.NVMLError_NotSupported()
        if pid not in gpu.accounting:
            raise pynvml.NVMLError_NotFound()
        stats = pynvml.c_nvmlAccountingStats_t()
        stats.startTime = gpu.accounting[pid]
        stats.isRunning = 1
        return stats

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        return list(self._device("nvmlDeviceGetMigMode", handle).mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        return len(self._device("nvmlDeviceGetMaxMigDeviceCount", handle).mig_slots)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, slot: int) -> FakeHandle:
        gpu = self._device("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if not 0 <= slot < len(gpu.mig_slots):
            raise pynvml.NVMLError_InvalidArgument()
        if gpu.mig_slots[slot] is None:
            raise pynvml.NVMLError_NotFound()
        return self._new_handle(handle.index, slot)

    def nvmlDeviceGetNumFans(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetNumFans", handle).num_fans

    # ------------------------------------------------------------------ dynamic fields

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        return types.SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeHandle) -> list[int]:
        return [self._device("nvmlDeviceGetEncoderUtilization", handle).encoder, 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeHandle) -> list[int]:
        return [self._device("nvmlDeviceGetDecoderUtilization", handle).decoder, 167_000]

    def nvmlDeviceGetTemperatureV(self, handle: FakeHandle, sensor: int, version: int | None = None) -> int:
        gpu = self._device("nvmlDeviceGetTemperatureV", handle, sensor)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.temperature

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._device("nvmlDeviceGetTemperature", handle, sensor)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.temperature

    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetFanSpeed", handle).fan

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetPowerUsage", handle).power_usage_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetPerformanceState(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetPerformanceState", handle).pstate

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._device("nvmlDeviceGetClockInfo", handle, clock_type)
        return {pynvml.NVML_CLOCK_SM: gpu.clock_sm, pynvml.NVML_CLOCK_MEM: gpu.clock_mem}.get(clock_type, gpu.clock_sm)

    def nvmlDeviceGetEccMode(self, handle: FakeHandle) -> list[int]:
        gpu = self._device("nvmlDeviceGetEccMode", handle)
        if not gpu.ecc_supported:
            raise pynvml.NVMLError_NotSupported()
        return list(gpu.ecc_mode)

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        gpu = self._device("nvmlDeviceGetTotalEccErrors", handle, error_type, counter_type)
        if not gpu.ecc_mode[0]:
            raise pynvml.NVMLError_NotSupported()
        return gpu.ecc_errors[(error_type, counter_type)]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_events

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        gpu = self._device("nvmlDeviceGetPcieThroughput", handle, counter)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return gpu.pcie_rx_kb
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return gpu.pcie_tx_kb
        raise pynvml.NVMLError_InvalidArgument()

    def nvmlDeviceGetPersistenceMode(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetPersistenceMode", handle).persistence

    def nvmlDeviceGetComputeMode(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetComputeMode", handle).compute_mode

    # ------------------------------------------------------------------ processes

    @staticmethod
    def _entries(procs: list[FakeProcess]) -> list[Any]:
        return [
            types.SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=p.used_memory,
                gpuInstanceId=p.gpu_instance_id,
                computeInstanceId=p.compute_instance_id,
            )
            for p in procs
        ]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._entries(self._device("nvmlDeviceGetComputeRunningProcesses_v3", handle).compute_procs)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._entries(self._device("nvmlDeviceGetComputeRunningProcesses_v2", handle).compute_procs)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._entries(self._device("nvmlDeviceGetGraphicsRunningProcesses_v3", handle).graphics_procs)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._entries(self._device("nvmlDeviceGetGraphicsRunningProcesses_v2", handle).graphics_procs)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._entries(self._device("nvmlDeviceGetMPSComputeRunningProcesses_v3", handle).mps_procs)

    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._entries(self._device("nvmlDeviceGetMPSComputeRunningProcesses_v2", handle).mps_procs)

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timestamp: int) -> list[Any]:
        gpu = self._device("nvmlDeviceGetProcessUtilization", handle, timestamp)
        self.last_process_utilization_since = timestamp
        now = now_us()
        samples = [
            types.SimpleNamespace(
                pid=s.pid,
                timeStamp=now if s.timestamp_us is None else s.timestamp_us,
                smUtil=s.sm,
                memUtil=s.mem,
                encUtil=s.enc,
                decUtil=s.dec,
            )
            for s in gpu.samples
        ]
        samples = [s for s in samples if s.timeStamp >= timestamp]
        if not samples:
            raise pynvml.NVMLError_NotFound()  # no sample newer than the timestamp
        return samples

    # ------------------------------------------------------------------ ctypes-level symbols (legacy process calls)

    _PROCESS_SYMBOLS = {
        "nvmlDeviceGetComputeRunningProcesses": "compute_procs",
        "nvmlDeviceGetGraphicsRunningProcesses": "graphics_procs",
        "nvmlDeviceGetComputeRunningProcesses_v3": "compute_procs",
        "nvmlDeviceGetGraphicsRunningProcesses_v3": "graphics_procs",
        "nvmlDeviceGetComputeRunningProcesses_v2": "compute_procs",
        "nvmlDeviceGetGraphicsRunningProcesses_v2": "graphics_procs",
        "nvmlDeviceGetMPSComputeRunningProcesses": "mps_procs",
        "nvmlDeviceGetMPSComputeRunningProcesses_v2": "mps_procs",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3": "mps_procs",
    }

    def _nvmlGetFunctionPointer(self, name: str) -> Callable[..., int]:
        """The raw C symbol (process lists only), returning NVML return codes like the driver."""
        self.calls[f"_nvmlGetFunctionPointer:{name}"] += 1
        if self.init_count <= 0:
            raise pynvml.NVMLError_Uninitialized()
        if name in self._removed or (name not in self._PROCESS_SYMBOLS and name != "nvmlDeviceGetProcessUtilization"):
            raise pynvml.NVMLError_FunctionNotFound()
        if name == "nvmlDeviceGetProcessUtilization":
            return self._utilization_symbol(name)
        attribute = self._PROCESS_SYMBOLS[name]

        def symbol(handle: Any, count_ref: Any, array: Any) -> int:
            try:
                gpu = self._device(name, handle)
            except pynvml.NVMLError as exc:
                return exc.value
            except pynvml.NVMLLibraryMismatchError:
                return pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            procs: list[FakeProcess] = getattr(gpu, attribute)
            count = count_ref._obj  # the c_uint behind ctypes.byref(...)
            if array is not None:
                self.entry_sizes[name] = ctypes.sizeof(array._type_)
            if array is None or count.value < len(procs):
                if not procs and array is None:
                    count.value = 0
                    return pynvml.NVML_SUCCESS
                count.value = len(procs)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for i, proc in enumerate(procs):
                entry = array[i]
                entry.pid = proc.pid
                entry.usedGpuMemory = NOT_AVAILABLE_ULL if proc.used_memory is None else proc.used_memory
                names = {f[0] for f in type(entry)._fields_}
                if "gpuInstanceId" in names:
                    entry.gpuInstanceId = proc.gpu_instance_id
                    entry.computeInstanceId = proc.compute_instance_id
            count.value = len(procs)
            return pynvml.NVML_SUCCESS

        return symbol

    def _utilization_symbol(self, name: str) -> Callable[..., int]:
        """``nvmlDeviceGetProcessUtilization(device, samples, &count, lastSeenTimeStamp)`` in C."""

        def symbol(handle: Any, array: Any, count_ref: Any, since: Any) -> int:
            timestamp = int(getattr(since, "value", since))
            try:
                gpu = self._device(name, handle, timestamp)
            except pynvml.NVMLError as exc:
                return exc.value
            self.last_process_utilization_since = timestamp
            now = now_us()
            samples = [
                (s, now if s.timestamp_us is None else s.timestamp_us)
                for s in gpu.samples
                if (now if s.timestamp_us is None else s.timestamp_us) >= timestamp
            ]
            count = count_ref._obj
            if not samples:
                count.value = 0
                return pynvml.NVML_ERROR_NOT_FOUND
            if array is None or count.value < len(samples):
                count.value = len(samples)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for i, (sample, stamp) in enumerate(samples):
                entry = array[i]
                entry.pid, entry.timeStamp = sample.pid, stamp
                entry.smUtil, entry.memUtil, entry.encUtil, entry.decUtil = (
                    sample.sm,
                    sample.mem,
                    sample.enc,
                    sample.dec,
                )
            count.value = len(samples)
            return pynvml.NVML_SUCCESS

        return symbol

    # ------------------------------------------------------------------ health: memory, PCIe link, NVLink

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        gpu = self._device("nvmlDeviceGetRemappedRows", handle)
        if gpu.remapped_rows is None:
            raise pynvml.NVMLError_NotSupported()
        return tuple(gpu.remapped_rows)

    def _retired(self, name: str, handle: FakeHandle, cause: int) -> list[int]:
        gpu = self._device(name, handle, cause)
        if gpu.retired_pages is None:
            raise pynvml.NVMLError_NotSupported()
        if cause not in (0, 1):
            raise pynvml.NVMLError_InvalidArgument()
        return [0x100000 + 0x10 * k + cause for k in range(gpu.retired_pages[cause])]

    def nvmlDeviceGetRetiredPages(self, handle: FakeHandle, cause: int) -> list[int]:
        return self._retired("nvmlDeviceGetRetiredPages", handle, cause)

    def nvmlDeviceGetRetiredPages_v2(self, handle: FakeHandle, cause: int) -> list[dict[str, int]]:
        pages = self._retired("nvmlDeviceGetRetiredPages_v2", handle, cause)
        return [{"address": page, "timestamp": int(time.time()) - 3600} for page in pages]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        gpu = self._device("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        if gpu.retired_pages is None:
            raise pynvml.NVMLError_NotSupported()
        return int(gpu.retired_pages[2])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle).pcie_gpu_gen_max

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetPcieReplayCounter", handle).pcie_replay

    def _link(self, name: str, handle: FakeHandle, link: int, *args: Any) -> FakeNvLink:
        gpu = self._device(name, handle, link, *args)
        if not gpu.nvlinks:
            raise pynvml.NVMLError_NotSupported()
        if not 0 <= link < len(gpu.nvlinks):
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        return int(self._link("nvmlDeviceGetNvLinkState", handle, link).active)

    def nvmlDeviceGetNvLinkVersion(self, handle: FakeHandle, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkVersion", handle, link).version

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> Any:
        remote = self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).remote
        return types.SimpleNamespace(busId=remote.encode(), busIdLegacy=remote[4:].encode())

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:
        nvlink = self._link("nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)
        if not 0 <= counter < pynvml.NVML_NVLINK_ERROR_COUNT:
            raise pynvml.NVMLError_InvalidArgument()
        return nvlink.errors.get(counter, 0)

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        self._device("nvmlDeviceGetIndex", handle)
        return handle.index

    # ------------------------------------------------------------------ field values

    _ECC_FIELDS = {
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (0, 0),
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (1, 0),
        pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (0, 1),
        pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (1, 1),
    }
    _REMAPPED_FIELDS = {
        pynvml.NVML_FI_DEV_REMAPPED_COR: 0,
        pynvml.NVML_FI_DEV_REMAPPED_UNC: 1,
        pynvml.NVML_FI_DEV_REMAPPED_PENDING: 2,
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE: 3,
    }
    _RETIRED_FIELDS = {
        pynvml.NVML_FI_DEV_RETIRED_SBE: 0,
        pynvml.NVML_FI_DEV_RETIRED_DBE: 1,
        pynvml.NVML_FI_DEV_RETIRED_PENDING: 2,
    }
    # Error counters of links 0-11, one field id per (kind, link): id -> (counters summed, link).
    _LINK_ERROR_FIELDS = {
        getattr(pynvml, f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}"): ((counter,), link)
        for kind, counter in (
            ("CRC_FLIT", pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
            ("CRC_DATA", pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
            ("REPLAY", pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
            ("RECOVERY", pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
        )
        for link in range(12)
    }
    # Error counters with the link in scopeId: id -> counters summed (DL_CRC: flit and data).
    _SCOPED_ERROR_FIELDS = {
        pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: (
            pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
        ),
        pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: (pynvml.NVML_NVLINK_ERROR_DL_REPLAY,),
        pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: (pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,),
    }

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[Any]) -> Any:
        """Every entry with its own return code; ids may be ``(field id, scope id)`` pairs, as in pynvml."""
        gpu = self._device("nvmlDeviceGetFieldValues", handle, field_ids)
        self.field_requests.append(list(field_ids))
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        stamp = self.field_time_us()
        for entry, requested in zip(values, field_ids, strict=True):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            entry.fieldId, entry.scopeId, entry.timestamp = field_id, scope, stamp
            entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            entry.nvmlReturn = gpu.field_errors.get(field_id, pynvml.NVML_SUCCESS)
            if entry.nvmlReturn == pynvml.NVML_SUCCESS:
                entry.nvmlReturn = self._field(gpu, field_id, scope, entry)
        return values

    def _field(self, gpu: FakeGpu, field_id: int, scope: int, entry: Any) -> int:
        """Fill one entry; returns its NVML return code."""
        uint = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        if field_id == pynvml.NVML_FI_DEV_ECC_CURRENT or field_id in self._ECC_FIELDS:
            if not gpu.ecc_supported:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            if field_id == pynvml.NVML_FI_DEV_ECC_CURRENT:
                entry.valueType, entry.value.uiVal = uint, gpu.ecc_mode[0]
                return pynvml.NVML_SUCCESS
            if not gpu.ecc_mode[0]:
                return pynvml.NVML_ERROR_NOT_SUPPORTED  # the counters fail while ECC is off
            entry.value.ullVal = gpu.ecc_errors[self._ECC_FIELDS[field_id]]
            return pynvml.NVML_SUCCESS
        if field_id in self._REMAPPED_FIELDS:
            if gpu.remapped_rows is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            entry.valueType, entry.value.uiVal = uint, gpu.remapped_rows[self._REMAPPED_FIELDS[field_id]]
            return pynvml.NVML_SUCCESS
        if field_id in self._RETIRED_FIELDS:
            if gpu.retired_pages is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            entry.valueType, entry.value.uiVal = uint, gpu.retired_pages[self._RETIRED_FIELDS[field_id]]
            return pynvml.NVML_SUCCESS
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            entry.valueType, entry.value.uiVal = uint, gpu.pcie_replay
            return pynvml.NVML_SUCCESS
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            entry.valueType, entry.value.uiVal = uint, len(gpu.nvlinks)
            return pynvml.NVML_SUCCESS
        return self._nvlink_field(gpu, field_id, scope, entry)

    def _nvlink_field(self, gpu: FakeGpu, field_id: int, scope: int, entry: Any) -> int:
        throughput = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "tx_kib",
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "rx_kib",
        }
        known = field_id in throughput or field_id in self._LINK_ERROR_FIELDS or field_id in self._SCOPED_ERROR_FIELDS
        if not known and field_id != pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if not gpu.nvlinks:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if field_id in throughput and scope == SCOPE_ALL:
            entry.value.ullVal = sum(getattr(link, throughput[field_id]) for link in gpu.nvlinks)
            return pynvml.NVML_SUCCESS
        counters: tuple[int, ...] = ()
        if field_id in self._LINK_ERROR_FIELDS:
            counters, scope = self._LINK_ERROR_FIELDS[field_id]
        elif field_id in self._SCOPED_ERROR_FIELDS:
            counters = self._SCOPED_ERROR_FIELDS[field_id]
        if not 0 <= scope < len(gpu.nvlinks):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        link = gpu.nvlinks[scope]
        if field_id in throughput:
            entry.value.ullVal = getattr(link, throughput[field_id])
        elif field_id == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            entry.valueType, entry.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, int(link.active)
        else:
            entry.value.ullVal = sum(link.errors.get(counter, 0) for counter in counters)
        return pynvml.NVML_SUCCESS

    # ------------------------------------------------------------------ events

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetSupportedEventTypes", handle).event_types

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._check("nvmlEventSetCreate", None)
        event_set = FakeEventSet()
        with self._events:
            self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, event_types: int, event_set: FakeEventSet) -> None:
        gpu = self._device("nvmlDeviceRegisterEvents", handle, event_types, event_set)
        if not gpu.event_types or event_types & ~gpu.event_types:
            raise pynvml.NVMLError_NotSupported()  # nothing registered then, as the driver documents
        with self._events:
            if event_set.freed:
                raise pynvml.NVMLError_InvalidArgument()
            previous = event_set.registered.get(handle.index, (0, handle))[0]
            event_set.registered[handle.index] = (previous | event_types, handle)

    def post_event(
        self,
        gpu: int,
        xid: int,
        *,
        event_type: int = XID,
        gpu_instance_id: int = NO_INSTANCE,
        compute_instance_id: int = NO_INSTANCE,
        fresh_handle: bool = False,
    ) -> int:
        """Queue an event for every open set registered for it on ``gpu``; returns how many sets got it.

        ``fresh_handle``: the event names the GPU by a handle object other than the one registered.
        """
        sent = 0
        with self._events:
            for event_set in self.event_sets:
                types_, handle = event_set.registered.get(gpu, (0, None))
                if event_set.freed or not types_ & event_type:
                    continue
                device = self._new_handle(gpu) if fresh_handle else handle
                event_set.queue.append(
                    types.SimpleNamespace(
                        device=device,
                        eventType=event_type,
                        eventData=xid,
                        gpuInstanceId=gpu_instance_id,
                        computeInstanceId=compute_instance_id,
                    )
                )
                sent += 1
            self._events.notify_all()
        return sent

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> Any:
        """The first queued event, waiting at most ``timeout_ms`` (really blocking); else NVMLError_Timeout."""
        self._check("nvmlEventSetWait_v2", None, (event_set, timeout_ms))
        self.event_waits.append(int(timeout_ms))
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self._events:
            while True:
                if event_set.freed:
                    raise pynvml.NVMLError_InvalidArgument()
                if event_set.queue:
                    return event_set.queue.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise pynvml.NVMLError_Timeout()
                self._events.wait(remaining)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._check("nvmlEventSetFree", None, (event_set,))
        with self._events:
            if event_set.freed:
                raise pynvml.NVMLError_InvalidArgument()
            event_set.freed = True
            self._events.notify_all()


def _address(sample: Any) -> int:
    return ctypes.cast(sample, ctypes.c_void_p).value or 0


def _gpm_methods() -> None:
    """GPM on FakeNvml: opaque sample buffers that remember what they sampled; metrics from FakeGpu.gpm_*."""

    def nvmlGpmQueryDeviceSupport(self: FakeNvml, handle: FakeHandle) -> Any:
        gpu = self._device("nvmlGpmQueryDeviceSupport", handle)
        return types.SimpleNamespace(version=1, isSupportedDevice=int(gpu.gpm))

    def nvmlGpmSampleAlloc(self: FakeNvml) -> Any:
        self._check("nvmlGpmSampleAlloc", None)
        buffer = ctypes.create_string_buffer(16)
        self._gpm_buffers.append(buffer)
        sample = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)
        self.gpm_samples[_address(sample)] = None
        return sample

    def nvmlGpmSampleFree(self: FakeNvml, sample: Any) -> None:
        self._check("nvmlGpmSampleFree", None)
        if self.gpm_samples.pop(_address(sample), "gone") == "gone":
            raise pynvml.NVMLError_InvalidArgument()

    def nvmlGpmSampleGet(self: FakeNvml, handle: FakeHandle, sample: Any) -> Any:
        gpu = self._device("nvmlGpmSampleGet", handle)
        if not gpu.gpm:
            raise pynvml.NVMLError_NotSupported()
        self.gpm_samples[_address(sample)] = (gpu.index, None)
        return sample

    def nvmlGpmMigSampleGet(self: FakeNvml, handle: FakeHandle, gi: int, sample: Any) -> Any:
        gpu = self._device("nvmlGpmMigSampleGet", handle, gi)
        if not gpu.gpm or gpu.mig_mode[0] != 1:
            raise pynvml.NVMLError_NotSupported()
        if gi not in gpu.gpm_mig:
            raise pynvml.NVMLError_NotFound()
        self.gpm_samples[_address(sample)] = (gpu.index, gi)
        return sample

    def nvmlGpmMetricsGet(self: FakeNvml, request: Any) -> Any:
        first, second = self.gpm_samples.get(_address(request.sample1)), self.gpm_samples.get(_address(request.sample2))
        gpu_index = first[0] if first else None
        self._check("nvmlGpmMetricsGet", gpu_index)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        if first is None or second is None or first != second or _address(request.sample1) == _address(request.sample2):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[first[0]]
        values = gpu.gpm_metrics if first[1] is None else gpu.gpm_mig[first[1]]
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            code = gpu.gpm_codes.get(
                metric.metricId, 0 if metric.metricId in values else pynvml.NVML_ERROR_NOT_SUPPORTED
            )
            metric.nvmlReturn = code
            metric.value = values.get(metric.metricId, 0.0) if code == 0 else 0.0
        return request

    for function in (
        nvmlGpmQueryDeviceSupport,
        nvmlGpmSampleAlloc,
        nvmlGpmSampleFree,
        nvmlGpmSampleGet,
        nvmlGpmMigSampleGet,
        nvmlGpmMetricsGet,
    ):
        setattr(FakeNvml, function.__name__, function)


_gpm_methods()

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
import time
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

__all__ = ["FakeGpu", "FakeHandle", "FakeNvml", "FakeProcess", "FakeSample", "now_us"]

_MISSING = object()
NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE_ulonglong
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId when MIG is off


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
    mig_slots: list[str | None] = field(default_factory=list)  # None = empty slot (NotFound)
    compute_procs: list[FakeProcess] = field(default_factory=list)
    graphics_procs: list[FakeProcess] = field(default_factory=list)
    mps_procs: list[FakeProcess] = field(default_factory=list)  # clients of an MPS server (MPSCompute list)
    samples: list[FakeSample] = field(default_factory=list)
    lost: bool = False  # every call for this GPU (handles included) raises GpuIsLost
    minor: int | None = None  # the N of /dev/nvidiaN (None: the index)
    # Accounting start times (Unix us) per pid; None: accounting mode off (the stats call is NotSupported).
    accounting: dict[int, int] | None = None

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


class FakeNvml:
    """Acts like the ``pynvml`` module for :class:`nvtopy.backends.nvml.NvmlBackend`."""

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

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        gpu = self._device("nvmlDeviceGetUUID", handle)
        if handle.mig_slot is not None:
            slot_uuid = gpu.mig_slots[handle.mig_slot]
            assert slot_uuid is not None
            return slot_uuid
        return gpu.uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._device("nvmlDeviceGetName", handle).name

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

    # ------------------------------------------------------------------ field values (ECC)

    _ECC_FIELDS = {
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (0, 0),
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (1, 0),
        pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (0, 1),
        pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (1, 1),
    }

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[int]) -> Any:
        """ECC fields, each entry with its own return code (the counters fail while ECC is off)."""
        gpu = self._device("nvmlDeviceGetFieldValues", handle, field_ids)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for entry, field_id in zip(values, field_ids, strict=True):
            entry.fieldId = field_id
            entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            entry.nvmlReturn = pynvml.NVML_SUCCESS
            if not gpu.ecc_supported:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif field_id == pynvml.NVML_FI_DEV_ECC_CURRENT:
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                entry.value.uiVal = gpu.ecc_mode[0]
            elif field_id in self._ECC_FIELDS and gpu.ecc_mode[0]:
                entry.value.ullVal = gpu.ecc_errors[self._ECC_FIELDS[field_id]]
            else:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

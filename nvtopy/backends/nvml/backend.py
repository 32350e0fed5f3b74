"""The NVML backend: real GPUs through nvidia-ml-py (the ``pynvml`` module).

What it does that the usual snippets do not (see ../shared/docs/nvml-notes.md):

- ``nvmlInit`` once; ``nvmlShutdown`` once at close or exit.
- Handles acquired once; after ``GpuIsLost`` / ``Unknown`` re-acquired by UUID
  (indices may shift) with exponential backoff, while the other GPUs keep reporting.
- ``NotSupported`` and ``FunctionNotFound`` are remembered per (GPU, call) and
  never asked again: a passive board is not asked for its fan every second.
- Every field fails on its own: a failing call leaves its fields ``None`` with a
  reason; only ``GpuIsLost`` ends the reading of that GPU (nothing else can succeed).
- Process lists fall back from ``_v3`` to ``_v2`` to the unversioned v1 call, and
  use the 32-byte layout of drivers 535.43-535.85 whose ``_v3`` differs from the header.
- Health (remapped rows, retired pages, the PCIe link, NVLink) is read in
  ``nvml_health``, Xid events in ``nvml_events``.
- The GPUs may be read from several threads at once (one per GPU): the call counts
  are kept under a lock; everything else a reading changes belongs to its GPU.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import os
import threading
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import BackendUnavailableError
from ...model import (
    COMPUTE_MODES,
    MIG_ATTRIBUTE_FIELDS,
    MIG_USAGE_FIELDS,
    SAMPLE_GROUPS,
    STATIC_FIELDS,
    GpuStatic,
    HostInfo,
    HostProcess,
    HostUsage,
    MigInstance,
    MigUsage,
    ProcessDetails,
    ProcessType,
    RawGpuProcess,
    Reason,
    cuda_version_string,
    decode_throttle_reasons,
    fast_constructor,
    freeze,
    mig_profile,
)
from ..base import Backend, EventStream, NoEvents, ProcessReading, Reading, SignalOutcome
from ..host.pidmap import GpuPids, PidMapper
from ..host.processes import (
    HostUsageReader,
    PsutilInspector,
    current_username,
    in_foreign_pid_namespace,
    read_process_details,
)
from .events import Target, open_xid_events
from .gpm import GpmState, NvmlGpmReaders
from .headstart import finish, import_bindings
from .health import NvLinkState, NvmlHealthReaders, field_value

if TYPE_CHECKING:
    import pynvml  # noqa: F401 -- imported by import_pynvml, ctypes.util standing in; named here for the layer rules

__all__ = ["NvmlBackend", "import_pynvml"]

_UINT_MAX = 0xFFFFFFFF
MIB = 1 << 20
_LEGACY_V3_DRIVERS = ((535, 43), (535, 86))  # [from, to): _v3 used a 32-byte struct


# NVML's driver models (nvmlDriverModel_t) and virtualization modes (nvmlGpuVirtualizationMode_t), in words.
DRIVER_MODELS: dict[int, str] = {0: "WDDM", 1: "TCC", 2: "MCDM"}
VIRTUALIZATION_MODES: dict[int, str] = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}


def _named(names: dict[int, str], value: object) -> str:
    """The word for an NVML enum value; ValueError (the field is then "not supported") for one NVML never gives."""
    if type(value) is not int or value not in names:
        raise ValueError(f"unknown value {value!r}")
    return names[value]


def import_pynvml() -> Any:
    """Import the official bindings, or explain in one line why they are unusable.

    ``ctypes.util`` stands in while they are imported (:mod:`nvtopy.standin`): they import its
    ``find_library`` and never call it on Linux, and it imports subprocess, tempfile and shutil.
    """
    try:
        pynvml = import_bindings()
    except ImportError as exc:
        raise BackendUnavailableError(
            f"cannot import pynvml ({exc}): install nvidia-ml-py (not the PyPI package named 'pynvml')"
        ) from None
    if not hasattr(pynvml, "nvmlInit") or not hasattr(pynvml, "NVMLError"):
        raise BackendUnavailableError(
            "the installed 'pynvml' module is not NVIDIA's bindings: pip uninstall pynvml && pip install nvidia-ml-py"
        )
    return pynvml


class _LostError(Exception):
    """Internal: the GPU stopped answering (GpuIsLost); abandon this reading."""


class _NoHandleError(Exception):
    """Internal: no handle for this GPU right now, for ``reason``."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class _Gpu:
    """Per-GPU driver state: the handle, when to retry a lost one, and reusable call buffers."""

    __slots__ = (
        "backoff",
        "capacity",
        "clock_mem_due",
        "clock_mem_pstate",
        "covered",
        "gpm",
        "handle",
        "index",
        "list_due",
        "mig_gis",
        "mig_handles",
        "nvlink",
        "pstate",
        "reason",
        "retry_at",
        "utilization",
        "uuid",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.uuid: str | None = None
        self.reason: Reason | None = None  # why there is no handle
        self.retry_at = 0.0
        self.backoff = 0.0
        self.capacity = 32  # entries of the process and sample buffers; grows when the driver asks
        self.utilization: dict[int, Any] | None = {}  # last per-process samples (None: unsupported)
        self.covered: set[int] = set()  # the pids listed when they were read
        self.list_due: dict[ProcessType, float] = {}  # monotonic time an empty list is next read (EMPTY_LIST_RECHECK_S)
        self.pstate: int | None = None  # the P-state last read (None: not read, or unavailable)
        self.clock_mem_pstate: int | None = None  # the P-state when the memory clock was last read
        self.clock_mem_due = 0.0  # monotonic time the memory clock is read again whatever the P-state
        self.nvlink = NvLinkState()  # link count, last throughput counters, per-link static facts
        self.mig_handles: dict[int, Any] = {}  # MIG device index -> its handle (read with the static fields)
        self.mig_gis: dict[int, int | None] = {}  # MIG device index -> its GPU instance id (GPM samples per GI)
        self.gpm = GpmState()  # GPM support and sample buffers


class NvmlBackend(NvmlHealthReaders, NvmlGpmReaders, Backend):
    """Reads real GPUs through NVML. Construct once; reuse for every sample."""

    kind = "nvml"
    BACKOFF_START = 1.0
    BACKOFF_MAX = 60.0

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        inspector: PsutilInspector | None = None,
        clock: Callable[[], float] = time.monotonic,
        foreign_pids: bool | None = None,
        close_at_exit: bool = True,
        pid_mapper: PidMapper | None = None,
    ) -> None:
        """``close_at_exit=False``: the owner closes it, or nobody (see :meth:`close`).

        ``pid_mapper``: proves which foreign (host) pids are local processes (see ``pidmap``).
        """
        self._nvml = nvml if nvml is not None else import_pynvml()
        self._clock = clock
        self._inspector = inspector or PsutilInspector()
        self._usage = HostUsageReader()  # the host line: CPU share since the previous poll
        self._counts: collections.Counter[str] = collections.Counter()
        self._counts_lock = threading.Lock()  # GPU threads count at once; ``+=`` on a Counter is not atomic
        self._unsupported: set[tuple[int, str]] = set()
        self._missing: set[str] = set()  # functions this driver lacks (FunctionNotFound)
        self._proc_api = "v3"  # downgraded on FunctionNotFound: v3 -> v2 -> v1
        self._closed = False
        self._init()
        self._foreign = in_foreign_pid_namespace() if foreign_pids is None else foreign_pids
        self._mapper = pid_mapper if pid_mapper is not None else PidMapper() if self._foreign else None
        self._minors: dict[int, int | None] = {}
        try:
            count = self._call_global("nvmlDeviceGetCount")
        except self._nvml.NVMLError as exc:
            self.close()
            raise BackendUnavailableError(f"NVML cannot count GPUs: {exc}") from None
        self._gpus = [_Gpu(i) for i in range(count)]
        self._host = self._read_host()
        if _LEGACY_V3_DRIVERS[0] <= _version_tuple(self._host.driver_version) < _LEGACY_V3_DRIVERS[1]:
            self._proc_api = "v3-535"
        # The MPS client list walks down its own versions: a driver may lack one of its symbols only.
        self._mps_api = self._proc_api
        if close_at_exit:
            atexit.register(self.close)

    # ----------------------------------------------------------------- driver plumbing

    def _init(self) -> None:
        nvml = self._nvml
        try:
            self._count("nvmlInit")
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound:
            raise BackendUnavailableError(
                "NVIDIA driver library libnvidia-ml.so.1 not found: is the NVIDIA driver installed? "
                "(nvtopy --demo shows simulated GPUs)"
            ) from None
        except nvml.NVMLError_DriverNotLoaded:
            raise BackendUnavailableError(
                "the NVIDIA driver is not loaded (no nvidia kernel module): check 'lsmod | grep nvidia' "
                "(nvtopy --demo shows simulated GPUs)"
            ) from None
        except nvml.NVMLError_LibRmVersionMismatch:
            raise BackendUnavailableError(
                "NVIDIA driver/library version mismatch: the driver was updated without reloading "
                "the kernel module; reboot or reload nvidia modules"
            ) from None
        except nvml.NVMLError_NoPermission:
            raise BackendUnavailableError("no permission to open the NVIDIA driver (/dev/nvidia*)") from None
        except nvml.NVMLError as exc:
            raise BackendUnavailableError(f"cannot initialise NVML: {exc}") from None
        except OSError as exc:  # a broken library file
            raise BackendUnavailableError(f"cannot load the NVIDIA driver library: {exc}") from None

    def close(self) -> None:
        """``nvmlShutdown``, once. Blocks as long as the driver does.

        Never call it while another thread may be inside NVML. An owner that
        cannot be sure of that at exit (the monitor's poller thread in a call to a
        stuck driver) builds the backend with ``close_at_exit=False`` and skips
        it: the driver cleans up after an exiting process.
        """
        if self._closed:
            return
        self._closed = True
        inspector = getattr(self, "_inspector", None)  # none when opening failed
        if inspector is not None:
            inspector.close()  # the /proc files it keeps open
        for gpu in getattr(self, "_gpus", ()):  # none when opening failed
            self._gpm_free(gpu)
        try:
            self._count("nvmlShutdown")
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - best effort at exit; nothing useful to report
            pass
        finish(self._nvml)  # a one-shot's head start: its unclaimed samples and its nvmlInit (headstart.py)

    def abandon(self) -> None:
        """Never ``nvmlShutdown``, now or at exit: a thread is stuck in the driver (see :meth:`Backend.abandon`)."""
        self._closed = True
        atexit.unregister(self.close)

    def call_counts(self) -> dict[str, int]:
        with self._counts_lock:
            return dict(self._counts)

    def _count(self, name: str) -> None:
        """Count one driver call of ``name`` (benchmarks compare these); safe from any thread."""
        with self._counts_lock:
            self._counts[name] += 1

    def _call_global(self, name: str, *args: Any) -> Any:
        self._count(name)
        return getattr(self._nvml, name)(*args)

    def _handle(self, gpu: _Gpu) -> Any:
        """The GPU's handle, acquiring it (by UUID when known) if needed; raises _NoHandleError."""
        if gpu.handle is not None:
            return gpu.handle
        now = self._clock()
        if now < gpu.retry_at and gpu.reason is not None:
            raise _NoHandleError(gpu.reason)
        nvml = self._nvml
        try:
            if gpu.uuid:
                gpu.handle = self._call_global("nvmlDeviceGetHandleByUUID", gpu.uuid)
            else:
                gpu.handle = self._call_global("nvmlDeviceGetHandleByIndex", gpu.index)
        except nvml.NVMLError as exc:
            reason = self._reason(exc)
            gpu.reason = Reason.LOST if reason in (Reason.LOST, Reason.UNKNOWN) else reason
            gpu.backoff = min(self.BACKOFF_MAX, gpu.backoff * 2 or self.BACKOFF_START)
            gpu.retry_at = now + gpu.backoff
            raise _NoHandleError(gpu.reason) from None
        gpu.reason = None
        gpu.backoff = 0.0
        return gpu.handle

    def _drop_handle(self, gpu: _Gpu) -> None:
        """Forget a handle that failed with GpuIsLost: re-acquire it by UUID after the backoff."""
        gpu.handle = None
        gpu.reason = Reason.LOST
        gpu.clock_mem_pstate = None  # a re-acquired GPU's memory clock is read again, not assumed
        gpu.backoff = min(self.BACKOFF_MAX, gpu.backoff * 2 or self.BACKOFF_START)
        gpu.retry_at = self._clock() + gpu.backoff

    def _reason(self, exc: BaseException) -> Reason:
        nvml = self._nvml
        if isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)):
            return Reason.NOT_SUPPORTED
        if isinstance(exc, nvml.NVMLError_NoPermission):
            return Reason.NO_PERMISSION
        if isinstance(exc, nvml.NVMLError_GpuIsLost):
            return Reason.LOST
        return Reason.UNKNOWN

    def _query(self, gpu: _Gpu, key: str, name: str, *args: Any) -> tuple[Any, Reason | None]:
        """Call ``name(handle, *args)``. Returns (value, None) or (None, reason); raises _LostError.

        ``key`` identifies the (call, arguments) pair for remembering NotSupported.
        """
        if (gpu.index, key) in self._unsupported:
            return None, Reason.NOT_SUPPORTED
        handle = self._handle(gpu)
        self._count(name)
        try:
            return getattr(self._nvml, name)(handle, *args), None
        except self._nvml.NVMLError as exc:
            return None, self._failed(gpu, key, name, exc)
        except self._nvml.NVMLLibraryMismatchError:  # pynvml's wrapper for a missing versioned symbol
            self._missing.add(name)
            self._unsupported.add((gpu.index, key))
            return None, Reason.NOT_SUPPORTED

    def _failed(self, gpu: _Gpu, key: str, name: str, exc: BaseException) -> Reason:
        """Classify a failed call, remember what must not be asked again; raises _LostError."""
        reason = self._reason(exc)
        if reason is Reason.NOT_SUPPORTED:
            self._unsupported.add((gpu.index, key))
            if isinstance(exc, self._nvml.NVMLError_FunctionNotFound):
                self._missing.add(name)
        elif reason is Reason.LOST:
            self._drop_handle(gpu)
            raise _LostError from None
        elif isinstance(exc, self._nvml.NVMLError_Unknown):
            # A handle that says Unknown is re-acquired (by UUID) before its next use -- at once,
            # without the lost-GPU backoff, so the GPU's other fields are still read.
            gpu.handle = None
        return reason

    # ----------------------------------------------------------------- events

    def open_events(self) -> EventStream:
        """Xid critical errors of every GPU that reports them (see ``nvml_events``); never raises.

        Runs on the events thread while GPU threads read: it takes each GPU's current
        handle but never changes a GPU's state -- a GPU without one gets a handle of
        its own here (by UUID when known), or a note saying why it is not watched.
        """
        try:
            targets: list[Target] = []
            for gpu in self._gpus:
                handle = gpu.handle
                if handle is None:
                    try:
                        if gpu.uuid:
                            handle = self._call_global("nvmlDeviceGetHandleByUUID", gpu.uuid)
                        else:
                            handle = self._call_global("nvmlDeviceGetHandleByIndex", gpu.index)
                    except self._nvml.NVMLError as exc:
                        targets.append((gpu.index, None, self._reason(exc)))
                        continue
                targets.append((gpu.index, handle, None))
            return open_xid_events(self._nvml, targets, self._count, self._reason)
        except Exception as exc:  # noqa: BLE001 - a broken driver gives a stream that says why, not a crash
            return NoEvents(f"cannot watch Xid events: {exc}")

    # ----------------------------------------------------------------- host and static

    def _read_host(self) -> HostInfo:
        reasons: dict[str, Reason] = {}
        values: dict[str, str | None] = {}
        for field_name, call, convert in (
            ("driver_version", "nvmlSystemGetDriverVersion", _text),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion", lambda v: cuda_version_string(int(v))),
            ("nvml_version", "nvmlSystemGetNVMLVersion", _text),
        ):
            try:
                values[field_name] = convert(self._call_global(call))
            except self._nvml.NVMLError_NotFound:
                # nvidia-smi's "Not Found" CUDA version (R430 and older, or no libcuda beside the driver): none to show
                values[field_name] = None
                reasons[field_name] = Reason.NOT_AVAILABLE
            except self._nvml.NVMLError as exc:
                values[field_name] = None
                reasons[field_name] = self._reason(exc)
        return HostInfo(
            hostname=os.uname().nodename,
            backend=self.kind,
            user=current_username(),
            pid_namespace_foreign=self._foreign,
            unavailable=freeze(reasons),
            **values,
        )

    def host_usage(self) -> HostUsage:
        return self._usage.read()

    def host_info(self) -> HostInfo:
        return self._host

    def device_count(self) -> int:
        return len(self._gpus)

    def read_static(self, index: int) -> GpuStatic:
        gpu = self._gpus[index]
        values: dict[str, Any] = {}
        reasons: dict[str, Reason] = {}
        nvml = self._nvml

        def put(
            fields: str | tuple[str, ...], result: tuple[Any, Reason | None], convert: Callable[[Any], Any]
        ) -> None:
            names = (fields,) if isinstance(fields, str) else fields
            value, reason = result
            if reason is not None:
                for name in names:
                    reasons[name] = reason
                return
            try:
                converted = convert(value)
            except (TypeError, ValueError):
                # e.g. a temperature threshold of 0: the board has no such value. Not UNKNOWN, which
                # would make the collector re-read the static fields on every tick.
                for name in names:
                    reasons[name] = Reason.NOT_SUPPORTED
                return
            if isinstance(fields, str):
                values[fields] = converted
            else:
                values.update(zip(fields, converted, strict=False))

        try:
            put("uuid", self._query(gpu, "uuid", "nvmlDeviceGetUUID"), _text)
            gpu.uuid = values.get("uuid", gpu.uuid)
            if "uuid" in values:
                self._gpm_first(gpu, instances=False)  # the GPU's first GPM sample as early as can be (gpm.py)
            put("name", self._query(gpu, "name", "nvmlDeviceGetName"), _text)
            pci = self._query(gpu, "pci_v3", "nvmlDeviceGetPciInfo_v3")
            if pci[1] is Reason.NOT_SUPPORTED:
                pci = self._query(gpu, "pci", "nvmlDeviceGetPciInfo")
            put("bus_id", pci, lambda info: _text(info.busId))
            put("serial", self._query(gpu, "serial", "nvmlDeviceGetSerial"), _text)
            put("memory_total_bytes", self._query(gpu, "memory_v1", "nvmlDeviceGetMemoryInfo"), lambda m: int(m.total))
            put(
                "power_default_limit_w",
                self._query(gpu, "power_default", "nvmlDeviceGetPowerManagementDefaultLimit"),
                _milli,
            )
            put(
                ("power_min_limit_w", "power_max_limit_w"),
                self._query(gpu, "power_constraints", "nvmlDeviceGetPowerManagementLimitConstraints"),
                lambda pair: (_milli(pair[0]), _milli(pair[1])),
            )
            put(
                "temperature_slowdown_c",
                self._query(
                    gpu,
                    "threshold_slowdown",
                    "nvmlDeviceGetTemperatureThreshold",
                    nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
                ),
                _positive_int,
            )
            put(
                "temperature_shutdown_c",
                self._query(
                    gpu,
                    "threshold_shutdown",
                    "nvmlDeviceGetTemperatureThreshold",
                    nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
                ),
                _positive_int,
            )
            put(
                "clock_sm_max_mhz",
                self._query(gpu, "max_clock_sm", "nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM),
                int,
            )
            put(
                "clock_mem_max_mhz",
                self._query(gpu, "max_clock_mem", "nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_MEM),
                int,
            )
            put(
                "compute_capability",
                self._query(gpu, "compute_capability", "nvmlDeviceGetCudaComputeCapability"),
                lambda cc: f"{cc[0]}.{cc[1]}",
            )
            put(
                "driver_model",
                self._query(gpu, "driver_model", "nvmlDeviceGetDriverModel"),
                lambda pair: _named(DRIVER_MODELS, pair[0]),
            )
            put(
                "virtualization_mode",
                self._query(gpu, "virtualization_mode", "nvmlDeviceGetVirtualizationMode"),
                lambda mode: _named(VIRTUALIZATION_MODES, mode),
            )
            put(
                ("mig_mode", "mig_mode_pending"),
                self._query(gpu, "mig_mode", "nvmlDeviceGetMigMode"),
                lambda modes: (bool(modes[0]), bool(modes[1])),
            )
            put("fan_count", self._query(gpu, "fan_count", "nvmlDeviceGetNumFans"), int)
            for name, result in self._static_pcie_link(gpu).items():
                put(name, result, int)
            put("nvlink_count", self._nvlink_count(gpu, refresh=True), int)
            instances = self._mig_instances(gpu) if values.get("mig_mode") else ()
        except _NoHandleError as exc:
            for name in STATIC_FIELDS:
                if name not in values:
                    reasons[name] = exc.reason
            instances = ()
        except _LostError:
            for name in STATIC_FIELDS:
                if name not in values:
                    reasons[name] = Reason.LOST
            instances = ()
        for name in list(reasons):
            if name in values:
                del reasons[name]
        if "uuid" in values and reasons.get("name") is not Reason.LOST:
            self._gpm_first(gpu)  # its MIG instances' first GPM samples (the GPU's own is taken above)
        return GpuStatic(index=index, mig_instances=tuple(instances), unavailable=freeze(reasons), **values)

    def _mig_instances(self, gpu: _Gpu) -> list[MigInstance]:
        """The MIG devices of a MIG-enabled GPU, their handles kept for the per-poll reads.

        Empty slots raise NotFound and are skipped. Each value of an instance can
        fail on its own (N/A with its reason); the parent's handle failing raises.
        """
        gpu.mig_handles = {}
        gpu.mig_gis = {}
        count, reason = self._query(gpu, "mig_count", "nvmlDeviceGetMaxMigDeviceCount")
        if reason is not None or not count:
            return []
        nvml = self._nvml
        handle = self._handle(gpu)
        instances = []
        for slot in range(min(int(count), 64)):
            try:
                self._count("nvmlDeviceGetMigDeviceHandleByIndex")
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as exc:
                if self._reason(exc) is Reason.LOST:
                    self._failed(gpu, "mig_handle", "nvmlDeviceGetMigDeviceHandleByIndex", exc)
                continue
            gpu.mig_handles[slot] = mig
            instance = self._mig_instance(gpu, slot, mig)
            gpu.mig_gis[slot] = instance.gpu_instance_id
            instances.append(instance)
        return instances

    def _mig_instance(self, gpu: _Gpu, slot: int, mig: Any) -> MigInstance:
        values: dict[str, Any] = {}
        reasons: dict[str, Reason] = {}

        def ask(names: tuple[str, ...], call: str, convert: Callable[[Any], Any]) -> None:
            value, reason = self._mig_query(gpu, mig, call)
            if reason is None:
                try:
                    values.update(zip(names, convert(value), strict=True))
                    return
                except (TypeError, ValueError, AttributeError):
                    reason = Reason.UNKNOWN
            reasons.update(dict.fromkeys(names, reason))

        ask(("uuid",), "nvmlDeviceGetUUID", lambda v: (_text(v),))
        ask(("profile",), "nvmlDeviceGetName", lambda v: (mig_profile(_text(v)),))
        ask(("gpu_instance_id",), "nvmlDeviceGetGpuInstanceId", lambda v: (int(v),))
        ask(("compute_instance_id",), "nvmlDeviceGetComputeInstanceId", lambda v: (int(v),))
        ask(
            MIG_ATTRIBUTE_FIELDS,
            "nvmlDeviceGetAttributes",
            lambda a: (
                int(a.memorySizeMB) * MIB,
                int(a.multiprocessorCount),
                int(a.gpuInstanceSliceCount),
                int(a.sharedCopyEngineCount),
                int(a.sharedEncoderCount),
                int(a.sharedDecoderCount),
                int(a.sharedJpegCount),
                int(a.sharedOfaCount),
            ),
        )
        if values.get("profile") is None:
            values.pop("profile", None)
            reasons.setdefault("profile", Reason.UNKNOWN)
        return MigInstance(index=slot, unavailable=freeze(reasons), **values)

    def _mig_query(self, gpu: _Gpu, mig: Any, name: str, *args: Any) -> tuple[Any, Reason | None]:
        """``name(mig, *args)`` on a MIG device's handle: (value, None) or (None, reason); raises _LostError."""
        if (gpu.index, f"mig/{name}") in self._unsupported:
            return None, Reason.NOT_SUPPORTED
        self._count(name)
        try:
            return getattr(self._nvml, name)(mig, *args), None
        except self._nvml.NVMLError as exc:
            reason = self._reason(exc)
            if reason is Reason.LOST:
                self._drop_handle(gpu)
                raise _LostError from None
            if reason is Reason.NOT_SUPPORTED:
                self._unsupported.add((gpu.index, f"mig/{name}"))
            return None, reason
        except self._nvml.NVMLLibraryMismatchError:
            self._unsupported.add((gpu.index, f"mig/{name}"))
            return None, Reason.NOT_SUPPORTED

    # ----------------------------------------------------------------- dynamic fields

    def read_sample(self, index: int, groups: Collection[str]) -> Reading:
        gpu = self._gpus[index]
        reading = Reading()
        readers = self._group_readers()
        done: set[str] = set()
        try:
            # GPM before MIG: the first GPM read primes the instances' streams too (one wait for all).
            # Clocks after the P-state: a P-state change is what makes the memory clock worth re-reading.
            for group in sorted(groups, key=lambda g: (g != "gpm", g == "clocks")):
                readers[group](gpu, reading)
                done.add(group)
        except (_LostError, _NoHandleError) as exc:
            reason = exc.reason if isinstance(exc, _NoHandleError) else Reason.LOST
            reading.lost = reason is Reason.LOST
            gpu.clock_mem_pstate = None  # the snapshot forgets a lost GPU's values: read it again when back
            for group in groups:
                if group in done:
                    continue
                for name in SAMPLE_GROUPS[group]:
                    reading.values.pop(name, None)
                    reading.unavailable[name] = reason
        return reading

    def _group_readers(self) -> dict[str, Callable[[_Gpu, Reading], None]]:
        return {
            "memory": self._read_memory,
            "utilization": self._read_utilization,
            "codec": self._read_codec,
            "temperature": self._read_temperature,
            "fan": self._read_fan,
            "power": self._read_power,
            "power_limit": self._read_power_limit,
            "energy": self._read_energy,
            "pstate": self._read_pstate,
            "clocks": self._read_clocks,
            "ecc": self._read_ecc,
            "throttle": self._read_throttle,
            "pcie": self._read_pcie,
            "modes": self._read_modes,
            "remapped_rows": self._read_remapped_rows,
            "retired_pages": self._read_retired_pages,
            "pcie_link": self._read_pcie_link,
            "nvlink": self._read_nvlink,
            "mig": self._read_mig,
            "gpm": self._read_gpm,
        }

    @staticmethod
    def _store(
        reading: Reading, name: str, result: tuple[Any, Reason | None], convert: Callable[[Any], Any] = int
    ) -> None:
        value, reason = result
        if reason is not None:
            reading.unavailable[name] = reason
            return
        try:
            reading.values[name] = convert(value)
        except (TypeError, ValueError):
            reading.unavailable[name] = Reason.UNKNOWN

    def _read_memory(self, gpu: _Gpu, reading: Reading) -> None:
        # v2 separates driver-reserved memory from "used" (what nvidia-smi shows);
        # drivers before R510 lack it (FunctionNotFound), then v1 counts reserved as used.
        memory, reason = self._query(gpu, "memory_v2", "nvmlDeviceGetMemoryInfo", self._nvml.nvmlMemory_v2)
        if reason is None:
            reading.values["memory_used_bytes"] = int(memory.used)
            reading.values["memory_free_bytes"] = int(memory.free)
            reading.values["memory_reserved_bytes"] = int(memory.reserved)
            return
        if reason is not Reason.NOT_SUPPORTED:
            for name in ("memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes"):
                reading.unavailable[name] = reason
            return
        memory, reason = self._query(gpu, "memory_v1", "nvmlDeviceGetMemoryInfo")
        reading.unavailable["memory_reserved_bytes"] = Reason.NOT_SUPPORTED
        if reason is not None:
            reading.unavailable["memory_used_bytes"] = reading.unavailable["memory_free_bytes"] = reason
            return
        reading.values["memory_used_bytes"] = int(memory.used)
        reading.values["memory_free_bytes"] = int(memory.free)

    def _read_mig(self, gpu: _Gpu, reading: Reading) -> None:
        """Each MIG instance's memory, through its own handle: one call per instance, none without MIG."""
        self._handle(gpu)  # a GPU without a handle has no instance to read either
        usage = []
        for slot, mig in gpu.mig_handles.items():
            memory, reason = self._mig_query(gpu, mig, "nvmlDeviceGetMemoryInfo", self._nvml.nvmlMemory_v2)
            if reason is Reason.NOT_SUPPORTED:
                memory, reason = self._mig_query(gpu, mig, "nvmlDeviceGetMemoryInfo")
            values, reasons = self._mig_gpm(gpu, gpu.mig_gis.get(slot))
            if reason is not None:
                reasons.update(dict.fromkeys(MIG_USAGE_FIELDS, reason))
            else:
                values.update(memory_used_bytes=int(memory.used), memory_free_bytes=int(memory.free))
            usage.append(MigUsage(slot, unavailable=freeze(reasons), **values))
        reading.values["mig_usage"] = tuple(usage)

    def _read_utilization(self, gpu: _Gpu, reading: Reading) -> None:
        rates, reason = self._query(gpu, "utilization", "nvmlDeviceGetUtilizationRates")
        self._store(reading, "utilization_gpu_percent", (getattr(rates, "gpu", None), reason))
        self._store(reading, "utilization_memory_percent", (getattr(rates, "memory", None), reason))

    def _read_codec(self, gpu: _Gpu, reading: Reading) -> None:
        enc = self._query(gpu, "encoder", "nvmlDeviceGetEncoderUtilization")
        self._store(reading, "encoder_percent", enc, lambda pair: int(pair[0]))
        dec = self._query(gpu, "decoder", "nvmlDeviceGetDecoderUtilization")
        self._store(reading, "decoder_percent", dec, lambda pair: int(pair[0]))

    def _read_temperature(self, gpu: _Gpu, reading: Reading) -> None:
        # TemperatureV is the current API; drivers before it raise FunctionNotFound once.
        result = self._query(gpu, "temperature_v", "nvmlDeviceGetTemperatureV", self._nvml.NVML_TEMPERATURE_GPU)
        if result[1] is Reason.NOT_SUPPORTED:
            result = self._query(gpu, "temperature", "nvmlDeviceGetTemperature", self._nvml.NVML_TEMPERATURE_GPU)
        self._store(reading, "temperature_c", result)

    def _read_fan(self, gpu: _Gpu, reading: Reading) -> None:
        self._store(reading, "fan_percent", self._query(gpu, "fan", "nvmlDeviceGetFanSpeed"))

    def _read_power(self, gpu: _Gpu, reading: Reading) -> None:
        self._store(reading, "power_draw_w", self._query(gpu, "power", "nvmlDeviceGetPowerUsage"), _milli)

    def _read_power_limit(self, gpu: _Gpu, reading: Reading) -> None:
        result = self._query(gpu, "power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        self._store(reading, "power_limit_w", result, _milli)

    def _read_energy(self, gpu: _Gpu, reading: Reading) -> None:
        self._store(reading, "energy_mj", self._query(gpu, "energy", "nvmlDeviceGetTotalEnergyConsumption"))

    def _read_pstate(self, gpu: _Gpu, reading: Reading) -> None:
        value, reason = self._query(gpu, "pstate", "nvmlDeviceGetPerformanceState")
        if reason is None and not 0 <= int(value) <= 15:
            value, reason = None, Reason.UNKNOWN  # 32 = NVML_PSTATE_UNKNOWN
        gpu.pstate = int(value) if reason is None else None
        self._store(reading, "pstate", (value, reason))

    def _read_clocks(self, gpu: _Gpu, reading: Reading) -> None:
        """The SM clock at every read; the memory clock when the P-state moved, or every CLOCK_MEM_RECHECK_S.

        The memory clock is set by the P-state (the board's table: P0 full speed, P8
        idle), not by load within a P-state as the SM clock is. A memory clock not read
        keeps its last value in the snapshot (the collector folds readings). Without a
        known P-state it is read every time.
        """
        nvml = self._nvml
        self._store(reading, "clock_sm_mhz", self._query(gpu, "clock_sm", "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM))
        now = self._clock()
        if gpu.pstate is not None and gpu.pstate == gpu.clock_mem_pstate and now < gpu.clock_mem_due:
            return
        result = self._query(gpu, "clock_mem", "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM)
        self._store(reading, "clock_mem_mhz", result)
        if result[1] is None:
            gpu.clock_mem_pstate, gpu.clock_mem_due = gpu.pstate, now + CLOCK_MEM_RECHECK_S
        else:
            gpu.clock_mem_pstate = None  # a failed read is tried again next time

    def _read_ecc(self, gpu: _Gpu, reading: Reading) -> None:
        nvml = self._nvml
        counters = {
            "ecc_corrected_volatile": (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
            "ecc_uncorrected_volatile": (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
            "ecc_corrected_aggregate": (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC),
            "ecc_uncorrected_aggregate": (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
        }
        if (gpu.index, "ecc_fields") not in self._unsupported and self._read_ecc_fields(gpu, reading, counters):
            return
        modes, reason = self._query(gpu, "ecc_mode", "nvmlDeviceGetEccMode")
        self._store(reading, "ecc_mode", (modes, reason), lambda pair: bool(pair[0]))
        if reason is not None or not modes[0]:
            # ECC off (or unknown): the counters are meaningless, not zero.
            for name in counters:
                reading.unavailable[name] = reason or Reason.NOT_SUPPORTED
            return
        for name, (error_type, counter_type) in counters.items():
            self._store(reading, name, self._query(gpu, name, "nvmlDeviceGetTotalEccErrors", error_type, counter_type))

    def _read_ecc_fields(self, gpu: _Gpu, reading: Reading, counters: dict[str, tuple[int, int]]) -> bool:
        """ECC mode and the four counters in one nvmlDeviceGetFieldValues call (five otherwise).

        Returns False when the call is unavailable, so the caller falls back to the
        individual calls. Each entry carries its own return code.
        """
        nvml = self._nvml
        ids = {
            "ecc_mode": nvml.NVML_FI_DEV_ECC_CURRENT,
            "ecc_corrected_volatile": nvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
            "ecc_uncorrected_volatile": nvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
            "ecc_corrected_aggregate": nvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
            "ecc_uncorrected_aggregate": nvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
        }
        values, reason = self._query(gpu, "ecc_fields", "nvmlDeviceGetFieldValues", list(ids.values()))
        if reason is Reason.NOT_SUPPORTED:
            return False
        if reason is not None:
            for name in ids:
                reading.unavailable[name] = reason
            return True
        decoded: dict[str, int | None] = {}
        for name, entry in zip(ids, values, strict=True):
            if entry.nvmlReturn == nvml.NVML_SUCCESS:
                decoded[name] = field_value(entry, nvml)
            else:
                decoded[name] = None
                reading.unavailable[name] = self._reason(nvml.NVMLError(entry.nvmlReturn))
        mode = decoded.pop("ecc_mode")
        if mode is None:
            return True
        reading.values["ecc_mode"] = bool(mode)
        for name, value in decoded.items():
            if not mode:
                reading.unavailable[name] = Reason.NOT_SUPPORTED  # ECC off: no counters, not zero
            elif value is not None:
                reading.values[name] = value
        assert set(decoded) == set(counters)
        return True

    def _read_throttle(self, gpu: _Gpu, reading: Reading) -> None:
        result = self._query(gpu, "clock_events", "nvmlDeviceGetCurrentClocksEventReasons")
        if result[1] is Reason.NOT_SUPPORTED:
            result = self._query(gpu, "throttle", "nvmlDeviceGetCurrentClocksThrottleReasons")
        self._store(reading, "throttle_reasons", result, lambda mask: decode_throttle_reasons(int(mask)))

    def _read_pcie(self, gpu: _Gpu, reading: Reading) -> None:
        nvml = self._nvml
        for name, counter in (
            ("pcie_rx_bytes_per_s", nvml.NVML_PCIE_UTIL_RX_BYTES),
            ("pcie_tx_bytes_per_s", nvml.NVML_PCIE_UTIL_TX_BYTES),
        ):
            result = self._query(gpu, name, "nvmlDeviceGetPcieThroughput", counter)
            self._store(reading, name, result, lambda kib: int(kib) * 1024)

    def _read_modes(self, gpu: _Gpu, reading: Reading) -> None:
        self._store(reading, "persistence_mode", self._query(gpu, "persistence", "nvmlDeviceGetPersistenceMode"), bool)
        self._store(
            reading,
            "compute_mode",
            self._query(gpu, "compute_mode", "nvmlDeviceGetComputeMode"),
            lambda mode: COMPUTE_MODES.get(int(mode), str(mode)),
        )

    # ----------------------------------------------------------------- processes

    def read_processes(self, index: int, utilization: bool = True) -> ProcessReading:
        gpu = self._gpus[index]
        reading = ProcessReading()
        merged: dict[int, _Listed] = {}
        try:
            reasons = []
            now = time.monotonic()
            for kind, ptype in _PROCESS_LISTS:
                recheck = EMPTY_LIST_RECHECK_S.get(ptype)
                if recheck is not None and now < gpu.list_due.get(ptype, 0.0):
                    continue  # empty at the last look: asked again after its recheck delay
                entries, reason = self._process_list(gpu, kind)
                if recheck is not None:
                    # A failing graphics list is asked every time: with the compute list's failure it
                    # makes the GPU's processes unavailable (below). MPS's failure is no client to show.
                    waits = not entries and (reason is None or ptype is ProcessType.MPS)
                    gpu.list_due[ptype] = now + recheck if waits else 0.0
                if reason is not None:
                    if ptype is not ProcessType.MPS:  # no MPS list (old driver, no MPS): no client to show
                        reasons.append(reason)
                    continue
                for entry in entries:
                    _merge_process(merged, entry, ptype)
            if len(reasons) == 2:
                reading.unavailable = reasons[0]
                return reading
            if merged:
                if utilization:
                    gpu.covered = set(merged)
                    gpu.utilization = self._process_utilization(gpu, gpu.covered)
                samples, covered = gpu.utilization, gpu.covered
                # A pid that started since the last utilisation read has no figure yet: None, not 0.
                reading.processes = [
                    _raw_process(pid, listed, samples if pid in covered else None) for pid, listed in merged.items()
                ]
        except _NoHandleError as exc:
            reading.unavailable = exc.reason
            reading.lost = exc.reason is Reason.LOST
            return reading
        except _LostError:
            reading.unavailable = Reason.LOST
            reading.lost = True
            return reading
        return reading

    def _process_list(self, gpu: _Gpu, kind: str) -> tuple[list[Any], Reason | None]:
        """One NVML process list, walking down to older API versions the driver has.

        ``kind``: ``Compute`` and ``Graphics`` share one API version; ``MPSCompute``
        (the clients of an MPS server, which the other two lists do not show) has its own.
        """
        attribute = "_mps_api" if kind == "MPSCompute" else "_proc_api"
        while True:
            api = getattr(self, attribute)
            name = f"nvmlDeviceGet{kind}RunningProcesses" + {"v3": "_v3", "v3-535": "_v3", "v2": "_v2", "v1": ""}[api]
            entries, reason = self._direct_processes(gpu, name, api)
            older = {"v3": "v2", "v3-535": "v2", "v2": "v1"}.get(api)
            if reason is Reason.NOT_SUPPORTED and name in self._missing and older is not None:
                setattr(self, attribute, older)  # the driver predates this symbol: every GPU uses the older one
                continue
            return (entries if entries is not None else []), reason

    def _call_direct(self, gpu: _Gpu, name: str, fill: Callable[[Any, int], tuple[int, Any]]) -> Any:
        """Call a C symbol with a buffer of ``gpu.capacity`` entries: one call, not pynvml's two.

        ``fill(function, capacity)`` makes the call and returns (return code, result).
        On INSUFFICIENT_SIZE the buffer grows and the call is repeated. Raises NVMLError.
        """
        nvml = self._nvml
        function = nvml._nvmlGetFunctionPointer(name)
        while True:
            self._count(name)
            ret, result = fill(function, gpu.capacity)
            if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                break
            gpu.capacity = max(gpu.capacity * 2, int(result) * 2)
        if ret != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        return result

    def _direct_processes(self, gpu: _Gpu, name: str, api: str) -> tuple[list[Any] | None, Reason | None]:
        key = f"{name}:{api}"
        if (gpu.index, key) in self._unsupported or name in self._missing:  # a missing symbol: on every GPU
            return None, Reason.NOT_SUPPORTED
        handle = self._handle(gpu)
        struct = _ProcessInfoV1 if api == "v1" else _ProcessInfo535 if api == "v3-535" else _ProcessInfo

        def fill(function: Any, capacity: int) -> tuple[int, Any]:
            count = ctypes.c_uint(capacity)
            array = (struct * capacity)()
            ret = function(handle, ctypes.byref(count), array)
            if ret == self._nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                return ret, count.value
            return ret, [_ProcEntry.of(array[i]) for i in range(min(count.value, capacity))]

        try:
            return self._call_direct(gpu, name, fill), None
        except self._nvml.NVMLError as exc:
            return None, self._failed(gpu, key, name, exc)

    def _process_utilization(self, gpu: _Gpu, pids: set[int]) -> dict[int, Any] | None:
        """Latest per-process sample of the last second: ``{}`` = no samples (idle), ``None`` = unavailable."""
        key = name = "nvmlDeviceGetProcessUtilization"
        if (gpu.index, key) in self._unsupported:
            return None
        handle = self._handle(gpu)
        nvml = self._nvml
        since = ctypes.c_ulonglong(int((time.time() - 1.0) * 1_000_000))  # NVML timestamps: Unix microseconds
        struct = nvml.c_nvmlProcessUtilizationSample_t

        def fill(function: Any, capacity: int) -> tuple[int, Any]:
            count = ctypes.c_uint(capacity)
            array = (struct * capacity)()
            ret = function(handle, array, ctypes.byref(count), since)
            if ret == nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                return ret, count.value
            return ret, array[: min(count.value, capacity)]

        try:
            samples = self._call_direct(gpu, name, fill)
        except nvml.NVMLError_NotFound:
            return {}  # no sample newer than the timestamp: the processes were idle
        except nvml.NVMLError as exc:
            self._failed(gpu, key, name, exc)
            return None
        latest: dict[int, Any] = {}
        garbage: dict[int, Any] = {}
        for sample in sorted(map(_UtilSample.of, samples), key=lambda s: s.timeStamp):
            if sample.pid not in pids:
                continue  # pids no longer listed
            if sample.smUtil > 100 or sample.memUtil > 100:  # garbage values seen on some drivers
                garbage[sample.pid] = sample
                continue
            latest[sample.pid] = sample
        # A pid with garbage samples only keeps one: the model makes its figures N/A ("out of range"), never
        # the 0 % of a process without samples.
        for pid, sample in garbage.items():
            latest.setdefault(pid, sample)
        return latest

    # ----------------------------------------------------------------- host processes and signals

    def pids_are_foreign(self) -> bool:
        return self._foreign

    def inspect_processes(self, pids: Collection[int]) -> dict[int, HostProcess | None]:
        return self._inspector.inspect(pids)

    def map_host_pids(self, lists: dict[int, Collection[int]]) -> dict[int, int]:
        """Foreign pids only: host pid -> local pid, for the mappings ``pidmap`` proves; {} on the host.

        ``lists``: the host pids NVML lists, per GPU index. Asks NVML for each GPU's minor
        number (once) and, when a proof is due, for the accounting stats of unproven pids.
        """
        if not self._foreign or self._mapper is None:
            return {}
        mapper = self._mapper
        due = mapper.due()
        proven = mapper.mapped()
        gpus = []
        for index, pids in lists.items():
            gpu = self._gpus[index]
            starts = self._accounting_starts(gpu, [p for p in pids if p not in proven]) if due else None
            gpus.append(GpuPids(self._minor(gpu), tuple(sorted(pids)), starts))
        return {host: mapping.local_pid for host, mapping in mapper.update(gpus).items()}

    def _minor(self, gpu: _Gpu) -> int | None:
        """The N of the GPU's ``/dev/nvidiaN`` (asked until answered; NotSupported is remembered)."""
        if self._minors.get(gpu.index) is None:
            try:
                value, _reason = self._query(gpu, "minor", "nvmlDeviceGetMinorNumber")
            except (_LostError, _NoHandleError):
                value = None
            self._minors[gpu.index] = int(value) if value is not None else None
        return self._minors[gpu.index]

    def _accounting_starts(self, gpu: _Gpu, pids: Collection[int]) -> dict[int, int] | None:
        """Accounting start times (Unix us) of ``pids``; None when accounting is off or unsupported."""
        starts: dict[int, int] = {}
        for pid in pids:
            try:
                stats, reason = self._query(gpu, "accounting", "nvmlDeviceGetAccountingStats", pid)
            except (_LostError, _NoHandleError):
                return starts or None
            if reason is Reason.NOT_SUPPORTED:
                return starts or None  # accounting mode off (remembered for this GPU)
            start = getattr(stats, "startTime", None)
            if start:
                starts[pid] = int(start)
        return starts or None

    def send_signal(self, pid: int, create_time: float | None, signum: int) -> SignalOutcome:
        # Foreign pids: only the LOCAL pid of a proven mapping, still the process that was proven (start time).
        if self._foreign and (self._mapper is None or self._mapper.local(pid, create_time) is None):
            return SignalOutcome(
                False, f"pid {pid} belongs to another PID namespace (container) and is not mapped; nothing sent"
            )
        from ..host.signals import send_signal_checked  # psutil: imported when a signal is sent

        return send_signal_checked(pid, create_time, signum)

    def process_details(self, pid: int, create_time: float | None) -> ProcessDetails | None:
        """psutil's view of ``pid`` while it is the process started at ``create_time``.

        A pid of another PID namespace is never looked up here (it would name an unrelated
        local process), unless it is the local pid of a proven mapping, as for signals.
        """
        if self._foreign and (self._mapper is None or self._mapper.local(pid, create_time) is None):
            return None
        return read_process_details(pid, create_time)


# --------------------------------------------------------------------- helpers


def _version_tuple(version: str | None) -> tuple[int, ...]:
    """``"535.54.03"`` -> (535, 54, 3); unparseable parts end the tuple."""
    parts: list[int] = []
    for part in (version or "").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _milli(value: Any) -> float:
    return int(value) / 1000.0


def _positive_int(value: Any) -> int:
    number = int(value)
    if number <= 0:
        raise ValueError(number)
    return number


# Seconds between two reads of a GPU's MPS client list while it is empty. Most GPUs never run an
# MPS server, and the list is one more driver call per GPU per refresh; while a GPU has MPS
# clients it is read every refresh like the others, and a new one shows within this delay.
MPS_RECHECK_S = 10.0

# Seconds after an empty graphics list before it is read again. Compute (CUDA) processes are in
# the compute list, read every refresh; graphics contexts (X, Vulkan/OpenGL, EGL rendering) are
# rare on the GPUs nvtopy watches, and their list is one driver call per GPU per refresh. While a
# GPU has graphics processes the list is read every refresh; at the default 1 s refresh an empty
# one is read every other refresh, so a new graphics-only process shows within 2 s (nvitop's
# process list is itself up to 2 s old: its cache lives 2 s).
GRAPHICS_RECHECK_S = 1.5

# The lists read only now and then while they are empty; the others (compute) at every refresh.
EMPTY_LIST_RECHECK_S = {ProcessType.MPS: MPS_RECHECK_S, ProcessType.GRAPHICS: GRAPHICS_RECHECK_S}

# Seconds a memory clock is kept while the P-state stays the same (see NvmlBackend._read_clocks).
CLOCK_MEM_RECHECK_S = 10.0

# The lists a GPU's processes are read from; a pid in several is one row (see ProcessType.merge).
_PROCESS_LISTS = (
    ("Compute", ProcessType.COMPUTE),
    ("Graphics", ProcessType.GRAPHICS),
    ("MPSCompute", ProcessType.MPS),
)


class _ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_t of ``_v2`` and ``_v3`` (24 bytes)."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


class _ProcessInfo535(ctypes.Structure):
    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    )


class _ProcEntry(NamedTuple):
    """One process-list entry, decoded from whichever C layout the driver uses."""

    pid: int
    usedGpuMemory: int | None  # noqa: N815 - mirrors NVML's field names
    gpuInstanceId: int = _UINT_MAX  # noqa: N815
    computeInstanceId: int = _UINT_MAX  # noqa: N815

    @classmethod
    def of(cls, raw: Any) -> _ProcEntry:
        memory = int(raw.usedGpuMemory)
        return cls(
            int(raw.pid),
            None if memory == 0xFFFFFFFFFFFFFFFF else memory,  # NVML_VALUE_NOT_AVAILABLE
            int(getattr(raw, "gpuInstanceId", _UINT_MAX)),
            int(getattr(raw, "computeInstanceId", _UINT_MAX)),
        )


class _UtilSample(NamedTuple):
    """The numbers of one nvmlProcessUtilizationSample_t, read out once.

    Why: pynvml's structures decode bytes in a Python-level ``__getattribute__``, a
    microsecond for each field read; a sample's six fields are read several times
    (sorting, checks, the row), for every process every other second. ctypes' own
    getter (``object.__getattribute__``) costs a tenth of that.
    """

    pid: int
    timeStamp: int  # noqa: N815 - mirrors NVML's field names
    smUtil: int  # noqa: N815
    memUtil: int  # noqa: N815
    encUtil: int = 0  # noqa: N815
    decUtil: int = 0  # noqa: N815

    @classmethod
    def of(cls, raw: Any) -> _UtilSample:
        get = object.__getattribute__
        fields = [get(raw, "pid"), get(raw, "timeStamp"), get(raw, "smUtil"), get(raw, "memUtil")]
        for name in ("encUtil", "decUtil"):
            try:
                fields.append(get(raw, name))
            except AttributeError:
                fields.append(0)
        return cls(*fields)


def _instance_id(value: Any) -> int | None:
    if value is None:
        return None
    value = int(value)
    return None if value == _UINT_MAX else value


_Listed = NamedTuple(  # noqa: UP014 - the functional form: no annotation text compiled at import (procstat.Stat)
    "_Listed",
    [
        ("type", ProcessType),
        ("memory", int | None),
        ("gpu_instance_id", int | None),
        ("compute_instance_id", int | None),
    ],
)
_Listed.__doc__ = """A pid's entries in one GPU's process lists, merged: its :class:`RawGpuProcess` is made once,
with its utilisation (one frozen dataclass a process a poll, not two)."""


def _merge_process(merged: dict[int, _Listed], entry: Any, ptype: ProcessType) -> None:
    """Add one NVML list entry; a pid already seen on this GPU becomes C+G (memory: the larger)."""
    pid = int(entry.pid)
    memory = entry.usedGpuMemory
    memory = None if memory is None else int(memory)
    previous = merged.get(pid)
    if previous is None:
        merged[pid] = _Listed(
            ptype,
            memory,
            _instance_id(getattr(entry, "gpuInstanceId", None)),
            _instance_id(getattr(entry, "computeInstanceId", None)),
        )
        return
    memories = [m for m in (previous.memory, memory) if m is not None]
    merged[pid] = previous._replace(type=previous.type.merge(ptype), memory=max(memories) if memories else None)


def _raw_process(pid: int, listed: _Listed, utilization: dict[int, Any] | None) -> RawGpuProcess:
    """The pid's row as NVML lists it, with its utilisation: None where not supported (e.g. MIG), not 0.

    Built by :func:`~nvtopy.model.fast_constructor` (every field, in order; RawGpuProcess has no range rule):
    without the frozen dataclass ``__init__`` (an ``object.__setattr__`` a field), 1.45 -> 0.9 us a process.
    """
    make = fast_constructor(RawGpuProcess)
    if utilization is None:
        return make(pid, listed.type, listed.memory, None, None, None, None, *listed[2:])
    sample = utilization.get(pid)
    if sample is None:
        return make(pid, listed.type, listed.memory, 0, 0, 0, 0, *listed[2:])
    return make(
        pid,
        listed.type,
        listed.memory,
        int(sample.smUtil),
        int(sample.memUtil),
        int(getattr(sample, "encUtil", 0)),
        int(getattr(sample, "decUtil", 0)),
        *listed[2:],
    )

"""GPM through NVML: how much of a GPU really works (SM, tensor, DRAM activity), without DCGM.

NVML's GPU Performance Monitoring (Hopper and newer) answers with the average of
each metric between two samples the caller takes. So each GPU keeps two
sample buffers: each poll takes one sample (``nvmlGpmSampleGet``) into the
spare buffer and asks ``nvmlGpmMetricsGet`` for the pair (the previous sample,
this one); the two then swap, and this sample is the next pair's first. A MIG
instance has its own pair (``nvmlGpmMigSampleGet``).

The first sample is taken with the GPU's static fields -- right after its UUID,
before the other static calls -- so that the first poll can measure. NVML wants
the two samples of a pair more than 100 ms apart (:data:`FIRST_PAIR_S`): a poll
that comes sooner says N/A ("not available") and keeps its previous sample -- a
monitor or logger never waits (a slow read would count against the GPU's
deadline). A one-shot reading (``nvtopy --once``, ``nvtopy.snapshot()``: the
backend's ``one_shot``) waits out the rest instead, once, so that it shows
figures too; the earlier its first sample, the more of that wait the one-shot's
other work (the driver's other calls, ``/proc``, imports) fills.

Support is asked once per GPU (``nvmlGpmQueryDeviceSupport``): a board that
says no, a driver that lacks the calls (FunctionNotFound), or NotSupported from
any GPM call makes every GPM field ``NOT_SUPPORTED`` from then on, and nothing
is asked again. Each metric carries its own return code: one that fails is N/A
with its reason, the others are kept. A value is kept as the driver gave it:
one no GPU can have (NaN, an infinity, a negative or 250 % from a buggy driver or
a corrupt sample pair) is N/A "out of range" by :mod:`nvtopy.ranges`, never clamped.

Mixed into :class:`nvtopy.backends.nvml.backend.NvmlBackend` (like ``nvml_health``), so
it shares the call counting, the NotSupported memory and the lost-GPU handling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ...model import GPM_FIELDS, MIG_GPM_FIELDS, Reason
from ...ranges import within
from ..base import Reading
from .headstart import claim

__all__ = ["FIRST_PAIR_S", "GPM_METRICS", "GpmState", "NvmlGpmReaders"]

FIRST_PAIR_S = 0.105
"""Seconds between the first two samples of a GPU, measured from the first: NVML wants more than 100 ms
(``nvmlGpmMetricsGet`` fails on a shorter pair); 5 ms over it, for the clocks' granularity."""

# nvtopy's field -> NVML_GPM_METRIC_* id; rates are MiB/s in NVML, bytes/s here.
GPM_METRICS: dict[str, int] = {
    "graphics_active_percent": 1,  # GRAPHICS_UTIL
    "sm_active_percent": 2,  # SM_UTIL
    "sm_occupancy_percent": 3,  # SM_OCCUPANCY
    "tensor_active_percent": 5,  # ANY_TENSOR_UTIL
    "dram_active_percent": 10,  # DRAM_BW_UTIL
    "fp64_active_percent": 11,
    "fp32_active_percent": 12,
    "fp16_active_percent": 13,
    "gpm_pcie_tx_bytes_per_s": 20,  # PCIE_TX_PER_SEC
    "gpm_pcie_rx_bytes_per_s": 21,
    "gpm_nvlink_rx_bytes_per_s": 60,  # NVLINK_TOTAL_RX_PER_SEC
    "gpm_nvlink_tx_bytes_per_s": 61,
}
_DECODERS = tuple(range(30, 38))  # NVDEC_0..7_UTIL: decoder_active_percent is their mean over those the GPU has
_RATES = frozenset(name for name in GPM_METRICS if name.endswith("_bytes_per_s"))
_MIB = 1 << 20
_SUCCESS = 0
_MAX_MIG_INSTANCES = 64
assert set(GPM_METRICS) | {"decoder_active_percent"} == set(GPM_FIELDS)


class _GpuLike(Protocol):
    index: int
    gpm: GpmState
    mig_gis: dict[int, int | None]


class _Pair:
    """One stream of GPM samples (a GPU's, or a GPU instance's): the previous sample and a spare buffer."""

    __slots__ = ("previous", "spare", "taken_at")

    def __init__(self) -> None:
        self.previous: Any = None  # filled: the next pair's first sample
        self.spare: Any = None
        self.taken_at = 0.0  # monotonic time ``previous`` was taken


class GpmState:
    """One GPU's GPM state: whether it is supported, and its sample streams."""

    __slots__ = ("gpu", "instances", "request", "supported")

    def __init__(self) -> None:
        self.supported: bool | None = None  # None: not asked yet
        self.gpu = _Pair()
        self.instances: dict[int, _Pair] = {}  # GPU instance id -> its stream
        self.request: Any = None  # the reusable nvmlGpmMetricsGet_t (its ids filled once)

    def buffers(self) -> list[Any]:
        """Every sample buffer allocated for this GPU (freed at close)."""
        pairs = [self.gpu, *self.instances.values()]
        return [b for p in pairs for b in (p.previous, p.spare) if b is not None]


class NvmlGpmReaders:
    """The GPM readers of :class:`~nvtopy.backends.nvml.backend.NvmlBackend` (a mixin: see the module doc)."""

    # Provided by NvmlBackend.
    _nvml: Any
    _unsupported: set[tuple[int, str]]
    _missing: set[str]
    _handle: Callable[..., Any]
    _reason: Callable[[BaseException], Reason]
    _failed: Callable[..., Reason]
    _count: Callable[[str], None]
    one_shot: bool  # a single reading follows: wait for a measurable pair rather than say N/A

    # ----------------------------------------------------------------- support

    def _gpm_reason(self, gpu: _GpuLike) -> Reason | None:
        """None when GPM can be read on ``gpu``; else why not (asked of the driver once)."""
        state = gpu.gpm
        if state.supported is True:
            return None
        if state.supported is False or (gpu.index, "gpm") in self._unsupported:
            return Reason.NOT_SUPPORTED
        nvml = self._nvml
        handle = self._handle(gpu)
        self._count("nvmlGpmQueryDeviceSupport")
        try:
            answer = nvml.nvmlGpmQueryDeviceSupport(handle)
        except nvml.NVMLError as exc:
            reason = self._failed(gpu, "gpm", "nvmlGpmQueryDeviceSupport", exc)  # raises for a lost GPU
            if reason is Reason.NOT_SUPPORTED:
                state.supported = False
            return reason
        state.supported = bool(answer.isSupportedDevice)
        return None if state.supported else Reason.NOT_SUPPORTED

    # ----------------------------------------------------------------- the GPU

    def _read_gpm(self, gpu: _GpuLike, reading: Reading) -> None:
        """The interval's GPM figures of ``gpu``: one sample taken, the pair (previous, this) measured."""
        reason = self._gpm_reason(gpu)
        if reason is None:
            metrics = self._gpm_measure(gpu, gpu.gpm.gpu, None)
            if isinstance(metrics, dict):
                self._gpm_store(reading.values, reading.unavailable, metrics, GPM_FIELDS)
                return
            reason = metrics
        for name in GPM_FIELDS:
            reading.unavailable[name] = reason

    def _gpm_first(self, gpu: _GpuLike, *, instances: bool = True) -> None:
        """The first samples of a GPU and (``instances``) its MIG instances, taken with its static fields.

        The static read calls it twice: right after the UUID for the GPU's own stream (as early as
        possible: a one-shot reading's wait is counted from it), and at its end for the MIG
        instances, whose GPU instance ids it has read by then (see the module doc).
        """
        try:
            if self._gpm_reason(gpu) is not None:
                return
        except Exception:  # noqa: BLE001 - a lost GPU: its next read says so
            return
        # Only streams without a sample: a static re-read (the GPU came back) must not spend a pair.
        pair = gpu.gpm.gpu
        if pair.previous is None and not (self.one_shot and self._gpm_claim(gpu, pair)):
            self._gpm_step(gpu, pair, None)
        for gi in self._gpu_instance_ids(gpu) if instances else ():
            pair = gpu.gpm.instances.setdefault(gi, _Pair())
            if pair.previous is None:
                self._gpm_step(gpu, pair, gi)

    def _gpm_claim(self, gpu: _GpuLike, pair: _Pair) -> bool:
        """A one-shot's first sample of ``gpu`` from the program's head start, if it took one (:mod:`.headstart`)."""
        first = claim(self._nvml, gpu.index, self._handle(gpu))
        if first is None:
            return False
        pair.previous, pair.taken_at = first
        return True

    def _gpm_measure(self, gpu: _GpuLike, pair: _Pair, gi: int | None) -> dict[int, tuple[int, float]] | Reason:
        """The metrics of ``pair``'s interval up to now, or why there are none this poll."""
        if pair.previous is None:
            first = self._gpm_step(gpu, pair, gi)
            if first is not None:
                return first
        age = time.monotonic() - pair.taken_at
        if age < FIRST_PAIR_S:
            if not self.one_shot:
                return Reason.NOT_AVAILABLE  # too soon for a pair: the previous sample is kept for the next poll
            time.sleep(FIRST_PAIR_S - age)
        metrics = self._gpm_step(gpu, pair, gi)
        return Reason.NOT_AVAILABLE if metrics is None else metrics

    def _gpm_step(self, gpu: _GpuLike, pair: _Pair, gi: int | None) -> dict[int, tuple[int, float]] | Reason | None:
        """Take one sample into ``pair``; the pair's metrics ({id: (return code, value)}), a Reason, or None (first).

        ``gi``: the GPU instance of a MIG stream (None: the whole GPU).
        """
        nvml = self._nvml
        name = "nvmlGpmSampleGet" if gi is None else "nvmlGpmMigSampleGet"
        try:
            if pair.spare is None:
                self._count("nvmlGpmSampleAlloc")
                pair.spare = nvml.nvmlGpmSampleAlloc()
            handle = self._handle(gpu)
            self._count(name)
            if gi is None:
                nvml.nvmlGpmSampleGet(handle, pair.spare)
            else:
                nvml.nvmlGpmMigSampleGet(handle, gi, pair.spare)
        except nvml.NVMLError as exc:
            reason = self._failed(gpu, "gpm" if gi is None else f"gpm-mig/{gi}", name, exc)
            if reason is Reason.NOT_SUPPORTED and gi is None:
                gpu.gpm.supported = False
            return reason
        if pair.previous is None:
            pair.previous, pair.spare = pair.spare, None
            pair.taken_at = time.monotonic()
            return None
        request = self._gpm_request(gpu)
        request.sample1, request.sample2 = pair.previous, pair.spare
        pair.previous, pair.spare = pair.spare, pair.previous  # this sample starts the next pair
        pair.taken_at = time.monotonic()
        self._count("nvmlGpmMetricsGet")
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError as exc:
            return self._failed(gpu, "gpm-metrics", "nvmlGpmMetricsGet", exc)
        # object.__getattribute__: pynvml's structures decode bytes in a Python-level __getattribute__,
        # a microsecond for each of these ~90 numeric reads per GPU per poll; ctypes' own getter is ten times less.
        get = object.__getattribute__
        return {
            int(get(m, "metricId")): (int(get(m, "nvmlReturn")), float(get(m, "value")))
            for m in get(request, "metrics")[: get(request, "numMetrics")]
        }

    def _gpm_request(self, gpu: _GpuLike) -> Any:
        """The GPU's nvmlGpmMetricsGet_t with every metric id nvtopy reads (built once, reused)."""
        state = gpu.gpm
        if state.request is None:
            nvml = self._nvml
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            ids = [*GPM_METRICS.values(), *_DECODERS]
            request.numMetrics = len(ids)
            for slot, metric in enumerate(ids):
                request.metrics[slot].metricId = metric
            state.request = request
        return state.request

    def _gpm_store(
        self,
        values: dict[str, Any],
        unavailable: dict[str, Reason],
        metrics: dict[int, tuple[int, float]],
        fields: tuple[str, ...],
    ) -> None:
        """Each field's value from its metric's answer, or why it has none (per-metric return codes)."""
        for name in fields:
            if name == "decoder_active_percent":
                decoders = [value for code, value in (metrics.get(m, (-1, 0.0)) for m in _DECODERS) if code == _SUCCESS]
                if decoders and not all(within(name, value) for value in decoders):
                    unavailable[name] = Reason.OUT_OF_RANGE  # their mean could hide one no decoder gives
                elif decoders:
                    values[name] = sum(decoders) / len(decoders)
                else:
                    unavailable[name] = Reason.NOT_SUPPORTED
                continue
            code, value = metrics.get(GPM_METRICS[name], (-1, 0.0))
            if code != _SUCCESS:
                unavailable[name] = self._code_reason(code)
                continue
            # As the driver gave it: one outside its range (NaN, inf, negative, 250 %) is N/A, said by the model.
            values[name] = value * _MIB if name in _RATES else value

    def _code_reason(self, code: int) -> Reason:
        """A per-metric return code as a reason (the codes of nvml.h)."""
        nvml = self._nvml
        if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND, -1):
            return Reason.NOT_SUPPORTED
        if code == nvml.NVML_ERROR_NO_PERMISSION:
            return Reason.NO_PERMISSION
        return Reason.UNKNOWN

    # ----------------------------------------------------------------- MIG instances

    def _gpu_instance_ids(self, gpu: _GpuLike) -> list[int]:
        """The GPU instance ids of ``gpu``'s MIG devices (several compute instances share one)."""
        return sorted({gi for gi in gpu.mig_gis.values() if gi is not None})[:_MAX_MIG_INSTANCES]

    def _mig_gpm(self, gpu: _GpuLike, gi: int | None) -> tuple[dict[str, Any], dict[str, Reason]]:
        """One GPU instance's GPM figures (values, reasons) for its MigUsage."""
        values: dict[str, Any] = {}
        reasons: dict[str, Reason] = {}
        reason = self._gpm_reason(gpu) if gi is not None else Reason.UNKNOWN
        if reason is None and (gpu.index, f"gpm-mig/{gi}") in self._unsupported:
            reason = Reason.NOT_SUPPORTED
        if reason is None:
            pair = gpu.gpm.instances.setdefault(gi, _Pair())  # type: ignore[arg-type]
            metrics = self._gpm_measure(gpu, pair, gi)
            if isinstance(metrics, Reason):
                reason = metrics
            else:
                self._gpm_store(values, reasons, metrics, MIG_GPM_FIELDS)
                return values, reasons
        return values, dict.fromkeys(MIG_GPM_FIELDS, reason)

    def _gpm_free(self, gpu: _GpuLike) -> None:
        """Free ``gpu``'s sample buffers (at close; best effort)."""
        for buffer in gpu.gpm.buffers():
            try:
                self._count("nvmlGpmSampleFree")
                self._nvml.nvmlGpmSampleFree(buffer)
            except Exception:  # noqa: BLE001 - closing: nothing useful to report
                pass

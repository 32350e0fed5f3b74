"""``nvtopy.track``: what a block of training code did to the GPUs it uses.

    with nvtopy.track("epoch") as t:
        train_one_epoch()
    print(t.report.format())

    @nvtopy.track()
    def evaluate(): ...

For each GPU this process uses: memory used at start, at end and at its peak
during the call, mean utilisation, mean SM active and tensor active (NVML's GPM:
Hopper and newer; None elsewhere, never 0), this process's own GPU memory as
NVML sees it, and -- when the job's torch has initialised CUDA -- torch's allocated,
reserved and peak-allocated memory, so the gap between what tensors use, what
the caching allocator holds and what the driver counts is visible.

How it stays cheap: the start and end readings are taken on the caller's
thread (a handful of NVML calls, no psutil); in between, the API's one sampling
thread (:func:`nvtopy.api.state.watch`) samples every active track's GPUs
(nested tracks share its snapshots) and exits when the last track ends. It is
meant for spans (an epoch, an evaluation, a few steps); for a permanent
per-step view use :class:`nvtopy.Sampler`.

MIG: when the job runs on a MIG slice (:func:`nvtopy.job_gpus` names it), the
report is the slice's -- ``GPU 1 MIG 1/2/0 3g.40gb``, the instance's memory used
and total, its processes, its own SM and tensor activity -- with the GPU's own
readings (utilisation, which the driver does not report under MIG) beside it. The background sampling reads whole
GPUs and picks each track's slice from them, so tracks on different slices of
one GPU share its snapshots.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..model import GpuState, MigState, Snapshot
from ..render.units import NA, fmt_bytes, short_name
from ..selection import select_gpus
from .state import shared_collector, unwatch, watch
from .torchmem import cuda_torch, torch_memory
from .usage import activity, activity_text, job_gpus

__all__ = ["GpuUsage", "TorchUsage", "TrackReport", "track"]

log = logging.getLogger("nvtopy.track")
F = TypeVar("F", bound=Callable[..., Any])
_GROUPS = frozenset({"memory", "utilization", "gpm"})  # "gpm": SM and tensor activity (Hopper and newer)
_ENDS = frozenset({"energy"})  # read at the start and the end only: the energy counter is a running total


@dataclass(frozen=True, slots=True)
class TorchUsage:
    """torch.cuda memory of one device during the call, in bytes."""

    ordinal: int
    allocated_start_bytes: int
    allocated_end_bytes: int
    allocated_peak_bytes: int  # exact when the call set a new max_memory_allocated, else the sampled peak
    reserved_start_bytes: int
    reserved_end_bytes: int
    reserved_peak_bytes: int


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One GPU during the call. ``None`` = NVML did not report it."""

    index: int
    uuid: str | None
    name: str | None
    memory_total_bytes: int | None
    memory_used_start_bytes: int | None
    memory_used_end_bytes: int | None
    memory_used_peak_bytes: int | None
    utilization_mean_percent: float | None
    process_memory_start_bytes: int | None  # this process, as NVML counts it (context and libraries included)
    process_memory_end_bytes: int | None
    process_memory_peak_bytes: int | None
    samples: int  # background samples taken during the call (besides start and end)
    torch: TorchUsage | None = None
    # On a MIG slice: the MIG device (the memory figures above are then the instance's, not the GPU's).
    mig_uuid: str | None = None
    mig_label: str | None = None  # "1/2/0": GPU, GPU instance, compute instance
    mig_profile: str | None = None  # "3g.40gb"
    # GPM (Hopper and newer): mean share of SMs / of tensor pipes active over the samples; a MIG slice's own.
    # None: not measured (before Hopper, not permitted), never 0.
    sm_active_mean_percent: float | None = None
    tensor_active_mean_percent: float | None = None
    # Energy the GPU used during the call, from NVML's total-energy counter (Volta and newer); the whole
    # GPU's, also on a MIG slice (the slices share it). None: no counter, or it went back (driver reload).
    energy_joules: float | None = None

    @property
    def label(self) -> str:
        """``GPU 1`` or, on a MIG slice, ``GPU 1 MIG 1/2/0 3g.40gb``."""
        if self.mig_label is None:
            return f"GPU {self.index}"
        return f"GPU {self.index} MIG {self.mig_label}" + (f" {self.mig_profile}" if self.mig_profile else "")


@dataclass(frozen=True, slots=True)
class TrackReport:
    """What :func:`track` measured; also available as a dict (:meth:`as_dict`) and a text (:meth:`format`)."""

    name: str
    started_at: float  # Unix time
    wall_seconds: float
    gpus: tuple[GpuUsage, ...]
    error: str | None = None  # the exception that ended the call, if any (it still propagates)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def format(self) -> str:
        head = f"nvtopy.track {self.name}: {self.wall_seconds:.3f} s"
        if self.error:
            head += f" (raised {self.error})"
        if not self.gpus:
            return head + ", no GPU in use"
        lines = [head]
        for gpu in self.gpus:
            name = short_name(gpu.name)
            head = f"{gpu.label} ({name})" if gpu.mig_label is not None else f"{gpu.label} {name}"
            line = (
                f"  {head}: memory {fmt_bytes(gpu.memory_used_start_bytes)}"
                f" -> {fmt_bytes(gpu.memory_used_end_bytes)} (peak {fmt_bytes(gpu.memory_used_peak_bytes)}"
                f" of {fmt_bytes(gpu.memory_total_bytes)}), util "
                + (NA if gpu.utilization_mean_percent is None else f"{gpu.utilization_mean_percent:.0f}%")
            )
            work = activity_text(gpu.sm_active_mean_percent, gpu.tensor_active_mean_percent)
            if work is not None:
                line += f", {work}"
            if gpu.energy_joules is not None:
                line += f", energy {_fmt_energy(gpu.energy_joules)}" + (" (whole GPU)" if gpu.mig_label else "")
            if gpu.process_memory_peak_bytes is not None:
                line += (
                    f"; this process {fmt_bytes(gpu.process_memory_start_bytes)}"
                    f" -> {fmt_bytes(gpu.process_memory_end_bytes)} (peak {fmt_bytes(gpu.process_memory_peak_bytes)})"
                )
            if gpu.torch is not None:
                t = gpu.torch
                line += (
                    f"; torch cuda:{t.ordinal} allocated {fmt_bytes(t.allocated_start_bytes)}"
                    f" -> {fmt_bytes(t.allocated_end_bytes)} (peak {fmt_bytes(t.allocated_peak_bytes)}),"
                    f" reserved {fmt_bytes(t.reserved_end_bytes)} (peak {fmt_bytes(t.reserved_peak_bytes)})"
                )
            lines.append(line)
        return "\n".join(lines)


def _fmt_energy(joules: float) -> str:
    """``812 J``, ``45.3 kJ``, ``2.41 kWh``: what a call used, in the unit that reads best."""
    if joules < 10_000:
        return f"{joules:.0f} J"
    if joules < 3_600_000:
        return f"{joules / 1000:.1f} kJ"
    return f"{joules / 3_600_000:.2f} kWh"


def _energy(before: GpuState | None, after: GpuState) -> float | None:
    """Joules between two readings of the total-energy counter (mJ); None without one, or if it went back."""
    if before is None:
        return None
    start, end = before.sample.energy_mj, after.sample.energy_mj
    if start is None or end is None or end < start:
        return None
    return (end - start) / 1000.0


def _max(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


Target = tuple[int, str | None]  # (NVML index, MIG device UUID or None for the whole GPU)


def _part(gpu: GpuState, mig_uuid: str | None) -> tuple[MigState | None, bool]:
    """The MIG device ``mig_uuid`` of ``gpu`` (None, True: the whole GPU; None, False: the slice is not there)."""
    if mig_uuid is None:
        return None, True
    wanted = mig_uuid.lower()
    found = next((m for m in gpu.mig if m.instance.uuid and m.instance.uuid.lower() == wanted), None)
    return found, found is not None


class _Mean:
    """A running mean of readings that may be missing: None until one is there."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, value: float | None) -> None:
        if value is not None:
            self.total += value
            self.count += 1

    def plus(self, value: float | None) -> float | None:
        """The mean with ``value`` (the end reading) added, without keeping it."""
        total, count = self.total, self.count
        if value is not None:
            total, count = total + value, count + 1
        return total / count if count else None


def _activity(gpu: GpuState, mig_uuid: str | None) -> tuple[float | None, float | None]:
    """SM and tensor activity of the GPU, or of its MIG device ``mig_uuid`` (None, None: not there)."""
    mig, found = _part(gpu, mig_uuid)
    return activity(gpu, mig) if found else (None, None)


def _memory_used(gpu: GpuState, mig_uuid: str | None) -> int | None:
    """Memory used of the GPU, or of its MIG device ``mig_uuid``."""
    mig, found = _part(gpu, mig_uuid)
    if not found:
        return None
    return gpu.sample.memory_used_bytes if mig is None else mig.memory_used_bytes


class _Accumulator:
    """The running peaks and sums of one active track (a :class:`~nvtopy.api.state.Watcher`).

    Keyed by target: a whole GPU, or one MIG device of it. The sampling thread
    reads whole GPUs (``indices``); each sample's slice is picked from them.
    """

    def __init__(self, targets: Sequence[Target], ordinals: dict[int, int], interval: float) -> None:
        self.targets = tuple(targets)
        self.indices = tuple(dict.fromkeys(index for index, _ in self.targets))
        self.groups = (
            (_GROUPS | {"mig"}) if any(uuid for _, uuid in self.targets) else _GROUPS
        )  # "mig": per-instance memory
        self.ordinals = ordinals  # NVML index -> torch ordinal
        self.interval = interval
        self.lock = threading.Lock()
        self.peak: dict[Target, int] = {}
        self.own_peak: dict[Target, int] = {}
        self.util_sum: dict[Target, float] = dict.fromkeys(self.targets, 0.0)
        self.util_count: dict[Target, int] = dict.fromkeys(self.targets, 0)
        self.sm_active: dict[Target, _Mean] = {target: _Mean() for target in self.targets}
        self.tensor_active: dict[Target, _Mean] = {target: _Mean() for target in self.targets}
        self.samples = 0
        self.torch_peak: dict[int, tuple[int, int]] = {}  # ordinal -> (allocated, reserved)

    def observe(self, snapshot: Snapshot) -> None:
        torch_samples = _torch_samples(self.ordinals.values())
        me = os.getpid()
        by_index = {gpu.index: gpu for gpu in snapshot.gpus}
        with self.lock:
            self.samples += 1
            for target in self.targets:
                gpu = by_index.get(target[0])
                if gpu is None:
                    continue
                used = _memory_used(gpu, target[1])
                if used is not None:
                    self.peak[target] = max(self.peak.get(target, used), used)
                util = gpu.sample.utilization_gpu_percent
                if util is not None:
                    self.util_sum[target] += util
                    self.util_count[target] += 1
                sm, tensor = _activity(gpu, target[1])
                self.sm_active[target].add(sm)
                self.tensor_active[target].add(tensor)
                for proc in gpu.processes:
                    if proc.pid == me and proc.gpu_memory_bytes is not None:
                        old = self.own_peak.get(target, proc.gpu_memory_bytes)
                        self.own_peak[target] = max(old, proc.gpu_memory_bytes)
            for ordinal, (allocated, reserved) in torch_samples.items():
                old_a, old_r = self.torch_peak.get(ordinal, (allocated, reserved))
                self.torch_peak[ordinal] = (max(old_a, allocated), max(old_r, reserved))


def _torch_samples(ordinals: Iterable[int]) -> dict[int, tuple[int, int]]:
    torch = cuda_torch()
    if torch is None:
        return {}
    return {o: (int(torch.cuda.memory_allocated(o)), int(torch.cuda.memory_reserved(o))) for o in ordinals}


class track:  # noqa: N801 - used like a function: ``with nvtopy.track(...)`` / ``@nvtopy.track()``
    """Measure a block (context manager) or every call of a function (decorator).

    Args:
        name: shown in the report; a decorated function's qualified name by default.
        interval: seconds between background samples during the call (peaks, mean utilisation).
        gpus: the GPUs to watch: NVML indices, or anything ``nvtopy.snapshot(gpus=...)`` takes
            (a MIG device's UUID watches that slice); default: the GPUs and MIG devices this
            process uses (:func:`nvtopy.job_gpus`).
        logger: where the report goes (``logging.getLogger("nvtopy.track")`` by default, at ``level``).
        callback: called with the :class:`TrackReport` instead of logging it.
        level: the logging level of the report.

    The report is ``t.report`` (context manager) or ``function.last_report`` (decorator).
    An exception inside the block still produces a report (with ``error`` set) and propagates.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        interval: float = 0.1,
        gpus: Sequence[int | str] | None = None,
        logger: logging.Logger | None = None,
        callback: Callable[[TrackReport], None] | None = None,
        level: int = logging.INFO,
    ) -> None:
        self.name = name
        self.interval = max(0.01, interval)
        self.gpus = list(gpus) if gpus is not None else None
        self.logger = logger or log
        self.callback = callback
        self.level = level
        self.report: TrackReport | None = None
        self._start: dict[str, Any] = {}

    # ----------------------------------------------------------------- context manager

    def __enter__(self) -> track:
        targets: list[Target]
        if self.gpus is not None:
            targets, ordinals = _targets(self.gpus), {}
        else:
            job = job_gpus()
            limited = job.selection.instances
            targets = [(i, uuid) for i in job.indices for uuid in limited.get(i, (None,))]
            ordinals = dict(job.torch_ordinals)
        indices = list(dict.fromkeys(index for index, _ in targets))
        self._accumulator = _Accumulator(targets, ordinals, self.interval)
        start = self._read(indices, ordinals, self._accumulator.groups | _ENDS)
        self._start = {"indices": indices, "ordinals": ordinals, "reading": start, "wall": time.time()}
        self._t0 = time.perf_counter()
        watch(self._accumulator)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        elapsed = time.perf_counter() - self._t0
        unwatch(self._accumulator)
        try:
            end = self._read(self._start["indices"], self._start["ordinals"], self._accumulator.groups | _ENDS)
            self.report = self._build(elapsed, end, None if exc_type is None else exc_type.__name__)
            self._emit(self.report)
        except Exception:  # measuring must never break the measured code
            self.logger.warning("nvtopy.track %s: could not read the GPUs at the end", self.name, exc_info=True)

    # ----------------------------------------------------------------- decorator

    def __call__(self, function: F) -> F:
        name = self.name or function.__qualname__

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tracker = track(
                name,
                interval=self.interval,
                gpus=self.gpus,
                logger=self.logger,
                callback=self.callback,
                level=self.level,
            )
            try:
                with tracker:
                    return function(*args, **kwargs)
            finally:
                wrapper.last_report = tracker.report  # type: ignore[attr-defined]

        wrapper.last_report = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    # ----------------------------------------------------------------- internals

    @staticmethod
    def _read(indices: list[int], ordinals: dict[int, int], groups: frozenset[str]) -> dict[str, Any]:
        with shared_collector("track") as collector:
            collector.select(indices)  # whole GPUs: each target's slice is picked from them
            snapshot = collector.collect(groups, join=False, process_utilization=False)
        torch = cuda_torch()
        memory = {o: torch_memory(torch, o) for o in ordinals.values()} if torch is not None else {}
        return {"snapshot": snapshot, "torch": memory}

    def _build(self, elapsed: float, end: dict[str, Any], error: str | None) -> TrackReport:
        start = self._start["reading"]
        acc = self._accumulator
        me = os.getpid()
        first = {g.index: g for g in start["snapshot"].gpus}
        last = {g.index: g for g in end["snapshot"].gpus}
        usages = []
        for target in acc.targets:
            index, mig_uuid = target
            gpu = last.get(index)
            if gpu is None:
                continue
            mig, found = _part(gpu, mig_uuid)
            if not found:  # the slice is gone (MIG reconfigured): nothing to report of it
                continue
            before = first.get(index)
            used_start = _memory_used(before, mig_uuid) if before else None
            used_end = _memory_used(gpu, mig_uuid)
            with acc.lock:
                util_sum, util_count = acc.util_sum.get(target, 0.0), acc.util_count.get(target, 0)
                peak, own_peak, samples = acc.peak.get(target), acc.own_peak.get(target), acc.samples
                sm_mean, tensor_mean = acc.sm_active[target], acc.tensor_active[target]
                sm_end, tensor_end = _activity(gpu, mig_uuid)  # the end reading, as for utilisation
                sm_active, tensor_active = sm_mean.plus(sm_end), tensor_mean.plus(tensor_end)
            if gpu.sample.utilization_gpu_percent is not None:  # the end reading covers the call's last moments
                util_sum += gpu.sample.utilization_gpu_percent
                util_count += 1
            own_start = _own(before, me)
            own_end = _own(gpu, me)
            usages.append(
                GpuUsage(
                    index=index,
                    uuid=gpu.static.uuid,
                    name=gpu.static.name,
                    memory_total_bytes=gpu.static.memory_total_bytes if mig is None else mig.memory_total_bytes,
                    memory_used_start_bytes=used_start,
                    memory_used_end_bytes=used_end,
                    memory_used_peak_bytes=_max(used_start, used_end, peak),
                    utilization_mean_percent=util_sum / util_count if util_count else None,
                    process_memory_start_bytes=own_start,
                    process_memory_end_bytes=own_end,
                    process_memory_peak_bytes=_max(own_start, own_end, own_peak),
                    samples=samples,
                    torch=self._torch_usage(index, start["torch"], end["torch"]),
                    mig_uuid=None if mig is None else mig.instance.uuid,
                    mig_label=None if mig is None else mig.label,
                    mig_profile=None if mig is None else mig.instance.profile,
                    sm_active_mean_percent=sm_active,
                    tensor_active_mean_percent=tensor_active,
                    energy_joules=_energy(before, gpu),
                )
            )
        return TrackReport(
            name=self.name or "block",
            started_at=self._start["wall"],
            wall_seconds=elapsed,
            gpus=tuple(usages),
            error=error,
        )

    def _torch_usage(self, index: int, start: dict[int, Any], end: dict[int, Any]) -> TorchUsage | None:
        ordinal = self._start["ordinals"].get(index)
        if ordinal is None or ordinal not in start or ordinal not in end:
            return None
        before, after = start[ordinal], end[ordinal]
        with self._accumulator.lock:
            sampled_alloc, sampled_reserved = self._accumulator.torch_peak.get(ordinal, (0, 0))
        peak = max(before.allocated_bytes, after.allocated_bytes, sampled_alloc)
        if after.peak_allocated_bytes > before.peak_allocated_bytes:
            peak = max(peak, after.peak_allocated_bytes)  # the call set a new high-water mark: exact
        return TorchUsage(
            ordinal=ordinal,
            allocated_start_bytes=before.allocated_bytes,
            allocated_end_bytes=after.allocated_bytes,
            allocated_peak_bytes=peak,
            reserved_start_bytes=before.reserved_bytes,
            reserved_end_bytes=after.reserved_bytes,
            reserved_peak_bytes=max(before.reserved_bytes, after.reserved_bytes, sampled_reserved),
        )

    def _emit(self, report: TrackReport) -> None:
        """To the callback; else to the logger; else, when no logging is set up at all, to stderr.

        Why stderr: Python drops INFO records when nothing configured logging, so a
        decorated function would report nothing visible -- the hand-written timing
        decorators nvtopy replaces printed, and so does this then.
        """
        if self.callback is not None:
            self.callback(report)
        elif self.logger.isEnabledFor(self.level) and self.logger.hasHandlers():
            self.logger.log(self.level, "%s", report.format())
        elif not self.logger.hasHandlers():
            print(report.format(), file=sys.stderr, flush=True)


def _targets(gpus: Sequence[int | str]) -> list[Target]:
    """``track(gpus=...)`` as targets: plain indices as given (as before), else the selection rules of ``--gpus``."""
    if all(isinstance(g, int) for g in gpus):
        return [(int(g), None) for g in dict.fromkeys(gpus)]
    with shared_collector("track") as collector:
        selection = select_gpus(collector.statics(), list(gpus))
    limited = selection.instances
    return [(i, uuid) for i in selection.indices for uuid in limited.get(i, (None,))]


def _own(gpu: GpuState | None, pid: int) -> int | None:
    if gpu is None:
        return None
    for proc in gpu.processes:
        if proc.pid == pid:
            return proc.gpu_memory_bytes
    return None

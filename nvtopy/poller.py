"""Turning a backend into snapshots: the collector (one read) and the poller (a thread of reads).

Why here and not in the backends: static fields are cached, slow fields read on
a slower cadence, history kept, and host processes joined in one place, the same
for NVML and simulated GPUs. Views only ever see the immutable
:class:`~nvtopy.model.Snapshot` this module publishes.

Threading: :class:`Poller` owns a daemon thread that does every backend call.
Callers read ``poller.latest`` or subscribe a callback (called on the poller
thread -- a UI must hand the snapshot over to its own thread, e.g. with Textual's
thread-safe ``post_message``). ``stop()`` returns at once: the thread waits on an
event, never on ``time.sleep``.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .backends.base import Backend, ProcessReading, Reading
from .model import (
    ALL_GROUPS,
    SAMPLE_GROUPS,
    GpuHistory,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HostProcess,
    RawGpuProcess,
    Reason,
    Snapshot,
    freeze,
    sample_from_fields,
)

__all__ = ["FAST_GROUPS", "SLOW_GROUPS", "Collector", "Poller"]

log = logging.getLogger(__name__)

# Read every tick: what a user watches change second by second.
FAST_GROUPS: frozenset[str] = frozenset(
    {"memory", "utilization", "temperature", "power", "pstate", "clocks", "throttle"}
)
# Read every ``slow_interval``: values that change rarely or are costly to read.
SLOW_GROUPS: frozenset[str] = ALL_GROUPS - FAST_GROUPS

MIN_INTERVAL = 0.1
HISTORY_LENGTH = 300


@dataclass(slots=True)
class _GpuMemo:
    """What the collector remembers of one GPU between reads."""

    static: GpuStatic
    values: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, Reason] = field(default_factory=dict)
    history: collections.deque[tuple[Any, ...]] = field(default_factory=collections.deque)
    never_read: set[str] = field(default_factory=lambda: set(ALL_GROUPS))


class Collector:
    """Reads snapshots from a backend: static fields once, the requested groups each call.

    Not thread-safe by design: one thread (the poller's, or the caller's for
    one-shot reads) owns a collector and its backend.
    """

    def __init__(self, backend: Backend, indices: Sequence[int] | None = None, history: int = HISTORY_LENGTH) -> None:
        self.backend = backend
        self.host = backend.host_info()
        self._history_length = max(1, history)
        self._memos: dict[int, _GpuMemo] = {}
        self._statics: list[GpuStatic] | None = None
        self._sequence = 0
        self.indices: list[int] = list(indices) if indices is not None else list(range(backend.device_count()))

    def statics(self) -> list[GpuStatic]:
        """Static fields of every GPU of the backend (read once; used for GPU selection)."""
        if self._statics is None:
            self._statics = [self._memo(i).static for i in range(self.backend.device_count())]
        return self._statics

    def _memo(self, index: int) -> _GpuMemo:
        memo = self._memos.get(index)
        if memo is None:
            memo = _GpuMemo(self.backend.read_static(index), history=collections.deque(maxlen=self._history_length))
            self._memos[index] = memo
        return memo

    def select(self, indices: Iterable[int]) -> None:
        """Poll only these GPUs from the next collection on."""
        self.indices = list(indices)

    def collect(
        self, groups: Collection[str] = ALL_GROUPS, *, processes: bool = True, interval: float | None = None
    ) -> Snapshot:
        """Read ``groups`` of every selected GPU (others keep their last values) and join processes."""
        backend = self.backend
        started_wall = backend.now()
        started = time.perf_counter()
        readings: list[tuple[_GpuMemo, Reading, ProcessReading | None]] = []
        for index in self.indices:
            memo = self._memo(index)
            wanted = set(groups) | memo.never_read
            reading = backend.read_sample(index, wanted)
            memo.never_read -= wanted
            if not reading.lost and _static_incomplete(memo.static):
                memo.static = backend.read_static(index)  # the GPU came back: its static fields can be read now
                self._statics = None
            proc_reading = backend.read_processes(index) if processes else None
            readings.append((memo, reading, proc_reading))

        host = self._join_host(readings) if processes else {}
        gpus = []
        now = backend.now()
        for memo, reading, proc_reading in readings:
            sample = self._merge(memo, reading, started_wall)
            rows: tuple[GpuProcess, ...] = ()
            rows_reason: Reason | None = None
            if proc_reading is not None:
                rows = self._rows(memo.static, proc_reading.processes, host, now)
                rows_reason = proc_reading.unavailable
            history = self._record(memo, sample)
            gpus.append(GpuState(memo.static, sample, rows, rows_reason, history))
        self._sequence += 1
        return Snapshot(
            timestamp=started_wall,
            host=self.host,
            gpus=tuple(gpus),
            sequence=self._sequence,
            interval=interval,
            collect_seconds=time.perf_counter() - started,
        )

    def _join_host(self, readings: Iterable[tuple[_GpuMemo, Reading, ProcessReading | None]]) -> dict[int, Any]:
        if self.backend.pids_are_foreign():
            return {}
        pids = {p.pid for _, _, pr in readings if pr is not None for p in pr.processes}
        return self.backend.inspect_processes(pids) if pids else {}

    def _rows(
        self, static: GpuStatic, raws: list[RawGpuProcess], host: dict[int, HostProcess | None], now: float
    ) -> tuple[GpuProcess, ...]:
        foreign = self.backend.pids_are_foreign()
        rows = []
        for raw in raws:
            reasons: dict[str, Reason] = {}
            if raw.gpu_memory_bytes is None:
                reasons["gpu_memory_bytes"] = Reason.NOT_AVAILABLE
            if raw.sm_percent is None:
                reasons["sm_percent"] = Reason.NOT_SUPPORTED
            if foreign:
                for name in ("user", "command", "cpu_percent", "host_memory_bytes", "running_seconds"):
                    reasons[name] = Reason.NO_PERMISSION
                rows.append(_row(static, raw, None, now, reasons, foreign=True))
                continue
            info = host.get(raw.pid)
            if info is None:
                continue  # the process exited between NVML's list and the host lookup
            reasons.update(info.unavailable)
            rows.append(_row(static, raw, info, now, reasons, foreign=False))
        return tuple(rows)

    @staticmethod
    def _merge(memo: _GpuMemo, reading: Reading, timestamp: float) -> GpuSample:
        """Fold a reading into the GPU's last known values (groups not read keep theirs)."""
        values, reasons = memo.values, memo.reasons
        for name, value in reading.values.items():
            values[name] = value
            reasons.pop(name, None)
        for name, reason in reading.unavailable.items():
            values.pop(name, None)
            reasons[name] = reason
        if reading.lost:
            # Nothing read before the loss is current any more.
            for group_fields in SAMPLE_GROUPS.values():
                for name in group_fields:
                    values.pop(name, None)
                    reasons[name] = Reason.LOST
        return sample_from_fields(timestamp, reading.lost, values, reasons)

    def _record(self, memo: _GpuMemo, sample: GpuSample) -> GpuHistory:
        used, total = sample.memory_used_bytes, memo.static.memory_total_bytes
        memo.history.append(
            (
                sample.timestamp,
                sample.utilization_gpu_percent,
                sample.utilization_memory_percent,
                100.0 * used / total if used is not None and total else None,
                sample.power_draw_w,
                sample.temperature_c,
            )
        )
        columns = tuple(zip(*memo.history, strict=True))
        return GpuHistory(*columns)  # type: ignore[arg-type]


def _static_incomplete(static: GpuStatic) -> bool:
    return any(reason in (Reason.LOST, Reason.UNKNOWN) for reason in static.unavailable.values())


def _row(
    static: GpuStatic,
    raw: RawGpuProcess,
    info: HostProcess | None,
    now: float,
    reasons: dict[str, Reason],
    *,
    foreign: bool,
) -> GpuProcess:
    create_time = info.create_time if info else None
    running = max(0.0, now - create_time) if create_time else None
    return GpuProcess(
        gpu_index=static.index,
        gpu_uuid=static.uuid,
        pid=raw.pid,
        type=raw.type,
        gpu_memory_bytes=raw.gpu_memory_bytes,
        sm_percent=raw.sm_percent,
        memory_percent=raw.memory_percent,
        encoder_percent=raw.encoder_percent,
        decoder_percent=raw.decoder_percent,
        user=info.user if info else None,
        uid=info.uid if info else None,
        name=info.name if info else None,
        command=info.command if info else None,
        cpu_percent=info.cpu_percent if info else None,
        host_memory_bytes=info.host_memory_bytes if info else None,
        create_time=create_time,
        running_seconds=running,
        status=info.status if info else "unknown",
        foreign=foreign,
        unavailable=freeze(reasons),
    )


SnapshotCallback = Callable[[Snapshot], None]
T = TypeVar("T")


class Poller:
    """Collects snapshots on a background thread at an adjustable interval."""

    def __init__(
        self,
        backend: Backend,
        *,
        interval: float = 1.0,
        indices: Sequence[int] | None = None,
        history: int = HISTORY_LENGTH,
        slow_interval: float = 5.0,
        processes: bool = True,
        collector: Collector | None = None,
    ) -> None:
        self.collector = collector or Collector(backend, indices, history)
        self.backend = backend
        self._interval = max(MIN_INTERVAL, interval)
        self._slow_interval = slow_interval
        self._processes = processes
        self._subscribers: list[SnapshotCallback] = []
        self._wake = threading.Event()
        self._stopping = False
        self._paused = False
        self._thread: threading.Thread | None = None
        self._requests: collections.deque[tuple[Callable[[], Any], Future[Any]]] = collections.deque()
        self.latest: Snapshot | None = None
        self.last_error: BaseException | None = None
        self.polls = 0
        self.poll_seconds = 0.0  # total time spent collecting (for benchmarks)

    # ----------------------------------------------------------------- control

    @property
    def interval(self) -> float:
        return self._interval

    def set_interval(self, seconds: float) -> None:
        """Change the interval; takes effect at once (the current wait is cut short)."""
        self._interval = max(MIN_INTERVAL, seconds)
        self._wake.set()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def refresh(self) -> None:
        """Collect now instead of at the end of the current wait (also while paused: one snapshot)."""
        self._refresh_once = True
        self._wake.set()

    def submit(self, function: Callable[[], T]) -> Future[T]:
        """Run ``function`` on the poller thread (which owns the backend) between two polls.

        Why: a backend is used by one thread only; actions such as sending a
        signal go through here instead of racing the poll. Without a running
        thread the function runs at once on the caller's thread. A poll follows,
        so the effect shows up in the next snapshot.
        """
        future: Future[T] = Future()
        if not self.running:
            _run_into(function, future)
            return future
        self._requests.append((function, future))
        self._refresh_once = True
        self._wake.set()
        return future

    def _drain_requests(self) -> None:
        while self._requests:
            function, future = self._requests.popleft()
            _run_into(function, future)

    def subscribe(self, callback: SnapshotCallback) -> None:
        self._subscribers.append(callback)

    def start(self) -> Poller:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nvtopy-poller", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 2.0) -> None:
        """Stop the thread; returns as soon as any backend call in progress ends."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Poller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- the thread

    _refresh_once = False

    def poll_once(self, *, slow: bool = True) -> Snapshot:
        """Collect one snapshot on the calling thread and publish it (used by the thread and by tests)."""
        groups = ALL_GROUPS if slow else FAST_GROUPS
        started = time.perf_counter()
        snapshot = self.collector.collect(groups, processes=self._processes, interval=self._interval)
        self.poll_seconds += time.perf_counter() - started
        self.polls += 1
        self.latest = snapshot
        for callback in list(self._subscribers):
            try:
                callback(snapshot)
            except Exception:
                log.exception("snapshot subscriber failed")
        return snapshot

    def _run(self) -> None:
        next_slow = 0.0
        while not self._stopping:
            self._drain_requests()
            timeout: float | None = None
            if not self._paused or self._refresh_once:
                self._refresh_once = False
                started = time.monotonic()
                slow = started >= next_slow
                try:
                    self.poll_once(slow=slow)
                    self.last_error = None
                except Exception as exc:  # a backend bug must not kill the monitor silently
                    log.exception("poll failed")
                    self.last_error = exc
                if slow:
                    next_slow = started + self._slow_interval
                if not self._paused:
                    timeout = max(0.0, self._interval - (time.monotonic() - started))
            self._wake.wait(timeout)
            self._wake.clear()
        self._drain_requests()


def _run_into(function: Callable[[], T], future: Future[T]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(function())
    except Exception as exc:  # noqa: BLE001 - handed to whoever waits on the future
        future.set_exception(exc)

"""One read of a backend into an immutable snapshot: the collector.

Why a class of its own (and no thread here): ``nvtopy --once``, the Python API
and the poller thread all collect the same way -- static fields read once and
cached, the requested field groups read and merged with the last values of the
others, bounded history kept, host processes joined -- and a one-shot command
should not pay for importing threads, futures or logging it does not use.

Not thread-safe by design: one thread (the poller's, or the caller's for
one-shot reads) owns a collector and its backend.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from ..backends.base import Backend, ProcessReading, Reading
from ..backends.pidmap import unmapped_hint
from ..model import (
    ALL_GROUPS,
    HISTORY_LENGTH,
    SAMPLE_GROUPS,
    GpuHistory,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HistoryBuffer,
    HostProcess,
    RawGpuProcess,
    Reason,
    Snapshot,
    freeze,
    sample_from_fields,
)

__all__ = ["HINT_MIN_BYTES", "Collector", "processes_hint"]


class _GpuMemo:
    """What the collector remembers of one GPU between reads."""

    __slots__ = ("history", "never_read", "reasons", "static", "values")

    def __init__(self, static: GpuStatic, history: int) -> None:
        self.static = static
        self.values: dict[str, Any] = {}
        self.reasons: dict[str, Reason] = {}
        self.history = HistoryBuffer(history)
        self.never_read: set[str] = set(ALL_GROUPS)


class Collector:
    """Reads snapshots from a backend: static fields once, the requested groups each call.

    Not thread-safe by design: one thread (the poller's, or the caller's for
    one-shot reads) owns a collector and its backend.
    """

    def __init__(self, backend: Backend, indices: Sequence[int] | None = None, history: int = HISTORY_LENGTH) -> None:
        self.backend = backend
        self.host = backend.host_info()
        self._history_length = history
        self._memos: dict[int, _GpuMemo] = {}
        self._statics: list[GpuStatic] | None = None
        self._sequence = 0
        self._host_map: dict[int, int] = {}  # foreign pids: host pid -> proven local pid (backends.pidmap)
        self.indices: list[int] = list(indices) if indices is not None else list(range(backend.device_count()))

    def statics(self) -> list[GpuStatic]:
        """Static fields of every GPU of the backend (read once; used for GPU selection)."""
        if self._statics is None:
            self._statics = [self._memo(i).static for i in range(self.backend.device_count())]
        return self._statics

    def _memo(self, index: int) -> _GpuMemo:
        memo = self._memos.get(index)
        if memo is None:
            memo = _GpuMemo(self.backend.read_static(index), self._history_length)
            self._memos[index] = memo
        return memo

    def select(self, indices: Iterable[int]) -> None:
        """Poll only these GPUs from the next collection on."""
        self.indices = list(indices)

    def collect(
        self,
        groups: Collection[str] = ALL_GROUPS,
        *,
        processes: bool = True,
        process_utilization: bool = True,
        join: bool = True,
        interval: float | None = None,
    ) -> Snapshot:
        """Read ``groups`` of every selected GPU (others keep their last values) and join processes.

        ``process_utilization=False`` reuses the per-process utilisation last read
        (it costs an NVML call per GPU and changes less than the process list).
        ``join=False`` lists processes as NVML reports them, without asking the host
        who they are (no psutil work: the Python API only needs its own pid's memory).
        """
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
            proc_reading = backend.read_processes(index, utilization=process_utilization) if processes else None
            readings.append((memo, reading, proc_reading))

        host = self._join_host(readings) if processes and join else None
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
            hint = None if proc_reading is None else processes_hint(sample, rows, rows_reason)
            if proc_reading is not None and self.backend.pids_are_foreign():
                hint = unmapped_hint(rows) or hint
            gpus.append(GpuState(memo.static, sample, rows, rows_reason, history, processes_hint=hint))
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
            # Host pids: only those proven to be local processes are joined, as their local pids.
            lists = {m.static.index: {p.pid for p in pr.processes} for m, _, pr in readings if pr is not None}
            self._host_map = self.backend.map_host_pids(lists) if any(lists.values()) else {}
            local = set(self._host_map.values())
            return self.backend.inspect_processes(local) if local else {}
        pids = {p.pid for _, _, pr in readings if pr is not None for p in pr.processes}
        return self.backend.inspect_processes(pids) if pids else {}

    def _rows(
        self, static: GpuStatic, raws: list[RawGpuProcess], host: dict[int, HostProcess | None] | None, now: float
    ) -> tuple[GpuProcess, ...]:
        """Join NVML's rows with the host's facts; ``host=None``: no join, every row kept as NVML gave it."""
        foreign = self.backend.pids_are_foreign()
        rows = []
        for raw in raws:
            reasons: dict[str, Reason] = {}
            if raw.gpu_memory_bytes is None:
                reasons["gpu_memory_bytes"] = Reason.NOT_AVAILABLE
            if raw.sm_percent is None:
                reasons["sm_percent"] = Reason.NOT_SUPPORTED
            local_pid = self._host_map.get(raw.pid) if foreign and host is not None else None
            if local_pid is not None and host.get(local_pid) is not None:  # type: ignore[union-attr]
                info = host[local_pid]  # type: ignore[index]
                reasons.update(info.unavailable)
                row = _row(static, dataclasses.replace(raw, pid=local_pid), info, now, reasons, foreign=False)
                rows.append(dataclasses.replace(row, host_pid=raw.pid))
                continue
            if foreign:
                for name in ("user", "command", "cpu_percent", "host_memory_bytes", "running_seconds"):
                    reasons[name] = Reason.NO_PERMISSION
                rows.append(_row(static, raw, None, now, reasons, foreign=True))
                continue
            if host is None:
                rows.append(_row(static, raw, None, now, reasons, foreign=False))
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

    @staticmethod
    def _record(memo: _GpuMemo, sample: GpuSample) -> GpuHistory:
        memo.history.append(memo.static, sample)
        return memo.history.history()


HINT_MIN_BYTES = 2 << 30  # less can be the driver's own (memory info v1 counts its reservation as used)


def processes_hint(sample: GpuSample, rows: Sequence[GpuProcess], reason: Reason | None) -> str | None:
    """A sentence for a GPU whose memory is in use while no process shows: where they may be.

    Not when the list itself is unavailable (``processes_unavailable`` says why).
    """
    used = sample.memory_used_bytes
    if rows or reason is not None or sample.lost or used is None or used < HINT_MIN_BYTES:
        return None
    return (
        f"{used / 2**30:.1f} GiB in use but no process is visible: processes of other containers "
        "or VMs, MPS clients the driver does not list, or no permission to see them"
    )


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
        owner=info.owner if info else None,
        ns_pid=info.ns_pid if info else None,
        cuda_visible_devices=info.cuda_visible_devices if info else None,
    )

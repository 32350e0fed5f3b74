"""``nvtopy replay FILE``: a recording shown in the monitor, with pause, step and speed.

A recording is the JSON lines ``nvtopy record`` (or ``nvtopy log --format jsonl
--processes``) writes. Each line is decoded by the JSON contract's decoder
(:mod:`nvtopy.formats.contract_decoder`, beside its encoder) into the same immutable
:class:`~nvtopy.model.Snapshot` the live monitor draws, so what is replayed is exactly
what was recorded (health, GPM, MIG included); this module is the source around it:
the file, its index, the pace, and what the monitor adds to a snapshot (the
sparklines' history rebuilt from the lines before it, the process hints, the charts).

Why an index, not a list of snapshots: a recording may be gigabytes, and a
parsed snapshot takes several times the memory of its line. One pass checks
every line and keeps only where each valid one starts (and its time); a
snapshot is parsed again when it is shown, a few are kept for stepping back
and forth, and the sparklines' history is rebuilt from the lines before it.
The history charts (:mod:`~nvtopy.sources.timeline`) are filled in that one
pass: every GPU's values of every line, in min/mean/max buckets of 1 s, 10 s
and 1 min, about 120 bytes per recorded second per GPU; a snapshot's charts read
them as of its time, so stepping anywhere costs nothing.

A file cut short (a logger killed mid-line) or damaged is read up to its first
bad line; the monitor shows what is valid and says where and why it stopped.
Whatever a line holds (JSON nested a million deep, a number of 5,000 digits,
values of the wrong type, a line of gigabytes), it is damage, never a crash.
"""

from __future__ import annotations

import collections
import logging
import operator
import os
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, overload

from ..backends.host.pidmap import unmapped_hint
from ..boundedfile import FileRefusedError, open_regular
from ..errors import NvtopyError
from ..formats.contract_decoder import RecordedGpu, gpu_from_dict, recorded_gpus, recorded_timestamp, snapshot_from_dict
from ..jsondecode import JsonRefusedError, decode_json
from ..model import HISTORY_LENGTH, GpuSample, GpuState, GpuStatic, HistoryBuffer, Snapshot
from ..textsafe import excerpt as _excerpt  # outside text in a one-line message: visible, and short
from ..textsafe import safe_text
from .base import SnapshotSource
from .collector import processes_hint
from .timeline import Timeline

__all__ = [
    "IndexingStoppedError",
    "RecordedSnapshots",
    "Recording",
    "ReplayPlayer",
    "load_recording",
    "replayed_snapshot",
]

log = logging.getLogger(__name__)

CACHE = 32  # parsed snapshots kept: the one shown and its neighbours, so stepping back is instant
MAX_LINE = 64 << 20  # bytes; a longer line is damage (a recording's lines are kilobytes)


class _DamageError(Exception):
    """Why a line is no snapshot: one short sentence, safe for a terminal."""


# ----------------------------------------------------------------- a line as the monitor replays it


def _take_history(buffers: dict[int, HistoryBuffer], static: GpuStatic, sample: GpuSample) -> HistoryBuffer:
    """Add the sample to its GPU's history (:data:`~nvtopy.model.HISTORY_LENGTH` points per chart)."""
    buffer = buffers.get(static.index)
    if buffer is None:
        buffer = buffers[static.index] = HistoryBuffer(HISTORY_LENGTH)
    buffer.append(static, sample)
    return buffer


def _replayed(
    history: dict[int, HistoryBuffer], timelines: dict[int, Timeline] | None
) -> Callable[[RecordedGpu], GpuState]:
    """Each decoded GPU as the monitor shows it: its sparklines carried across lines, the live monitor's hints."""

    def state(gpu: RecordedGpu) -> GpuState:
        static, sample, processes, reason = gpu.static, gpu.sample, gpu.processes, gpu.processes_unavailable
        buffer = _take_history(history, static, sample)
        return GpuState(
            static,
            sample,
            processes,
            reason,
            buffer.history(),
            # as the live monitor says it; a log without processes has no list to hint about
            processes_hint=(unmapped_hint(processes) or processes_hint(sample, processes, reason))
            if gpu.processes_listed
            else None,
            health=gpu.health,
            timeline=timelines.get(static.index) if timelines else None,
        )

    return state


def replayed_snapshot(
    data: dict[str, Any], history: dict[int, HistoryBuffer], timelines: dict[int, Timeline] | None = None
) -> Snapshot:
    """One line of a recording as the monitor replays it (decoded by
    :func:`~nvtopy.formats.contract_decoder.snapshot_from_dict`); ``history`` carries the sparklines
    across lines, ``timelines`` are the charts' history of the whole recording (by GPU index; None: none).

    Raises KeyError, ValueError, TypeError or AttributeError on a line that is not a snapshot.
    """
    return snapshot_from_dict(data, _replayed(history, timelines))


def _history_only(data: dict[str, Any], history: dict[int, HistoryBuffer]) -> None:
    """What a line adds to the charts, without building its processes (to rebuild history fast)."""
    timestamp = recorded_timestamp(data)
    for item in recorded_gpus(data):
        _take_history(history, *gpu_from_dict(item, timestamp))


# ----------------------------------------------------------------- lines


def _json(raw: bytes) -> Any:
    """One line as JSON; raises _DamageError saying why it is not."""
    try:
        return decode_json(raw)
    except JsonRefusedError as exc:
        if exc.syntax and not raw.endswith(b"\n"):
            raise _DamageError("the file ends mid-record (cut short)") from None
        if exc.syntax:
            raise _DamageError(str(exc)) from None
        raise _DamageError(f"not JSON that can be read ({_excerpt(exc, 60)})") from None  # too deep, too long


def _parse(raw: bytes, history: dict[int, HistoryBuffer]) -> Snapshot:
    data = _json(raw)
    try:
        return replayed_snapshot(data, history)
    except (KeyError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as exc:
        raise _DamageError(f"not an nvtopy snapshot ({type(exc).__name__}: {_excerpt(exc)})") from None


class RecordedSnapshots(Sequence[Snapshot]):
    """The valid snapshots of a recording, parsed from the file when asked for; a few are kept.

    Indexing is what a tuple of every snapshot would give, charts included: the
    history of snapshot ``i`` is rebuilt from the lines before it (at most
    :data:`~nvtopy.model.HISTORY_LENGTH`), or carried on from ``i - 1`` when played in order. The
    last :data:`CACHE` snapshots asked for are kept, the same objects each time.
    Safe to use from several threads.
    """

    def __init__(
        self,
        path: str,
        offsets: array[int],
        timestamps: array[float],
        cache: int = CACHE,
        timelines: dict[int, Timeline] | None = None,
    ) -> None:
        """``timelines``: the charts' history of the whole recording, by GPU (built by :func:`load_recording`)."""
        self.path = path
        self.timelines = timelines or {}
        self._offsets = offsets
        self._timestamps = timestamps
        self._cache_size = max(1, cache)
        self._cache: collections.OrderedDict[int, Snapshot] = collections.OrderedDict()
        self._history: dict[int, HistoryBuffer] = {}
        self._at = -1  # the last line the history has taken in (-1: none, so line 0 follows)
        self._lock = threading.Lock()
        self.parsed = 0  # lines parsed on demand (history rebuilds included)

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> Snapshot: ...

    @overload
    def __getitem__(self, index: slice) -> list[Snapshot]: ...

    def __getitem__(self, index: int | slice) -> Snapshot | list[Snapshot]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError("recording index out of range")
        with self._lock:
            snapshot = self._cache.get(position)
            if snapshot is not None:
                self._cache.move_to_end(position)
                return snapshot
            snapshot = self._load(position)
            self._keep(position, snapshot)
            return snapshot

    def timestamp(self, index: int) -> float:
        """When snapshot ``index`` was taken, without parsing it."""
        return self._timestamps[index]

    @property
    def cached(self) -> int:
        """How many parsed snapshots are kept (at most :data:`CACHE`)."""
        return len(self._cache)

    def _load(self, position: int) -> Snapshot:
        """Parse snapshot ``position``; going back, also the few before it (kept, so the next steps back are free)."""
        first = position
        try:
            with open_regular(self.path) as handle:  # replaced by a FIFO since: refused, never waited on
                if position != self._at + 1:  # not the next one: the charts start again from the lines before
                    if position < self._at:
                        first = max(0, position - self._cache_size // 2)
                    self._at = -2
                    self._history = {}
                    for before in range(max(0, first - HISTORY_LENGTH + 1), first):
                        _history_only(self._data(handle, before), self._history)
                for earlier in range(first, position):
                    data = self._data(handle, earlier)
                    self._keep(earlier, replayed_snapshot(data, self._history, self.timelines))
                snapshot = replayed_snapshot(self._data(handle, position), self._history, self.timelines)
        except (
            OSError,
            FileRefusedError,
            _DamageError,
            KeyError,
            ValueError,
            TypeError,
            AttributeError,
            ArithmeticError,
        ) as exc:
            self._at = -2  # the history may be half built
            raise NvtopyError(f"{self.path}: cannot read snapshot {position + 1} again ({_excerpt(exc)})") from None
        self._at = position
        return snapshot

    def _keep(self, position: int, snapshot: Snapshot) -> None:
        self._cache[position] = snapshot
        self._cache.move_to_end(position)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _data(self, handle: IO[bytes], position: int) -> Any:
        handle.seek(self._offsets[position])
        self.parsed += 1
        return _json(handle.readline(MAX_LINE + 1))


@dataclass(frozen=True, slots=True)
class Recording:
    snapshots: Sequence[Snapshot]  # a RecordedSnapshots: parsed when asked for
    stopped: str | None  # where and why reading stopped early, or None when the whole file was read
    path: str


class IndexingStoppedError(Exception):
    """:func:`load_recording` was asked to stop (the monitor quit while it indexed): no recording, and no error."""


def load_recording(
    path: str,
    *,
    cache: int = CACHE,
    progress: Callable[[int, int], object] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Recording:
    """Index every valid snapshot up to the first bad line (with a sentence saying where it stopped).

    One pass over the file parses each line once, to check it, and keeps only
    its offset and time: memory does not grow with the recording. A 200 MB
    recording takes seconds: ``progress(bytes read, file size)`` is called after
    each line (the monitor shows how far it is), and ``stop()`` is asked before
    each one -- True ends the pass at once with :class:`IndexingStoppedError`.
    """
    try:
        handle = open_regular(path)  # a FIFO or a device is refused, never waited on
    except FileRefusedError as exc:
        raise NvtopyError(f"cannot read {path}: {exc}") from None
    offsets: array[int] = array("q")
    timestamps: array[float] = array("d")
    timelines: dict[int, Timeline] = {}  # the charts' history: every line's values, read in this one pass
    stopped = None
    with handle:
        number = offset = 0
        size = _size(handle) if progress is not None else 0
        while True:
            if stop is not None and stop():
                raise IndexingStoppedError(path)
            if progress is not None:
                progress(offset, max(size, offset))
            try:
                raw = handle.readline(MAX_LINE + 1)
            except OSError as exc:
                stopped = f"line {number + 1}: cannot be read ({exc.strerror or exc})"
                break
            if not raw:
                break
            number += 1
            start, offset = offset, offset + len(raw)
            if len(raw) > MAX_LINE:
                stopped = f"line {number}: longer than {MAX_LINE >> 20} MiB, not a snapshot"
                break
            if not raw.strip():
                continue
            try:
                snapshot = _parse(raw, {})
            except _DamageError as exc:
                stopped = f"line {number}: {exc}"
                break
            offsets.append(start)
            timestamps.append(snapshot.timestamp)
            for gpu in snapshot.gpus:
                timeline = timelines.get(gpu.index)
                if timeline is None:
                    timeline = timelines[gpu.index] = Timeline(bounded=False)
                timeline.record(gpu.static, gpu.sample)
    if not offsets:
        reason = f" ({stopped})" if stopped else ""
        raise NvtopyError(f"{path}: no snapshot to replay{reason}")
    return Recording(RecordedSnapshots(path, offsets, timestamps, cache, timelines), stopped, path)


def _mib(size: int) -> str:
    """``"200 MiB"``, ``"1.5 GiB"``: a file's size for the indexing progress."""
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{max(1, round(size / 2**20))} MiB"


def _size(handle: IO[bytes]) -> int:
    """The bytes the file holds now (0 when it cannot say: a pipe), for the share indexed so far."""
    try:
        return max(0, os.fstat(handle.fileno()).st_size)
    except (OSError, ValueError):
        return 0


class ReplayPlayer(SnapshotSource):
    """A snapshot source for the monitor that plays a recording at its recorded pace.

    Besides what every source offers (subscribe, pause/resume, refresh) it steps
    back and forth (``refresh()`` is a step forward) and changes speed; its status
    line says where it is. It refuses to signal: there is no process to signal.

    Given a path instead of a :class:`Recording`, it indexes the file on its own
    thread first (:func:`load_recording`: seconds for a big one), so the monitor
    draws at once: ``busy_since`` and ``waiting_for`` say how far it is
    ("run.jsonl to be indexed (45 % of 200 MiB)"), stopping it ends the indexing
    at the next line, and a file with nothing to replay is reported as a failed
    start (``open_error``). ``indexed`` is set once the indexing has ended, either way.
    """

    SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)
    thread_name = "nvtopy-replay"
    can_step = True
    can_change_speed = True
    signal_refusal = "this is a replay: there is no process to signal"

    def __init__(self, recording: Recording | str, speed: float = 1.0) -> None:
        super().__init__(interval=1.0)  # unused: snapshots follow the recorded pace, times the speed
        self.recording: Recording | None = None
        self.snapshots: Sequence[Snapshot] = ()  # the recording's, once indexed
        self.path = recording if isinstance(recording, str) else recording.path
        self.indexed = threading.Event()
        self._read = self._size = 0  # bytes indexed so far, of how many
        if not isinstance(recording, str):
            self._loaded(recording)
        self.position = 0
        self._speed = speed

    def _loaded(self, recording: Recording) -> None:
        self.recording = recording
        self.snapshots = recording.snapshots
        self.indexed.set()

    @property
    def waiting_for(self) -> str:  # type: ignore[override]
        """What the monitor waits for while the file is indexed, with how far it is."""
        done = f" ({100 * self._read // self._size} % of {_mib(self._size)})" if self._size else ""
        return f"{safe_text(os.path.basename(self.path))} to be indexed{done}"

    def _index(self) -> bool:
        """Index the file (this thread); False when it stopped first or there is nothing to replay."""
        self.busy_since = time.monotonic()
        try:
            recording = load_recording(self.path, progress=self._indexing, stop=lambda: self._stopping)
        except IndexingStoppedError:
            return False
        except NvtopyError as exc:
            self._fail(exc)
            return False
        finally:
            self.busy_since = None
            self.indexed.set()
        self._loaded(recording)
        return not self._stopping

    def _indexing(self, done: int, size: int) -> None:
        self._read, self._size = done, size

    @property
    def speed(self) -> float:
        """How many times faster than recorded it plays."""
        return self._speed

    @property
    def startup_notice(self) -> str | None:
        recording = self.recording
        if recording is None or recording.stopped is None:
            return None
        return (
            f"{recording.path}: replaying the {len(recording.snapshots)} valid snapshots; "
            f"reading stopped at {recording.stopped}"
        )

    def resume(self) -> None:
        if self.snapshots and self.position >= len(self.snapshots) - 1:
            self.position = -1  # at the end: play again from the start
        super().resume()

    def refresh(self) -> None:
        self.step(1)

    def step(self, count: int) -> None:
        """Pause and show the snapshot ``count`` records away (negative: back)."""
        self._paused = True
        if not self.snapshots:  # still indexing: nothing to step through yet
            return
        self.position = max(0, min(len(self.snapshots) - 1, self.position + count))
        self._show(self.position)

    def faster(self) -> None:
        bigger = [s for s in self.SPEEDS if s > self.speed]
        self._speed = bigger[0] if bigger else self.speed
        self._wake.set()

    def slower(self) -> None:
        smaller = [s for s in self.SPEEDS if s < self.speed]
        self._speed = smaller[-1] if smaller else self.speed
        self._wake.set()

    def status_line(self) -> str:
        state = "⏸" if self._paused else "▶"
        return f"REPLAY {state} x{self.speed:g} {self.position + 1}/{len(self.snapshots)}"

    def _time(self, position: int) -> float:
        stamps = getattr(self.snapshots, "timestamp", None)  # a RecordedSnapshots knows without parsing
        return stamps(position) if stamps is not None else self.snapshots[position].timestamp

    def _show(self, position: int) -> None:
        try:
            snapshot = self.snapshots[position]
        except NvtopyError as exc:  # the file changed under the replay: stay on what is shown
            log.warning("%s", exc)
            self._paused = True
            return
        self._publish(snapshot)

    def _run(self) -> None:
        if self.recording is None and not self._index():
            return
        self.position = max(0, self.position)
        last = len(self.snapshots) - 1
        # At the end the player pauses before the last snapshot is published, never after: whatever draws it (the
        # header's status line) says paused with it, not playing until the next refresh.
        self._paused = self._paused or self.position >= last
        self._show(self.position)
        while not self._stopping:
            if self._paused or self.position >= last:
                self._paused = self._paused or self.position >= last
                self._wake.wait()
                self._wake.clear()
                continue
            gap = self._time(self.position + 1) - self._time(self.position)
            if self._wake.wait(min(5.0, max(0.02, gap / self.speed))):
                self._wake.clear()
                continue  # paused, stepped or re-timed: decide again
            if not self._paused and not self._stopping:
                self.position += 1
                self._paused = self.position >= last
                self._show(self.position)

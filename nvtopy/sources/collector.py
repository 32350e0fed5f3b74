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
import functools
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..backends.base import Backend, ProcessReading, Reading
from ..backends.host.pidmap import unmapped_hint
from ..health.realwork import GpuWatch, WatchResult
from ..health.verdict import HealthInputs, HealthThresholds, assess
from ..model import (
    ALL_GROUPS,
    HISTORY_LENGTH,
    SAMPLE_GROUPS,
    STATIC_FIELDS,
    GpuHealth,
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
    fast_constructor,
    freeze,
    sample_from_fields,
)
from ..selection import Selection, instances_named, narrow_to_instances
from .events import EventLog
from .workers import GpuWorkers

if TYPE_CHECKING:
    from .timeline import Timeline

__all__ = ["HINT_MIN_BYTES", "ONE_SHOT_LAST", "Collector", "processes_hint"]

ONE_SHOT_LAST = frozenset({"gpm", "mig"})
"""The groups a one-shot reading (the backend's ``one_shot``) reads last on each GPU: GPM waits for its first
pair (:data:`~nvtopy.backends.nvml.gpm.FIRST_PAIR_S` after the sample the static read took), and a MIG
instance's figures are GPM too. Read after the GPU's other groups and its processes, the wait is what is
left of it once they are done, not a delay before them."""


class _GpuMemo:
    """What the collector remembers of one GPU between reads."""

    __slots__ = ("exited", "history", "last", "never_read", "reasons", "seen", "static", "timeline", "values", "watch")

    def __init__(self, static: GpuStatic, history: int, thresholds: HealthThresholds, timeline: bool = True) -> None:
        self.static = static
        self.values: dict[str, Any] = {}
        self.reasons: dict[str, Reason] = {}
        self.history = HistoryBuffer(history)
        # The charts' long history (min/mean/max buckets, bounded); None where nothing draws charts
        # (imported only then: ``--once`` never needs it).
        self.timeline: Timeline | None = None
        if timeline:
            from .timeline import Timeline

            self.timeline = Timeline()
        self.never_read: set[str] = set(ALL_GROUPS)
        self.watch = GpuWatch(thresholds)
        self.last: GpuState | None = None  # what the last snapshot showed (a stalled GPU keeps showing it)
        # The pids of its last rows that the host knew, and those of them it no longer has while NVML still
        # lists them: exited (dropped), where a pid the host never had is a row "not visible from here".
        self.seen: frozenset[int] = frozenset()
        self.exited: frozenset[int] = frozenset()


_GpuRead = NamedTuple(  # noqa: UP014 - the functional form: no annotation text compiled at import (procstat.Stat)
    "_GpuRead",
    [
        ("static", GpuStatic | None),  # read when the GPU had none yet, or an incomplete one
        ("reading", Reading),
        ("processes", ProcessReading | None),
        ("groups", frozenset[str]),
    ],
)
_GpuRead.__doc__ = """One GPU's reads of one collection, done on its worker thread (only backend calls there)."""


class Collector:
    """Reads snapshots from a backend: static fields once, the requested groups each call.

    Not thread-safe by design: one thread (the poller's, or the caller's for
    one-shot reads) owns a collector. Given a ``deadline``, :meth:`collect` reads
    each GPU on its own worker thread (:class:`~nvtopy.sources.workers.GpuWorkers`)
    and does not wait past it for a GPU whose driver call is stuck.
    """

    def __init__(
        self,
        backend: Backend,
        indices: Sequence[int] | None = None,
        history: int = HISTORY_LENGTH,
        *,
        thresholds: HealthThresholds | None = None,
        events: EventLog | None = None,
        timeline: bool = True,
    ) -> None:
        """``events``: the log an :class:`~nvtopy.sources.events.EventWatcher` fills (None: no timeline).

        ``timeline=False``: keep no long history for charts (each GPU state's ``timeline``
        is None). What has no charts to draw -- the exporter, ``nvtopy log``, the Python
        API -- saves its cost per poll and its 24 h of buckets (about 273 kB a GPU).
        """
        self.backend = backend
        self._timeline = timeline
        self.host = backend.host_info()
        self._history_length = history
        self._memos: dict[int, _GpuMemo] = {}
        self._statics: list[GpuStatic] | None = None
        self._sequence = 0
        self._host_map: dict[int, int] = {}  # foreign pids: host pid -> proven local pid (backends.pidmap)
        self.indices: list[int] = list(indices) if indices is not None else list(range(backend.device_count()))
        self.thresholds = thresholds or HealthThresholds()
        self.events = events if events is not None else EventLog(window_s=self.thresholds.xid_window_s)
        if self.events.window_s < self.thresholds.xid_window_s:
            raise ValueError("the event log keeps a shorter Xid window than the verdict weighs")
        self._workers: GpuWorkers | None = None
        # GPU -> the MIG device UUIDs shown of it (Selection.instances); a GPU not in it is shown whole.
        self._narrowed: Mapping[int, tuple[str, ...]] = {}

    def statics(self) -> list[GpuStatic]:
        """Static fields of every GPU of the backend (read once; used for GPU selection)."""
        if self._statics is None:
            self._statics = [self._memo(i).static for i in range(self.backend.device_count())]
        return self._statics

    def read_statics(self, deadline: float) -> None:
        """Read every GPU's static fields on its own thread, waiting at most ``deadline`` seconds.

        A GPU that does not answer in time gets what is known (its index; every
        other field "not responding") and its real fields when its read returns:
        selecting GPUs (:meth:`statics`) then never waits on a stuck one.
        """
        workers = self._ensure_workers()
        pending = [i for i in range(self.backend.device_count()) if i not in self._memos]
        for index in pending:
            workers.start(index, functools.partial(self._read_static, index))
        workers.wait(pending, time.monotonic() + max(0.0, deadline))
        for index in pending:
            answer = workers.take(index)
            if answer is None:
                reasons = dict.fromkeys(STATIC_FIELDS, Reason.NOT_RESPONDING)
                self._new_memo(GpuStatic(index=index, unavailable=freeze(reasons)))
                continue
            value, error = answer
            if error is not None:
                raise error
            self._fold(index, value)
        self._statics = None

    def look_up_processes(self, deadline: float) -> None:
        """List each selected GPU's processes and look each one up on the host, now (a one-shot reading's head start).

        Why: ``nvtopy --once`` on a GPU with GPM waits for its first pair of samples (105 ms after the
        first one, which the static read takes: :data:`~nvtopy.backends.nvml.gpm.FIRST_PAIR_S`), and a
        first sight of each process on the host (psutil, its owner's cgroup) costs about 0.25-0.75 ms.
        Done here, between the two, that work fills the wait instead of following it; the
        :meth:`collect` that comes next finds every process known and only reads its changing figures.
        Each GPU's list is read on its own thread within ``deadline``: a GPU that does not answer is
        left to :meth:`collect`, which does not wait for it again.
        """
        workers = self._ensure_workers()
        started = [i for i in self.indices if workers.start(i, functools.partial(self._read_process_list, i))]
        workers.wait(started, time.monotonic() + max(0.0, deadline))
        readings = []
        for index in started:
            answer = workers.take(index)
            if answer is None:
                continue  # still reading: collect() marks it
            value, error = answer
            if error is not None:
                raise error
            memo = self._memos.get(index)
            if memo is not None:
                readings.append((memo, value.processes))
        if readings:
            self._join_host(readings)

    def _read_process_list(self, index: int) -> _GpuRead:
        return _GpuRead(None, Reading(), self.backend.read_processes(index, utilization=False), frozenset())

    def _read_static(self, index: int) -> _GpuRead:
        return _GpuRead(self.backend.read_static(index), Reading(), None, frozenset())

    def _ensure_workers(self) -> GpuWorkers:
        if self._workers is None:
            self._workers = GpuWorkers()
        return self._workers

    def _memo(self, index: int) -> _GpuMemo:
        memo = self._memos.get(index)
        if memo is None:
            memo = self._new_memo(self.backend.read_static(index))
        return memo

    def _new_memo(self, static: GpuStatic) -> _GpuMemo:
        memo = self._memos[static.index] = _GpuMemo(static, self._history_length, self.thresholds, self._timeline)
        return memo

    def select(self, indices: Iterable[int] | Selection) -> None:
        """Poll only these GPUs from the next collection on.

        A :class:`~nvtopy.selection.Selection` that names MIG instances also limits
        those GPUs to them: their other instances and the processes there are left out.
        """
        if isinstance(indices, Selection):
            self.indices = list(indices.indices)
            self._narrowed = indices.instances
        else:
            self.indices = list(indices)
            self._narrowed = {}

    def close(self) -> None:
        """Let the GPU worker threads end (one stuck in the driver ends when its call returns). Never waits."""
        if self._workers is not None:
            self._workers.close()

    def busy(self) -> bool:
        """True while some GPU's read is still outstanding on its worker thread."""
        workers = self._workers
        return workers is not None and any(workers.busy_since(i) is not None for i in self._memos)

    def collect(
        self,
        groups: Collection[str] = ALL_GROUPS,
        *,
        processes: bool = True,
        process_utilization: bool = True,
        join: bool = True,
        interval: float | None = None,
        deadline: float | None = None,
        stall_after: float = 0.0,
        meanwhile: Callable[[], object] | None = None,
    ) -> Snapshot:
        """Read ``groups`` of every selected GPU (others keep their last values) and join processes.

        ``process_utilization=False`` reuses the per-process utilisation last read
        (it costs an NVML call per GPU and changes less than the process list).
        ``join=False`` lists processes as NVML reports them, without asking the host
        who they are (no psutil work: the Python API only needs its own pid's memory).

        ``deadline`` (seconds): read each GPU on its own thread and wait at most
        this long; a GPU still reading then keeps its last values, and once its
        read has been outstanding ``stall_after`` seconds it is "not responding"
        (``health.responding`` False). None: read the GPUs one after the other
        on this thread, waiting as long as the driver takes.

        ``meanwhile``: the caller's work that needs no driver (``nvtopy --once`` loads its config and
        imports its printer), run on this thread once the GPUs' reads have started on theirs, so that
        it fills their wait (a one-shot's GPM pair, :data:`ONE_SHOT_LAST`); within ``deadline``.
        Without a deadline it runs first, then the GPUs are read.
        """
        backend = self.backend
        started_wall = backend.now()
        started = time.perf_counter()
        wanted = frozenset(groups)
        if deadline is None:
            if meanwhile is not None:
                meanwhile()
            answers = {i: self._read_gpu(i, wanted, processes, process_utilization) for i in self.indices}
            stalled: dict[int, float] = {}
        else:
            answers, stalled = self._read_on_workers(wanted, processes, process_utilization, deadline, meanwhile)

        fresh = [(self._fold(index, answer), answer) for index, answer in answers.items()]
        host = self._join_host([(m, a.processes) for m, a in fresh]) if processes and join else None
        now = backend.now()
        states: dict[int, GpuState] = {}
        for memo, answer in fresh:
            states[memo.static.index] = self._state(memo, answer, host, now, started_wall)
        for index, seconds in stalled.items():
            states[index] = self._stalled_state(index, seconds, seconds >= stall_after, now)
        self._sequence += 1
        return Snapshot(
            timestamp=started_wall,
            host=self.host,
            gpus=tuple(states[i] for i in self.indices if i in states),
            sequence=self._sequence,
            interval=interval,
            collect_seconds=time.perf_counter() - started,
            host_usage=backend.host_usage(),  # a few /proc reads, on this (the poller's) thread
        )

    # ----------------------------------------------------------------- reading (worker threads)

    def _read_gpu(self, index: int, groups: frozenset[str], processes: bool, utilization: bool) -> _GpuRead:
        """Every backend call of one GPU for one collection: static if needed, the groups, the processes.

        A one-shot reading reads :data:`ONE_SHOT_LAST` (GPM, which may wait for its pair) after the rest.
        """
        backend = self.backend
        memo = self._memos.get(index)
        static = None
        if memo is None:
            static = backend.read_static(index)
        wanted = groups | (memo.never_read if memo is not None else ALL_GROUPS)
        last = wanted & ONE_SHOT_LAST if backend.one_shot else frozenset()
        reading = backend.read_sample(index, wanted - last)
        if memo is not None and not reading.lost and _static_incomplete(memo.static):
            static = backend.read_static(index)  # the GPU came back: its static fields can be read now
        proc_reading = backend.read_processes(index, utilization=utilization) if processes else None
        if last and not reading.lost:  # a lost GPU: every field is LOST (_merge), nothing more to ask
            late = backend.read_sample(index, last)
            reading.values.update(late.values)
            reading.unavailable.update(late.unavailable)
            reading.lost = late.lost
        return _GpuRead(static, reading, proc_reading, frozenset(wanted))

    def _read_on_workers(
        self,
        groups: frozenset[str],
        processes: bool,
        utilization: bool,
        deadline: float,
        meanwhile: Callable[[], object] | None = None,
    ) -> tuple[dict[int, _GpuRead], dict[int, float]]:
        """Start each idle GPU's read on its thread, run ``meanwhile``, wait until ``deadline``; (answers, stalled
        seconds)."""
        until = time.monotonic() + max(0.0, deadline)
        workers = self._ensure_workers()
        started: list[int] = []
        for index in self.indices:
            late = workers.take(index)  # a read that answered after an earlier deadline
            if late is not None and late[1] is None:
                self._fold(index, late[0], processes=False)
            if workers.start(index, functools.partial(self._read_gpu, index, groups, processes, utilization)):
                started.append(index)
        if meanwhile is not None:
            meanwhile()
        # Only the reads started now are waited for: a GPU already stuck costs its wait once, not every time.
        workers.wait(started, until)
        answers: dict[int, _GpuRead] = {}
        stalled: dict[int, float] = {}
        now = time.monotonic()
        for index in self.indices:
            since = workers.busy_since(index)
            if since is not None:
                stalled[index] = now - since
                continue
            answer = workers.take(index)
            if answer is None:
                continue
            value, error = answer
            if error is not None:
                raise error  # a bug in a backend: as the sequential path would raise it
            answers[index] = value
        return answers, stalled

    # ----------------------------------------------------------------- folding (the collector's thread)

    def _fold(self, index: int, answer: _GpuRead, *, processes: bool = True) -> _GpuMemo:
        """Take a GPU's answer into its memo: new static fields, which groups have now been read."""
        memo = self._memos.get(index)
        if answer.static is not None:
            if memo is None or _placeholder(memo.static):
                fresh = self._new_memo(answer.static)
                if memo is not None:
                    fresh.history, fresh.watch, fresh.timeline = memo.history, memo.watch, memo.timeline
                memo = fresh
            else:
                memo.static = answer.static
            self._statics = None
        assert memo is not None, "a GPU without a memo reads its static fields first"
        memo.never_read -= answer.groups
        if not processes:  # a late answer: its values count, its processes are stale by now
            self._merge(memo, answer.reading, self.backend.now())
        return memo

    def _state(
        self,
        memo: _GpuMemo,
        answer: _GpuRead,
        host: dict[int, HostProcess | None] | None,
        now: float,
        timestamp: float,
    ) -> GpuState:
        sample = self._merge(memo, answer.reading, timestamp)
        rows: tuple[GpuProcess, ...] = ()
        rows_reason: Reason | None = None
        proc_reading = answer.processes
        if proc_reading is not None:
            rows = self._rows(memo, proc_reading.processes, host, now)
            rows_reason = proc_reading.unavailable
        history = self._record(memo, sample)
        hint = None
        if proc_reading is not None:
            foreign = self.backend.pids_are_foreign()
            hint = unmapped_hint(rows, host_pids=foreign) or processes_hint(sample, rows, rows_reason)
        watched = memo.watch.observe(sample, rows, now)
        health = self._assess(memo, sample, now, watched=watched)
        state = GpuState(
            memo.static,
            sample,
            watched.rows,
            rows_reason,
            history,
            processes_hint=hint,
            health=health,
            timeline=memo.timeline,
        )
        named = self._narrowed.get(memo.static.index)
        if named is not None:  # matched at each read: the GPU's static fields may be read again (it came back)
            state = narrow_to_instances(state, instances_named(memo.static, named))
        memo.last = state
        return state

    def _stalled_state(self, index: int, seconds: float, not_responding: bool, now: float) -> GpuState:
        """A GPU whose read is still outstanding: its last values, and (past ``stall_after``) "not responding"."""
        memo = self._memos.get(index)
        if memo is None:  # it never answered: not even its static fields are known
            reasons = dict.fromkeys(STATIC_FIELDS, Reason.NOT_RESPONDING)
            memo = self._new_memo(GpuStatic(index=index, unavailable=freeze(reasons)))
        last = memo.last
        if last is None:
            reasons = {name: Reason.NOT_RESPONDING for fields in SAMPLE_GROUPS.values() for name in fields}
            sample = sample_from_fields(now, False, {}, reasons)
            last = GpuState(memo.static, sample, (), Reason.NOT_RESPONDING)
            not_responding = True
        if not not_responding:
            return last
        health = self._assess(memo, last.sample, now, stalled=seconds)
        return dataclasses.replace(last, health=health)

    def _assess(
        self,
        memo: _GpuMemo,
        sample: GpuSample,
        now: float,
        *,
        watched: WatchResult | None = None,
        stalled: float | None = None,
    ) -> GpuHealth:
        index = memo.static.index
        events, counts, recent = self.events.read(index, now, self.thresholds.xid_window_s)
        inputs = HealthInputs(
            now=now,
            events=events,
            xid_counts=counts,
            recent_xids=recent,
            events_note=self.events.note(index),
            responding=stalled is None,
            stalled_seconds=stalled,
        )
        if watched is None and memo.last is not None:
            previous = memo.last.health
            inputs = dataclasses.replace(
                inputs,
                idle_held_bytes=previous.idle_held_bytes,
                suspected_hang_seconds=previous.suspected_hang_seconds,
            )
        elif watched is not None:
            inputs = dataclasses.replace(
                inputs,
                replay_growth=watched.replay_growth,
                nvlink_error_growth=watched.nvlink_error_growth,
                idle_held_bytes=watched.idle_held_bytes,
                idle_held_processes=watched.idle_held_processes,
                suspected_hang_seconds=watched.suspected_hang_seconds,
            )
        return assess(memo.static, sample, inputs, self.thresholds)

    def _join_host(self, readings: Iterable[tuple[_GpuMemo, ProcessReading | None]]) -> dict[int, Any]:
        if self.backend.pids_are_foreign():
            # Host pids: only those proven to be local processes are joined, as their local pids.
            lists: dict[int, Collection[int]] = {
                m.static.index: {p.pid for p in pr.processes} for m, pr in readings if pr is not None
            }
            self._host_map = self.backend.map_host_pids(lists) if any(lists.values()) else {}
            local = set(self._host_map.values())
            return self.backend.inspect_processes(local) if local else {}
        pids = {p.pid for _, pr in readings if pr is not None for p in pr.processes}
        return self.backend.inspect_processes(pids) if pids else {}

    def _rows(
        self, memo: _GpuMemo, raws: list[RawGpuProcess], host: dict[int, HostProcess | None] | None, now: float
    ) -> tuple[GpuProcess, ...]:
        """Join NVML's rows with the host's facts; ``host=None``: no join, every row kept as NVML gave it.

        Why a pid the host does not have is still a row: NVML listed it with its GPU memory (a
        container without the host's PID namespace, a captured machine). It is marked ``foreign``
        (not visible from this PID namespace): no user or command, never signalled. Only a pid the
        host had at an earlier read and no longer has is left out: it exited after NVML's list.
        """
        static = memo.static
        foreign = self.backend.pids_are_foreign()
        rows = []
        seen: set[int] = set()
        exited: set[int] = set()
        for raw in raws:
            reasons: dict[str, Reason] = {}
            if raw.gpu_memory_bytes is None:
                reasons["gpu_memory_bytes"] = Reason.NOT_AVAILABLE
            if raw.sm_percent is None:
                reasons["sm_percent"] = Reason.NOT_SUPPORTED
            local_pid = self._host_map.get(raw.pid) if foreign and host is not None else None
            proven = host.get(local_pid) if local_pid is not None and host is not None else None
            if local_pid is not None and proven is not None:
                reasons.update(proven.unavailable)
                row = _row(static, dataclasses.replace(raw, pid=local_pid), proven, now, reasons, foreign=False)
                rows.append(dataclasses.replace(row, host_pid=raw.pid))
                continue
            if foreign:
                rows.append(_not_visible_row(static, raw, now, reasons))
                continue
            if host is None:
                rows.append(_row(static, raw, None, now, reasons, foreign=False))
                continue
            info = host.get(raw.pid)
            if info is None:
                if raw.pid in memo.seen or raw.pid in memo.exited:
                    exited.add(raw.pid)  # the host had it: it exited between NVML's list and the host lookup
                else:
                    rows.append(_not_visible_row(static, raw, now, reasons))
                continue
            seen.add(raw.pid)
            reasons.update(info.unavailable)
            rows.append(_row(static, raw, info, now, reasons, foreign=False))
        if host is not None and not foreign:
            memo.seen, memo.exited = frozenset(seen), frozenset(exited)
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
        if memo.timeline is not None:
            memo.timeline.record(memo.static, sample)
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
    return any(reason in (Reason.LOST, Reason.UNKNOWN, Reason.NOT_RESPONDING) for reason in static.unavailable.values())


def _placeholder(static: GpuStatic) -> bool:
    """A GPU's static fields made up while its first read was stuck (nothing known but its index)."""
    return static.unavailable.get("uuid") is Reason.NOT_RESPONDING


# What a row NVML lists but this PID namespace cannot see lacks: everything the host would have told.
_NOT_VISIBLE_FIELDS = ("user", "command", "cpu_percent", "host_memory_bytes", "running_seconds")


def _not_visible_row(static: GpuStatic, raw: RawGpuProcess, now: float, reasons: dict[str, Reason]) -> GpuProcess:
    """A pid NVML lists that has no process here: NVML's figures, the host's fields N/A (not visible)."""
    reasons.update(dict.fromkeys(_NOT_VISIBLE_FIELDS, Reason.NOT_VISIBLE))
    return _row(static, raw, None, now, reasons, foreign=True)


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
    if info is None:
        return _new_row(
            static.index, static.uuid, raw.pid, raw.type, raw.gpu_memory_bytes, raw.sm_percent, raw.memory_percent,
            raw.encoder_percent, raw.decoder_percent, None, None, None, None, None, None, None, None, "unknown",
            foreign, freeze(reasons), None, None, None, None, (), None, raw.gpu_instance_id, raw.compute_instance_id,
            None, (), None,
        )  # fmt: skip
    return _new_row(
        static.index, static.uuid, raw.pid, raw.type, raw.gpu_memory_bytes, raw.sm_percent, raw.memory_percent,
        raw.encoder_percent, raw.decoder_percent, info.user, info.uid, info.name, info.command, info.cpu_percent,
        info.host_memory_bytes, create_time, running, info.status, foreign, freeze(reasons), info.owner, info.ns_pid,
        info.cuda_visible_devices, None, (), None, raw.gpu_instance_id, raw.compute_instance_id, info.ppid,
        info.parents, None,
    )  # fmt: skip


def _new_row(*values: Any) -> GpuProcess:
    """``GpuProcess(*values)``, every field in order, by the model's fast constructor (every range still checked).

    Why: a row a GPU process a poll and a ``--once``; the keyword call through the frozen ``__init__`` cost
    6.3-7.2 us a row, this 2.2-2.3 us (``_row`` timed, best of 7); the constructor is compiled at the first row.
    """
    return fast_constructor(GpuProcess)(*values)

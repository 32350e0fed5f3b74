"""``nvtopy replay FILE``: a recording shown in the monitor, with pause, step and speed.

A recording is the JSON lines ``nvtopy record`` (or ``nvtopy log --format jsonl
--processes``) writes. Each line is turned back into the same immutable
:class:`~nvtopy.model.Snapshot` the live monitor draws (history rebuilt from the
lines before it), so what is replayed is exactly what was recorded: every
string is read back with :func:`~nvtopy.textsafe.unescape_text`, the reverse
of the ``escape_text`` the writers apply.

Why an index, not a list of snapshots: a recording may be gigabytes, and a
parsed snapshot takes several times the memory of its line. One pass checks
every line and keeps only where each valid one starts (and its time); a
snapshot is parsed again when it is shown, a few are kept for stepping back
and forth, and the sparklines' history is rebuilt from the lines before it.
The history charts (:mod:`~nvtopy.sources.timeline`) are filled in that one
pass: every GPU's values of every line, in min/mean/max buckets of 1 s, 10 s
and 1 min, about 120 bytes per recorded second per GPU; a snapshot's charts read
them as of its time, so stepping anywhere costs nothing.

Health comes back whole: the verdict, findings, event timeline and Xid counts
of each GPU, its readings (``health.readings``) and the processes' flags, so a
recording replays its events and verdicts exactly as they were recorded. A
recording made before health existed replays with every GPU OK.

The real work (GPM: ``sm_active_percent``, ``tensor_active_percent``, ... and the
``gpm_*`` rates) is read like every other sample field, under its JSON name, as the
recording has it (two decimals, whole bytes per second); an older recording has
none: N/A.

MIG comes back too: each GPU's ``mig_devices`` objects become its
:class:`~nvtopy.model.MigInstance` (static) and :class:`~nvtopy.model.MigUsage`
(the sample's ``mig_usage``, with each device's own GPM activity), and processes
keep their GPU and compute instance ids. A recording made before MIG devices were
objects (a list of their UUIDs) replays with those UUIDs as devices whose other
values are unknown.

A file cut short (a logger killed mid-line) or damaged is read up to its first
bad line; the monitor shows what is valid and says where and why it stopped.
Whatever a line holds (JSON nested a million deep, a number of 5,000 digits,
values of the wrong type, a line of gigabytes), it is damage, never a crash.
"""

from __future__ import annotations

import collections
import logging
import math
import operator
import os
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, overload

from ..backends.host.pidmap import unmapped_hint
from ..boundedfile import FileRefusedError, open_regular
from ..errors import NvtopyError
from ..formats.contract import READINGS, host_usage_from_dict, owner_from_dict, recorded_text
from ..jsondecode import JsonRefusedError, decode_json
from ..model import (
    EVENTS_PER_GPU,
    HISTORY_LENGTH,
    MIG_GPM_FIELDS,
    MIG_USAGE_FIELDS,
    OK_HEALTH,
    Finding,
    GpuEvent,
    GpuHealth,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HistoryBuffer,
    HostInfo,
    MigInstance,
    MigUsage,
    NvLink,
    ProcessType,
    Reason,
    Severity,
    Snapshot,
    freeze,
)
from ..ranges import FIELD_RANGES
from ..textsafe import excerpt as _excerpt  # outside text in a one-line message: visible, and short
from ..textsafe import safe_text, unescape_text
from .base import SnapshotSource
from .collector import processes_hint
from .timeline import Timeline

__all__ = [
    "IndexingStoppedError",
    "RecordedSnapshots",
    "Recording",
    "ReplayPlayer",
    "load_recording",
    "snapshot_from_dict",
]

log = logging.getLogger(__name__)

CACHE = 32  # parsed snapshots kept: the one shown and its neighbours, so stepping back is instant
MAX_LINE = 64 << 20  # bytes; a longer line is damage (a recording's lines are kilobytes)
MAX_GPUS = 4096  # per line; more is damage, not a node
MAX_MIG_DEVICES = 64  # per GPU; an A100 or H100 has at most 7: more is damage
_LIMIT = 2**64  # a figure beyond this (or not finite) is no reading: it is replayed as N/A

_SAMPLE_KEYS = set(GpuSample.__dataclass_fields__) - {
    "timestamp",
    "lost",
    "unavailable",
    "pstate",
    "throttle_reasons",
    "nvlinks",
    "mig_usage",
}
_STATIC_KEYS = set(GpuStatic.__dataclass_fields__) - {"index", "unavailable", "mig_instances"}
_PROCESS_KEYS = {"gpu_memory_bytes", "sm_percent", "memory_percent", "encoder_percent", "decoder_percent"}
_PROCESS_MORE = (
    "user",
    "name",
    "command",
    "cpu_percent",
    "host_memory_bytes",
    "create_time",
    "running_seconds",
    "ns_pid",
    "host_pid",
    "cuda_visible_devices",
    "idle_seconds",
    "host",  # another host's process (a recording of --remote or --prometheus)
)
_GPU_REASON_KEYS = set(GpuStatic.__dataclass_fields__) | set(GpuSample.__dataclass_fields__)
_PROCESS_REASON_KEYS = set(GpuProcess.__dataclass_fields__)
_MIG_REASON_KEYS = set(MigInstance.__dataclass_fields__) - {"index", "unavailable"}
_MIG_USAGE_REASON_KEYS = set(MIG_USAGE_FIELDS) | set(MIG_GPM_FIELDS)
# A MIG device's whole numbers, as the JSON contract writes them (memory_total_bytes among them).
_MIG_NUMBERS = (
    "gpu_instance_id",
    "compute_instance_id",
    "memory_total_bytes",
    "sm_count",
    "slices",
    "copy_engines",
    "encoders",
    "decoders",
    "jpeg_decoders",
    "ofa",
)


class _DamageError(Exception):
    """Why a line is no snapshot: one short sentence, safe for a terminal."""


# ----------------------------------------------------------------- values, checked


def _number(value: Any, name: str) -> int | float | None:
    """A figure as recorded; one that is not finite or beyond 2**64 is no reading (None: N/A)."""
    if value is None:
        return None
    kind = type(value)
    if kind is int:
        return value if -_LIMIT < value < _LIMIT else None
    if kind is float:
        return value if math.isfinite(value) and -_LIMIT < value < _LIMIT else None
    raise TypeError(f"{name} is not a number")


def _reading(value: Any, name: str) -> int | float | None:
    """A reading with a range (:mod:`nvtopy.ranges`), as recorded: the model makes one outside it (NaN,
    an infinity, 1e308, a negative, 250 %) N/A "out of range", as it does for the driver's and a peer's."""
    if value is None:
        return None
    kind = type(value)
    if kind is int or kind is float:
        return value
    raise TypeError(f"{name} is not a number")


def _flag(value: Any, name: str) -> bool | None:
    if value is None or type(value) is bool:
        return value
    raise TypeError(f"{name} is not true or false")


def _count(value: Any, name: str, limit: int) -> int:
    if type(value) is not int or not 0 <= value < limit:
        raise ValueError(f"{name} {_excerpt(value, 30)} is not a whole number from 0 to {limit - 1}")
    return value


def _texts(value: Any, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if type(value) is not list:
        raise TypeError(f"{name} is not a list")
    return tuple(recorded_text(item, name) or "" for item in value)


_CONVERT: dict[str, Callable[[Any, str], Any]] = {"int": _number, "float": _number, "str": recorded_text, "bool": _flag}


def _converters(cls: Any, names: Iterable[str]) -> tuple[tuple[str, Callable[[Any, str], Any]], ...]:
    """(field, checker) from the model's own annotations: ``"int | None"`` is checked as a number, a reading
    with a range (:data:`~nvtopy.ranges.FIELD_RANGES`) as a :func:`_reading`."""
    fields = cls.__dataclass_fields__
    return tuple(
        (name, _reading if name in FIELD_RANGES else _CONVERT[fields[name].type.split("|")[0].strip()])
        for name in sorted(names)
    )


_STATIC_FIELDS = _converters(GpuStatic, _STATIC_KEYS)
_SAMPLE_FIELDS = _converters(GpuSample, _SAMPLE_KEYS)
_PROCESS_FIELDS = _converters(GpuProcess, (*_PROCESS_KEYS, *_PROCESS_MORE))


def _fields(data: dict[str, Any], converters: tuple[tuple[str, Callable[[Any, str], Any]], ...]) -> dict[str, Any]:
    return {name: convert(data.get(name), name) for name, convert in converters}


def _pstate(value: Any) -> int | None:
    """``"P2"`` (the JSON contract) or 2; 0 to 15, and NVML's 32 for unknown."""
    if value is None:
        return None
    if type(value) is str:
        digits = value.removeprefix("P")
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 2):
            raise ValueError(f"pstate {_excerpt(value, 30)} is not P0 to P15")
        value = int(digits)
    if type(value) is not int:
        raise TypeError("pstate is not P0 to P15")
    return value if 0 <= value <= 32 else None


def _reasons(data: dict[str, Any], allowed: set[str]) -> dict[str, Reason]:
    return {k: Reason(v) for k, v in (data.get("unavailable") or {}).items() if k in allowed}


def _process(data: dict[str, Any], gpu: GpuStatic) -> GpuProcess:
    status = recorded_text(data.get("status", "running"), "status")
    flags = _texts(data.get("flags"), "flags") or ()
    return GpuProcess(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        pid=_count(data["pid"], "pid", 2**32),
        type=ProcessType(data["type"]),
        **_fields(data, _PROCESS_FIELDS),
        status="running" if status is None else status,
        foreign=bool(_flag(data.get("foreign", False), "foreign")),
        unavailable=freeze(_reasons(data, _PROCESS_REASON_KEYS)),
        owner=owner_from_dict(data.get("owner")),
        flags=flags,
        gpu_instance_id=_whole(data.get("gpu_instance_id"), "gpu_instance_id"),
        compute_instance_id=_whole(data.get("compute_instance_id"), "compute_instance_id"),
    )


def _timestamp(data: dict[str, Any]) -> float:
    text = data["timestamp"]
    if type(text) is not str:
        raise TypeError("timestamp is not text")
    timestamp = datetime.fromisoformat(text[:64]).timestamp()  # no ISO time is longer: the message stays short
    if not math.isfinite(timestamp):
        raise ValueError("timestamp is not a time")
    return timestamp


def _object(value: Any, name: str) -> dict[str, Any]:
    """A JSON object, or {} for null/absent (an older recording); anything else is damage."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise TypeError(f"{name} is not an object")
    return value


def _list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if type(value) is not list:
        raise TypeError(f"{name} is not a list")
    return value


def _whole(value: Any, name: str) -> int | None:
    """A whole number (an Xid, a link, a MIG instance id) or None; a fraction or text is damage."""
    if value is None:
        return None
    if type(value) is not int:
        raise TypeError(f"{name} is not a whole number")
    return value if -_LIMIT < value < _LIMIT else None


def _with_readings(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with ``health.readings`` laid flat under the model's field names (the top level wins).

    The readings are where the health fields are written (README, JSON schema); the ECC counts and
    PCIe throughput are also at the top level, where older recordings have them.
    """
    readings = _object(_object(item.get("health"), "health").get("readings"), "health readings")
    if not readings:
        return item
    flat = dict(item)
    for group, fields in READINGS.items():
        values = _object(readings.get(group), f"health readings {group}")
        for key, name in fields:
            flat.setdefault(name.removeprefix("static."), values.get(key))
    return flat


def _nvlinks(item: dict[str, Any]) -> tuple[NvLink, ...] | None:
    """The per-link readings (``health.readings.nvlink.links``); None where the recording has none."""
    readings = _object(_object(item.get("health"), "health").get("readings"), "health readings")
    links = _object(readings.get("nvlink"), "health readings nvlink").get("links")
    if links is None:
        return None
    return tuple(
        NvLink(
            link=_count(link.get("link"), "NVLink link", 1 << 16),
            active=_flag(link.get("active"), "NVLink active"),
            version=_whole(link.get("version"), "NVLink version"),
            rx_bytes_per_s=_whole(link.get("rx_bytes_per_s"), "NVLink rx_bytes_per_s"),
            tx_bytes_per_s=_whole(link.get("tx_bytes_per_s"), "NVLink tx_bytes_per_s"),
            errors=_whole(link.get("errors"), "NVLink errors"),
            remote=recorded_text(link.get("remote"), "NVLink remote"),
        )
        for link in (_object(entry, "NVLink") for entry in _list(links, "NVLink links"))
    )


def _mig_device(value: Any, position: int) -> tuple[MigInstance, MigUsage | None]:
    """One entry of ``mig_devices``: an object (the JSON contract), or a UUID (older recordings).

    The usage is None where the entry has no memory readings at all (an older recording).
    """
    if type(value) is str:
        return MigInstance(index=position, uuid=unescape_text(value)), None
    if type(value) is not dict:
        raise TypeError("a MIG device is neither an object nor a UUID")
    index = _count(value.get("index", position), "MIG device index", MAX_MIG_DEVICES)
    instance = MigInstance(
        index=index,
        uuid=recorded_text(value.get("uuid"), "MIG device uuid"),
        profile=recorded_text(value.get("profile"), "MIG device profile"),
        unavailable=freeze(_reasons(value, _MIG_REASON_KEYS)),
        **{name: _whole(value.get(name), f"MIG device {name}") for name in _MIG_NUMBERS},
    )
    if not any(name in value for name in (*MIG_USAGE_FIELDS, *MIG_GPM_FIELDS)):
        return instance, None
    usage = MigUsage(
        index=index,
        unavailable=freeze(_reasons(value, _MIG_USAGE_REASON_KEYS)),
        **{name: _whole(value.get(name), f"MIG device {name}") for name in MIG_USAGE_FIELDS},
        # Its own activity (GPM; absent from recordings made before it: None).
        **{name: _reading(value.get(name), f"MIG device {name}") for name in MIG_GPM_FIELDS},
    )
    return instance, usage


def _mig_devices(item: dict[str, Any]) -> tuple[tuple[MigInstance, ...], tuple[MigUsage, ...] | None]:
    """A GPU's MIG devices and their readings (None: no reading recorded, as in older recordings)."""
    listed = _list(item.get("mig_devices"), "mig_devices")
    if len(listed) > MAX_MIG_DEVICES:
        raise ValueError(f"more than {MAX_MIG_DEVICES} MIG devices on a GPU")
    devices = [_mig_device(entry, position) for position, entry in enumerate(listed)]
    instances = tuple(instance for instance, _ in devices)
    if len({instance.index for instance in instances}) != len(instances):
        raise ValueError("two MIG devices with one index")
    usage = tuple(u for _, u in devices if u is not None)
    return instances, (usage if usage else None)


def _gpu(item: dict[str, Any], timestamp: float) -> tuple[GpuStatic, GpuSample]:
    """The static and sampled fields of one GPU of a line (what its chart needs, processes aside)."""
    reasons = _reasons(item, _GPU_REASON_KEYS)
    flat = _with_readings(item)
    instances, usage = _mig_devices(item)
    if "mig_usage" in reasons:  # the GPU's per-instance readings are missing, and why
        usage = None
    static = GpuStatic(
        index=_count(item["index"], "index", MAX_GPUS),
        mig_instances=instances,
        unavailable=freeze({k: v for k, v in reasons.items() if k in _STATIC_KEYS}),
        **_fields(flat, _STATIC_FIELDS),
    )
    sample = GpuSample(
        timestamp=timestamp,
        lost=bool(_flag(item.get("lost", False), "lost")),
        pstate=_pstate(item.get("pstate")),
        throttle_reasons=_texts(item.get("throttle_reasons"), "throttle_reasons"),
        nvlinks=_nvlinks(item),
        mig_usage=usage,
        unavailable=freeze({k: v for k, v in reasons.items() if k in GpuSample.__dataclass_fields__}),
        **_fields(flat, _SAMPLE_FIELDS),
    )
    return static, sample


def _finding(data: Any) -> Finding:
    data = _object(data, "finding")
    return Finding(
        severity=Severity(data["severity"]),
        code=recorded_text(data["code"], "finding code") or "",
        text=recorded_text(data["text"], "finding text") or "",
        action=recorded_text(data.get("action"), "finding action"),
    )


def _event(data: Any, gpu_index: int) -> GpuEvent:
    data = _object(data, "event")
    timestamp = _number(data["timestamp"], "event timestamp")
    if timestamp is None:
        raise ValueError("event timestamp is not a time")
    return GpuEvent(
        timestamp=timestamp,
        gpu_index=gpu_index,
        kind=recorded_text(data.get("kind", "xid"), "event kind") or "xid",
        xid=_whole(data.get("xid"), "xid"),
        gpu_instance_id=_whole(data.get("gpu_instance_id"), "gpu_instance_id"),
        compute_instance_id=_whole(data.get("compute_instance_id"), "compute_instance_id"),
    )


def _xid_counts(value: Any) -> tuple[tuple[int, int], ...]:
    """``{"79": 2}`` back to ``((79, 2),)``, in the recorded order."""
    counts = []
    for key, count in _object(value, "xid_counts").items():
        if not (key.isascii() and key.isdigit() and len(key) <= 10):
            raise ValueError(f"xid {_excerpt(key, 30)} is not a whole number")
        counts.append((int(key), _count(count, "xid count", _LIMIT)))
    return tuple(counts)


def _health(item: dict[str, Any], gpu_index: int) -> GpuHealth:
    """The GPU's health as recorded: verdict, findings, event timeline, counts (OK when not recorded)."""
    data = _object(item.get("health"), "health")
    if not data:
        return OK_HEALTH
    responding = _flag(data.get("responding", True), "responding")
    return GpuHealth(
        verdict=Severity(data.get("verdict", "OK")),
        findings=tuple(_finding(f) for f in _list(data.get("findings"), "findings")),
        events=tuple(_event(e, gpu_index) for e in _list(data.get("events"), "events")[-EVENTS_PER_GPU:]),
        xid_counts=_xid_counts(data.get("xid_counts")),
        events_note=recorded_text(data.get("events_note"), "events_note"),
        responding=True if responding is None else responding,
        stalled_seconds=_number(data.get("stalled_seconds"), "stalled_seconds"),
        throttle=recorded_text(data.get("throttle"), "throttle"),
        idle_held_bytes=_whole(data.get("idle_held_bytes"), "idle_held_bytes"),
        suspected_hang_seconds=_number(data.get("suspected_hang_seconds"), "suspected_hang_seconds"),
    )


def _gpu_items(data: dict[str, Any]) -> list[Any]:
    items = data["gpus"]
    if type(items) is not list:
        raise TypeError("gpus is not a list")
    if len(items) > MAX_GPUS:
        raise ValueError(f"more than {MAX_GPUS} GPUs")
    return items


def _take_history(buffers: dict[int, HistoryBuffer], static: GpuStatic, sample: GpuSample) -> HistoryBuffer:
    """Add the sample to its GPU's history (:data:`~nvtopy.model.HISTORY_LENGTH` points per chart)."""
    buffer = buffers.get(static.index)
    if buffer is None:
        buffer = buffers[static.index] = HistoryBuffer(HISTORY_LENGTH)
    buffer.append(static, sample)
    return buffer


def snapshot_from_dict(
    data: dict[str, Any], history: dict[int, HistoryBuffer], timelines: dict[int, Timeline] | None = None
) -> Snapshot:
    """Rebuild a snapshot from one line of a recording; ``history`` carries the sparklines across lines,
    ``timelines`` are the charts' history of the whole recording (by GPU index; None: none).

    Every value is checked against the model's type (text, number, true/false) and
    every string unescaped (``unescape_text``). Raises KeyError, ValueError,
    TypeError or AttributeError on a line that is not a snapshot.
    """
    timestamp = _timestamp(data)
    hostname = recorded_text(data["hostname"], "hostname")
    if hostname is None:
        raise TypeError("hostname is not text")
    host = HostInfo(
        hostname=hostname,
        driver_version=recorded_text(data.get("driver_version"), "driver_version"),
        cuda_driver_version=recorded_text(data.get("cuda_driver_version"), "cuda_driver_version"),
        nvml_version=recorded_text(data.get("nvml_version"), "nvml_version"),
        backend=f"replay of {recorded_text(data.get('backend'), 'backend') or 'nvml'}",
    )
    gpus = []
    for item in _gpu_items(data):
        static, sample = _gpu(item, timestamp)
        unavailable = item.get("processes_unavailable")
        listed = item.get("processes") or ()
        if type(listed) not in (list, tuple):
            raise TypeError("processes is not a list")
        processes = tuple(_process(p, static) for p in listed)
        reason = None if unavailable is None else Reason(unavailable)
        buffer = _take_history(history, static, sample)
        gpus.append(
            GpuState(
                static,
                sample,
                processes,
                reason,
                buffer.history(),
                # as the live monitor says it; a log without processes has no list to hint about
                processes_hint=(unmapped_hint(processes) or processes_hint(sample, processes, reason))
                if "processes" in item
                else None,
                health=_health(item, static.index),
                timeline=timelines.get(static.index) if timelines else None,
            )
        )
    sequence = _number(data.get("sequence"), "sequence")
    return Snapshot(
        timestamp=timestamp,
        host=host,
        gpus=tuple(gpus),
        sequence=int(sequence or 0),
        interval=_number(data.get("interval_s"), "interval_s"),
        host_usage=host_usage_from_dict(data.get("host_usage")),  # None: recorded before nvtopy read it
    )


def _history_only(data: dict[str, Any], history: dict[int, HistoryBuffer]) -> None:
    """What a line adds to the charts, without building its processes (to rebuild history fast)."""
    timestamp = _timestamp(data)
    for item in _gpu_items(data):
        _take_history(history, *_gpu(item, timestamp))


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
        return snapshot_from_dict(data, history)
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
                    self._keep(earlier, snapshot_from_dict(data, self._history, self.timelines))
                snapshot = snapshot_from_dict(self._data(handle, position), self._history, self.timelines)
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
        self._show(self.position)
        last = len(self.snapshots) - 1
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
                self._show(self.position)

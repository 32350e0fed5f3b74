"""The JSON contract read back: a recorded line (``record``, ``log --format jsonl``) as a snapshot, trusting nothing.

The encoder is :mod:`nvtopy.formats.contract`; this is its inverse, so the format is
written and read in one place. Each line is turned back into the same immutable
:class:`~nvtopy.model.Snapshot` the live monitor draws: every value is checked
against the model's type (text, number, true/false), every string read back with
:func:`~nvtopy.textsafe.unescape_text`, the reverse of the ``escape_text`` the
writers apply. Its readers: ``nvtopy replay`` (:mod:`nvtopy.sources.replay`, which
adds the sparklines' history, the process hints and the charts) and ``nvtopy report``.

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

Whatever a line holds (values of the wrong type, numbers of 5,000 digits, a
million GPUs), it raises KeyError, ValueError, TypeError or AttributeError, never
anything else; what the line's JSON itself may be is its reader's bound.

Lines of one source read in order (a host's stream for ``nvtopy --ssh``, a recording
played forward) go through one :class:`SnapshotDecoder`, which reuses what a line
repeats of the line before; :func:`snapshot_from_dict` is such a decoder with no line
before. Both check the common case a few C-level passes at a time and send anything
else through the checkers one value at a time: the same snapshot, or the same error.
"""

from __future__ import annotations

import marshal
import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, replace
from datetime import datetime
from itertools import chain, repeat, starmap
from typing import Any, NamedTuple

from ..model import (
    EMPTY_REASONS,
    EVENTS_PER_GPU,
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
    HostInfo,
    HostUsage,
    MigInstance,
    MigUsage,
    NvLink,
    OwnerKind,
    ProcessOwner,
    ProcessType,
    Reason,
    Reasons,
    Severity,
    Snapshot,
    fast_constructor,
    fast_replacer,
    freeze,
)
from ..ranges import FIELD_RANGES
from ..textsafe import excerpt, unescape_text
from .contract import HOST_USAGE_FIELDS, OWNER_STRING_FIELDS, READINGS
from .fields import field_part
from .stream import LIST

__all__ = [
    "MAX_GPUS",
    "MAX_MIG_DEVICES",
    "Placement",
    "RecordedGpu",
    "SnapshotDecoder",
    "gpu_from_dict",
    "host_usage_from_dict",
    "owner_from_dict",
    "recorded_gpus",
    "recorded_text",
    "recorded_timestamp",
    "snapshot_from_dict",
]

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


# ----------------------------------------------------------------- values, checked


def recorded_text(value: Any, name: str) -> str | None:
    """A recorded string, unescaped as the writers escaped it; ``null`` is None. Raises TypeError for a non-string."""
    if value is None:
        return None
    if type(value) is not str:
        raise TypeError(f"{name} is not text")
    return unescape_text(value)


def owner_from_dict(value: Any) -> ProcessOwner | None:
    """:func:`owner_to_dict`'s inverse, trusting nothing: the names unescaped, ``None`` for ``null``.

    The one decoder of a recorded owner (replay and ``report`` both read recordings). A kind
    this version does not know reads as ``cgroup`` (an owner it cannot name). Raises
    TypeError for an owner that is no object, or a name that is not text.
    """
    if value is None:
        return None
    if type(value) is not dict:
        raise TypeError("owner is not an object")
    kind = value.get("kind")
    if type(kind) is not str:
        raise TypeError("owner kind is not text")
    try:
        owner_kind = OwnerKind(kind)
    except ValueError:
        owner_kind = OwnerKind.CGROUP
    names = {name: recorded_text(value.get(name), f"owner {name}") for name in OWNER_STRING_FIELDS}
    uid = value.get("uid")
    if uid is not None and (type(uid) is not int or not 0 <= uid < 2**32):
        uid = None  # not a uid (a float, a negative or huge number): unknown, as a bad figure is N/A
    return ProcessOwner(kind=owner_kind, uid=uid, **names)


def host_usage_from_dict(value: Any) -> HostUsage | None:
    """A recorded ``host_usage`` (replay); anything not a number is N/A, an unknown reason is ``unknown``.

    The common case -- every figure there, a number within the limit, the counts whole -- is built by the model's fast
    constructor (each value out of range still N/A "out of range"): ``nvtopy --ssh`` reads one a host a second, and the
    dataclass's ``__init__`` was most of it. Anything else is read field by field (:func:`_checked_host_usage`).
    """
    if type(value) is dict:
        try:
            row = _HOST_USAGE_ROW(value)
        except KeyError:  # a figure missing: its reason is read
            row = None
        if (
            row is not None
            and _HOST_FIGURE_TYPES.issuperset(map(type, row))
            and _INT_TYPES.issuperset(map(type, _HOST_COUNTS(row)))
            and _within_limit(row)
        ):
            return _new_host_usage(*row, EMPTY_REASONS)
    return _checked_host_usage(value)


def _checked_host_usage(value: Any) -> HostUsage | None:
    """:func:`host_usage_from_dict` field by field: what its common case is held to."""
    if not isinstance(value, dict):
        return None
    values: dict[str, Any] = {}
    reasons: dict[str, Reason] = {}
    for name in HOST_USAGE_FIELDS:
        item = value.get(name)
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            values[name] = int(item) if name in _HOST_INTEGERS and float(item).is_integer() else item
    recorded = value.get("unavailable")
    for name in HOST_USAGE_FIELDS:
        if name in values:
            continue
        reason = recorded.get(name) if isinstance(recorded, dict) else None
        reasons[name] = Reason(reason) if reason in _REASON_VALUES else Reason.UNKNOWN
    return HostUsage(**values, unavailable=freeze(reasons))


_HOST_INTEGERS = frozenset({"cpu_count", "ram_total_bytes", "ram_used_bytes", "swap_total_bytes", "swap_used_bytes"})
_HOST_USAGE_ROW = operator.itemgetter(*HOST_USAGE_FIELDS)
_HOST_COUNTS = operator.itemgetter(*(n for n, name in enumerate(HOST_USAGE_FIELDS) if name in _HOST_INTEGERS))
_HOST_FIGURE_TYPES = frozenset({int, float})
assert (*HOST_USAGE_FIELDS, "unavailable") == tuple(HostUsage.__dataclass_fields__)  # the fast constructor's order
_new_host_usage = fast_constructor(HostUsage)
_REASON_VALUES = frozenset(reason.value for reason in Reason)


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
        reading: int | float = value
        return reading
    raise TypeError(f"{name} is not a number")


def _flag(value: Any, name: str) -> bool | None:
    if value is None or type(value) is bool:
        return value
    raise TypeError(f"{name} is not true or false")


def _count(value: Any, name: str, limit: int) -> int:
    if type(value) is not int or not 0 <= value < limit:
        raise ValueError(f"{name} {excerpt(value, 30)} is not a whole number from 0 to {limit - 1}")
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
            raise ValueError(f"pstate {excerpt(value, 30)} is not P0 to P15")
        value = int(digits)
    if type(value) is not int:
        raise TypeError("pstate is not P0 to P15")
    return value if 0 <= value <= 32 else None


def _reasons(data: dict[str, Any], allowed: set[str]) -> dict[str, Reason]:
    return {k: Reason(v) for k, v in (data.get("unavailable") or {}).items() if k in allowed}


def _process(data: dict[str, Any], gpu: GpuStatic) -> GpuProcess:
    status = recorded_text(data.get("status", "running"), "status")
    flags = _texts(data.get("flags"), "flags") or ()
    fields = _fields(data, _PROCESS_FIELDS)
    if gpu.host is not None:  # a GPU placed in a fleet (SnapshotDecoder.decode's place): its host's process
        fields["host"] = gpu.host
    return GpuProcess(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        pid=_count(data["pid"], "pid", 2**32),
        type=ProcessType(data["type"]),
        **fields,
        status="running" if status is None else status,
        foreign=bool(_flag(data.get("foreign", False), "foreign")),
        unavailable=freeze(_reasons(data, _PROCESS_REASON_KEYS)),
        owner=owner_from_dict(data.get("owner")),
        flags=flags,
        gpu_instance_id=_whole(data.get("gpu_instance_id"), "gpu_instance_id"),
        compute_instance_id=_whole(data.get("compute_instance_id"), "compute_instance_id"),
    )


def recorded_timestamp(data: dict[str, Any]) -> float:
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
            flat.setdefault(field_part(name)[1], values.get(key))
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
    readings: dict[str, Any] = {name: _whole(value.get(name), f"MIG device {name}") for name in MIG_USAGE_FIELDS}
    # Its own activity (GPM; absent from recordings made before it: None).
    readings.update({name: _reading(value.get(name), f"MIG device {name}") for name in MIG_GPM_FIELDS})
    usage = MigUsage(index=index, unavailable=freeze(_reasons(value, _MIG_USAGE_REASON_KEYS)), **readings)
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


def _checked_gpu(item: dict[str, Any], timestamp: float) -> tuple[GpuStatic, GpuSample]:
    """The static and sampled fields of one GPU of a line, every value through its checker (:func:`gpu_from_dict`)."""
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
            raise ValueError(f"xid {excerpt(key, 30)} is not a whole number")
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


def recorded_gpus(data: dict[str, Any]) -> list[Any]:
    items = data["gpus"]
    if type(items) is not list:
        raise TypeError("gpus is not a list")
    if len(items) > MAX_GPUS:
        raise ValueError(f"more than {MAX_GPUS} GPUs")
    return items


@dataclass(frozen=True, slots=True)
class RecordedGpu:
    """One GPU of a recorded line, decoded: what its :class:`~nvtopy.model.GpuState` is made of."""

    static: GpuStatic
    sample: GpuSample
    processes: tuple[GpuProcess, ...]
    processes_unavailable: Reason | None
    processes_listed: bool  # the line has a process list (a log without --processes has none)
    health: GpuHealth

    def state(self) -> GpuState:
        """The GPU as recorded, and nothing more: no history, no process hint, no charts (a source's to add)."""
        return GpuState(self.static, self.sample, self.processes, self.processes_unavailable, health=self.health)


def _checked_host(data: dict[str, Any]) -> HostInfo:
    hostname = recorded_text(data["hostname"], "hostname")
    if hostname is None:
        raise TypeError("hostname is not text")
    return HostInfo(
        hostname=hostname,
        driver_version=recorded_text(data.get("driver_version"), "driver_version"),
        cuda_driver_version=recorded_text(data.get("cuda_driver_version"), "cuda_driver_version"),
        nvml_version=recorded_text(data.get("nvml_version"), "nvml_version"),
        backend=f"replay of {recorded_text(data.get('backend'), 'backend') or 'nvml'}",
    )


# ----------------------------------------------------------------- the common case, in a few C-level steps
#
# Why: a line of 8 GPUs holds about 2,500 values; checked one by one (a Python call each) they cost
# more than building the model objects. In the common case -- every value of the type its field
# wants, no figure past 2**64 -- an object's values are checked by a few C-level passes (map, issuperset,
# sum) and the object built at once. A part (a GPU, a process, an owner) with any value outside the
# common case goes whole through the checkers above, in the order they always ran: the same value, or
# the same error. Nothing below raises but what those checkers raise.

_NONE = type(None)
_READING_TYPES = frozenset({int, float, _NONE})
_TEXT_TYPES = frozenset({str, _NONE})
_FLAG_TYPES = frozenset({bool, _NONE})
_WHOLE_TYPES = frozenset({int, _NONE})
_STR_TYPES = frozenset({str})
_INT_TYPES = frozenset({int})
_NO_FLAGS_TYPES = frozenset({list, _NONE})  # a process's flags: [] or null in the common case
_EMPTY_TYPES = frozenset({dict, _NONE})  # a process's unavailable: {} or null in the common case
_REASON_OF = {reason.value: reason for reason in Reason}
_PROCESS_TYPE_OF = {kind.value: kind for kind in ProcessType}
_OWNER_KIND_OF = {kind.value: kind for kind in OwnerKind}
_PSTATE_OF = {f"P{number}": number for number in range(33)}  # _pstate's common case: "P0" .. "P32"
_SAMPLE_FIELD_NAMES = frozenset(GpuSample.__dataclass_fields__)
_LINK_KEYS = tuple(NvLink.__dataclass_fields__)  # link, active, version, rx, tx, errors, remote: NvLink's order
_HEALTH_KEYS = (
    "verdict",
    "findings",
    "events",
    "xid_counts",
    "events_note",
    "responding",
    "stalled_seconds",
    "throttle",
    "idle_held_bytes",
    "suspected_hang_seconds",
)  # what _health reads of a GPU's health object
_LINK_ROW = operator.itemgetter(*_LINK_KEYS)
# READINGS as (group, keys, model field names): _with_readings' flattening in one update per group.
_READING_GROUPS = tuple(
    (group, tuple(key for key, _ in fields), tuple(field_part(name)[1] for _, name in fields))
    for group, fields in READINGS.items()
)


class _Uncommon:
    """What a common-case reader says of a value it leaves to the checkers (a value can be None)."""


_UNCOMMON = _Uncommon()


def _within_limit(values: tuple[Any, ...]) -> bool:
    """Every figure (int, float or None) finite and within 2**64 either way: what _number passes unchanged."""
    try:
        return bool(sum(map(abs, filter(None, values))) < _LIMIT)  # NaN and the infinities fail this
    except OverflowError:  # an integer too large for a float, beside a float
        return False


_KIND_RANK: dict[Callable[[Any, str], Any], int] = {_reading: 0, _number: 1, recorded_text: 2, _flag: 3}


class _Reader:
    """One model class's plain fields (:func:`_converters`) read from a JSON object in the common case.

    The names are ordered by checker -- readings, numbers, texts, flags -- so that each kind is one
    slice, checked by one C-level pass: every value's type among those its checker takes, the numbers
    within :func:`_number`'s limit, the texts unescaped where one has an escape.
    """

    __slots__ = ("flags", "names", "numbers", "texts")

    def __init__(self, converters: tuple[tuple[str, Callable[[Any, str], Any]], ...]) -> None:
        ordered = sorted(converters, key=lambda item: (_KIND_RANK[item[1]], item[0]))
        self.names = tuple(name for name, _ in ordered)
        ranks = [_KIND_RANK[convert] for _, convert in ordered]
        self.numbers = ranks.count(0)
        self.texts = self.numbers + ranks.count(1)
        self.flags = self.texts + ranks.count(2)

    def values(self, data: dict[str, Any], defaults: tuple[Any, ...] | None = None) -> tuple[Any, ...] | None:
        """The values in ``names`` order, as :func:`_fields` gives them; None where one is not the common case.

        ``defaults``: a value per name for the names ``data`` lacks (a GPU's health readings, under the model's
        names: what :func:`_with_readings` lays flat, the top level winning).
        """
        return self.checked(self.raw(data, defaults))

    def raw(self, data: dict[str, Any], defaults: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
        """The values in ``names`` order as they are, unchecked (see :meth:`values`)."""
        return tuple(map(data.get, self.names) if defaults is None else map(data.get, self.names, defaults))

    def checked(self, values: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """:meth:`raw`'s values as :meth:`values` gives them; None where one is not the common case."""
        numbers, texts, flags = self.numbers, self.texts, self.flags
        if not (
            _READING_TYPES.issuperset(map(type, values[:texts]))
            and _TEXT_TYPES.issuperset(map(type, values[texts:flags]))
            and _FLAG_TYPES.issuperset(map(type, values[flags:]))
            and (numbers == texts or _within_limit(values[numbers:texts]))
        ):
            return None
        if texts < flags and "\\" in "".join(filter(None, values[texts:flags])):
            values = (*values[:texts], *map(unescape_text, values[texts:flags]), *values[flags:])
        return values


_STATIC_READER = _Reader(_STATIC_FIELDS)
_SAMPLE_READER = _Reader(_SAMPLE_FIELDS)
_PROCESS_READER = _Reader(_PROCESS_FIELDS)
# A process's keys, as one row: what _process reads besides the plain fields, then those (in _PROCESS_READER's order).
_PROCESS_ROW = operator.itemgetter(
    "pid",
    "type",
    "status",
    "flags",
    "foreign",
    "unavailable",
    "owner",
    "gpu_instance_id",
    "compute_instance_id",
    *_PROCESS_READER.names,
)
# What the columns of _common_processes fill, and GpuProcess's fields in order with the default of each
# other one: positional arguments, the cheapest call. Where a field has no plain default (a factory: a
# field added to the model that no line has), processes are built by name, one by one.
_PROCESS_FILLED = frozenset(
    {
        *_PROCESS_READER.names,
        *("gpu_index", "gpu_uuid", "pid", "type", "status", "foreign", "unavailable", "owner", "flags"),
        *("gpu_instance_id", "compute_instance_id"),
    }
)
# The model's fast constructors (model.fast_constructor: every ranged value still checked, the same objects).
_NEW_SAMPLE = fast_constructor(GpuSample)
_NEW_PROCESS = fast_constructor(GpuProcess)
_NEW_LINK = fast_constructor(NvLink)
_REPLACE_PROCESS = fast_replacer(GpuProcess)  # a process's patched figures on the last line's (model.fast_replacer)
_SAMPLE_EXTRA = ("timestamp", "lost", "pstate", "throttle_reasons", "nvlinks", "mig_usage", "unavailable")
# From (the sample reader's values, then _SAMPLE_EXTRA's) to GpuSample's fields in their order.
_SAMPLE_ORDER = operator.itemgetter(
    *((*_SAMPLE_READER.names, *_SAMPLE_EXTRA).index(name) for name in GpuSample.__dataclass_fields__)
)
_PROCESS_POSITIONS = tuple((name, field.default) for name, field in GpuProcess.__dataclass_fields__.items())
_PROCESSES_BY_POSITION = all(name in _PROCESS_FILLED or default is not MISSING for name, default in _PROCESS_POSITIONS)

# For a line patched from the last one (SnapshotDecoder._patched): the keys a GPU's patch may hold to be built from
# its last parts (its sampled figures, its processes); a process's figures (readings and numbers: a type and a limit
# to check, no text to unescape).
_PATCHABLE_GPU_KEYS = frozenset({*_SAMPLE_READER.names, "processes"})
_PROCESS_FIGURES = frozenset(_PROCESS_READER.names[: _PROCESS_READER.texts])
_SAMPLE_AT = {name: n for n, name in enumerate(_SAMPLE_READER.names)}
_UNCHANGED = object()
# A GPU's health patch may change only its readings' sampled figures and its links (the far side reads the NVLinks of
# every GPU at once every 5 s, PCIe and memory health more slowly): those figures and the links are read again from the
# line, the rest is the last line's. By group: the readings' keys that are the sample's figures (not the static ones,
# such as a link count: a GPU whose patch changes one is decoded whole), and what of the group a patch may change.
_READING_SAMPLE_KEYS = {
    group: tuple((key, name) for key, name in zip(keys, names, strict=True) if name in _SAMPLE_AT)
    for group, keys, names in _READING_GROUPS
}
_PATCHABLE_READING_KEYS = {
    group: frozenset({*(key for key, _ in figures), *(("links",) if group == "nvlink" else ())})
    for group, figures in _READING_SAMPLE_KEYS.items()
}
# What else a GPU's patch may hold to be built from its last parts: its health, throttle reasons and P-state, read
# again from the line.
_NOT_FIGURES = frozenset({"processes", "health", "throttle_reasons", "pstate"})
_PATCHABLE_WITH_HEALTH = _PATCHABLE_GPU_KEYS | _NOT_FIGURES


def _patched_readings(change: Any, item: Any) -> list[tuple[str, dict[str, Any], dict[str, Any]]] | None:
    """Each reading group the GPU's health patch (``change``) changes: (its name, its values in the line's GPU
    ``item``, its patch); None where the patch changes more of a group than its sampled figures and links (a static
    one, such as the link count). The rest of the health (verdict, findings, events) is not readings: the GPU's
    health is read again from the line, the last line's where its values are the very same objects."""
    if type(change) is not dict or type(item) is not dict:
        return None
    groups = change.get("readings", _UNCHANGED)
    if groups is _UNCHANGED:
        return []
    health = item.get("health")
    readings = health.get("readings") if type(health) is dict else None
    if type(groups) is not dict or not groups or type(readings) is not dict:
        return None
    made = []
    for group, group_change in groups.items():
        allowed = _PATCHABLE_READING_KEYS.get(group)
        values = readings.get(group)
        if allowed is None or type(group_change) is not dict or not group_change.keys() <= allowed:
            return None
        if type(values) is not dict:
            return None
        made.append((group, values, group_change))
    return made


def _sample_states(item: Any) -> tuple[int | None, tuple[str, ...] | None] | None:
    """The GPU's P-state and throttle reasons in the line, as :meth:`SnapshotDecoder._common_gpu` reads them; None
    where one is not the common case."""
    pstate = item.get("pstate")
    if pstate is not None:
        pstate = _PSTATE_OF.get(pstate) if type(pstate) is str else None
        if pstate is None:
            return None
    throttle = item.get("throttle_reasons")
    if throttle is not None:
        if type(throttle) is not list or not _STR_TYPES.issuperset(map(type, throttle)):
            return None
        throttle = tuple(map(unescape_text, throttle)) if "\\" in "".join(throttle) else tuple(throttle)
    return pstate, throttle


_LINK_RATES = frozenset({"rx_bytes_per_s", "tx_bytes_per_s"})  # a link's figures that move between the far side's reads
_DICT_TYPES = frozenset({dict})


def _list_patch(change: Any, length: int) -> list[Any] | None:
    """A stream patch of a list of ``length`` objects (``{"$list": [a patch each]}``); None where it is else."""
    if type(change) is not dict or len(change) != 1:
        return None
    items = change.get(LIST)
    return items if type(items) is list and len(items) == length else None


class _KeptGpu(NamedTuple):
    """One GPU of the last line, as a patch of its figures starts from it (a tuple: one is made per GPU a line, and a
    frozen dataclass's ``__init__`` costs four times as much)."""

    static: GpuStatic
    sample_parts: tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]] | None  # raw, checked, the rest
    processes: tuple[GpuProcess, ...]
    reason: Reason | None
    listed: bool
    health: GpuHealth
    sample: GpuSample

    def recorded(self) -> RecordedGpu:
        return _NEW_RECORDED(self.static, self.sample, self.processes, self.reason, self.listed, self.health)


@dataclass(frozen=True, slots=True)
class _Kept:
    """The last line's GPUs, placed from ``first`` under ``host``."""

    first: int
    host: str
    gpus: list[_KeptGpu]


_NEW_RECORDED = fast_constructor(RecordedGpu)  # a GPU of a line, for the source's GpuState (model.fast_constructor)


def _common_reasons(value: Any, allowed: set[str]) -> dict[str, Reason] | None:
    """:func:`_reasons` of an ``unavailable`` object of known reasons; None where it is anything else."""
    if not value:
        return {}
    if type(value) is not dict:
        return None
    reasons = {}
    for key, text in value.items():
        if key in allowed:
            reason = _REASON_OF.get(text) if type(text) is str else None
            if reason is None:
                return None
            reasons[key] = reason
    return reasons


@dataclass(frozen=True, slots=True)
class _Columns:
    """Process rows checked a column at a time (the common case): the columns, and each row's owner."""

    columns: tuple[tuple[Any, ...], ...]  # _PROCESS_ROW's keys, then _PROCESS_READER's names
    owners: list[ProcessOwner | None]

    @property
    def hosts(self) -> tuple[Any, ...]:
        """Each row's own ``host`` (a recording of --remote or --prometheus; None elsewhere)."""
        return self.columns[9 + _PROCESS_READER.names.index("host")]


_LinkColumns = tuple[tuple[Any, ...], ...]  # link, active, version, rx, tx, errors, remote: each link's, checked
_LinkEntry = tuple[bytes | None, tuple[NvLink, ...], Any, _LinkColumns | None]


class _Memo:
    """The parts of one line, by what each was built of (its checked values): what the next line may reuse."""

    __slots__ = (
        "healths",
        "hosts",
        "links",
        "owners",
        "reasons",
        "same_health",
        "same_owner",
        "same_readings",
        "same_reasons",
        "same_static",
        "statics",
    )

    def __init__(self) -> None:
        self.hosts: dict[tuple[Any, ...], HostInfo] = {}
        self.reasons: dict[tuple[tuple[str, str], ...], tuple[Reasons, Reasons, bool]] = {}
        self.statics: dict[int, tuple[tuple[Any, ...], GpuStatic]] = {}  # by GPU index: (what it was built of, it)
        # by GPU index: key, links, the list, and the checked columns they were built of (None: not the common case)
        self.links: dict[int, _LinkEntry] = {}
        self.owners: dict[tuple[Any, ...], ProcessOwner] = {}
        self.healths: dict[bytes, GpuHealth] = {}
        # Known by identity, by GPU (the owners: by the id of the JSON object, which the entry holds):
        # (the JSON it was made of, held and compared by identity, ..., what was made of it)
        self.same_reasons: dict[int, tuple[Any, ...]] = {}
        self.same_readings: dict[int, tuple[Any, ...]] = {}
        self.same_static: dict[int, tuple[Any, ...]] = {}
        self.same_health: dict[int, tuple[Any, ...]] = {}
        self.same_owner: dict[int, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return sum(
            len(table)
            for table in (
                *(self.hosts, self.reasons, self.statics, self.links, self.owners, self.healths),
                *(self.same_reasons, self.same_readings, self.same_static, self.same_health, self.same_owner),
            )
        )


# marshal's format 2 for the memo keys: from format 3 on, an object that has other references is written as a
# back-reference where it repeats, so the bytes of equal values depend on who else holds them (a patched line's
# unchanged parts are shared): the same links would miss their memo every other line. Format 2 writes values only.
_MARSHAL = 2


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a line's GPUs go in a fleet (``nvtopy --ssh``): from index ``first``, under ``host``, dated ``taken``."""

    first: int
    host: str
    taken: float


class SnapshotDecoder:
    """The lines of one source -- a host's stream, a recording played in order -- decoded one after another.

    Why: ``nvtopy --ssh`` decodes a line per host per second (64 hosts of 8 GPUs: the monitor's own
    CPU must stay under 100 ms a refresh), and most of a line is what the line before said. Each part
    is checked as :func:`snapshot_from_dict` checks it; then, where the previous line (or an earlier
    part of this one) built a part of the very same values -- a GPU's static part, its reasons, an
    NVLink, a process owner, a GPU's health -- that frozen model object is reused instead of built
    again. The key is the checked values the object is made of, types included (1, 1.0 and true are
    equal to Python, not to the decoder), so a reused object is the one the line would have built:
    the snapshots are equal to :func:`snapshot_from_dict`'s, and a line raises what it raises.

    A part the previous line had as the very same JSON object (a patched stream's line shares every
    unchanged part with the line before: :class:`~nvtopy.formats.stream.StreamReader`) is known by
    identity, without reading it again; so a line's JSON must not be changed after it was decoded
    (each line is new JSON, or such a patched copy). Identity is only compared with objects the memo
    still holds, so an id is never that of another object.

    Bounded: only this line's and the previous line's parts are kept (:attr:`remembered`), whatever
    comes and goes between lines. Not thread-safe: one decoder per source, used by one thread.
    """

    __slots__ = ("_before", "_from_patch", "_kept", "_now", "_parts")

    def __init__(self) -> None:
        self._now = _Memo()
        self._before = _Memo()
        self._parts: tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]] | None = None
        self._kept: _Kept | None = None  # the last line's GPUs as a patch of the next one starts from them
        # The line is a patched copy of the one before: a part that is not the very same object changed (the
        # stream's patches carry only what changed), so no key of its values is made to find it among the old
        self._from_patch = False

    @property
    def remembered(self) -> int:
        """How many parts are kept for the next line (the last two lines' at most)."""
        return len(self._now) + len(self._before)

    def decode(
        self,
        data: dict[str, Any],
        gpu_state: Callable[[RecordedGpu], GpuState] = RecordedGpu.state,
        *,
        place: Placement | None = None,
        patch: Any = None,
    ) -> Snapshot:
        """The snapshot of the source's next line; as :func:`snapshot_from_dict`, with the parts it repeats reused.

        ``place``: the line's GPUs as lines of a fleet (``--ssh``), built so the first time rather than
        copied after: each GPU's index from ``place.first`` on (its own index kept as ``host_index``),
        ``place.host`` on it and on its processes, and its sample dated ``place.taken``.

        ``patch``: the stream patch (:mod:`~nvtopy.formats.stream`) that made ``data`` of the line this
        decoder decoded last, with the same ``place`` apart from its date (None: unknown). Where it
        changes only GPUs' sampled figures and their processes' (the common case: a second of a busy
        host), the line is decoded from the patch: each GPU's static part, health and links are the
        last line's objects, and only the changed values are read and checked -- into the very
        snapshot the whole line would make (``tests/formats/test_stream_decoder.py`` holds them equal).
        Anything else in the patch: the whole line is decoded.

        Raises KeyError, ValueError, TypeError or AttributeError on a line that is not a snapshot
        (the decoder stays usable: the next line is decoded as any other).
        """
        kept, self._kept = self._kept, None
        self._from_patch = patch is not None
        if patch is not None and kept is not None and place is not None and type(patch) is dict:
            patched = self._patched(data, patch, kept, gpu_state, place)
            if patched is not None:
                return patched
        self._before, self._now = self._now, _Memo()
        timestamp = recorded_timestamp(data)
        host = self._host(data)
        items = recorded_gpus(data)
        every = self._every_process(items)
        if every is not None:
            return _snapshot(data, timestamp, host, self._gpus_of(items, every, timestamp, gpu_state, place))
        gpus: list[GpuState] = []
        for item in items:
            if place is None:
                static, sample = self._gpu(item, timestamp)
            else:
                static, sample = self._placed_gpu(item, place, len(gpus))
            unavailable = item.get("processes_unavailable")
            listed = item.get("processes") or ()
            if type(listed) not in (list, tuple):
                raise TypeError("processes is not a list")
            processes = self._processes(listed, static)
            reason = None if unavailable is None else Reason(unavailable)
            health = self._health(item, static.index)
            gpus.append(gpu_state(_NEW_RECORDED(static, sample, processes, reason, "processes" in item, health)))
        return _snapshot(data, timestamp, host, gpus)

    def _gpus_of(
        self,
        items: list[Any],
        every: tuple[list[int], _Columns | None],
        timestamp: float,
        gpu_state: Callable[[RecordedGpu], GpuState],
        place: Placement | None,
    ) -> list[GpuState]:
        """The loop above, for a line whose processes are all of the common case (checked at once, so none raises):
        each GPU's other parts in the same order (the same first error), then every process in one pass."""
        counts, columns = every
        parts: list[tuple[GpuStatic, GpuSample, Reason | None, bool, GpuHealth]] = []
        samples: list[tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]] | None] = []
        for item in items:
            if place is None:
                static, sample = self._gpu(item, timestamp)
            else:
                static, sample = self._placed_gpu(item, place, len(parts))
                samples.append(self._parts)
            unavailable = item.get("processes_unavailable")
            reason = None if unavailable is None else Reason(unavailable)
            parts.append((static, sample, reason, "processes" in item, self._health(item, static.index)))
        processes: tuple[GpuProcess, ...] = ()
        if columns is not None:
            statics = [part[0] for part in parts]
            hosts: list[Any] = []
            at = 0
            for static, count in zip(statics, counts, strict=True):  # the GPU's host, else each process's own
                hosts.extend(repeat(static.host, count) if static.host is not None else columns.hosts[at : at + count])
                at += count
            processes = self._built_processes(
                columns,
                chain.from_iterable(map(repeat, [static.index for static in statics], counts)),
                chain.from_iterable(map(repeat, [static.uuid for static in statics], counts)),
                hosts,
            )
        gpus = []
        at = 0
        kept: list[_KeptGpu] = []
        for (static, sample, reason, listed, health), count in zip(parts, counts, strict=True):
            mine = processes[at : at + count] if count else ()
            at += count
            gpus.append(gpu_state(_NEW_RECORDED(static, sample, mine, reason, listed, health)))
            if place is not None:
                kept.append(_KeptGpu(static, samples[len(kept)], mine, reason, listed, health, sample))
        if place is not None:
            self._kept = _Kept(place.first, place.host, kept)
        return gpus

    def _patched(
        self,
        data: dict[str, Any],
        patch: dict[str, Any],
        kept: _Kept,
        gpu_state: Callable[[RecordedGpu], GpuState],
        place: Placement,
    ) -> Snapshot | None:
        """:meth:`decode` of a line that ``patch`` made of the last one, from the last one's parts: a GPU whose patch
        changes only sampled figures and its processes' is built from its own last parts, any other GPU as the whole
        line builds it. None where the patch does not fit the last line, or a GPU's decoding fails (the whole line is
        decoded then, and raises its own first error)."""
        if place.first != kept.first or place.host != kept.host:
            return None
        changes: Any = patch.get("gpus", _UNCHANGED)
        if changes is _UNCHANGED:
            changes = [{}] * len(kept.gpus)
        else:
            changes = _list_patch(changes, len(kept.gpus))
            if changes is None:
                return None
            whole = sum(
                1 for change in changes if type(change) is not dict or not change.keys() <= _PATCHABLE_WITH_HEALTH
            )
            if 2 * whole > len(changes):  # most GPUs as the whole line decodes them: cheaper all at once
                return None
        before, self._before, self._now = self._before, self._now, _Memo()
        last, memo = self._before, self._now
        # What the memo knew of each GPU (by its index: as many as the host has), kept for the next whole line's
        # reuse of what a GPU built from its parts still shares; a GPU decoded whole below writes its own over it.
        memo.same_static.update(last.same_static)
        memo.statics.update(last.statics)
        memo.links.update(last.links)
        memo.same_health.update(last.same_health)
        memo.same_reasons.update(last.same_reasons)
        memo.same_readings.update(last.same_readings)
        # Processes patched keep their owners, still known -- while they are about as many as the processes
        # (owners of processes that ended are let go: the memo stays the size of two lines' parts)
        if len(last.same_owner) <= 2 * sum(len(gpu.processes) for gpu in kept.gpus) + 16:
            memo.same_owner.update(last.same_owner)
            memo.owners.update(last.owners)
        try:
            made = self._patched_gpus(data, kept, changes, gpu_state, place)
        except (KeyError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError):
            made = None
        if made is None:  # as if this had not been tried: the whole line is decoded from the same memos
            self._now, self._before = self._before, before
            return None
        timestamp, host, states, now = made
        self._kept = _Kept(kept.first, kept.host, now)
        return _snapshot(data, timestamp, host, states)

    def _patched_gpus(
        self,
        data: dict[str, Any],
        kept: _Kept,
        changes: list[Any],
        gpu_state: Callable[[RecordedGpu], GpuState],
        place: Placement,
    ) -> tuple[float, HostInfo, list[GpuState], list[_KeptGpu]] | None:
        timestamp = recorded_timestamp(data)
        host = self._host(data)
        items: list[Any] | None = None
        taken = place.taken
        states: list[GpuState] = []
        now: list[_KeptGpu] = []
        for position, (gpu, change) in enumerate(zip(kept.gpus, changes, strict=True)):
            if type(change) is not dict:
                return None
            if items is None and "health" in change:  # its NVLink readings are read from the line
                items = recorded_gpus(data)
                if len(items) != len(kept.gpus):
                    return None
            item = None if items is None else items[position]
            made = self._patched_gpu(gpu, change, taken, item) if gpu.sample_parts is not None else None
            if made is None:  # this GPU as the whole line decodes it
                if items is None:
                    items = recorded_gpus(data)
                    if len(items) != len(kept.gpus):
                        return None
                made = self._whole_gpu(items[position], place, position, gpu, change)
            states.append(gpu_state(made.recorded()))
            now.append(made)
        return timestamp, host, states, now

    def _patched_gpu(self, gpu: _KeptGpu, change: dict[str, Any], taken: float, item: Any = None) -> _KeptGpu | None:
        """The GPU from its last parts and a patch of its sampled figures, processes and NVLink readings; None where it
        is more. ``item``: the GPU in the patched line (needed where the patch has ``health``)."""
        raw, values, extras = gpu.sample_parts  # type: ignore[misc]  # not None: said by the caller
        processes, health = gpu.processes, gpu.health
        if change:
            groups = None
            if not change.keys() <= _PATCHABLE_GPU_KEYS:
                if not change.keys() <= _PATCHABLE_WITH_HEALTH:
                    return None  # a static field, reasons, lost, MIG devices, ...
                if "health" in change:
                    groups = _patched_readings(change["health"], item)
                    if groups is None:
                        return None  # a static reading
                if "throttle_reasons" in change or "pstate" in change:
                    states = _sample_states(item)
                    if states is None:
                        return None  # not the common case: the whole GPU's checks say what
                    extras = (extras[0], *states, *extras[3:])
            if len(change) > ("processes" in change):  # the raw values with the patch's, checked as a line's
                figures = list(raw)
                at = _SAMPLE_AT
                for key, value in change.items():
                    if key not in _NOT_FIGURES:
                        figures[at[key]] = value
                for group, readings, group_change in groups or ():
                    for key, name in _READING_SAMPLE_KEYS[group]:  # where the GPU has none of its own (_readings')
                        figures[at[name]] = item.get(name, readings.get(key))
                    if "links" in group_change:
                        index = gpu.static.host_index  # the GPU's own index: its links' key, as _common_gpu's
                        links = readings.get("links")
                        nvlinks = None
                        if links is not None and index is not None:
                            nvlinks = self._rates_patched(index, extras[3], links, group_change["links"])
                            if nvlinks is None:  # read whole: a column at a time is cheaper than each link's patch
                                nvlinks = self._nvlinks(index, links)
                        if nvlinks is None and links is not None:
                            return None  # a link not of the common case: the whole GPU's checks say what
                        extras = (*extras[:3], nvlinks, *extras[4:])
                raw = tuple(figures)
                values = _SAMPLE_READER.checked(raw)
                if values is None:
                    return None
            if "processes" in change:
                patched = self._patched_processes(processes, change["processes"])
                if patched is None:
                    return None
                processes = patched
            if groups is not None:  # the last line's where its values are the very same objects
                health = self._health(item, gpu.static.index)
        sample = _NEW_SAMPLE(*_SAMPLE_ORDER((*values, taken, *extras)))
        return _KeptGpu(gpu.static, (raw, values, extras), processes, gpu.reason, gpu.listed, health, sample)

    def _whole_gpu(
        self, item: Any, place: Placement, position: int, last: _KeptGpu, change: dict[str, Any]
    ) -> _KeptGpu:
        """One GPU of a line as :meth:`decode`'s loop decodes it (raises what it raises); its processes patched where
        its static part is the last line's and they only changed figures."""
        static, sample = self._placed_gpu(item, place, position)
        parts = self._parts
        unavailable = item.get("processes_unavailable")
        listed = item.get("processes") or ()
        if type(listed) not in (list, tuple):
            raise TypeError("processes is not a list")
        processes: tuple[GpuProcess, ...] | None = None
        if static is last.static:
            processes = (
                self._patched_processes(last.processes, change["processes"])
                if "processes" in change
                else last.processes
            )
        if processes is None:
            processes = self._processes(listed, static)
        reason = None if unavailable is None else Reason(unavailable)
        health = self._health(item, static.index)
        return _KeptGpu(static, parts, processes, reason, "processes" in item, health, sample)

    @staticmethod
    def _patched_processes(processes: tuple[GpuProcess, ...], change: Any) -> tuple[GpuProcess, ...] | None:
        """A GPU's processes with a patch of their figures applied; None where it is more (a process came or went, a
        text changed) or a value is not the common case (every changed figure checked at once, as a line's are)."""
        changes = _list_patch(change, len(processes))
        if changes is None:
            return None
        figures: list[Any] = []
        for process, fields in zip(processes, changes, strict=True):
            if fields and (type(fields) is not dict or process.unavailable or not fields.keys() <= _PROCESS_FIGURES):
                return None  # a value out of range before (its reason must go with it), or not figures alone
            if fields:
                figures.extend(fields.values())
        if not (_READING_TYPES.issuperset(map(type, figures)) and _within_limit(tuple(figures))):
            return None
        replace = _REPLACE_PROCESS
        return tuple(
            replace(process, fields) if fields else process for process, fields in zip(processes, changes, strict=True)
        )

    def _every_process(self, items: list[Any]) -> tuple[list[int], _Columns | None] | None:
        """Every GPU's processes as rows, checked a column at a time for the whole line: (processes per GPU, the
        checked columns); None where a GPU or a process is not the common case (then GPU by GPU, as always)."""
        if not _PROCESSES_BY_POSITION:
            return None
        counts = []
        rows: list[tuple[Any, ...]] = []
        try:
            for item in items:
                listed = item.get("processes") if type(item) is dict else None
                if type(item) is not dict or (listed and type(listed) is not list):
                    return None
                counts.append(len(listed) if listed else 0)
                if listed:
                    rows.extend(map(_PROCESS_ROW, listed))
        except (KeyError, TypeError):  # a process without one of the keys, or not an object
            return None
        if not rows:
            return counts, None
        columns = self._common_columns(rows)
        return None if columns is None else (counts, columns)

    # -- the host

    def _host(self, data: dict[str, Any]) -> HostInfo:
        key = (
            data["hostname"],
            data.get("driver_version"),
            data.get("cuda_driver_version"),
            data.get("nvml_version"),
            data.get("backend"),
        )
        if type(key[0]) is not str or not _TEXT_TYPES.issuperset(map(type, key)):
            return _checked_host(data)
        host = self._now.hosts.get(key) or self._before.hosts.get(key) or _checked_host(data)
        self._now.hosts[key] = host
        return host

    # -- a GPU's static and sampled parts

    def _gpu(self, item: Any, timestamp: float) -> tuple[GpuStatic, GpuSample]:
        parts = self._common_gpu(item, timestamp) if type(item) is dict else None
        return _checked_gpu(item, timestamp) if parts is None else parts

    def _placed_gpu(self, item: Any, place: Placement, position: int) -> tuple[GpuStatic, GpuSample]:
        index = place.first + position
        self._parts = None
        parts = self._common_gpu(item, place.taken, (index, place.host)) if type(item) is dict else None
        if parts is not None:
            return parts
        self._parts = None
        static, sample = _checked_gpu(item, place.taken)  # the uncommon case: checked, then placed
        return replace(static, index=index, host=place.host, host_index=static.index), sample

    def _gpu_reasons(self, value: Any, slot: int | None = None) -> tuple[Reasons, Reasons, bool] | None:
        """The GPU's ``unavailable``: the static part's, the sample's, and whether ``mig_usage`` is missing."""
        if not value:
            return EMPTY_REASONS, EMPTY_REASONS, False
        if slot is not None:
            same = self._before.same_reasons.get(slot)
            if same is not None and same[0] is value:  # the very object of the line before
                self._now.same_reasons[slot] = same
                return same[1]  # type: ignore[no-any-return]
        known = self._reasons_of(value)
        if known is not None and slot is not None:
            self._now.same_reasons[slot] = (value, known)
        return known

    def _reasons_of(self, value: Any) -> tuple[Reasons, Reasons, bool] | None:
        if type(value) is not dict or not _STR_TYPES.issuperset(map(type, value.values())):
            return None
        key = tuple(value.items())
        known = self._now.reasons.get(key) or self._before.reasons.get(key)
        if known is None:
            reasons = _common_reasons(value, _GPU_REASON_KEYS)
            if reasons is None:
                return None
            known = (
                freeze({k: v for k, v in reasons.items() if k in _STATIC_KEYS}),
                freeze({k: v for k, v in reasons.items() if k in _SAMPLE_FIELD_NAMES}),
                "mig_usage" in reasons,
            )
        self._now.reasons[key] = known
        return known

    def _readings(self, readings: dict[str, Any], slot: int | None) -> tuple[Any, Any, Any] | None:
        """A GPU's health readings under the model's names (:func:`_with_readings`): a default per static and
        sample field, and the links; the line before's where the readings are the very same object."""
        if slot is not None:
            same = self._before.same_readings.get(slot)
            if same is not None and same[0] is readings:
                self._now.same_readings[slot] = same
                return same[1]  # type: ignore[no-any-return]
        flat: dict[str, Any] = {}
        for group, keys, names in _READING_GROUPS:
            values = readings.get(group)
            if values is None:
                continue
            if type(values) is not dict:
                return None
            flat.update(zip(names, map(values.get, keys), strict=True))
        nvlink = readings.get("nvlink")
        links = None if nvlink is None else nvlink.get("links")
        laid = (tuple(map(flat.get, _STATIC_READER.names)), tuple(map(flat.get, _SAMPLE_READER.names)), links)
        if slot is not None:
            self._now.same_readings[slot] = (readings, laid)
        return laid

    def _common_gpu(
        self, item: dict[str, Any], timestamp: float, placed: tuple[int, str] | None = None
    ) -> tuple[GpuStatic, GpuSample] | None:
        """:func:`_checked_gpu` in the common case, in its order; None where a value is not the common case."""
        slot = item.get("index")  # where this GPU's parts are remembered (any key would do: identity decides)
        if type(slot) is not int:
            slot = None
        reasons = self._gpu_reasons(item.get("unavailable"), slot)
        if reasons is None:
            return None
        static_reasons, sample_reasons, no_mig_usage = reasons
        health = item.get("health")
        if health is None:
            readings = None
        elif type(health) is dict:
            readings = health.get("readings")
        else:
            return None
        links = static_defaults = sample_defaults = None
        if readings is None or (type(readings) is dict and not readings):
            pass
        elif type(readings) is dict:
            laid = self._readings(readings, slot)
            if laid is None:
                return None
            static_defaults, sample_defaults, links = laid
        else:
            return None
        listed = item.get("mig_devices")
        if listed is None or (type(listed) is list and not listed):
            instances: tuple[MigInstance, ...] = ()
            usage = None
        else:  # checked: what it raises is this GPU's first error, as in _checked_gpu
            instances, usage = _mig_devices(item)
        if no_mig_usage:
            usage = None
        index = item.get("index")
        if type(index) is not int or not 0 <= index < MAX_GPUS:
            return None
        raw = _STATIC_READER.raw(item, static_defaults)
        same = self._before.same_static.get(index)
        if (  # the very values (objects) of the line before, in the same place: the same static part
            same is not None
            and same[1] is instances
            and same[2] is static_reasons
            and same[3] == placed
            and all(map(operator.is_, raw, same[0]))
        ):
            static = same[4]
            self._now.same_static[index] = same  # its values are these, the very objects
            known = self._before.statics.get(index)
            if known is not None:
                self._now.statics[index] = known
        else:
            values = _STATIC_READER.checked(raw)
            if values is None:
                return None
            static = self._static(index, instances, static_reasons, values, placed)
            self._now.same_static[index] = (raw, instances, static_reasons, placed, static)
        lost = item.get("lost", False)
        if lost is not None and type(lost) is not bool:
            return None
        states = _sample_states(item)
        if states is None:
            return None
        pstate, throttle = states
        nvlinks = None
        if links is not None:
            nvlinks = self._nvlinks(index, links)
            if nvlinks is None:
                return None
        raw_sample = _SAMPLE_READER.raw(item, sample_defaults)
        values = _SAMPLE_READER.checked(raw_sample)
        if values is None:
            return None
        extras = (bool(lost), pstate, throttle, nvlinks, usage, sample_reasons)
        self._parts = (raw_sample, values, extras)  # what a patch of this GPU's sample alone starts from
        # GpuSample(timestamp=..., ..., **the reader's values), its fields put in order by one C-level call
        return static, _NEW_SAMPLE(*_SAMPLE_ORDER((*values, timestamp, *extras)))

    def _static(
        self,
        index: int,
        instances: tuple[MigInstance, ...],
        reasons: Reasons,
        values: tuple[Any, ...],
        placed: tuple[int, str] | None = None,
    ) -> GpuStatic:
        # marshal: the values exactly, types and the sign of a zero included (0.0 == -0.0 to Python)
        key = (instances, reasons, marshal.dumps(values, _MARSHAL), placed)
        known = self._now.statics.get(index) or self._before.statics.get(index)
        if known is not None and known[0] == key:
            static = known[1]
        elif placed is None:
            static = GpuStatic(
                index=index,
                mig_instances=instances,
                unavailable=reasons,
                **dict(zip(_STATIC_READER.names, values, strict=True)),
            )
        else:  # in its place in a fleet: whatever the line said of a host, this one's
            named = dict(zip(_STATIC_READER.names, values, strict=True))
            named.update(index=placed[0], host=placed[1], host_index=index)
            static = GpuStatic(mig_instances=instances, unavailable=reasons, **named)
        self._now.statics[index] = (key, static)
        return static

    def _nvlinks(self, index: int, links: Any) -> tuple[NvLink, ...] | None:
        """The GPU's links, the previous line's where they are the very same (the far side reads them every 5 s).

        The very same list object (a patched line shares what did not change: :class:`~.stream.StreamReader`)
        is known without reading it; else the key is its values, exactly.
        """
        known = self._before.links.get(index)
        if known is not None and known[2] is links:  # held by the memo: an id never reused while compared
            self._now.links[index] = known
            return known[1]
        if known is not None and self._from_patch:  # another list in a patched line: changed values, built
            nvlinks, columns = self._links(links)
            if nvlinks is not None:
                self._now.links[index] = (None, nvlinks, links, columns)
            return nvlinks
        try:  # marshal: the list exactly, types included (1, 1.0 and true are equal to Python)
            key = marshal.dumps(links, _MARSHAL)
        except ValueError:  # nested deeper than marshal writes
            return self._links(links)[0]
        if known is not None and known[0] == key:
            nvlinks, columns = known[1], known[3]
        else:
            nvlinks, columns = self._links(links)
        if nvlinks is not None:
            self._now.links[index] = (key, nvlinks, links, columns)
        return nvlinks

    def _rates_patched(
        self, index: int, last: tuple[NvLink, ...] | None, links: Any, change: Any
    ) -> tuple[NvLink, ...] | None:
        """The GPU's links where a patch changed their rates alone (``links``: the line's list; ``change``: its patch,
        ``{"$list": [{"rx_bytes_per_s": .., "tx_bytes_per_s": ..}, ...]}``), built of the checked columns of ``last``,
        the last line's links, with the patch's rates; None where the patch is more, or ``last`` is not known so.

        Why: the far side reads every GPU's links every 5 s and only their throughput moves; reading 18 links of 512
        GPUs whole again was a fifth of that second's refresh. The other columns are the values the last line's links
        were built of, already checked, and a patch that names the rates alone leaves them the very values; the new
        rates are checked as :meth:`_links` checks them (whole numbers within the limit) and each link is built by its
        fast constructor (a value out of range None): the links the whole list makes."""
        known = self._before.links.get(index)
        if known is None or known[1] is not last or known[3] is None or type(links) is not list:
            return None
        number, active, version, rx, tx, errors, remote = known[3]
        items = _list_patch(change, len(number))
        if items is None or len(links) != len(items):
            return None
        if not (_DICT_TYPES.issuperset(map(type, items)) and _LINK_RATES.issuperset(chain.from_iterable(items))):
            return None
        rx = tuple(map(dict.get, items, repeat("rx_bytes_per_s"), rx))
        tx = tuple(map(dict.get, items, repeat("tx_bytes_per_s"), tx))
        rates = rx + tx
        if not (_WHOLE_TYPES.issuperset(map(type, rates)) and _within_limit(rates)):
            return None
        nvlinks = tuple(map(_NEW_LINK, number, active, version, rx, tx, errors, remote))
        self._now.links[index] = (None, nvlinks, links, (number, active, version, rx, tx, errors, remote))
        return nvlinks

    def _links(self, links: Any) -> tuple[tuple[NvLink, ...] | None, _LinkColumns | None]:
        """:func:`_nvlinks` of a list of links in the common case, a column at a time, and the checked columns they were
        built of; (None, None) where one is not the common case (the links one by one then, and no columns)."""
        if type(links) is not list:
            return None, None
        try:
            rows = list(map(_LINK_ROW, links))
        except (KeyError, TypeError):  # a link without one of the keys, or not an object
            return self._links_one_by_one(links), None
        if not rows:
            return (), None
        columns = tuple(zip(*rows, strict=True))
        number, active, version, rx, tx, errors, remote = columns
        wholes = version + rx + tx + errors
        if not (
            _INT_TYPES.issuperset(map(type, number))
            and min(number) >= 0
            and max(number) < 1 << 16
            and _FLAG_TYPES.issuperset(map(type, active))
            and _WHOLE_TYPES.issuperset(map(type, wholes))
            and _within_limit(wholes)
            and _TEXT_TYPES.issuperset(map(type, remote))
            and "\\" not in "".join(filter(None, remote))
        ):
            return self._links_one_by_one(links), None
        return tuple(starmap(_NEW_LINK, rows)), columns

    def _links_one_by_one(self, links: list[Any]) -> tuple[NvLink, ...] | None:
        decoded = []
        for entry in links:
            if type(entry) is not dict:
                return None
            values: tuple[Any, ...] = tuple(map(entry.get, _LINK_KEYS))
            number, active, remote = values[0], values[1], values[6]
            if not (
                type(number) is int
                and 0 <= number < 1 << 16
                and (active is None or type(active) is bool)
                and _WHOLE_TYPES.issuperset(map(type, values[2:6]))
                and _within_limit(values[2:6])
            ):
                return None
            if remote is not None:
                if type(remote) is not str:
                    return None
                if "\\" in remote:
                    values = (*values[:6], unescape_text(remote))
            decoded.append(NvLink(*values))
        return tuple(decoded)

    # -- processes

    def _processes(self, listed: list[Any] | tuple[()], gpu: GpuStatic) -> tuple[GpuProcess, ...]:
        """A GPU's processes: a column at a time in the common case, else one by one (each through its checkers)."""
        if not listed:
            return ()
        try:
            rows = list(map(_PROCESS_ROW, listed))
        except (KeyError, TypeError):  # a process without one of the keys, or not an object
            rows = None
        made = None if rows is None else self._common_processes(rows, gpu)
        if made is None:
            made = tuple([self._process(data, gpu) for data in listed])
        return made

    def _common_processes(self, rows: list[tuple[Any, ...]], gpu: GpuStatic) -> tuple[GpuProcess, ...] | None:
        """:func:`_process` of every row, checked a column at a time; None where one value is not the common case."""
        if not _PROCESSES_BY_POSITION:
            return None
        columns = self._common_columns(rows)
        if columns is None:
            return None
        hosts = columns.hosts if gpu.host is None else repeat(gpu.host)  # placed in a fleet: its host's processes
        return self._built_processes(columns, repeat(gpu.index), repeat(gpu.uuid), hosts)

    def _common_columns(self, rows: list[tuple[Any, ...]]) -> _Columns | None:
        """The rows (one or more) checked a column at a time; None where one value is not the common case."""
        columns = tuple(zip(*rows, strict=True))
        pid, kind, status, flags, foreign, unavailable, owner_column, gpu_instance, compute_instance = columns[:9]
        reader, values = _PROCESS_READER, columns[9:]
        instances = gpu_instance + compute_instance
        texts = values[reader.texts : reader.flags]
        if not (
            _INT_TYPES.issuperset(map(type, pid))
            and min(pid) >= 0
            and max(pid) < 1 << 32
            and _STR_TYPES.issuperset(map(type, kind))
            and _PROCESS_TYPE_OF.keys() >= set(kind)
            and _STR_TYPES.issuperset(map(type, status))
            and _NO_FLAGS_TYPES.issuperset(map(type, flags))
            and not any(flags)
            and _FLAG_TYPES.issuperset(map(type, foreign))
            and _EMPTY_TYPES.issuperset(map(type, unavailable))
            and not any(unavailable)
            and _WHOLE_TYPES.issuperset(map(type, instances))
            and _within_limit(instances)
            and _READING_TYPES.issuperset(map(type, chain.from_iterable(values[: reader.texts])))
            and _within_limit(tuple(chain.from_iterable(values[reader.numbers : reader.texts])))
            and _TEXT_TYPES.issuperset(map(type, chain.from_iterable(texts)))
            and "\\" not in "".join(filter(None, chain(status, *texts)))
        ):
            return None
        owners: list[ProcessOwner | None] = []
        for value in owner_column:
            owner = self._owner(value)
            if isinstance(owner, _Uncommon):
                return None
            owners.append(owner)
        return _Columns(columns, owners)

    def _built_processes(
        self, columns: _Columns, gpu_index: Iterable[Any], gpu_uuid: Iterable[Any], hosts: Iterable[Any]
    ) -> tuple[GpuProcess, ...]:
        """The processes of checked rows; ``gpu_index``, ``gpu_uuid``, ``hosts``: a value per row (or endless)."""
        pid, kind, status, _, foreign, _, _, gpu_instance, compute_instance = columns.columns[:9]
        by_name: dict[str, Iterable[Any]] = dict(zip(_PROCESS_READER.names, columns.columns[9:], strict=True))
        by_name.update(
            host=hosts,
            gpu_index=gpu_index,
            gpu_uuid=gpu_uuid,
            pid=pid,
            type=map(_PROCESS_TYPE_OF.__getitem__, kind),
            status=status,
            foreign=map(bool, foreign),
            unavailable=repeat(EMPTY_REASONS),
            owner=columns.owners,
            flags=repeat(()),
            gpu_instance_id=gpu_instance,
            compute_instance_id=compute_instance,
        )
        # GpuProcess's fields in their order, each a column (or its default, for the fields no line has).
        fields = [by_name[name] if name in by_name else repeat(default) for name, default in _PROCESS_POSITIONS]
        return tuple(starmap(_NEW_PROCESS, zip(*fields)))  # noqa: B905  # the repeats are endless

    def _process(self, data: Any, gpu: GpuStatic) -> GpuProcess:
        process = self._common_process(data, gpu) if type(data) is dict else None
        return _process(data, gpu) if process is None else process

    def _common_process(self, data: dict[str, Any], gpu: GpuStatic) -> GpuProcess | None:
        """:func:`_process` in the common case; None where a value is not the common case."""
        values = _PROCESS_READER.values(data)
        if values is None:
            return None
        pid = data.get("pid")
        if type(pid) is not int or not 0 <= pid < 1 << 32:
            return None
        kind = data.get("type")
        process_type = _PROCESS_TYPE_OF.get(kind) if type(kind) is str else None
        if process_type is None:
            return None
        status = data.get("status", "running")
        if status is None:
            status = "running"
        elif type(status) is not str:
            return None
        elif "\\" in status:
            status = unescape_text(status)
        flags = data.get("flags")
        if flags is None:
            flags = ()
        elif type(flags) is list and _STR_TYPES.issuperset(map(type, flags)):
            flags = tuple([unescape_text(flag) or "" for flag in flags])
        else:
            return None
        foreign = data.get("foreign", False)
        if foreign is not None and type(foreign) is not bool:
            return None
        gpu_instance_id = data.get("gpu_instance_id")
        compute_instance_id = data.get("compute_instance_id")
        if not (
            _WHOLE_TYPES.issuperset((type(gpu_instance_id), type(compute_instance_id)))
            and _within_limit((gpu_instance_id, compute_instance_id))
        ):
            return None
        reasons = _common_reasons(data.get("unavailable"), _PROCESS_REASON_KEYS)
        if reasons is None:
            return None
        owner = self._owner(data.get("owner"))
        if owner is _UNCOMMON:
            return None
        named = dict(zip(_PROCESS_READER.names, values, strict=True))
        if gpu.host is not None:  # placed in a fleet: the process is its host's
            named["host"] = gpu.host
        return GpuProcess(
            gpu_index=gpu.index,
            gpu_uuid=gpu.uuid,
            pid=pid,
            type=process_type,
            status=status,
            foreign=bool(foreign),
            unavailable=freeze(reasons),
            owner=owner,  # type: ignore[arg-type]  # not _UNCOMMON: said above
            flags=flags,
            gpu_instance_id=gpu_instance_id,
            compute_instance_id=compute_instance_id,
            **named,
        )

    def _owner(self, value: Any) -> ProcessOwner | _Uncommon | None:
        """:func:`owner_from_dict` in the common case, the owner reused where one of the same values was built."""
        if value is None:
            return None
        if type(value) is not dict:
            return _UNCOMMON
        same = self._before.same_owner.get(id(value))  # the memo holds the object: its id is its own
        if same is not None and same[0] is value:  # the very object of the line before (a patched stream's)
            self._now.same_owner[id(value)] = same
            return same[1]  # type: ignore[no-any-return]
        kind = value.get("kind")
        names = tuple(map(value.get, OWNER_STRING_FIELDS))
        if type(kind) is not str or not _TEXT_TYPES.issuperset(map(type, names)):
            return _UNCOMMON
        uid = value.get("uid")
        if uid is not None and (type(uid) is not int or not 0 <= uid < 2**32):
            uid = None  # as owner_from_dict: not a uid, unknown
        key = (kind, uid, names)
        owner = self._now.owners.get(key) or self._before.owners.get(key)
        if owner is None:
            if "\\" in "".join(filter(None, names)):
                names = tuple(map(unescape_text, names))
            owner_kind = _OWNER_KIND_OF.get(kind, OwnerKind.CGROUP)  # as owner_from_dict: unknown, a cgroup
            owner = ProcessOwner(kind=owner_kind, uid=uid, **dict(zip(OWNER_STRING_FIELDS, names, strict=True)))
        self._now.owners[key] = owner
        self._now.same_owner[id(value)] = (value, owner)
        return owner

    # -- health

    def _health(self, item: dict[str, Any], index: int) -> GpuHealth:
        data = item.get("health")
        if not data or type(data) is not dict:
            return _health(item, index)
        values = tuple(map(data.get, _HEALTH_KEYS, repeat(...)))
        same = self._before.same_health.get(index)
        if same is not None and all(map(operator.is_, values, same[0])):  # the very objects of the line before
            self._now.same_health[index] = same
            return same[1]  # type: ignore[no-any-return]
        if same is not None and self._from_patch:  # other values in a patched line: changed, built
            health = _health(item, index)
            self._now.same_health[index] = (values, health)
            return health
        try:  # marshal: the values exactly, types included; deeper than it writes, no reuse
            key = marshal.dumps((index, values), _MARSHAL)
        except ValueError:
            return _health(item, index)
        health = self._now.healths.get(key) or self._before.healths.get(key) or _health(item, index)
        self._now.healths[key] = health
        self._now.same_health[index] = (values, health)
        return health


def _checked_snapshot(data: dict[str, Any]) -> Snapshot:
    """The checked walk: every value of a line through its checker, in the order :func:`snapshot_from_dict`
    checks them, with no fast path and no reuse -- what :class:`SnapshotDecoder`'s snapshots and errors are
    held equal to (tests/formats/test_stream_decoder.py)."""
    timestamp = recorded_timestamp(data)
    host = _checked_host(data)
    gpus = []
    for item in recorded_gpus(data):
        static, sample = _checked_gpu(item, timestamp)
        unavailable = item.get("processes_unavailable")
        listed = item.get("processes") or ()
        if type(listed) not in (list, tuple):
            raise TypeError("processes is not a list")
        processes = tuple(_process(p, static) for p in listed)
        reason = None if unavailable is None else Reason(unavailable)
        health = _health(item, static.index)
        gpus.append(RecordedGpu(static, sample, processes, reason, "processes" in item, health).state())
    return _snapshot(data, timestamp, host, gpus, _checked_host_usage)


def _snapshot(
    data: dict[str, Any],
    timestamp: float,
    host: HostInfo,
    gpus: list[GpuState],
    usage: Callable[[Any], HostUsage | None] = host_usage_from_dict,
) -> Snapshot:
    """The line's snapshot of its decoded host and GPUs (the line's sequence, interval and host usage checked)."""
    sequence = _number(data.get("sequence"), "sequence")
    return Snapshot(
        timestamp=timestamp,
        host=host,
        gpus=tuple(gpus),
        sequence=int(sequence or 0),
        interval=_number(data.get("interval_s"), "interval_s"),
        host_usage=usage(data.get("host_usage")),  # None: recorded before nvtopy read it
    )


def gpu_from_dict(item: dict[str, Any], timestamp: float) -> tuple[GpuStatic, GpuSample]:
    """The static and sampled fields of one GPU of a line (what its chart needs, processes aside)."""
    return SnapshotDecoder()._gpu(item, timestamp)


def snapshot_from_dict(
    data: dict[str, Any], gpu_state: Callable[[RecordedGpu], GpuState] = RecordedGpu.state
) -> Snapshot:
    """Rebuild a snapshot from one line of a recording; ``gpu_state`` makes each GPU's state of its decoded parts.

    Every value is checked against the model's type (text, number, true/false) and
    every string unescaped (``unescape_text``). Raises KeyError, ValueError,
    TypeError or AttributeError on a line that is not a snapshot. Lines of one source
    read in order are cheaper through one :class:`SnapshotDecoder`.
    """
    return SnapshotDecoder().decode(data, gpu_state)

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model import (
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
    Severity,
    Snapshot,
    freeze,
)
from ..ranges import FIELD_RANGES
from ..textsafe import excerpt, unescape_text
from .contract import HOST_USAGE_FIELDS, OWNER_STRING_FIELDS, READINGS
from .fields import field_part

__all__ = [
    "MAX_GPUS",
    "MAX_MIG_DEVICES",
    "RecordedGpu",
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
    """A recorded ``host_usage`` (replay); anything not a number is N/A, an unknown reason is ``unknown``."""
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


def gpu_from_dict(item: dict[str, Any], timestamp: float) -> tuple[GpuStatic, GpuSample]:
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


def snapshot_from_dict(
    data: dict[str, Any], gpu_state: Callable[[RecordedGpu], GpuState] = RecordedGpu.state
) -> Snapshot:
    """Rebuild a snapshot from one line of a recording; ``gpu_state`` makes each GPU's state of its decoded parts.

    Every value is checked against the model's type (text, number, true/false) and
    every string unescaped (``unescape_text``). Raises KeyError, ValueError,
    TypeError or AttributeError on a line that is not a snapshot.
    """
    timestamp = recorded_timestamp(data)
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
    for item in recorded_gpus(data):
        static, sample = gpu_from_dict(item, timestamp)
        unavailable = item.get("processes_unavailable")
        listed = item.get("processes") or ()
        if type(listed) not in (list, tuple):
            raise TypeError("processes is not a list")
        processes = tuple(_process(p, static) for p in listed)
        reason = None if unavailable is None else Reason(unavailable)
        health = _health(item, static.index)
        gpus.append(gpu_state(RecordedGpu(static, sample, processes, reason, "processes" in item, health)))
    sequence = _number(data.get("sequence"), "sequence")
    return Snapshot(
        timestamp=timestamp,
        host=host,
        gpus=tuple(gpus),
        sequence=int(sequence or 0),
        interval=_number(data.get("interval_s"), "interval_s"),
        host_usage=host_usage_from_dict(data.get("host_usage")),  # None: recorded before nvtopy read it
    )

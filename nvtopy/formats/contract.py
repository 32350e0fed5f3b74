"""The JSON contract: what ``--once --json``, ``log --format jsonl`` and ``record`` write.

Names documented in the README are a contract: fields may be added, never
renamed. A missing value is ``null`` and ``unavailable`` says why.

Every string that can come from outside (commands, user and process names,
GPU names, serials, UUIDs, host and driver strings, MIG devices, throttle
reasons and modes, finding texts that may quote a driver, an NVLink's peer,
which a recording or a peer may supply) goes through
:func:`~nvtopy.textsafe.escape_text` exactly once, here in the dict builders:
the output is always valid UTF-8 with no control characters, and
:func:`~nvtopy.textsafe.unescape_text` gives the exact text back. Strings that
are ours (timestamps, ``P0``, ``C``, reasons) never contain a backslash, so a
reader may unescape every string value. :func:`encode` is the one encoder of
``--once --json``, ``log --format jsonl`` and ``record``; its inverse, the one
decoder of what they write, is :mod:`nvtopy.formats.contract_decoder`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._version import __version__
from ..health.xid import describe_xid
from ..model import (
    GPM_PERCENT_FIELDS,
    GPM_RATE_FIELDS,
    MIG_ATTRIBUTE_FIELDS,
    MIG_GPM_FIELDS,
    SAMPLE_GROUPS,
    Finding,
    GpuEvent,
    GpuProcess,
    GpuState,
    HostUsage,
    MigState,
    NvLink,
    ProcessOwner,
    Reason,
    Snapshot,
)
from ..textsafe import escape_text as _esc
from .fields import field_reader
from .timestamps import iso_timestamp

__all__ = [
    "GPM_KEYS",
    "HOST_USAGE_FIELDS",
    "MIG_GPM_KEYS",
    "READINGS",
    "SCHEMA_VERSION",
    "dumps",
    "encode",
    "event_to_dict",
    "finding_to_dict",
    "gpm_value",
    "gpu_to_dict",
    "health_to_dict",
    "host_usage_to_dict",
    "mig_device_to_dict",
    "nvlink_to_dict",
    "owner_to_dict",
    "process_to_dict",
    "snapshot_to_dict",
]

SCHEMA_VERSION = 1
# One encoder object for every line (json.dumps with arguments builds a new one per call), made at the first:
# a module that imports this one may write no JSON at all.
_compact: Callable[[Any], str] | None = None


# The owner object's string fields, in output order (``uid`` is a number).
OWNER_STRING_FIELDS: tuple[str, ...] = (
    "id",
    "name",
    "namespace",
    "pod",
    "container",
    "container_id",
    "job",
    "step",
    "project",
    "cgroup",
)


def owner_to_dict(owner: ProcessOwner | None) -> dict[str, Any] | None:
    """A process's owner (container, pod, Slurm job, service, session), every name escaped; ``None``: unknown."""
    if owner is None:
        return None
    data: dict[str, Any] = {"kind": owner.kind.value}
    for name in OWNER_STRING_FIELDS:
        data[name] = _esc(getattr(owner, name))
    data["uid"] = owner.uid
    return data


def process_to_dict(process: GpuProcess) -> dict[str, Any]:
    return {
        "pid": process.pid,
        "type": process.type.value,
        "gpu_memory_bytes": process.gpu_memory_bytes,
        "sm_percent": process.sm_percent,
        "memory_percent": process.memory_percent,
        "encoder_percent": process.encoder_percent,
        "decoder_percent": process.decoder_percent,
        "user": _esc(process.user),
        "command": _esc(process.command),
        "name": _esc(process.name),
        "cpu_percent": None if process.cpu_percent is None else round(process.cpu_percent, 1),
        "host_memory_bytes": process.host_memory_bytes,
        "running_seconds": None if process.running_seconds is None else round(process.running_seconds, 1),
        "create_time": process.create_time,
        "status": _esc(process.status),
        "foreign": process.foreign,
        "owner": owner_to_dict(process.owner),
        "ns_pid": process.ns_pid,
        "host_pid": process.host_pid,
        "cuda_visible_devices": _esc(process.cuda_visible_devices),
        # Real-work flags ("idle-held", "suspected-hang") and how long it has held memory at ~0 % SM.
        "flags": [_esc(flag) for flag in process.flags],
        "idle_seconds": None if process.idle_seconds is None else round(process.idle_seconds, 1),
        # The MIG instance it runs on (null on a whole GPU): GPU and compute instance ids, "0/1/0".
        "gpu_instance_id": process.gpu_instance_id,
        "compute_instance_id": process.compute_instance_id,
        "instance_label": process.instance_label,
        # The host it runs on (--remote, --prometheus: as its GPU's "host"); null on this host.
        "host": _esc(process.host),
        "unavailable": {k: v.value for k, v in process.unavailable.items()},
    }


# The real-work figures (NVML's GPM, Hopper and newer), under the model's names: percentages 0-100 with two
# decimals (the figures are means over an interval: more digits would be noise), rates in whole bytes per second.
# Why rounded here: a JSON reader (and a replay) gets what a person reads, and a CSV cell stays a plain number.
GPM_KEYS: tuple[str, ...] = GPM_PERCENT_FIELDS + GPM_RATE_FIELDS
MIG_GPM_KEYS: tuple[str, ...] = MIG_GPM_FIELDS
_GPM_RATES = frozenset(GPM_RATE_FIELDS)


def gpm_value(name: str, value: float | None) -> float | int | None:
    """A GPM figure as JSON writes it: a percentage to two decimals, a rate in whole bytes per second."""
    if value is None:
        return None
    return round(value) if name in _GPM_RATES else round(value, 2)


# The MIG device object's keys, in output order, after its identity (index, uuid, ids, label, profile).
MIG_MEMORY_KEYS: tuple[str, ...] = ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes")
MIG_COUNT_KEYS: tuple[str, ...] = tuple(f for f in MIG_ATTRIBUTE_FIELDS if f != "memory_total_bytes")


def mig_device_to_dict(mig: MigState, gpu_reason: Reason | None = None, *, processes: bool = True) -> dict[str, Any]:
    """One MIG device of a GPU: how it is configured, its memory now, the processes on it.

    ``memory_total_bytes`` is the instance's memory as configured (NVML's attributes),
    else used + free as the driver gave them. ``uuid`` and ``profile`` come from the
    driver (or a recording, or a peer): escaped. ``gpu_reason`` is why the GPU's
    per-instance readings are missing (its ``mig_usage``), when they are. A missing
    value is null and ``unavailable`` says why, under the key's name. Without
    ``processes`` (the list was not read) there is no ``process_count`` nor ``pids``.
    """
    instance, usage = mig.instance, mig.usage
    reasons: dict[str, Reason] = dict(instance.unavailable)
    total = instance.memory_total_bytes
    if total is None and mig.memory_total_bytes is not None:
        total = mig.memory_total_bytes
        reasons.pop("memory_total_bytes", None)
    if usage is None:
        missing = gpu_reason or Reason.NOT_AVAILABLE
        reasons.update(memory_used_bytes=missing, memory_free_bytes=missing)
        reasons.update(dict.fromkeys(MIG_GPM_KEYS, missing))
    else:
        reasons.update(usage.unavailable)
    data: dict[str, Any] = {
        "index": instance.index,
        "uuid": _esc(instance.uuid),
        "gpu_instance_id": instance.gpu_instance_id,
        "compute_instance_id": instance.compute_instance_id,
        "label": mig.label,  # GPU/GI/CI, nvidia-smi's columns: "1/2/0" ("?" where an id is unknown)
        "profile": _esc(instance.profile),
        "memory_total_bytes": total,
        "memory_used_bytes": None if usage is None else usage.memory_used_bytes,
        "memory_free_bytes": None if usage is None else usage.memory_free_bytes,
    }
    for key in MIG_COUNT_KEYS:
        data[key] = getattr(instance, key)
    # Its own activity (GPM: the GPU instance's, so compute instances of one GPU instance show the same).
    for key in MIG_GPM_KEYS:
        data[key] = None if usage is None else gpm_value(key, getattr(usage, key))
    if processes:
        data["process_count"] = len(mig.processes)
        data["pids"] = [p.pid for p in mig.processes]
    data["unavailable"] = {k: v.value for k, v in reasons.items() if k in data and data[k] is None}
    return data


# The health readings, grouped as the ``readings`` object writes them: (JSON key, model field). A field
# of GpuStatic is written "static.<name>". Why grouped: a reader asks "is the memory healthy?", "is the
# link at full speed?" -- each group answers one such question with every figure it needs (the ECC
# counts and PCIe throughput also stay where they were, at the GPU's top level). A missing reading
# is null, and the GPU's ``unavailable`` object says why under the model's field name.
READINGS: dict[str, tuple[tuple[str, str], ...]] = {
    "memory": tuple(
        (name, name)
        for name in (*SAMPLE_GROUPS["remapped_rows"], *SAMPLE_GROUPS["retired_pages"], *SAMPLE_GROUPS["ecc"])
    ),
    "pcie": (
        ("link_gen", "pcie_link_gen"),
        ("link_width", "pcie_link_width"),
        ("link_gen_max", "static.pcie_link_gen_max"),
        ("link_width_max", "static.pcie_link_width_max"),
        ("replay_counter", "pcie_replay_counter"),
        ("rx_bytes_per_s", "pcie_rx_bytes_per_s"),
        ("tx_bytes_per_s", "pcie_tx_bytes_per_s"),
    ),
    "nvlink": (
        ("count", "static.nvlink_count"),
        ("rx_bytes_per_s", "nvlink_rx_bytes_per_s"),
        ("tx_bytes_per_s", "nvlink_tx_bytes_per_s"),
    ),
}


def nvlink_to_dict(link: NvLink) -> dict[str, Any]:
    """One NVLink; ``remote`` (the peer's PCI bus id, as the driver gave it) is outside text."""
    return {
        "link": link.link,
        "active": link.active,
        "version": link.version,
        "rx_bytes_per_s": link.rx_bytes_per_s,
        "tx_bytes_per_s": link.tx_bytes_per_s,
        "errors": link.errors,
        "remote": _esc(link.remote),
    }


# READINGS with each field's getter (:func:`~nvtopy.formats.fields.field_reader`), resolved once.
_READING_GETTERS: dict[str, tuple[tuple[str, Callable[[GpuState], object]], ...]] = {
    group: tuple((key, field_reader(name)) for key, name in fields) for group, fields in READINGS.items()
}


def _readings(gpu: GpuState) -> dict[str, Any]:
    data: dict[str, Any] = {
        group: {key: read(gpu) for key, read in getters} for group, getters in _READING_GETTERS.items()
    }
    links = gpu.sample.nvlinks
    data["nvlink"]["links"] = None if links is None else [nvlink_to_dict(link) for link in links]
    return data


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    """A reason for the verdict; its text and action may quote the driver (or a recording): escaped."""
    return {
        "severity": finding.severity.value,
        "code": _esc(finding.code),
        "text": _esc(finding.text),
        "action": _esc(finding.action),
    }


def event_to_dict(event: GpuEvent) -> dict[str, Any]:
    """An event with the Xid catalogue's words, so a reader of the file needs no table of its own.

    ``timestamp`` (Unix seconds, exact) is what a replay reads back; ``time`` is for people.
    """
    info = None if event.xid is None else describe_xid(event.xid)
    return {
        "time": iso_timestamp(event.timestamp),
        "timestamp": event.timestamp,
        "kind": _esc(event.kind),
        "xid": event.xid,
        "meaning": None if info is None else info.meaning,
        "action": None if info is None else info.action,
        "severity": None if info is None else info.severity.value,
        "gpu_instance_id": event.gpu_instance_id,
        "compute_instance_id": event.compute_instance_id,
    }


def health_to_dict(gpu: GpuState) -> dict[str, Any]:
    """The GPU's ``health`` object: its verdict, the findings behind it, its events and the readings."""
    health = gpu.health
    return {
        "verdict": health.verdict.value,
        "findings": [finding_to_dict(f) for f in health.findings],
        "events": [event_to_dict(e) for e in health.events],
        "xid_counts": {str(xid): count for xid, count in health.xid_counts},
        "last_xid": health.last_xid,
        "events_note": _esc(health.events_note),
        "responding": health.responding,
        "stalled_seconds": health.stalled_seconds,
        "throttle": _esc(health.throttle),
        "idle_held_bytes": health.idle_held_bytes,
        "suspected_hang_seconds": health.suspected_hang_seconds,
        "readings": _readings(gpu),
    }


def gpu_to_dict(gpu: GpuState, *, processes: bool = True) -> dict[str, Any]:
    static, sample = gpu.static, gpu.sample
    reasons = {**static.unavailable, **sample.unavailable}
    data: dict[str, Any] = {
        "index": static.index,
        "uuid": _esc(static.uuid),
        "name": _esc(static.name),
        "bus_id": _esc(static.bus_id),
        "lost": sample.lost,
        "memory_total_bytes": static.memory_total_bytes,
        "memory_used_bytes": sample.memory_used_bytes,
        "utilization_gpu_percent": sample.utilization_gpu_percent,
        "utilization_memory_percent": sample.utilization_memory_percent,
        "temperature_c": sample.temperature_c,
        "temperature_slowdown_c": static.temperature_slowdown_c,
        "fan_percent": sample.fan_percent,
        "power_draw_w": sample.power_draw_w,
        "power_limit_w": sample.power_limit_w,
        "pstate": None if sample.pstate is None else f"P{sample.pstate}",
        "ecc_mode": sample.ecc_mode,
        "ecc_uncorrected_volatile": sample.ecc_uncorrected_volatile,
        "clock_sm_mhz": sample.clock_sm_mhz,
        "clock_mem_mhz": sample.clock_mem_mhz,
        "throttle_reasons": None if sample.throttle_reasons is None else [_esc(r) for r in sample.throttle_reasons],
        # Beyond the contract's minimum:
        "serial": _esc(static.serial),
        "memory_free_bytes": sample.memory_free_bytes,
        "memory_reserved_bytes": sample.memory_reserved_bytes,
        "encoder_percent": sample.encoder_percent,
        "decoder_percent": sample.decoder_percent,
        "temperature_shutdown_c": static.temperature_shutdown_c,
        "power_default_limit_w": static.power_default_limit_w,
        "power_min_limit_w": static.power_min_limit_w,
        "power_max_limit_w": static.power_max_limit_w,
        "energy_mj": sample.energy_mj,
        "clock_sm_max_mhz": static.clock_sm_max_mhz,
        "clock_mem_max_mhz": static.clock_mem_max_mhz,
        "ecc_corrected_volatile": sample.ecc_corrected_volatile,
        "ecc_corrected_aggregate": sample.ecc_corrected_aggregate,
        "ecc_uncorrected_aggregate": sample.ecc_uncorrected_aggregate,
        "pcie_rx_bytes_per_s": sample.pcie_rx_bytes_per_s,
        "pcie_tx_bytes_per_s": sample.pcie_tx_bytes_per_s,
        # The real work (GPM, Hopper and newer; null with a reason elsewhere): see GPM_KEYS.
        **{key: gpm_value(key, getattr(sample, key)) for key in GPM_KEYS},
        "persistence_mode": sample.persistence_mode,
        "compute_mode": _esc(sample.compute_mode),
        "compute_capability": _esc(static.compute_capability),
        "driver_model": _esc(static.driver_model),  # Windows: WDDM, TCC or MCDM; null (not supported) elsewhere
        "virtualization_mode": _esc(static.virtualization_mode),  # none, passthrough, vgpu (a guest), host_vgpu...
        "mig_mode": static.mig_mode,
        "mig_mode_pending": static.mig_mode_pending,  # the mode after the next GPU reset (differs: a reset waits)
        # Its MIG devices (one per compute instance), by NVML's MIG device index: see mig_device_to_dict.
        "mig_devices": [
            mig_device_to_dict(m, sample.unavailable.get("mig_usage"), processes=processes) for m in gpu.mig
        ],
        # Another host's GPU (--remote): its host and index there; a sentence when it cannot be read.
        "host": _esc(static.host),
        "host_index": static.host_index,
        "note": _esc(gpu.note),
        "health": health_to_dict(gpu),
        "unavailable": {k: v.value for k, v in reasons.items()},
    }
    if processes:
        data["processes"] = [process_to_dict(p) for p in gpu.processes]
        data["processes_unavailable"] = None if gpu.processes_unavailable is None else gpu.processes_unavailable.value
        data["processes_hint"] = gpu.processes_hint
    return data


def snapshot_to_dict(snapshot: Snapshot, *, processes: bool = True) -> dict[str, Any]:
    host = snapshot.host
    return {
        "timestamp": iso_timestamp(snapshot.timestamp),
        "hostname": _esc(host.hostname),
        "driver_version": _esc(host.driver_version),
        "cuda_driver_version": _esc(host.cuda_driver_version),
        "nvml_version": _esc(host.nvml_version),
        "backend": _esc(host.backend),
        "nvtopy_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "sequence": snapshot.sequence,
        "interval_s": snapshot.interval,
        "gpus": [gpu_to_dict(gpu, processes=processes) for gpu in snapshot.gpus],
        "host_usage": host_usage_to_dict(snapshot.host_usage),
        # An added field: why a version above is null (an old driver's "Not Found" CUDA version), as per GPU.
        "unavailable": {k: v.value for k, v in host.unavailable.items() if k in HOST_VERSION_FIELDS},
    }


HOST_VERSION_FIELDS = ("driver_version", "cuda_driver_version", "nvml_version")
"""The host's versions at the top level of a snapshot: each text, or null with its reason in ``unavailable``."""


HOST_USAGE_FIELDS = (
    "cpu_busy_percent",
    "cpu_count",
    "load_1m",
    "load_5m",
    "load_15m",
    "ram_total_bytes",
    "ram_used_bytes",
    "swap_total_bytes",
    "swap_used_bytes",
)
"""The keys of ``host_usage`` (an added field; null: the source has no such figures, e.g. ``--remote``)."""


def host_usage_to_dict(usage: HostUsage | None) -> dict[str, Any] | None:
    """The host's CPU, load, memory and swap: each figure, or null with its reason in ``unavailable``."""
    if usage is None:
        return None
    data: dict[str, Any] = {name: getattr(usage, name) for name in HOST_USAGE_FIELDS}
    data["unavailable"] = {k: v.value for k, v in usage.unavailable.items() if data.get(k) is None}
    return data


def encode(data: Any, *, indent: int | None = None) -> str:
    """``data`` (built by the functions above) as JSON text: compact on one line, or indented.

    UTF-8 characters stay as they are (``ensure_ascii=False``): the builders have
    escaped every outside string, so the text always encodes as UTF-8.
    """
    global _compact
    if indent is None:
        if _compact is None:
            import json

            _compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        return _compact(data)
    import json

    return json.dumps(data, indent=indent, ensure_ascii=False)


def dumps(snapshot: Snapshot, *, indent: int | None = 2, processes: bool = True) -> str:
    return encode(snapshot_to_dict(snapshot, processes=processes), indent=indent)

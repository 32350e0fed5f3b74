"""The JSON contract: what ``--once --json``, ``log --format jsonl`` and ``record`` write.

Names documented in the README are a contract: fields may be added, never
renamed. A missing value is ``null`` and ``unavailable`` says why.

Every string that can come from outside (commands, user and process names,
GPU names, serials, UUIDs, host and driver strings, MIG devices, throttle
reasons and modes, which a recording or a peer may supply) goes through
:func:`~nvtopy.textsafe.escape_text` exactly once, here in the dict builders:
the output is always valid UTF-8 with no control characters, and
:func:`~nvtopy.textsafe.unescape_text` gives the exact text back. Strings that
are ours (timestamps, ``P0``, ``C``, reasons) never contain a backslash, so a
reader may unescape every string value. :func:`encode` is the one encoder of
``--once --json``, ``log --format jsonl`` and ``record``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from .._version import __version__
from ..model import GpuProcess, GpuState, ProcessOwner, Snapshot
from ..textsafe import escape_text as _esc

__all__ = [
    "SCHEMA_VERSION",
    "dumps",
    "encode",
    "gpu_to_dict",
    "iso_timestamp",
    "owner_to_dict",
    "process_to_dict",
    "snapshot_to_dict",
]

SCHEMA_VERSION = 1
# One encoder object for every line (json.dumps with arguments builds a new one per call).
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def iso_timestamp(timestamp: float) -> str:
    """ISO 8601 in local time with its UTC offset, millisecond precision."""
    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).astimezone().isoformat(timespec="milliseconds")


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
        "unavailable": {k: v.value for k, v in process.unavailable.items()},
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
        "persistence_mode": sample.persistence_mode,
        "compute_mode": _esc(sample.compute_mode),
        "compute_capability": _esc(static.compute_capability),
        "mig_mode": static.mig_mode,
        "mig_devices": [_esc(m) for m in static.mig_devices],
        # Another host's GPU (--remote): its host and index there; a sentence when it cannot be read.
        "host": _esc(static.host),
        "host_index": static.host_index,
        "note": _esc(gpu.note),
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
    }


def encode(data: Any, *, indent: int | None = None) -> str:
    """``data`` (built by the functions above) as JSON text: compact on one line, or indented.

    UTF-8 characters stay as they are (``ensure_ascii=False``): the builders have
    escaped every outside string, so the text always encodes as UTF-8.
    """
    if indent is None:
        return _COMPACT.encode(data)
    return json.dumps(data, indent=indent, ensure_ascii=False)


def dumps(snapshot: Snapshot, *, indent: int | None = 2, processes: bool = True) -> str:
    return encode(snapshot_to_dict(snapshot, processes=processes), indent=indent)

"""An exporter's answer (nvtopy's or dcgm-exporter's) read back into GPUs and processes, trusting nothing.

:func:`parse_exposition` serves ``nvtopy --remote``; the label readers
(:func:`scraped_label`, :func:`process_from_labels`, :func:`owner_from_labels`...)
also serve ``--prometheus`` and ``report --prometheus``. Labels are cut and
unescaped, values out of range are None, a host claims a bounded number of
GPUs and processes (the ``MAX_*`` caps). Profiling series are read back as
percentages. The names and units are :mod:`nvtopy.formats.dcgm`'s and
:mod:`~nvtopy.formats.prometheus.series`'.

Every naming generation of dcgm-exporter is read, per host: 3.x to 4.8 (legacy names, ``Hostname``
up to 4.8.2 and ``hostname`` from 4.8.3, ``DCGM_FI_DRIVER_VERSION``), 4.9 (DCGM 4.7's names and
units: Hz, J, ratios, bytes; ``DCGM_FI_SYSTEM_DRIVER_VERSION``) and nvtopy's own. A 4.9 sample is
turned into its legacy name and unit at the door (:func:`~nvtopy.formats.dcgm_naming.legacy_reading`),
and a label with several spellings is read in each (:func:`scraped_spelling`): everything after that
is one path, so a 4.9 host's figures are the same as a 4.8 host's.
"""

from __future__ import annotations

import collections
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from ...health.xid import MAX_XIDS_PER_GPU
from ...model import GpuStatic, MigInstance, MigUsage, OwnerKind, ProcessOwner, Reason, freeze
from ...ranges import FIELD_RANGES, fits
from ...textsafe import unescape_text
from ..dcgm import INSTANCE_FIELDS, INSTANCE_GPM_FIELDS
from ..dcgm_naming import DRIVER_LABELS, HOST_LABELS, READ_ALIASES, UUID_LABELS, first_label, legacy_reading
from ..fields import FieldPart, field_part
from .series import ALL_BY_NAME, PROCESS_FIELDS

__all__ = [
    "MAX_COMMAND",
    "MAX_GPUS_PER_HOST",
    "MAX_GPU_INDEX",
    "MAX_HOSTS",
    "MAX_INSTANCE_ID",
    "MAX_LABEL",
    "MAX_MIG_PER_GPU",
    "MAX_PID",
    "MAX_PROCESSES_PER_HOST",
    "PROCESS_VALUES",
    "HostScrape",
    "mig_device_sample",
    "mig_of",
    "owner_from_labels",
    "parse_exposition",
    "process_from_labels",
    "process_value",
    "scraped_label",
    "scraped_spelling",
    "scraped_whole",
    "xid_count",
]


MAX_HOSTS = 1024  # hosts one view of several shows (--remote, --prometheus): more is a fleet for Grafana


MAX_GPUS_PER_HOST = 64  # an HGX board has 8 or 16: more is a broken or hostile exporter


MAX_GPU_INDEX = 1023  # a ``gpu`` label above this is no GPU (it is counted as reported, never shown)


MAX_PROCESSES_PER_HOST = 4096


MAX_LABEL = 256  # characters kept of a label (host and model names, UUIDs, user names)


MAX_COMMAND = 4096  # of a command line


MAX_PID = 2**32 - 1  # pids are 32-bit (Linux's own limit is 2**22); 0 is no process

MAX_MIG_PER_GPU = 64  # MIG devices (and GPU instances) a GPU may claim; an H100 has at most 7


_FRACTIONAL = frozenset({"cpu_percent", "start_time_seconds", "idle_held_seconds"})
# Per-process values: (their field's range in nvtopy.ranges, whole number). Outside the range, or not finite,
# a value is None (N/A, "out of range"), like the GPU fields of nvtopy.formats.dcgm.
PROCESS_VALUES: dict[str, tuple[tuple[int, int], bool]] = {
    name: (FIELD_RANGES[field], name not in _FRACTIONAL) for name, field in PROCESS_FIELDS.items()
}


@dataclass
class HostScrape:
    """One host's GPUs as its exporter last described them (or why it could not be read)."""

    url: str
    hostname: str
    driver_version: str | None = None
    gpus: list[tuple[GpuStatic, dict[str, Any], bool]] = field(default_factory=list)  # static, sample values, lost
    processes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # gpu index -> process values
    # gpu index -> what the exporter said of its health (GpuHealth field names; "xid_counts": {xid: count})
    health: dict[int, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    note: str | None = None  # what was left out (GPUs, processes beyond the caps), shown beside the GPUs


def scraped_label(labels: dict[str, str], name: str, limit: int = MAX_LABEL) -> str | None:
    """A label's text (nvtopy's exporter escapes it: undone), at most ``limit`` characters; None if empty.

    Shared by every reader of scraped or queried series (``--remote``, ``--prometheus``, ``report``):
    a value that is not text (a hostile server's JSON) is no label.
    """
    return _scraped_text(labels.get(name), limit)


def scraped_spelling(labels: dict[str, str], spellings: tuple[str, ...], limit: int = MAX_LABEL) -> str | None:
    """A label spelt several ways across dcgm-exporter's versions (``hostname``/``Hostname``: the tuples of
    :mod:`~nvtopy.formats.dcgm_naming`), read as :func:`scraped_label` reads one: the first spelling present."""
    return _scraped_text(first_label(labels, spellings), limit)


def _scraped_text(value: object, limit: int) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    value = unescape_text(value[: limit * 4]) or ""  # an escape is at most 4 characters
    return value[:limit] or None


def scraped_whole(text: str | None, highest: int) -> int | None:
    """A label holding a whole number from 0 to ``highest``, else None (a 5,000-digit one too)."""
    if not text or len(text) > len(str(highest)) or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= highest else None


def process_from_labels(labels: dict[str, str]) -> dict[str, Any]:
    """What a process's series labels say of it (user, command, type, owner, MIG instances), trusting nothing.

    One reading of nvtopy's ``nvtopy_process_*`` labels for every reader of them: a
    scraped exporter (``--remote``) and a Prometheus server (``--prometheus``).
    """
    kind = labels.get("type") or "C"
    return {
        "user": scraped_label(labels, "user"),
        "command": scraped_label(labels, "command", MAX_COMMAND),
        "type": kind if kind in ("C", "G", "C+G") else "C",
        "owner": owner_from_labels(labels),
        "gpu_instance_id": scraped_whole(labels.get("GPU_I_ID"), MAX_INSTANCE_ID),
        "compute_instance_id": scraped_whole(labels.get("compute_instance_id"), MAX_INSTANCE_ID),
    }


def owner_from_labels(labels: dict[str, str]) -> ProcessOwner | None:
    """The owner a process's labels name (:data:`OWNER_LABELS`); ``None`` when they name none."""
    container, pod = scraped_label(labels, "container"), scraped_label(labels, "pod")
    namespace, job = scraped_label(labels, "namespace"), scraped_label(labels, "slurm_job")
    text = labels.get("owner_kind") or ""
    try:
        kind = OwnerKind(text) if len(text) <= 32 else None
    except ValueError:
        kind = None
    if kind is None:  # an older nvtopy, or another exporter: guess from what is there
        if pod:
            kind = OwnerKind.KUBERNETES
        elif job:
            kind = OwnerKind.SLURM
        elif container:
            kind = OwnerKind.DOCKER
        else:
            return None
    return ProcessOwner(
        kind=kind,
        id=job if kind is OwnerKind.SLURM else None,
        name=pod if kind is OwnerKind.KUBERNETES else container,
        namespace=namespace,
        pod=pod,
        container=container,
        job=job,
    )


_SKIPPED = "nvtopy_nvlink_link_"  # the prefix of the series parse_exposition does not read


def xid_count(health: dict[str, Any], xid: str | None, value: float) -> None:
    """One ``nvtopy_xid_events_total{xid}`` sample into ``health["xid_counts"]`` (bounded, range-checked)."""
    number = scraped_whole(xid, 2**32 - 1)
    count = _whole_value(value)
    counts = health.setdefault("xid_counts", {})
    if number is None or count is None or (number not in counts and len(counts) >= MAX_XIDS_PER_GPU):
        return
    counts[number] = count


def _whole_value(value: float) -> int | None:
    """A sample's value as a count: whole, from 0 to 2**64 - 1; else None."""
    if not 0 <= value <= 2**64 - 1 or value != int(value):  # NaN and the infinities fail this too
        return None
    return int(value)


def process_value(name: str, value: float) -> float | int | None:
    limits, whole = PROCESS_VALUES[name]
    if not fits(value, limits):  # NaN and the infinities fail this too
        return None
    return round(value) if whole else float(value)


MAX_INSTANCE_ID = 2**32 - 1  # a GPU or compute instance id (NVML's are small: 0 to 14 on an H100)
_MIG_DEVICE_PREFIX = "nvtopy_mig_device_"
# nvtopy_mig_device_* -> the key its value is kept under, with its range (bytes, SMs).
_MIG_DEVICE_VALUES: dict[str, tuple[str, float]] = {
    "nvtopy_mig_device_memory_used_bytes": ("memory_used_bytes", 2**64 - 1),
    "nvtopy_mig_device_memory_total_bytes": ("memory_total_bytes", 2**64 - 1),
    "nvtopy_mig_device_sm_count": ("sm_count", 2**20),
}


def mig_device_sample(devices: dict[int, dict[str, Any]], name: str, labels: dict[str, str], value: float) -> None:
    """One ``nvtopy_mig_device_*`` sample into its GPU's ``devices`` (by MIG device index; bounded)."""
    number = scraped_whole(labels.get("mig_device"), MAX_MIG_PER_GPU - 1)
    if number is None:
        return
    device = devices.get(number)
    if device is None:
        if len(devices) >= MAX_MIG_PER_GPU:
            return
        device = devices[number] = {
            "gpu_instance_id": scraped_whole(labels.get("GPU_I_ID"), MAX_INSTANCE_ID),
            "compute_instance_id": scraped_whole(labels.get("compute_instance_id"), MAX_INSTANCE_ID),
            "profile": scraped_label(labels, "GPU_I_PROFILE"),
        }
    if name == "nvtopy_mig_device_info":
        device["uuid"] = scraped_label(labels, "mig_uuid")
        device["profile"] = scraped_label(labels, "mig_profile") or device["profile"]
        return
    known = _MIG_DEVICE_VALUES.get(name)
    if known is not None:
        key, highest = known
        whole = _whole_value(value)
        device[key] = whole if whole is not None and whole <= highest else None


def mig_of(
    gpu_instances: dict[int, dict[str, Any]], devices: dict[int, dict[str, Any]]
) -> tuple[tuple[MigInstance, ...], tuple[MigUsage, ...]]:
    """A remote GPU's ``mig_instances`` and ``mig_usage`` from its GPU instances' and MIG devices' series.

    nvtopy's exporter names each MIG device (``nvtopy_mig_device_*``); dcgm-exporter
    only GPU instances, each then one device, numbered in GPU instance order. A
    device's memory is its GPU instance's framebuffer where that is exported.
    """
    if not devices:
        devices = {
            number: {"gpu_instance_id": gi, "profile": said.get("profile")}
            for number, (gi, said) in enumerate(sorted(gpu_instances.items()))
        }
    found, usage = [], []
    for number, device in sorted(devices.items()):
        fb = gpu_instances.get(device.get("gpu_instance_id"), {})  # type: ignore[arg-type]
        total = device.get("memory_total_bytes")
        found.append(
            MigInstance(
                index=number,
                uuid=device.get("uuid"),
                gpu_instance_id=device.get("gpu_instance_id"),
                compute_instance_id=device.get("compute_instance_id"),
                profile=device.get("profile"),
                memory_total_bytes=total if total is not None else fb.get("DCGM_FI_DEV_FB_TOTAL"),
                sm_count=device.get("sm_count"),
            )
        )
        used = device.get("memory_used_bytes")  # nvtopy's, in bytes; else the GPU instance's, in MiB
        if used is None:
            used = fb.get("DCGM_FI_DEV_FB_USED")
        # The GPU instance's own activity (GPM, as percentages): not said -> not available; said but out of range
        # (read as None) -> out of range.
        gpm = {attribute: fb.get(name) for name, attribute in INSTANCE_GPM_FIELDS.items()}
        reasons = {
            attribute: Reason.OUT_OF_RANGE if name in fb else Reason.NOT_AVAILABLE
            for name, attribute in INSTANCE_GPM_FIELDS.items()
            if gpm[attribute] is None
        }
        usage.append(MigUsage(number, used, fb.get("DCGM_FI_DEV_FB_FREE"), unavailable=freeze(reasons), **gpm))
    return tuple(found), tuple(usage)


def parse_exposition(text: str, url: str) -> HostScrape:
    """GPUs and processes out of a Prometheus text exposition with dcgm-exporter's names.

    Raises ValueError (or another exception of the parser) for text that is not
    an exposition; values and counts that no GPU has are cut as the module says.

    MIG: a series labelled ``GPU_I_ID`` is a GPU instance's. Its framebuffer and
    profiling values are the instance's (:data:`~nvtopy.formats.dcgm.INSTANCE_FIELDS`); any
    other value is its GPU's (dcgm-exporter repeats them per instance, and has no
    whole-GPU series for a MIG GPU), used where the GPU has no series of its own.
    nvtopy's ``nvtopy_mig_device_*`` series name the MIG devices; without them
    (dcgm-exporter) each GPU instance is one device.
    """
    from prometheus_client.parser import text_string_to_metric_families

    if _SKIPPED in text:  # per-link series are not read back: not parsed (on an HGX node, most of the answer)
        text = "\n".join(line for line in text.split("\n") if not line.startswith(_SKIPPED))
    host = urllib.parse.urlsplit(url).hostname or url
    statics: dict[int, dict[str, Any]] = {}
    values: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    health: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    lost: dict[int, bool] = {}
    processes: dict[tuple[int, int], dict[str, Any]] = {}
    # What GPU instances' series say of their GPU, used where its own series do not (dcgm-exporter's MIG GPUs).
    inherited: dict[int, dict[FieldPart, dict[str, Any]]] = collections.defaultdict(
        lambda: {"static": {}, "sample": {}, "health": {}}
    )
    instances: dict[int, dict[int, dict[str, Any]]] = collections.defaultdict(dict)  # gpu -> GPU_I_ID -> values
    devices: dict[int, dict[int, dict[str, Any]]] = collections.defaultdict(dict)  # gpu -> MIG device -> values
    reported: set[str] = set()  # every gpu label seen, shown or not
    left_out: set[tuple[int, int]] = set()  # processes beyond MAX_PROCESSES_PER_HOST
    driver = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            gpu = labels.get("gpu", "")
            if not (gpu.isascii() and gpu.isdigit()):
                continue
            is_process = sample.name.startswith("nvtopy_process_")
            if not is_process and len(reported) <= 100_000:
                reported.add(gpu.lstrip("0") or "0")
            index = scraped_whole(gpu, MAX_GPU_INDEX)
            if index is None:
                continue
            if is_process:
                metric = sample.name.removeprefix("nvtopy_process_")
                pid = scraped_whole(labels.get("pid"), MAX_PID)
                if not pid or metric not in PROCESS_VALUES:
                    continue
                row = processes.get((index, pid))
                if row is None:
                    if len(processes) >= MAX_PROCESSES_PER_HOST:
                        if len(left_out) < 1_000_000:
                            left_out.add((index, pid))
                        continue
                    row = processes[(index, pid)] = process_from_labels(labels)
                row[metric] = process_value(metric, sample.value)
                continue
            static = statics.get(index)
            if static is None:
                static = statics[index] = {
                    "uuid": scraped_spelling(labels, UUID_LABELS),
                    "bus_id": scraped_label(labels, "pci_bus_id"),
                    "name": scraped_label(labels, "modelName"),
                }
            host = scraped_spelling(labels, HOST_LABELS) or host
            driver = scraped_spelling(labels, DRIVER_LABELS) or driver
            if sample.name.startswith(_MIG_DEVICE_PREFIX):
                mig_device_sample(devices[index], sample.name, labels, sample.value)
                continue
            gi_text = labels.get("GPU_I_ID")
            gi = scraped_whole(gi_text, MAX_INSTANCE_ID) if gi_text else None
            if gi_text and gi is None:
                continue  # an instance no GPU has: nothing of it is read
            if sample.name == "nvtopy_gpu_lost":
                lost[index] = sample.value >= 1
                continue
            if sample.name == "nvtopy_xid_events_total":
                if gi is None:
                    xid_count(health[index], labels.get("xid"), sample.value)
                continue
            name = sample.name
            if name not in ALL_BY_NAME and name not in READ_ALIASES and name.endswith("_total"):
                # prometheus-client's parser renames a counter X (energy, ECC; 4.9's X_TOTAL too) to X_total
                name = name[:-6]
            name, reading = legacy_reading(name, sample.value)  # a 4.9 series: its legacy name and unit
            known = ALL_BY_NAME.get(name)
            if known is None:
                continue
            value = known.from_metric(reading)  # None: not finite, or out of the field's range
            if gi is not None:
                of_gpu = instances[index]
                if gi not in of_gpu and len(of_gpu) >= MAX_MIG_PER_GPU:
                    continue
                gpu_instance = of_gpu.setdefault(gi, {"profile": scraped_label(labels, "GPU_I_PROFILE")})
                if name in INSTANCE_FIELDS:
                    gpu_instance[name] = value
                    continue
                part, key = field_part(known.attribute)
                inherited[index][part].setdefault(key, value)  # the GPU's value, as its instance's series repeat it
                continue
            part, key = field_part(known.attribute)
            if part == "static":
                static[key] = value
            elif part == "health":
                health[index][key] = value
            else:
                values[index][key] = value
    for index, said in inherited.items():  # the GPU's own series win
        statics[index].update({k: v for k, v in said["static"].items() if k not in statics[index]})
        values[index] = {**said["sample"], **values[index]}
        if said["health"]:
            health[index] = {**said["health"], **health[index]}
    for index in set(instances) | set(devices):
        if index in statics:
            mig_instances, values[index]["mig_usage"] = mig_of(instances.get(index, {}), devices.get(index, {}))
            statics[index]["mig_instances"] = mig_instances
            statics[index].setdefault("mig_mode", True)  # instances exist: MIG is on
    scrape = HostScrape(url=url, hostname=host, driver_version=driver)
    for gpu_values in values.values():
        if any(k.startswith("ecc_") for k in gpu_values):
            gpu_values["ecc_mode"] = True  # dcgm has no ECC-mode metric: counters are exported only when it is on
    shown = sorted(statics)[:MAX_GPUS_PER_HOST]
    for index in shown:
        gpu_static = GpuStatic(index=index, **statics[index])
        scrape.gpus.append((gpu_static, dict(values.get(index, {})), lost.get(index, False)))
    for (index, pid), row in sorted(processes.items()):
        if index in statics:  # a process of a GPU without GPU series has nowhere to be shown
            scrape.processes.setdefault(index, []).append({"pid": pid, **row})
    scrape.health = {index: dict(health[index]) for index in shown if health.get(index)}
    notes = []
    if len(reported) > len(shown):
        count = (
            f"{len(reported)} GPU{'s' if len(reported) > 1 else ''}" if len(reported) <= 100_000 else "over 100000 GPUs"
        )
        notes.append(f"host reported {count}; showing the first {len(shown)}")
    if left_out:
        notes.append(f"host reported {len(processes) + len(left_out)} processes; showing {len(processes)}")
    scrape.note = "; ".join(notes) or None
    return scrape

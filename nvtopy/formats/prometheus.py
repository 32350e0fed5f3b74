"""Prometheus text exposition under dcgm-exporter's names, both ways.

Encode: :class:`SnapshotCollector` renders the latest snapshot of a source for
prometheus-client (``nvtopy exporter``). Parse: :func:`parse_exposition` reads
an exporter's answer (nvtopy's or dcgm-exporter's) back into GPUs and
processes (``nvtopy --remote``), trusting nothing in it: labels are cut and
unescaped, values out of range are None, a host claims a bounded number of
GPUs and processes. The names and units themselves are :mod:`nvtopy.formats.dcgm`'s.
"""

from __future__ import annotations

import collections
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..model import GpuState, GpuStatic, OwnerKind, ProcessOwner, Snapshot
from ..textsafe import escape_text, unescape_text
from .dcgm import BY_NAME, FIELDS, GPU_LABELS, gpu_labels

__all__ = [
    "COMMAND_LABEL_MAX",
    "POD_LABELS",
    "PROCESS_LABELS",
    "HostScrape",
    "SnapshotCollector",
    "parse_exposition",
    "pod_labels",
]


# Who owns the process (empty where it has none of them): its container, Kubernetes pod and namespace, Slurm job,
# and the owner's kind (docker, kubernetes, podman, slurm, systemd-service, user-session, cgroup, host).
OWNER_LABELS = ("owner_kind", "container", "pod", "namespace", "slurm_job")
PROCESS_LABELS = ("gpu", "UUID", "pid", "type", "user", "command", "Hostname", *OWNER_LABELS)

# dcgm-exporter's labels of a GPU that a Kubernetes pod holds, after its GPU labels (its rendermetrics template).
POD_LABELS = ("pod", "namespace", "container")


def pod_labels(gpu: GpuState) -> dict[str, str]:
    """dcgm-exporter's ``pod``/``namespace``/``container`` of a GPU that exactly one pod holds, else nothing.

    As dcgm-exporter sets them under Kubernetes: only when every process on the GPU
    runs in the same named pod; ``container`` only when they share one container too.
    """
    pods = set()
    containers = set()
    for proc in gpu.processes:
        owner = proc.owner
        if owner is None or owner.kind is not OwnerKind.KUBERNETES or not owner.pod or not owner.namespace:
            return {}
        pods.add((owner.namespace, owner.pod))
        containers.add(owner.container)
    if len(pods) != 1:
        return {}
    ((namespace, pod),) = pods
    labels = {"pod": _label_text(pod), "namespace": _label_text(namespace)}
    if len(containers) == 1 and None not in containers:
        labels["container"] = _label_text(next(iter(containers)))
    return labels


def _owner_values(owner: ProcessOwner | None) -> list[str]:
    """The :data:`OWNER_LABELS` values of a process, escaped."""
    if owner is None:
        return [""] * len(OWNER_LABELS)
    job = owner.job if owner.kind is OwnerKind.SLURM else None
    # A container without a readable name is still one container: its short id, as `docker ps` shows it.
    container = owner.container or (owner.container_id[:12] if owner.container_id else None)
    return [owner.kind.value, *(_label_text(v) for v in (container, owner.pod, owner.namespace, job))]


COMMAND_LABEL_MAX = 120


def _label_text(text: str | None) -> str:
    """Outside text (argv, user names, GPU names, host names) as a label value.

    :func:`~nvtopy.textsafe.escape_text`, the rule of every file nvtopy writes:
    valid UTF-8 (a non-UTF-8 argv arrives as lone surrogates, which would make
    the encoding of the whole exposition fail and every scrape answer 500), no
    control characters, and reversible with ``unescape_text`` (``--remote`` does).
    prometheus-client then escapes backslash, quote and newline for the format,
    and a parser undoes exactly that, so a reader sees the escaped text.
    """
    return escape_text(text) or ""


class SnapshotCollector:
    """A prometheus-client collector that renders the latest snapshot of a snapshot source."""

    def __init__(self, source: Any) -> None:
        self.source = source  # anything with a ``latest`` Snapshot (a Poller)

    def describe(self) -> list[Any]:
        return []  # metrics depend on the GPUs present: not known at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.samples import Sample

        snapshot: Snapshot | None = self.source.latest
        info = GaugeMetricFamily(
            "nvtopy_exporter_info", "nvtopy exporter build and backend.", labels=["version", "backend"]
        )
        from .._version import __version__

        info.add_metric([__version__, "none" if snapshot is None else snapshot.host.backend], 1.0)
        yield info
        if snapshot is None:
            return
        host = snapshot.host
        labels = [
            (gpu, {name: _label_text(value) for name, value in gpu_labels(gpu, host).items()}) for gpu in snapshot.gpus
        ]
        # A GPU that one pod holds also gets dcgm-exporter's pod labels: its series then have more labels than the
        # others' (allowed in one family), so they are added as samples rather than through add_metric.
        pods = [pod_labels(gpu) for gpu, _ in labels]
        for metric in FIELDS:
            family = GaugeMetricFamily(metric.name, metric.help, labels=list(GPU_LABELS))
            for (gpu, gpu_label), pod in zip(labels, pods, strict=True):
                if gpu.lost:
                    continue
                value = metric.value(gpu)
                if value is None:
                    continue
                if pod:
                    series = {name: gpu_label[name] for name in GPU_LABELS}
                    series.update(pod)
                    family.samples.append(Sample(metric.name, series, value))
                else:
                    family.add_metric([gpu_label[name] for name in GPU_LABELS], value)
            yield family
        lost = GaugeMetricFamily(
            "nvtopy_gpu_lost", "1 when the GPU fell off the bus (GpuIsLost).", labels=list(GPU_LABELS)
        )
        for gpu, gpu_label in labels:
            lost.add_metric([gpu_label[name] for name in GPU_LABELS], 1.0 if gpu.lost else 0.0)
        yield lost
        age = GaugeMetricFamily("nvtopy_snapshot_age_seconds", "Seconds since the metrics were collected.")
        age.add_metric([], max(0.0, time.time() - snapshot.timestamp) if host.backend == "nvml" else 0.0)
        yield age
        yield from self._processes(snapshot)

    @staticmethod
    def _processes(snapshot: Snapshot) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        families = {
            "gpu_memory_bytes": ("GPU memory used by the process, as NVML reports it (bytes).", "gpu_memory_bytes"),
            "sm_utilization_percent": ("The process's share of SM time (%).", "sm_percent"),
            "memory_utilization_percent": ("The process's share of memory bandwidth (%).", "memory_percent"),
            "cpu_percent": ("CPU use of the process (% of one core).", "cpu_percent"),
            "host_memory_bytes": ("Resident host memory of the process (bytes).", "host_memory_bytes"),
            "start_time_seconds": ("Start time of the process since the Unix epoch (seconds).", "create_time"),
        }
        made = {
            key: GaugeMetricFamily(f"nvtopy_process_{key}", help_, labels=list(PROCESS_LABELS))
            for key, (help_, _) in families.items()
        }
        hostname = _label_text(snapshot.host.hostname)
        for gpu in snapshot.gpus:
            uuid = _label_text(gpu.static.uuid)
            for proc in gpu.processes:
                command = proc.command or ""
                if len(command) > COMMAND_LABEL_MAX:  # cut before escaping: never half an escape
                    command = command[: COMMAND_LABEL_MAX - 1] + "…"
                command = _label_text(command)
                user = _label_text(proc.user)
                values = [
                    str(gpu.index),
                    uuid,
                    str(proc.pid),
                    proc.type.value,
                    user,
                    command,
                    hostname,
                    *_owner_values(proc.owner),
                ]
                for key, (_, attribute) in families.items():
                    value = getattr(proc, attribute)
                    if value is not None:
                        made[key].add_metric(values, float(value))
        yield from made.values()


MAX_GPUS_PER_HOST = 64  # an HGX board has 8 or 16: more is a broken or hostile exporter


MAX_GPU_INDEX = 1023  # a ``gpu`` label above this is no GPU (it is counted as reported, never shown)


MAX_PROCESSES_PER_HOST = 4096


MAX_LABEL = 256  # characters kept of a label (host and model names, UUIDs, user names)


MAX_COMMAND = 4096  # of a command line


MAX_PID = 2**32 - 1  # pids are 32-bit (Linux's own limit is 2**22); 0 is no process


# Per-process values, as nvtopy's exporter names them: (lowest, highest, whole number). Outside
# the range, or not finite, a value is None (N/A), like the GPU fields of nvtopy.formats.dcgm.
PROCESS_VALUES: dict[str, tuple[float, float, bool]] = {
    "gpu_memory_bytes": (0, 2**64 - 1, True),
    "sm_utilization_percent": (0, 100, True),
    "memory_utilization_percent": (0, 100, True),
    "cpu_percent": (0, 100 * 4096, False),  # psutil: 100 per CPU used
    "host_memory_bytes": (0, 2**64 - 1, True),
    "start_time_seconds": (1, 2**33, False),  # a Unix time, after 1970 and before the year 2242
}


@dataclass
class HostScrape:
    """One host's GPUs as its exporter last described them (or why it could not be read)."""

    url: str
    hostname: str
    driver_version: str | None = None
    gpus: list[tuple[GpuStatic, dict[str, Any], bool]] = field(default_factory=list)  # static, sample values, lost
    processes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # gpu index -> process values
    error: str | None = None
    note: str | None = None  # what was left out (GPUs, processes beyond the caps), shown beside the GPUs


def _label(labels: dict[str, str], name: str, limit: int = MAX_LABEL) -> str | None:
    """A label's text (nvtopy's exporter escapes it: undone), at most ``limit`` characters; None if empty."""
    value = labels.get(name)
    if not value:
        return None
    value = unescape_text(value[: limit * 4]) or ""  # an escape is at most 4 characters
    return value[:limit] or None


def _whole(text: str | None, highest: int) -> int | None:
    """A label holding a whole number from 0 to ``highest``, else None (a 5,000-digit one too)."""
    if not text or len(text) > len(str(highest)) or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= highest else None


def _owner_from_labels(labels: dict[str, str]) -> ProcessOwner | None:
    """The owner a process's labels name (:data:`OWNER_LABELS`); ``None`` when they name none."""
    container, pod = _label(labels, "container"), _label(labels, "pod")
    namespace, job = _label(labels, "namespace"), _label(labels, "slurm_job")
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


def _process_value(name: str, value: float) -> float | int | None:
    low, high, whole = PROCESS_VALUES[name]
    if not low <= value <= high:  # NaN and the infinities fail this too
        return None
    return round(value) if whole else float(value)


def parse_exposition(text: str, url: str) -> HostScrape:
    """GPUs and processes out of a Prometheus text exposition with dcgm-exporter's names.

    Raises ValueError (or another exception of the parser) for text that is not
    an exposition; values and counts that no GPU has are cut as the module says.
    """
    from prometheus_client.parser import text_string_to_metric_families

    host = urllib.parse.urlsplit(url).hostname or url
    statics: dict[int, dict[str, Any]] = {}
    values: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    lost: dict[int, bool] = {}
    processes: dict[tuple[int, int], dict[str, Any]] = {}
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
            index = _whole(gpu, MAX_GPU_INDEX)
            if index is None:
                continue
            if is_process:
                metric = sample.name.removeprefix("nvtopy_process_")
                pid = _whole(labels.get("pid"), MAX_PID)
                if not pid or metric not in PROCESS_VALUES:
                    continue
                row = processes.get((index, pid))
                if row is None:
                    if len(processes) >= MAX_PROCESSES_PER_HOST:
                        if len(left_out) < 1_000_000:
                            left_out.add((index, pid))
                        continue
                    kind = labels.get("type") or "C"
                    row = processes[(index, pid)] = {
                        "user": _label(labels, "user"),
                        "command": _label(labels, "command", MAX_COMMAND),
                        "type": kind if kind in ("C", "G", "C+G") else "C",
                        "owner": _owner_from_labels(labels),
                    }
                row[metric] = _process_value(metric, sample.value)
                continue
            static = statics.get(index)
            if static is None:
                static = statics[index] = {
                    "uuid": _label(labels, "UUID"),
                    "bus_id": _label(labels, "pci_bus_id"),
                    "name": _label(labels, "modelName"),
                }
            host = _label(labels, "Hostname") or host
            driver = _label(labels, "DCGM_FI_DRIVER_VERSION") or driver
            if sample.name == "nvtopy_gpu_lost":
                lost[index] = sample.value >= 1
                continue
            name = sample.name
            if name not in BY_NAME and name.endswith("_total"):
                name = name[:-6]  # prometheus-client's parser renames dcgm's counters (energy, ECC) to *_total
            known = BY_NAME.get(name)
            if known is None:
                continue
            value = known.from_metric(sample.value)  # None: not finite, or out of the field's range
            if known.attribute.startswith("static."):
                static[known.attribute[7:]] = value
            else:
                values[index][known.attribute] = value
    scrape = HostScrape(url=url, hostname=host, driver_version=driver)
    for gpu_values in values.values():
        if any(k.startswith("ecc_") for k in gpu_values):
            gpu_values["ecc_mode"] = True  # dcgm has no ECC-mode metric: counters are exported only when it is on
    shown = sorted(statics)[:MAX_GPUS_PER_HOST]
    for index in shown:
        static = GpuStatic(index=index, **statics[index])
        scrape.gpus.append((static, dict(values.get(index, {})), lost.get(index, False)))
    for (index, pid), row in sorted(processes.items()):
        if index in statics:  # a process of a GPU without GPU series has nowhere to be shown
            scrape.processes.setdefault(index, []).append({"pid": pid, **row})
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

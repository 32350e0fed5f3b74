"""Prometheus text exposition under dcgm-exporter's names, both ways.

Encode: :class:`SnapshotCollector` renders the latest snapshot of a source for
prometheus-client (``nvtopy exporter``). Parse: :func:`parse_exposition` reads
an exporter's answer (nvtopy's or dcgm-exporter's) back into GPUs and
processes (``nvtopy --remote``), trusting nothing in it: labels are cut and
unescaped, values out of range are None, a host claims a bounded number of
GPUs and processes. The names and units themselves are :mod:`nvtopy.formats.dcgm`'s.

Beyond dcgm's names, nvtopy's own GPU series (:data:`NVTOPY_FIELDS`, the same
labels): the health verdict (``nvtopy_gpu_health``: 0 OK, 1 WARN, 2 FAIL),
whether the driver answers (``nvtopy_gpu_responding``), PCIe and NVLink
throughput in bytes per second; and per NVLink its state, throughput and
errors (labels :data:`LINK_LABELS`). ``nvtopy_gpu_mig_mode`` and
``nvtopy_gpu_mig_mode_pending`` (1/0) say whether MIG is on now and after the
next reset.

Profiling: dcgm-exporter's ``DCGM_FI_PROF_*`` series from GPM (Hopper and newer;
ratios 0-1 and bytes per second, :data:`~nvtopy.formats.dcgm.GPM_DCGM_FIELDS`),
absent on a GPU without GPM; ``--remote`` reads them back as percentages.

MIG instances: per GPU instance, dcgm-exporter's framebuffer and profiling series with its
``GPU_I_PROFILE`` and ``GPU_I_ID`` labels (:mod:`nvtopy.formats.dcgm`); per MIG
device (compute instance), ``nvtopy_mig_device_info`` (1, with its UUID and
profile) and its memory, SM count and process count (labels
:data:`MIG_DEVICE_LABELS`); a process on a MIG device carries ``GPU_I_ID`` and
``compute_instance_id`` too. ``nvtopy_xid_events_total{xid}`` counts
the Xid events seen since the exporter started, per Xid: a counter, it only
grows. The health series are kept for a lost GPU: a GPU that fell off the bus
is the one an alert is for.

A scrape never waits on the driver: it renders ``source.latest``, the snapshot
the poller last published, and reads nothing else. A GPU whose driver call
hangs is published by the collector with ``responding`` false and its last
values, so the exporter keeps answering with ``nvtopy_gpu_responding 0``.
"""

from __future__ import annotations

import collections
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...health.xid import MAX_XIDS_PER_GPU
from ...model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    MigInstance,
    MigUsage,
    OwnerKind,
    ProcessOwner,
    Reason,
    Severity,
    Snapshot,
    freeze,
)
from ...ranges import BYTES, BYTES_PER_S, FIELD_RANGES, SECONDS, fits
from ...textsafe import escape_text, unescape_text
from ..dcgm import (
    BY_NAME,
    FIELDS,
    GPU_LABELS,
    INSTANCE_FIELDS,
    INSTANCE_GPM_FIELDS,
    MIG_LABELS,
    DcgmField,
    gpu_instance_profile,
    gpu_instances,
    gpu_labels,
    ranged,
)
from ..fields import FieldPart, field_part

__all__ = [
    "COMMAND_LABEL_MAX",
    "MIG_DEVICE_LABELS",
    "MIG_DEVICE_SERIES",
    "NVTOPY_FIELDS",
    "POD_LABELS",
    "PROCESS_FIELDS",
    "PROCESS_LABELS",
    "Exposition",
    "HostScrape",
    "SnapshotCollector",
    "TextRenderer",
    "age_families",
    "mig_device_sample",
    "mig_of",
    "owner_from_labels",
    "parse_exposition",
    "pod_labels",
    "process_from_labels",
    "process_value",
    "scraped_label",
    "scraped_whole",
    "xid_count",
]


# ----------------------------------------------------------------- nvtopy's own GPU series


_SEVERITY_BY_RANK = {severity.rank: severity for severity in Severity}


def _float(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


NVTOPY_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        "nvtopy_gpu_health",
        "The GPU's health verdict: 0 OK, 1 WARN, 2 FAIL (nvtopy's findings; see --once or the JSON for why).",
        "health.verdict",
        lambda verdict: float(verdict.rank),  # type: ignore[attr-defined]
        ranged((0, 2), lambda v: _SEVERITY_BY_RANK[round(v)], whole=True),
        when_lost=True,
    ),
    DcgmField(
        "nvtopy_gpu_responding",
        "1 while the GPU's driver calls answer; 0 when one has been outstanding too long (a hung GPU or driver).",
        "health.responding",
        lambda value: 1.0 if value else 0.0,
        ranged((0, 1), bool, whole=True),
        when_lost=True,
    ),
    DcgmField(
        "nvtopy_gpu_stalled_seconds",
        "How long the outstanding driver call of a GPU that does not respond has run (seconds).",
        "health.stalled_seconds",
        _float,
        ranged(SECONDS, float),
        when_lost=True,
    ),
    DcgmField(
        "nvtopy_gpu_idle_held_bytes",
        "GPU memory held by processes that compute nothing, for long (bytes).",
        "health.idle_held_bytes",
        _float,
        ranged(BYTES, round),
    ),
    DcgmField(
        "nvtopy_gpu_suspected_hang_seconds",
        "How long the GPU has looked busy with its SMs idle (without GPM: at low power), "
        "as in a deadlocked collective (seconds).",
        "health.suspected_hang_seconds",
        _float,
        ranged(SECONDS, float),
    ),
    DcgmField(
        "nvtopy_pcie_rx_bytes_per_second",
        "PCIe receive throughput, NVML's 20 ms sample (bytes/s; not DCGM_FI_PROF_PCIE_RX_BYTES, see docs).",
        "pcie_rx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_pcie_tx_bytes_per_second",
        "PCIe transmit throughput, NVML's 20 ms sample (bytes/s; not DCGM_FI_PROF_PCIE_TX_BYTES, see docs).",
        "pcie_tx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_nvlink_rx_bytes_per_second",
        "NVLink receive throughput, data payload, all links (bytes/s).",
        "nvlink_rx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_nvlink_tx_bytes_per_second",
        "NVLink transmit throughput, data payload, all links (bytes/s).",
        "nvlink_tx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_gpu_mig_mode",
        "1 when MIG mode is on, 0 when off (absent: the GPU has no MIG).",
        "static.mig_mode",
        lambda value: 1.0 if value else 0.0,
        ranged((0, 1), bool, whole=True),
    ),
    DcgmField(
        "nvtopy_gpu_mig_mode_pending",
        "MIG mode after the next GPU reset: 1 on, 0 off (differs from nvtopy_gpu_mig_mode until the reset).",
        "static.mig_mode_pending",
        lambda value: 1.0 if value else 0.0,
        ranged((0, 1), bool, whole=True),
    ),
)
NVTOPY_BY_NAME = {field.name: field for field in NVTOPY_FIELDS}
_ALL_BY_NAME = {**BY_NAME, **NVTOPY_BY_NAME}

# Per NVLink: (metric, help, NvLink attribute, counter?). Labelled as the nvtopy_process_* series are: the GPU's
# identity (gpu, UUID, Hostname), then ``link`` -- not every dcgm label: an HGX node has 144 links and four series
# each, and the model, bus id and driver are one join away on the GPU's series (``on(gpu, Hostname)``).
# ``remote`` (the peer's PCI bus id) labels the state series.
LINK_LABELS = ("gpu", "UUID", "Hostname", "link")
LINK_SERIES: tuple[tuple[str, str, str, bool], ...] = (
    ("nvtopy_nvlink_link_active", "1 when the NVLink is active, 0 when not (label remote: its peer).", "active", False),
    (
        "nvtopy_nvlink_link_rx_bytes_per_second",
        "NVLink receive throughput, data payload (bytes/s).",
        "rx_bytes_per_s",
        False,
    ),
    (
        "nvtopy_nvlink_link_tx_bytes_per_second",
        "NVLink transmit throughput, data payload (bytes/s).",
        "tx_bytes_per_s",
        False,
    ),
    ("nvtopy_nvlink_link_errors", "NVLink CRC, replay and recovery errors since driver load.", "errors", True),
)


# Per MIG device (a compute instance): the GPU's identity, as the per-link series have it, then which device:
# NVML's MIG device index, dcgm-exporter's GPU instance labels (for joins with its FB series) and the compute
# instance. ``nvtopy_mig_device_info`` adds the device's UUID (what CUDA_VISIBLE_DEVICES takes) and own profile.
MIG_DEVICE_LABELS = ("gpu", "UUID", "Hostname", "mig_device", *MIG_LABELS, "compute_instance_id")
MIG_INFO_LABELS = (*MIG_DEVICE_LABELS, "mig_uuid", "mig_profile")
# (metric, help, MigState attribute): unknown values are left out.
MIG_DEVICE_SERIES: tuple[tuple[str, str, str], ...] = (
    ("nvtopy_mig_device_memory_used_bytes", "GPU memory used in the MIG device's GPU instance (bytes).", "used"),
    ("nvtopy_mig_device_memory_total_bytes", "GPU memory of the MIG device (bytes).", "total"),
    ("nvtopy_mig_device_sm_count", "Streaming multiprocessors the MIG device computes with.", "sm_count"),
    ("nvtopy_mig_device_processes", "Processes running on the MIG device.", "processes"),
)
MAX_MIG_PER_GPU = 64  # MIG devices (and GPU instances) a GPU may claim; an H100 has at most 7

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
    return _pod_labels(gpu.processes)


def _pod_labels(processes: tuple[GpuProcess, ...]) -> dict[str, str]:
    """:func:`pod_labels` of these processes (a GPU's, or a GPU instance's)."""
    pods = set()
    containers = set()
    for proc in processes:
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


def age_families(snapshot: Snapshot | None) -> list[Any]:
    """``nvtopy_snapshot_age_seconds``, as of now: the one series a scrape changes (none before a snapshot).

    Why per scrape: a poller that stopped publishing shows as an age that grows
    while the rest stays the same. A simulated or replayed snapshot's age is 0.
    """
    from prometheus_client.core import GaugeMetricFamily

    if snapshot is None:
        return []
    age = GaugeMetricFamily("nvtopy_snapshot_age_seconds", "Seconds since the metrics were collected.")
    age.add_metric([], max(0.0, time.time() - snapshot.timestamp) if snapshot.host.backend == "nvml" else 0.0)
    return [age]


_READERS: tuple[tuple[DcgmField, Callable[[GpuState], object]], ...] = ()


def _gpu_readers() -> tuple[tuple[DcgmField, Callable[[GpuState], object]], ...]:
    """Each GPU series' field with a getter of its raw value (``DcgmField.reader``), resolved once.

    Why: working out from the attribute's text where the value lives, for every value
    (60 fields x 8 GPUs every second), was a fifth of building the families.
    """
    global _READERS  # made once, on first use (the same from any thread)
    if not _READERS:
        _READERS = tuple((metric, metric.reader()) for metric in FIELDS + NVTOPY_FIELDS)
    return _READERS


class SnapshotCollector:
    """A prometheus-client collector that renders the latest snapshot of a snapshot source.

    ``nvtopy exporter`` serves :class:`Exposition` (the same families, as bytes made once
    per snapshot); this collector is what prometheus-client itself is given: the
    exporter's ``name[]``-filtered requests, and any caller of ``generate_latest``.
    """

    def __init__(self, source: Any) -> None:
        self.source = source  # anything with a ``latest`` Snapshot (a Poller)
        # (snapshot, its families but the age): the last snapshot's families.
        self._cache: tuple[Snapshot | None, list[Any]] | None = None
        # What a process's labels are made of -> its label dict, for the processes of the last snapshot built.
        self._process_labels: dict[tuple[Any, ...], dict[str, str]] = {}
        # Family name -> (what it was built from, the family): the last snapshot's families, each reused
        # whole by the next snapshot when its inputs are the same (most are: slow groups, static fields,
        # idle processes), so neither its samples nor, in TextRenderer, its text are made again.
        self._reused: dict[str, tuple[Any, Any]] = {}
        self._reused_processes: dict[str, tuple[Any, Any]] = {}

    def describe(self) -> list[Any]:
        return []  # metrics depend on the GPUs present: not known at registration

    def collect(self) -> Iterator[Any]:
        """Every family of the latest snapshot: built once per snapshot, only the age is new per call.

        The age comes last, so that the text of everything before it is the same for
        every scrape of a snapshot (:class:`Exposition` keeps it as bytes).
        """
        snapshot: Snapshot | None = self.source.latest
        cached = self._cache
        if cached is None or cached[0] is not snapshot:
            cached = (snapshot, self.families(snapshot))
            self._cache = cached
        yield from cached[1]
        yield from age_families(snapshot)

    def families(self, snapshot: Snapshot | None) -> list[Any]:
        """Every family of ``snapshot`` but its age (the one figure that changes between two scrapes of it)."""
        head, tail = self._families(snapshot)
        return head + tail

    def _families(self, snapshot: Snapshot | None) -> tuple[list[Any], list[Any]]:
        """The families before and after the snapshot's age (which is the one figure a scrape changes)."""
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.samples import Sample

        head: list[Any] = []
        info = GaugeMetricFamily(
            "nvtopy_exporter_info", "nvtopy exporter build and backend.", labels=["version", "backend"]
        )
        from ..._version import __version__

        info.add_metric([__version__, "none" if snapshot is None else snapshot.host.backend], 1.0)
        head.append(info)
        if snapshot is None:
            return head, []
        host = snapshot.host
        labels = [
            (gpu, {name: _label_text(value) for name, value in gpu_labels(gpu, host).items()}) for gpu in snapshot.gpus
        ]
        # A GPU that one pod holds also gets dcgm-exporter's pod labels: its series then have more labels than the
        # others' (allowed in one family). One label dict per GPU, shared by all its series (a renderer formats it
        # once), so they are added as samples rather than through add_metric.
        series_of = [({name: gpu_label[name] for name in GPU_LABELS} | pod_labels(gpu)) for gpu, gpu_label in labels]
        instances = self._gpu_instances(labels)
        # The label dicts are made anew per snapshot: a family is reused only if they are equal too.
        series_key = (
            tuple(tuple(series.items()) for series in series_of),
            tuple(tuple(s.items()) for _, s in instances),
        )
        previous, reused = self._reused, {}
        for metric, read in _gpu_readers():
            raws = tuple(None if gpu.lost and not metric.when_lost else read(gpu) for gpu, _ in labels)
            read_instance = INSTANCE_FIELDS.get(metric.name)
            instance_raws = () if read_instance is None else tuple(read_instance(mig) for mig, _ in instances)
            more = () if metric.labels is None else tuple(metric.labels(gpu) for gpu, _ in labels)
            inputs = (series_key, raws, instance_raws, more)
            last = previous.get(metric.name)
            if last is not None and last[0] == inputs:
                family = last[1]
            else:
                family = GaugeMetricFamily(metric.name, metric.help, labels=list(GPU_LABELS))
                for i, (raw, series) in enumerate(zip(raws, series_of, strict=True)):
                    if raw is not None:
                        extra = more[i] if more else None
                        series_labels = series | extra if extra else series
                        family.samples.append(Sample(metric.name, series_labels, metric.to_metric(raw)))
                for raw, (_, series) in zip(instance_raws, instances if instance_raws else (), strict=True):
                    if raw is not None:  # after the GPUs' own: dcgm-exporter's GPU instance series
                        family.samples.append(Sample(metric.name, series, metric.to_metric(raw)))
            reused[metric.name] = (inputs, family)
            head.append(family)
        self._reused = reused
        head.extend(self._mig_devices(labels))
        head.extend(self._xid_counts(labels))
        head.extend(self._nvlinks(labels))
        lost = GaugeMetricFamily(
            "nvtopy_gpu_lost", "1 when the GPU fell off the bus (GpuIsLost).", labels=list(GPU_LABELS)
        )
        for gpu, gpu_label in labels:
            lost.add_metric([gpu_label[name] for name in GPU_LABELS], 1.0 if gpu.lost else 0.0)
        head.append(lost)
        return head, list(self._processes(snapshot))

    @staticmethod
    def _gpu_instances(labels: list[tuple[GpuState, dict[str, str]]]) -> list[tuple[Any, dict[str, str]]]:
        """Each GPU instance of each GPU (not lost) with its series' labels: the GPU's, GPU_I_PROFILE, GPU_I_ID.

        Under Kubernetes, the pod labels are those of the pod holding the instance (its processes).
        """
        found = []
        for gpu, gpu_label in labels:
            if gpu.lost:
                continue
            for mig in gpu_instances(gpu):
                gi = mig.instance.gpu_instance_id
                series = {name: gpu_label[name] for name in GPU_LABELS}
                series["GPU_I_PROFILE"] = _label_text(gpu_instance_profile(mig.instance.profile))
                series["GPU_I_ID"] = str(gi)
                series.update(_pod_labels(tuple(p for p in gpu.processes if p.gpu_instance_id == gi)))
                found.append((mig, series))
        return found

    @staticmethod
    def _mig_devices(labels: list[tuple[GpuState, dict[str, str]]]) -> Iterator[Any]:
        """Per MIG device: ``nvtopy_mig_device_info`` (1) and its memory, SM count and processes."""
        from prometheus_client.core import GaugeMetricFamily

        info = GaugeMetricFamily(
            "nvtopy_mig_device_info",
            "A MIG device (compute instance) of the GPU: 1, with its UUID and profile as labels.",
            labels=list(MIG_INFO_LABELS),
        )
        families = [
            GaugeMetricFamily(name, help_, labels=list(MIG_DEVICE_LABELS)) for name, help_, _ in MIG_DEVICE_SERIES
        ]
        for gpu, gpu_label in labels:
            if gpu.lost:
                continue
            listed = gpu.processes_unavailable is None
            for mig in gpu.mig:
                instance = mig.instance
                gi, ci = instance.gpu_instance_id, instance.compute_instance_id
                values = [
                    *(gpu_label[name] for name in ("gpu", "UUID", "Hostname")),
                    str(instance.index),
                    _label_text(gpu_instance_profile(instance.profile)),
                    "" if gi is None else str(gi),
                    "" if ci is None else str(ci),
                ]
                info.add_metric([*values, _label_text(instance.uuid), _label_text(instance.profile)], 1.0)
                readings = {
                    "used": mig.memory_used_bytes,
                    "total": mig.memory_total_bytes,
                    "sm_count": instance.sm_count,
                    "processes": len(mig.processes) if listed else None,
                }
                for family, (_, _, key) in zip(families, MIG_DEVICE_SERIES, strict=True):
                    value = readings[key]
                    if value is not None:
                        family.add_metric(values, float(value))
        yield info
        yield from families

    @staticmethod
    def _xid_counts(labels: list[tuple[GpuState, dict[str, str]]]) -> Iterator[Any]:
        """``nvtopy_xid_events_total{xid}``: Xid events seen since the exporter started, per GPU and Xid.

        A counter (the model's counts only grow), so ``increase(...[1h])`` alerts on new Xids; kept
        for a lost GPU, whose last Xid (79, fallen off the bus) is the one to see.
        """
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            "nvtopy_xid_events",
            "Xid events (GPU critical errors) seen since nvtopy started, per Xid.",
            labels=[*GPU_LABELS, "xid"],
        )
        for gpu, gpu_label in labels:
            for xid, count in gpu.health.xid_counts:
                family.add_metric([*(gpu_label[name] for name in GPU_LABELS), str(xid)], float(count))
        yield family

    @staticmethod
    def _nvlinks(labels: list[tuple[GpuState, dict[str, str]]]) -> Iterator[Any]:
        """Per NVLink: active (with its peer as label ``remote``), throughput and errors; unknown values left out."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families = {}
        for name, help_, attribute, counter in LINK_SERIES:
            extra = ["remote"] if attribute == "active" else []
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            families[attribute] = kind(name, help_, labels=[*LINK_LABELS, *extra])
        for gpu, gpu_label in labels:
            links = gpu.sample.nvlinks
            if gpu.lost or not links:
                continue
            base = [gpu_label[name] for name in LINK_LABELS[:-1]]
            for link in links:
                for _, _, attribute, _ in LINK_SERIES:
                    value = getattr(link, attribute)
                    if value is None:
                        continue
                    values = [*base, str(link.link)]
                    if attribute == "active":
                        values.append(_label_text(link.remote))
                    families[attribute].add_metric(values, float(value))
        yield from families.values()

    def _processes(self, snapshot: Snapshot) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.samples import Sample

        families = {
            "gpu_memory_bytes": "GPU memory used by the process, as NVML reports it (bytes).",
            "sm_utilization_percent": "The process's share of SM time (%).",
            "memory_utilization_percent": "The process's share of memory bandwidth (%).",
            "cpu_percent": "CPU use of the process (% of one core).",
            "host_memory_bytes": "Resident host memory of the process (bytes).",
            "start_time_seconds": "Start time of the process since the Unix epoch (seconds).",
            "idle_held_seconds": "How long the process has held GPU memory while computing nothing (~0 % SM; seconds).",
        }
        made = {
            key: GaugeMetricFamily(f"nvtopy_process_{key}", help_, labels=list(PROCESS_LABELS))
            for key, help_ in families.items()
        }
        names = {key: f"nvtopy_process_{key}" for key in families}
        host = snapshot.host.hostname
        hostname = _label_text(host)
        # A process's labels change only with what they are made of (its command, user, owner...): one label dict
        # per process, kept from one snapshot to the next, and shared by its seven families' samples.
        previous, kept = self._process_labels, {}
        rows: list[tuple[dict[str, str], GpuProcess]] = []
        for gpu in snapshot.gpus:
            uuid = gpu.static.uuid
            for proc in gpu.processes:
                key = (
                    gpu.index,
                    uuid,
                    proc.pid,
                    proc.type,
                    proc.user,
                    proc.command,
                    proc.owner,
                    proc.gpu_instance_id,
                    proc.compute_instance_id,
                    host,
                )
                series = previous.get(key)
                if series is None:
                    series = self._process_series(gpu.index, uuid, proc, hostname)
                kept[key] = series
                rows.append((series, proc))
        self._process_labels = kept  # the processes gone are forgotten
        # A family is reused whole when its processes (the same label dicts, compared by identity first) and
        # their values are the same as in the last snapshot: start times and GPU memory mostly are.
        all_series = tuple(series for series, _ in rows)
        last, reused = self._reused_processes, {}
        for key_ in families:
            attribute = PROCESS_FIELDS[key_]
            values = tuple(getattr(proc, attribute) for _, proc in rows)
            inputs = (all_series, values)
            cached = last.get(key_)
            if cached is not None and cached[0] == inputs:
                family = cached[1]
            else:
                family = made[key_]
                name = names[key_]
                for series, value in zip(all_series, values, strict=True):
                    if value is not None:
                        family.samples.append(Sample(name, series, float(value)))
            reused[key_] = (inputs, family)
            yield family
        self._reused_processes = reused

    @staticmethod
    def _process_series(gpu_index: int, uuid: str | None, proc: GpuProcess, hostname: str) -> dict[str, str]:
        """The labels of a process's series (:data:`PROCESS_LABELS`, on a MIG device its instances too), escaped."""
        command = proc.command or ""
        if len(command) > COMMAND_LABEL_MAX:  # cut before escaping: never half an escape
            command = command[: COMMAND_LABEL_MAX - 1] + "…"
        values = [
            str(gpu_index),
            _label_text(uuid),
            str(proc.pid),
            proc.type.value,
            _label_text(proc.user),
            _label_text(command),
            hostname,
            *_owner_values(proc.owner),
        ]
        series = dict(zip(PROCESS_LABELS, values, strict=True))
        if proc.gpu_instance_id is not None:  # on a MIG device: its GPU and compute instance too
            series["GPU_I_ID"] = str(proc.gpu_instance_id)
            ci = proc.compute_instance_id
            series["compute_instance_id"] = "" if ci is None else str(ci)
        return series


# ----------------------------------------------------------------- rendering once per snapshot

# prometheus-client's text format, version 0.0.4: what ``nvtopy exporter`` always answers, as dcgm-exporter does
# (every Prometheus accepts it; the OpenMetrics text of the same families holds the same samples).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Family type -> (suffix of its samples' name, its TYPE in the text format), for the types rendered here.
_TEXT_TYPES = {"gauge": ("", "gauge"), "counter": ("_total", "counter"), "unknown": ("", "untyped")}
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")
_FINITE = float("inf")  # samples the text format moves to families of their own

GZIP_LEVEL = 1  # 3.5 ms and 100 kB for 1.2 MB of text (8 GPUs x 512 processes); level 9: 16 ms and 70 kB
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # RFC 1952: deflate, no name, no mtime, OS unknown


class TextRenderer:
    """Families as prometheus-client's ``generate_latest`` writes them, byte for byte, in a fraction of its time.

    Why: ``generate_latest`` formats every label of every sample anew, and a node's
    series carry 7 to 12 labels each: 70 ms of CPU for 8 GPUs and 512 processes,
    once a second. Here the label text of a series is made once and kept while the
    series exists -- a GPU's labels never change, a process's not while it lives,
    and its seven families share them -- so a render mostly joins strings it already
    has. Label and metric names go through prometheus-client's own escaping and
    values through its ``floatToGoString``; a family this does not know (a histogram,
    OpenMetrics-only samples) is handed to ``generate_latest`` itself. Not thread-safe:
    one renderer per caller (:class:`Exposition` holds its lock).
    """

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}  # the last render's label texts
        self._values: dict[float, str] = {}  # the last render's value texts
        self._names: dict[str, str] = {}
        # id of a family -> (the family, its text) of the last render: a family object rendered again (the
        # SnapshotCollector reuses those whose inputs did not change) is not formatted again. The entry
        # holds the family, so no other object can have its id meanwhile.
        self._texts: dict[int, tuple[Any, str]] = {}

    def render(self, families: Iterable[Any]) -> bytes:
        from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
        from prometheus_client.utils import floatToGoString

        previous, labels = self._labels, {}
        old_values, values = self._values, {}
        same: dict[int, str] = {}  # id of a label dict -> its text, in this render (families share dicts)
        names = self._names
        old_texts, texts = self._texts, {}
        out: list[str] = []
        append = out.append
        pending: Any = None  # the family whose text is out[start:]
        start = 0
        for family in families:
            if pending is not None:  # the previous family's lines become one text, kept for the next render
                texts[id(pending)] = (pending, _joined(out, start))
            done = old_texts.get(id(family))
            if done is not None and done[0] is family:
                append(done[1])
                texts[id(family)] = done
                pending = None
                continue
            pending, start = family, len(out)
            known = _TEXT_TYPES.get(family.type)
            samples = family.samples
            special = {family.name + suffix for suffix in _OPENMETRICS_ONLY}
            if known is None or any(sample[0] in special for sample in samples):
                append(_generate_latest([family]))
                continue
            name = escape_metric_name(family.name + known[0])
            help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
            append(f"# HELP {name} {help_text}\n# TYPE {name} {known[1]}\n")
            raw_name = sample_name = None
            for sample in samples:  # Sample: name, labels, value, timestamp, ... (indexed: the fastest way in)
                if sample[0] is not raw_name:
                    raw_name = sample[0]
                    sample_name = names.get(raw_name)
                    if sample_name is None:
                        sample_name = names[raw_name] = escape_metric_name(raw_name)
                series = sample[1]
                text = same.get(id(series))
                if text is None:
                    key = tuple(series.items())
                    text = labels.get(key)
                    if text is None:
                        text = previous.get(key)
                        if text is None:
                            text = ",".join(f'{escape_label_name(k)}="{_quoted(v)}"' for k, v in sorted(key))
                            text = f"{{{text}}}" if text else ""
                        labels[key] = text
                    same[id(series)] = text
                value = sample[2]
                if type(value) is not float:
                    value = float(value)
                # Values repeat (totals, limits, start times, zeros): each one's text is kept a render long.
                # 0.0 is not (-0.0 equals it and is written "-0.0"), nor NaN (never equal, never found).
                shown = values.get(value) if value else None
                if shown is None:
                    shown = old_values.get(value) if value else None
                    if shown is None:
                        shown = repr(value)
                        # floatToGoString's own cases: not finite, or Go's exponent form (a dot past the 6th digit).
                        if not -_FINITE < value < _FINITE or (value > 0 and shown.find(".") > 6):
                            shown = floatToGoString(value)
                    if value:
                        values[value] = shown
                stamp = sample[3]
                if stamp is None:
                    append(f"{sample_name}{text} {shown}\n")
                else:
                    append(f"{sample_name}{text} {shown} {int(float(stamp) * 1000):d}\n")
        if pending is not None:
            texts[id(pending)] = (pending, _joined(out, start))
        self._texts = texts
        self._labels = labels  # a series gone from this render is forgotten
        self._values = values
        if len(names) > 4096:
            names.clear()
        return "".join(out).encode("utf-8")


def _joined(out: list[str], start: int) -> str:
    """``out[start:]`` replaced by their concatenation, which is returned."""
    text = "".join(out[start:])
    out[start:] = [text]
    return text


def _quoted(value: str) -> str:
    """A label value as the text format quotes it (prometheus-client's ``_escape`` for UTF-8 values)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _generate_latest(families: list[Any]) -> str:
    """prometheus-client's own text of ``families``."""
    from prometheus_client.exposition import generate_latest

    class Families:
        def collect(self) -> list[Any]:
            return families

    return generate_latest(Families()).decode("utf-8")  # type: ignore[arg-type]


@dataclass
class _Rendered:
    """One snapshot's exposition, but its age: the text, and its gzip once asked for."""

    snapshot: Snapshot | None
    text: bytes
    gzip: bytes | None = None  # gzip header and the text's deflate stream, flushed but not finished
    crc: int = 0  # CRC-32 of the text (the gzip trailer's, before the age is added)


class Exposition:
    """The latest snapshot's exposition as bytes: rendered once per snapshot, shared by every scrape.

    Why: a scrape rendered the whole exposition again (30 ms at 8 GPUs and 64
    processes, 80 ms at 512), and gzipped it again, for every scraper and every
    idle-then-retried connection. A snapshot never changes once published, so its
    text -- everything but ``nvtopy_snapshot_age_seconds``, which comes last -- is
    made once, by the first scrape after it or, once something has scraped, by
    :meth:`prerender` as soon as the poller publishes it (so a scrape finds it ready).
    Concurrent scrapes wait for that one render and share its bytes.

    gzip the same way: the text's deflate stream is made once, ended with a sync
    flush (byte-aligned, not final); a scrape compresses only the age into a final
    block of its own and writes the trailer (CRC-32 and length, from the cached
    CRC). The result is one ordinary gzip member, which any gzip reader accepts.
    """

    content_type = CONTENT_TYPE

    def __init__(self, source: Any, *, gzip_level: int = GZIP_LEVEL) -> None:
        self.source = source  # anything with a ``latest`` Snapshot (a Poller)
        self._collector = SnapshotCollector(source)
        self._renderer = TextRenderer()
        self._gzip_level = gzip_level
        self._lock = threading.Lock()
        self._rendered: _Rendered | None = None
        self._gzip_wanted = False  # the last scrape asked for gzip: prerender it too

    def prerender(self, snapshot: Snapshot) -> None:
        """Render ``snapshot`` now, as a scrape would (a poller's subscriber): nothing until a first scrape."""
        with self._lock:
            if self._rendered is not None:  # else nobody scrapes (yet, or any more): no work
                self._current(snapshot, self._gzip_wanted)

    def close(self) -> None:
        """No more prerendering until a scrape comes (the server is gone; the poller may go on); the bytes go."""
        with self._lock:
            self._rendered = None

    def chunks(self, *, gzip: bool = False) -> list[bytes]:
        """The exposition of the latest snapshot, as a WSGI body (gzip: one gzip member), age as of now."""
        snapshot: Snapshot | None = self.source.latest
        with self._lock:
            self._gzip_wanted = gzip
            rendered = self._current(snapshot, gzip)
        age = TextRenderer().render(age_families(snapshot))  # one line: no cache worth keeping
        if not gzip:
            return [rendered.text, age]
        end = zlib.compressobj(self._gzip_level, zlib.DEFLATED, -zlib.MAX_WBITS)
        crc = zlib.crc32(age, rendered.crc)
        size = (len(rendered.text) + len(age)) & 0xFFFFFFFF
        assert rendered.gzip is not None
        return [rendered.gzip, end.compress(age) + end.flush() + struct.pack("<II", crc, size)]

    def selected(self, names: Iterable[str]) -> bytes:
        """The families named ``names`` (``?name[]=``), age included, rendered for this request only.

        prometheus-client's own ``name[]`` filter finds families by what a collector
        declares up front, and the families of a snapshot are not known before it:
        it answered nothing. A family is selected by its name or one of its samples'.
        """
        wanted = set(names)
        snapshot: Snapshot | None = self.source.latest
        families = self._collector.families(snapshot) + age_families(snapshot)
        chosen = [f for f in families if f.name in wanted or any(sample[0] in wanted for sample in f.samples)]
        return TextRenderer().render(chosen)

    def _current(self, snapshot: Snapshot | None, gzip: bool) -> _Rendered:
        """The rendering of ``snapshot``, made if it is not the one kept (the lock is held)."""
        rendered = self._rendered
        if rendered is None or rendered.snapshot is not snapshot:
            rendered = self._rendered = _Rendered(snapshot, self._render(snapshot))
        if gzip and rendered.gzip is None:
            deflate = zlib.compressobj(self._gzip_level, zlib.DEFLATED, -zlib.MAX_WBITS)
            body = deflate.compress(rendered.text) + deflate.flush(zlib.Z_SYNC_FLUSH)
            rendered.gzip, rendered.crc = _GZIP_HEADER + body, zlib.crc32(rendered.text)
        return rendered

    def _render(self, snapshot: Snapshot | None) -> bytes:
        """The text of every family of ``snapshot`` but its age: the work done once per snapshot."""
        return self._renderer.render(self._collector.families(snapshot))


MAX_HOSTS = 1024  # hosts one view of several shows (--remote, --prometheus): more is a fleet for Grafana


MAX_GPUS_PER_HOST = 64  # an HGX board has 8 or 16: more is a broken or hostile exporter


MAX_GPU_INDEX = 1023  # a ``gpu`` label above this is no GPU (it is counted as reported, never shown)


MAX_PROCESSES_PER_HOST = 4096


MAX_LABEL = 256  # characters kept of a label (host and model names, UUIDs, user names)


MAX_COMMAND = 4096  # of a command line


MAX_PID = 2**32 - 1  # pids are 32-bit (Linux's own limit is 2**22); 0 is no process


# nvtopy's per-process series (nvtopy_process_<name>) -> the GpuProcess field each carries: what the exporter
# writes, and what a reader of the series fills.
PROCESS_FIELDS: dict[str, str] = {
    "gpu_memory_bytes": "gpu_memory_bytes",
    "sm_utilization_percent": "sm_percent",
    "memory_utilization_percent": "memory_percent",
    "cpu_percent": "cpu_percent",
    "host_memory_bytes": "host_memory_bytes",
    "start_time_seconds": "create_time",
    "idle_held_seconds": "idle_seconds",
}
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
    value = labels.get(name)
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
                    "uuid": scraped_label(labels, "UUID"),
                    "bus_id": scraped_label(labels, "pci_bus_id"),
                    "name": scraped_label(labels, "modelName"),
                }
            host = scraped_label(labels, "Hostname") or host
            driver = scraped_label(labels, "DCGM_FI_DRIVER_VERSION") or driver
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
            if name not in _ALL_BY_NAME and name.endswith("_total"):
                name = name[:-6]  # prometheus-client's parser renames dcgm's counters (energy, ECC) to *_total
            known = _ALL_BY_NAME.get(name)
            if known is None:
                continue
            value = known.from_metric(sample.value)  # None: not finite, or out of the field's range
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
        static = GpuStatic(index=index, **statics[index])
        scrape.gpus.append((static, dict(values.get(index, {})), lost.get(index, False)))
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

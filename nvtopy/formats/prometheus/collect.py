"""A snapshot as prometheus-client metric families: dcgm-exporter's series, then nvtopy's own.

:class:`SnapshotCollector` builds the families of the latest snapshot of a source
(``nvtopy exporter``); :mod:`~nvtopy.formats.prometheus.expose` renders them as text.
The series and their labels are :mod:`~nvtopy.formats.prometheus.series`'s and
:mod:`nvtopy.formats.dcgm`'s, under the names, units and label spellings of a
:class:`~nvtopy.formats.dcgm_naming.Naming` (``nvtopy exporter --names``): dcgm-exporter's
legacy ones by default, or 4.9's. The naming renames dcgm-exporter's series and its host and
driver labels (nvtopy's own series keep their names; their host label follows the naming's).

MIG instances: per GPU instance, dcgm-exporter's framebuffer and profiling series with its
``GPU_I_PROFILE`` and ``GPU_I_ID`` labels (:mod:`nvtopy.formats.dcgm`); per MIG
device (compute instance), ``nvtopy_mig_device_info`` (1, with its UUID and
profile) and its memory, SM count and process count; a process on a MIG device carries
``GPU_I_ID`` and ``compute_instance_id`` too. ``nvtopy_xid_events_total{xid}`` counts
the Xid events seen since the exporter started, per Xid: a counter, it only
grows. The health series are kept for a lost GPU: a GPU that fell off the bus
is the one an alert is for.

Profiling: dcgm-exporter's ``DCGM_FI_PROF_*`` series from GPM (Hopper and newer;
ratios 0-1 and bytes per second, :data:`~nvtopy.formats.dcgm.GPM_DCGM_FIELDS`),
absent on a GPU without GPM.

A scrape never waits on the driver: it renders ``source.latest``, the snapshot
the poller last published, and reads nothing else. A GPU whose driver call
hangs is published by the collector with ``responding`` false and its last
values, so the exporter keeps answering with ``nvtopy_gpu_responding 0``.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ...model import GpuProcess, GpuState, OwnerKind, ProcessOwner, Snapshot
from ...textsafe import escape_text
from ..dcgm import FIELDS, INSTANCE_FIELDS, DcgmField, gpu_instance_profile, gpu_instances
from ..dcgm_naming import LEGACY, Naming
from .series import (
    COMMAND_LABEL_MAX,
    LINK_SERIES,
    MIG_DEVICE_SERIES,
    NVTOPY_FIELDS,
    OWNER_LABELS,
    PROCESS_FIELDS,
    link_labels,
    mig_device_labels,
    mig_info_labels,
    process_labels,
)

__all__ = ["AGE_HELP", "AGE_NAME", "SnapshotCollector", "age_families", "age_seconds", "pod_labels"]


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
    age = GaugeMetricFamily(AGE_NAME, AGE_HELP)
    age.add_metric([], age_seconds(snapshot))
    return [age]


AGE_NAME = "nvtopy_snapshot_age_seconds"
AGE_HELP = "Seconds since the metrics were collected."


def age_seconds(snapshot: Snapshot) -> float:
    """The value of ``nvtopy_snapshot_age_seconds`` now (:func:`age_families`)."""
    return max(0.0, time.time() - snapshot.timestamp) if snapshot.host.backend == "nvml" else 0.0


# A GPU series: its field as the naming writes it, the getter of its raw value, and how a GPU instance's value
# is read (INSTANCE_FIELDS, keyed by the legacy name; None: the series has none per GPU instance).
_Reader = tuple[DcgmField, Callable[[GpuState], object], Callable[[Any], float | None] | None]
_READERS: dict[str, tuple[_Reader, ...]] = {}


def _gpu_readers(naming: Naming) -> tuple[_Reader, ...]:
    """Each GPU series of ``naming`` with a getter of its raw value (``DcgmField.reader``), resolved once.

    Why: working out from the attribute's text where the value lives, for every value
    (60 fields x 8 GPUs every second), was a fifth of building the families. A naming's
    fields are in :data:`~nvtopy.formats.dcgm.FIELDS`' order, one for one: the legacy
    name of each (which :data:`~nvtopy.formats.dcgm.INSTANCE_FIELDS` is keyed by) is its
    counterpart's there.
    """
    readers = _READERS.get(naming.key)
    if readers is None:  # made once per naming, on first use (the same from any thread)
        assert len(naming.fields) == len(FIELDS), "a naming writes every dcgm field"
        dcgm = tuple(
            (metric, metric.reader(), INSTANCE_FIELDS.get(legacy.name))
            for metric, legacy in zip(naming.fields, FIELDS, strict=True)
        )
        readers = _READERS[naming.key] = dcgm + tuple((metric, metric.reader(), None) for metric in NVTOPY_FIELDS)
    return readers


_PROCESS_HELP = {
    "gpu_memory_bytes": "GPU memory used by the process, as NVML reports it (bytes).",
    "sm_utilization_percent": "The process's share of SM time (%).",
    "memory_utilization_percent": "The process's share of memory bandwidth (%).",
    "cpu_percent": "CPU use of the process (% of one core).",
    "host_memory_bytes": "Resident host memory of the process (bytes).",
    "start_time_seconds": "Start time of the process since the Unix epoch (seconds).",
    "idle_held_seconds": "How long the process has held GPU memory while computing nothing (~0 % SM; seconds).",
}
# Each per-process family: (its key in PROCESS_FIELDS, its name, its help, the getter of its value on a GpuProcess).
_PROCESS_FAMILIES: tuple[tuple[str, str, str, Callable[[GpuProcess], Any]], ...] = tuple(
    (key, f"nvtopy_process_{key}", help_, operator.attrgetter(PROCESS_FIELDS[key]))
    for key, help_ in _PROCESS_HELP.items()
)

_Keep = Callable[[str, int, dict[str, str]], dict[str, str]]


def _keeper(before: dict[tuple[str, int], dict[str, str]], now: dict[tuple[str, int], dict[str, str]]) -> _Keep:
    """``keep(kind, gpu, labels)``: the last snapshot's dict for (kind, gpu) if equal to ``labels``, else ``labels``.

    Each one kept goes into ``now`` (the next snapshot's ``before``). A label dict is never changed once made.
    """

    def keep(kind: str, gpu: int, labels: dict[str, str]) -> dict[str, str]:
        key = (kind, gpu)
        last = before.get(key)
        if last is not None and last == labels:
            labels = last
        now[key] = labels
        return labels

    return keep


def _info_family(version: str, backend: str) -> Any:
    """``nvtopy_exporter_info``: 1, with the version and the backend as labels."""
    from prometheus_client.core import GaugeMetricFamily

    info = GaugeMetricFamily(
        "nvtopy_exporter_info", "nvtopy exporter build and backend.", labels=["version", "backend"]
    )
    info.add_metric([version, backend], 1.0)
    return info


def _lost_family(gpus: list[GpuState], series_of: list[dict[str, str]], gpu_labels: tuple[str, ...]) -> Any:
    """``nvtopy_gpu_lost``: 1 for a GPU that fell off the bus, else 0.

    Under each GPU's very labels of its value series (``series_of``: its pod's too, where one pod holds it), so
    that a reader that groups a GPU's series by their labels finds one GPU: the fleet's read took a GPU one pod
    held for two (its lost flag without the pod labels, its memory with them).
    """
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.samples import Sample

    lost = GaugeMetricFamily("nvtopy_gpu_lost", "1 when the GPU fell off the bus (GpuIsLost).", labels=list(gpu_labels))
    for gpu, series in zip(gpus, series_of, strict=True):
        lost.samples.append(Sample("nvtopy_gpu_lost", series, 1.0 if gpu.lost else 0.0))
    return lost


class SnapshotHolder(Protocol):
    """What the exporter serves from: anything whose ``latest`` is the snapshot to show (None before the first).

    A :class:`~nvtopy.sources.poller.Poller` in the command; a test's stand-in holding one snapshot.
    Read on each scrape's thread, never waited for: a scrape never reaches the driver.
    """

    @property
    def latest(self) -> Snapshot | None: ...


class SnapshotCollector:
    """A prometheus-client collector that renders the latest snapshot of a snapshot source.

    ``nvtopy exporter`` serves :class:`Exposition` (the same families, as bytes made once
    per snapshot); this collector is what prometheus-client itself is given: the
    exporter's ``name[]``-filtered requests, and any caller of ``generate_latest``.
    """

    def __init__(self, source: SnapshotHolder, naming: Naming = LEGACY) -> None:
        self.source = source
        self.naming = naming  # the names, units and label spellings written (nvtopy exporter --names)
        # (snapshot, its families but the age): the last snapshot's families.
        self._cache: tuple[Snapshot | None, list[Any]] | None = None
        # (GPU index, pid) -> (what its labels are made of, its label dict), for the processes of the last snapshot.
        self._process_labels: dict[tuple[int, int], tuple[tuple[Any, ...], dict[str, str]]] = {}
        # Family name -> (what it was built from, the family): the last snapshot's families, each reused
        # whole by the next snapshot when its inputs are the same (most are: slow groups, static fields,
        # idle processes), so neither its samples nor, in TextRenderer, its text are made again.
        self._reused: dict[str, tuple[Any, Any]] = {}
        self._reused_processes: dict[str, tuple[Any, Any]] = {}
        # The last snapshot's label dicts, each kept while it is equal to the one made now: the same dict object
        # from one snapshot to the next, so reuse checks compare identities and the renderer's label texts
        # (kept per label dict) are not made again.
        self._kept_labels: dict[tuple[str, int], dict[str, str]] = {}

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

        from ..._version import __version__

        head: list[Any] = []
        previous = self._reused
        reused: dict[str, tuple[Any, Any]] = {}

        backend = "none" if snapshot is None else snapshot.host.backend
        info = self._reuse(previous, reused, " info", backend, lambda: _info_family(__version__, backend))
        head.append(info)
        if snapshot is None:
            self._reused = reused
            return head, []
        host = snapshot.host
        naming = self.naming
        gpu_labels = naming.gpu_labels
        kept: dict[tuple[str, int], dict[str, str]] = {}
        keep = _keeper(self._kept_labels, kept)
        labels = [
            (
                gpu,
                keep(
                    "gpu", gpu.index, {name: _label_text(value) for name, value in naming.labels_of(gpu, host).items()}
                ),
            )
            for gpu in snapshot.gpus
        ]
        # A GPU that one pod holds also gets dcgm-exporter's pod labels: its series then have more labels than the
        # others' (allowed in one family). One label dict per GPU, shared by all its series (a renderer formats it
        # once), so they are added as samples rather than through add_metric.
        series_of = [keep("series", gpu.index, gpu_label | pod_labels(gpu)) for gpu, gpu_label in labels]
        instances = self._gpu_instances(labels, gpu_labels, keep)
        self._kept_labels = kept
        # A label dict is the same object as the last snapshot's while it is equal to it (keep): a family is
        # reused only if they are the same ones (a tuple compares its items by identity first).
        label_key = tuple(gpu_label for _, gpu_label in labels)
        series_key = (tuple(series_of), tuple(s for _, s in instances))
        gpus = [gpu for gpu, _ in labels]
        lost_gpus = any(gpu.lost for gpu in gpus)
        for metric, read, read_instance in _gpu_readers(naming):
            if lost_gpus and not metric.when_lost:
                raws = tuple(None if gpu.lost else read(gpu) for gpu in gpus)
            else:
                raws = tuple(map(read, gpus))
            instance_raws = () if read_instance is None else tuple(read_instance(mig) for mig, _ in instances)
            more = () if metric.labels is None else tuple(metric.labels(gpu) for gpu, _ in labels)
            inputs = (series_key, raws, instance_raws, more)
            last = previous.get(metric.name)
            if last is not None and last[0] == inputs:
                family = last[1]
            else:
                family = GaugeMetricFamily(metric.name, metric.help, labels=list(gpu_labels))
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
        # The families below are reused whole, as those above, while what they are made of is the same (kept under
        # keys that begin with a space: no metric's name does).
        lost_flags = tuple(gpu.lost for gpu in gpus)
        mig = (label_key, lost_flags, tuple((gpu.processes_unavailable is None, gpu.mig) for gpu in gpus))
        head.extend(self._reuse(previous, reused, " mig devices", mig, lambda: [*self._mig_devices(labels, naming)]))
        xids = (label_key, tuple(gpu.health.xid_counts for gpu in gpus))
        head.extend(self._reuse(previous, reused, " xids", xids, lambda: [*self._xid_counts(labels, gpu_labels)]))
        links = (label_key, lost_flags, tuple(gpu.sample.nvlinks for gpu in gpus))
        head.extend(self._reuse(previous, reused, " nvlinks", links, lambda: [*self._nvlinks(labels, naming)]))
        lost = (tuple(series_of), lost_flags)
        head.append(self._reuse(previous, reused, " lost", lost, lambda: _lost_family(gpus, series_of, gpu_labels)))
        self._reused = reused
        return head, list(self._processes(snapshot))

    @staticmethod
    def _reuse(
        previous: dict[str, tuple[Any, Any]],
        reused: dict[str, tuple[Any, Any]],
        key: str,
        inputs: Any,
        make: Callable[[], Any],
    ) -> Any:
        """The last snapshot's ``key`` (a family, or a list of them) if made of equal ``inputs``, else ``make()``'s."""
        last = previous.get(key)
        made = last[1] if last is not None and last[0] == inputs else make()
        reused[key] = (inputs, made)
        return made

    @staticmethod
    def _gpu_instances(
        labels: list[tuple[GpuState, dict[str, str]]], gpu_labels: tuple[str, ...], keep: _Keep
    ) -> list[tuple[Any, dict[str, str]]]:
        """Each GPU instance of each GPU (not lost) with its series' labels: the GPU's, GPU_I_PROFILE, GPU_I_ID.

        Under Kubernetes, the pod labels are those of the pod holding the instance (its processes).
        """
        found = []
        for gpu, gpu_label in labels:
            if gpu.lost:
                continue
            for mig in gpu_instances(gpu):
                gi = mig.instance.gpu_instance_id
                series = {name: gpu_label[name] for name in gpu_labels}
                series["GPU_I_PROFILE"] = _label_text(gpu_instance_profile(mig.instance.profile))
                series["GPU_I_ID"] = str(gi)
                series.update(_pod_labels(tuple(p for p in gpu.processes if p.gpu_instance_id == gi)))
                found.append((mig, keep(f"instance {gi}", gpu.index, series)))
        return found

    @staticmethod
    def _mig_devices(labels: list[tuple[GpuState, dict[str, str]]], naming: Naming) -> Iterator[Any]:
        """Per MIG device: ``nvtopy_mig_device_info`` (1) and its memory, SM count and processes."""
        from prometheus_client.core import GaugeMetricFamily

        info = GaugeMetricFamily(
            "nvtopy_mig_device_info",
            "A MIG device (compute instance) of the GPU: 1, with its UUID and profile as labels.",
            labels=list(mig_info_labels(naming)),
        )
        device_labels = mig_device_labels(naming)
        families = [GaugeMetricFamily(name, help_, labels=list(device_labels)) for name, help_, _ in MIG_DEVICE_SERIES]
        identity = ("gpu", "UUID", naming.host_label)
        for gpu, gpu_label in labels:
            if gpu.lost:
                continue
            listed = gpu.processes_unavailable is None
            for mig in gpu.mig:
                instance = mig.instance
                gi, ci = instance.gpu_instance_id, instance.compute_instance_id
                values = [
                    *(gpu_label[name] for name in identity),
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
    def _xid_counts(labels: list[tuple[GpuState, dict[str, str]]], gpu_labels: tuple[str, ...]) -> Iterator[Any]:
        """``nvtopy_xid_events_total{xid}``: Xid events seen since the exporter started, per GPU and Xid.

        A counter (the model's counts only grow), so ``increase(...[1h])`` alerts on new Xids; kept
        for a lost GPU, whose last Xid (79, fallen off the bus) is the one to see.
        """
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            "nvtopy_xid_events",
            "Xid events (GPU critical errors) seen since nvtopy started, per Xid.",
            labels=[*gpu_labels, "xid"],
        )
        for gpu, gpu_label in labels:
            for xid, count in gpu.health.xid_counts:
                family.add_metric([*(gpu_label[name] for name in gpu_labels), str(xid)], float(count))
        yield family

    @staticmethod
    def _nvlinks(labels: list[tuple[GpuState, dict[str, str]]], naming: Naming) -> Iterator[Any]:
        """Per NVLink: active (with its peer as label ``remote``), throughput and errors; unknown values left out."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families = {}
        link_label_names = link_labels(naming)
        for name, help_, attribute, counter in LINK_SERIES:
            extra = ["remote"] if attribute == "active" else []
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            families[attribute] = kind(name, help_, labels=[*link_label_names, *extra])
        for gpu, gpu_label in labels:
            links = gpu.sample.nvlinks
            if gpu.lost or not links:
                continue
            base = [gpu_label[name] for name in link_label_names[:-1]]
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

        label_names = process_labels(self.naming)
        host = snapshot.host.hostname
        hostname = _label_text(host)
        # A process's labels change only with what they are made of (its command, user, owner...): one label dict
        # per process, kept from one snapshot to the next, and shared by its seven families' samples. Found by
        # (GPU, pid) and checked against what it was made of (compared, never hashed: an owner's hash is Python's).
        previous: dict[tuple[int, int], tuple[tuple[Any, ...], dict[str, str]]] = self._process_labels
        kept: dict[tuple[int, int], tuple[tuple[Any, ...], dict[str, str]]] = {}
        series_of: list[dict[str, str]] = []
        procs: list[GpuProcess] = []
        for gpu in snapshot.gpus:
            uuid = gpu.static.uuid
            index = gpu.index
            for proc in gpu.processes:
                made_of = (
                    uuid,
                    proc.type,
                    proc.user,
                    proc.command,
                    proc.owner,
                    proc.gpu_instance_id,
                    proc.compute_instance_id,
                    host,
                )
                key = (index, proc.pid)
                last = previous.get(key)
                if last is None or last[0] != made_of:
                    last = (made_of, self._process_series(label_names, index, uuid, proc, hostname))
                kept[key] = last
                series_of.append(last[1])
                procs.append(proc)
        self._process_labels = kept  # the processes gone are forgotten
        # A family is reused whole when its processes (the same label dicts, compared by identity first) and
        # their values are the same as in the last snapshot: start times and GPU memory mostly are.
        all_series = tuple(series_of)
        last_families, reused = self._reused_processes, {}
        for key_, name, help_, read in _PROCESS_FAMILIES:
            values = tuple(map(read, procs))
            inputs = (all_series, values)
            cached = last_families.get(key_)
            if cached is not None and cached[0] == inputs:
                family = cached[1]
            else:
                family = GaugeMetricFamily(name, help_, labels=list(label_names))
                for series, value in zip(all_series, values, strict=True):
                    if value is not None:
                        family.samples.append(Sample(name, series, float(value)))
            reused[key_] = (inputs, family)
            yield family
        self._reused_processes = reused

    @staticmethod
    def _process_series(
        label_names: tuple[str, ...], gpu_index: int, uuid: str | None, proc: GpuProcess, hostname: str
    ) -> dict[str, str]:
        """The labels of a process's series (``label_names``: :func:`~.series.process_labels`; on a MIG device
        its instances too), escaped."""
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
        series = dict(zip(label_names, values, strict=True))
        if proc.gpu_instance_id is not None:  # on a MIG device: its GPU and compute instance too
            series["GPU_I_ID"] = str(proc.gpu_instance_id)
            ci = proc.compute_instance_id
            series["compute_instance_id"] = "" if ci is None else str(ci)
        return series

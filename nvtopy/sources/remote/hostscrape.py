"""One host's GPUs as its exporter describes them (a :class:`~nvtopy.formats.prometheus.parse.HostScrape`): GpuStates.

Shared by the two views of other hosts: ``--remote`` (each exporter scraped
directly, :mod:`nvtopy.sources.remote.exporters`) and ``--prometheus`` (the fleet read from a
Prometheus server, :mod:`nvtopy.sources.remote.fleet`). Both first turn what they read
into a ``HostScrape`` (values already range-checked, labels already cut), then
into the model here, so a GPU looks the same whichever way it was read: its own
index as ``host_index``, the host in ``host``, fan and power "not available" when
the host does not say them, the last Xid dated when first seen, the process rows
carrying their host.

:class:`HostGpus` keeps what lasts between refreshes: each GPU's short history
(the sparklines), its long timeline (the charts) and when each Xid was first
seen, keyed by whatever names the GPU for its source (``(url, index)`` for
``--remote``, ``(instance, host name, index)`` for a fleet). :meth:`HostGpus.forget`
drops the GPUs no longer seen, so a fleet whose hosts come and go stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ...formats.prometheus.parse import HostScrape
from ...formats.prometheus.series import PROCESS_FIELDS
from ...model import (
    GPM_FIELDS,
    OK_HEALTH,
    GpuEvent,
    GpuHealth,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HistoryBuffer,
    ProcessType,
    Reason,
    Severity,
    freeze,
)
from ..timeline import Timeline

__all__ = ["SAID_OR_NOT_AVAILABLE", "HostGpus", "process"]

# Sample fields whose absence from a host's answer is "not available" (its board or exporter has none), not a gap.
SAID_OR_NOT_AVAILABLE = ("fan_percent", "power_draw_w", *GPM_FIELDS)
_STATIC_COPIED = (
    "uuid",
    "name",
    "bus_id",
    "memory_total_bytes",
    "temperature_slowdown_c",
    "pcie_link_gen_max",
    "pcie_link_width_max",
    "mig_mode",
    "mig_mode_pending",
    "mig_instances",
)


class HostGpus:
    """HostScrapes to GpuStates, with each GPU's history, timeline and Xid dates kept between refreshes."""

    def __init__(self) -> None:
        self._history: dict[Hashable, HistoryBuffer] = {}
        self._timelines: dict[Hashable, Timeline] = {}  # the charts' long history
        self._xid_seen: dict[Hashable, tuple[int, float]] = {}  # -> (last Xid, when first seen)
        self._statics: dict[Hashable, tuple[tuple[Any, ...], GpuStatic]] = {}  # -> (what it was made of, it)

    def gpus(
        self,
        scrape: HostScrape,
        first: int,
        now: float,
        key: Callable[[int], Hashable] | None = None,
    ) -> list[GpuState]:
        """One host's GPUs, numbered from ``first``, then a line saying what was left out (if anything).

        ``key(index)`` names the host's GPU ``index`` for the history kept here (default
        ``(scrape.url, index)``). The GPUs and process rows carry ``scrape.hostname``.
        """
        gpus: list[GpuState] = []
        host = scrape.hostname
        for remote_static, values, lost in scrape.gpus:
            index = first + len(gpus)
            gpu_key = (scrape.url, remote_static.index) if key is None else key(remote_static.index)
            # The same GPU as last time, the same figures: the very same (frozen) GpuStatic, not a new one checked
            # again (4,096 of them a refresh in a fleet).
            said = (index, host, remote_static.index, *[getattr(remote_static, name) for name in _STATIC_COPIED])
            last = self._statics.get(gpu_key)
            if last is not None and last[0] == said:
                static = last[1]
            else:
                static = GpuStatic(
                    index=index,
                    host=host,
                    host_index=remote_static.index,
                    **dict(zip(_STATIC_COPIED, said[3:], strict=True)),
                )
                self._statics[gpu_key] = (said, static)
            # Not said by the host: fan and power (a board without them), the real work (no GPM there, or an
            # exporter without profiling fields).
            reasons = {k: Reason.NOT_AVAILABLE for k in SAID_OR_NOT_AVAILABLE if k not in values}
            if None in values.values():  # said, out of range (a C-level test first: rare, and 40 values a GPU)
                reasons.update({k: Reason.OUT_OF_RANGE for k, v in values.items() if v is None})
            sample = GpuSample(now, lost=lost, unavailable=freeze(reasons), **values)
            processes = tuple(
                process(row, index, static.uuid, now, host) for row in scrape.processes.get(remote_static.index, [])
            )
            history = self._history.get(gpu_key)
            if history is None:
                history = self._history[gpu_key] = HistoryBuffer()
            history.append(static, sample)
            timeline = self._timelines.get(gpu_key)
            if timeline is None:
                timeline = self._timelines[gpu_key] = Timeline()
            timeline.record(static, sample)
            health = self.health(gpu_key, scrape.health.get(remote_static.index), index, now)
            gpus.append(
                GpuState(static, sample, processes, history=history.history(), health=health, timeline=timeline)
            )
        if scrape.note:
            static = GpuStatic(index=first + len(gpus), host=host)
            gpus.append(GpuState(static, GpuSample(now), note=scrape.note))
        return gpus

    def health(self, key: Hashable, said: dict[str, Any] | None, index: int, now: float) -> GpuHealth:
        """What the host's exporter said of a GPU's health (values already range-checked; None: not said).

        The last Xid becomes one event, dated when this monitor first saw it on this GPU (an
        exporter says which Xid came last, not when): a new Xid, or another one, gets a new date.
        A last Xid of 0 is "none happened" unless the host counted Xid 0 events
        (``nvtopy_xid_events_total{xid="0"}``: an nvtopy exporter after an Xid 0); dcgm-exporter
        counts none, and its 0 is "none".
        """
        if not said:
            self._xid_seen.pop(key, None)
            return OK_HEALTH
        last = said.get("last_xid")
        counts = said.get("xid_counts") or {}
        events: tuple[GpuEvent, ...] = ()
        if last or (last == 0 and counts.get(0)):  # None: not said (or out of range)
            seen = self._xid_seen.get(key)
            if seen is None or seen[0] != last:
                seen = self._xid_seen[key] = (last, now)
            events = (GpuEvent(seen[1], index, "xid", last),)
        else:
            self._xid_seen.pop(key, None)
        responding = said.get("responding")
        return GpuHealth(
            verdict=said.get("verdict") or Severity.OK,
            events=events,
            xid_counts=tuple(sorted(counts.items())),
            responding=True if responding is None else responding,
            stalled_seconds=said.get("stalled_seconds"),
            idle_held_bytes=said.get("idle_held_bytes"),
            suspected_hang_seconds=said.get("suspected_hang_seconds"),
        )

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop what is kept of every GPU whose key ``keep`` refuses (a host gone for good)."""
        for kept in (self._history, self._timelines, self._xid_seen, self._statics):
            for gpu_key in [k for k in kept if not keep(k)]:
                del kept[gpu_key]

    def __len__(self) -> int:
        """GPUs with a history kept."""
        return len(self._history)


def process(row: dict[str, Any], index: int, uuid: str | None, now: float, host: str | None = None) -> GpuProcess:
    """A process row of another host's GPU; its values were range-checked when read (None, "out of range", where
    a series said one outside its range)."""
    started = row.get("start_time_seconds")
    said_out_of_range = (
        [field for metric, field in PROCESS_FIELDS.items() if metric in row and row[metric] is None]
        if None in row.values()  # rare: a C-level test first
        else []
    )
    if started is None and "start_time_seconds" in row:
        said_out_of_range.append("running_seconds")
    return GpuProcess(
        gpu_index=index,
        gpu_uuid=uuid,
        pid=row["pid"],
        type=ProcessType(row["type"]),
        gpu_memory_bytes=row.get("gpu_memory_bytes"),
        sm_percent=row.get("sm_utilization_percent"),
        memory_percent=row.get("memory_utilization_percent"),
        user=row.get("user"),
        command=row.get("command"),
        cpu_percent=row.get("cpu_percent"),
        host_memory_bytes=row.get("host_memory_bytes"),
        create_time=started,
        running_seconds=None if started is None else max(0.0, now - started),
        owner=row.get("owner"),
        idle_seconds=row.get("idle_held_seconds"),
        gpu_instance_id=row.get("gpu_instance_id"),
        compute_instance_id=row.get("compute_instance_id"),
        host=host,
        unavailable=freeze(dict.fromkeys(said_out_of_range, Reason.OUT_OF_RANGE)),
    )

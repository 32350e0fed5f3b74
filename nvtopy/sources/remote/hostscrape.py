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

import operator
from collections.abc import Callable, Hashable
from dataclasses import MISSING
from typing import Any

from ...formats.prometheus.parse import HostScrape
from ...formats.prometheus.series import PROCESS_FIELDS
from ...model import (
    EMPTY_REASONS,
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
    Reasons,
    Severity,
    fast_constructor,
    freeze,
)
from ..timeline import Timeline

__all__ = ["SAID_OR_NOT_AVAILABLE", "HostGpus", "ProcessParts", "process"]

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
_STATIC_SAID = operator.attrgetter(*_STATIC_COPIED)  # the figures a GpuStatic is made of, in one C-level call

# The model's fast constructors (model.fast_constructor): the very objects the dataclasses build, every ranged value
# still checked (one out of range goes to the dataclass itself: None, and why). Why: 4,096 GPUs and ~8,000 process
# rows a refresh in a fleet (issue 27), where the dataclass __init__ with its range check was most of the building.
_NEW_SAMPLE = fast_constructor(GpuSample)
_NEW_PROCESS = fast_constructor(GpuProcess)
_NEW_STATE = fast_constructor(GpuState)
_SAMPLE_FIELDS = tuple(GpuSample.__dataclass_fields__)
# Every GpuSample field but the three set here, with its default: a host's values laid over them, then read out in
# the dataclass's order (a C-level copy, update and itemgetter a GPU, not some 40 keyword arguments).
_SAMPLE_DEFAULTS = {
    name: f.default
    for name, f in GpuSample.__dataclass_fields__.items()
    if name not in ("timestamp", "lost", "unavailable")
}
_SAMPLE_ORDER = operator.itemgetter(*_SAMPLE_FIELDS)
# A sample built the fast way only where every field but these has a plain default (not a factory) and the host's
# values name sample fields only (anything else: the dataclass, whose TypeError says so).
_SAMPLE_BY_POSITION = all(default is not MISSING for default in _SAMPLE_DEFAULTS.values())
_SAMPLE_SETTABLE = frozenset(_SAMPLE_DEFAULTS)
# The "not available" reasons of a host's values, by the names they say in their order (a fleet has a handful of
# kinds of host, each naming the same in the same order every refresh): one frozen map each, in
# SAID_OR_NOT_AVAILABLE's order, as built one by one; _UNSETTABLE where the fast way cannot take those names. Why
# by the names, not by the set left out: one look-up of a tuple a GPU (its names the very strings a read routes
# to: compared by identity), not a set test, a set difference and a frozenset (4,096 GPUs a refresh, issue 27).
_NOT_SAID: dict[tuple[str, ...], Reasons] = {}
NOT_SAID_KINDS = 256  # _NOT_SAID's bound
_UNSETTABLE: Reasons = freeze({"": Reason.NOT_AVAILABLE})  # a marker, never a sample's reasons
# GpuProcess's fields in their order, as process() fills them positionally (checked at import: another order, a
# field added or removed, and process() builds by keyword as before).
_PROCESS_FIELDS_ORDER = (
    *("gpu_index", "gpu_uuid", "pid", "type", "gpu_memory_bytes", "sm_percent", "memory_percent"),
    *("encoder_percent", "decoder_percent", "user", "uid", "name", "command", "cpu_percent", "host_memory_bytes"),
    *("create_time", "running_seconds", "status", "foreign", "unavailable", "owner", "ns_pid"),
    *("cuda_visible_devices", "host_pid", "flags", "idle_seconds", "gpu_instance_id", "compute_instance_id"),
    *("ppid", "parents", "host"),
)
_PROCESS_BY_POSITION = tuple(GpuProcess.__dataclass_fields__) == _PROCESS_FIELDS_ORDER
# (each ranged process metric, 0 where not said): a row's ranged values in one C-level map, a None among them one
# said out of range.
_RANGED_METRICS = (tuple(PROCESS_FIELDS), (0,) * len(PROCESS_FIELDS))
_PROCESS_TYPES = {member.value: member for member in ProcessType}  # ProcessType(value), a dict look-up
ProcessParts = tuple[int, dict[str, Any], dict[str, Any]]
"""A process row in parts: its pid, its identity (what ``process_from_labels`` makes of its labels) and its
values (each ranged metric said, :data:`PROCESS_FIELDS`' names; None: said out of range)."""
# The identity a row's parts are built from directly (_processes): these keys exactly; values of ranged metrics only
_IDENTITY_KEYS = frozenset(("user", "command", "type", "owner", "gpu_instance_id", "compute_instance_id"))
_RANGED_KEYS = frozenset(PROCESS_FIELDS)
# GpuState's fields in their order, as HostGpus.gpus fills them positionally (else by keyword, as before).
_STATE_BY_POSITION = tuple(GpuState.__dataclass_fields__) == (
    *("static", "sample", "processes", "processes_unavailable", "history", "note", "processes_hint", "health"),
    "timeline",
)


class HostGpus:
    """HostScrapes to GpuStates, with each GPU's history, timeline and Xid dates kept between refreshes."""

    def __init__(self) -> None:
        self._history: dict[Hashable, HistoryBuffer] = {}
        self._timelines: dict[Hashable, Timeline] = {}  # the charts' long history
        self._xid_seen: dict[Hashable, tuple[int, float]] = {}  # -> (last Xid, when first seen)
        # -> (what it was made of, it, the host's GpuStatic it was made from)
        self._statics: dict[Hashable, tuple[tuple[Any, ...], GpuStatic, GpuStatic]] = {}
        self._healths: dict[Hashable, tuple[int, dict[str, Any], GpuHealth]] = {}  # -> (index, what was said, it)

    def gpus(
        self,
        scrape: HostScrape,
        first: int,
        now: float,
        key: Callable[[int], Hashable] | None = None,
        parts: dict[int, list[ProcessParts]] | None = None,
    ) -> list[GpuState]:
        """One host's GPUs, numbered from ``first``, then a line saying what was left out (if anything).

        ``key(index)`` names the host's GPU ``index`` for the history kept here (default
        ``(scrape.url, index)``). The GPUs and process rows carry ``scrape.hostname``.

        ``parts``: the process rows in parts (:data:`ProcessParts`), in place of ``scrape.processes``: each row
        the dict ``{"pid": pid, **identity, **values}`` would be, built without merging it first.
        """
        gpus: list[GpuState] = []
        host = scrape.hostname
        for remote_static, values, lost in scrape.gpus:
            index = first + len(gpus)
            gpu_key = (scrape.url, remote_static.index) if key is None else key(remote_static.index)
            # The same GPU as last time, the same figures: the very same (frozen) GpuStatic, not a new one checked
            # again (4,096 of them a refresh in a fleet).
            last = self._statics.get(gpu_key)
            if last is not None and last[2] is remote_static and last[0][0] == index and last[0][1] == host:
                # the very (frozen) GpuStatic the host's figures were read into last time (a fleet's, kept by
                # _scrape while they are the same): its figures cannot differ, so they are not gathered again
                static = last[1]
            else:
                said = (index, host, remote_static.index, *_STATIC_SAID(remote_static))
                if last is not None and last[0] == said:
                    static = last[1]
                else:
                    static = GpuStatic(
                        index=index,
                        host=host,
                        host_index=remote_static.index,
                        **dict(zip(_STATIC_COPIED, said[3:], strict=True)),
                    )
                self._statics[gpu_key] = (said, static, remote_static)
            # Not said by the host: fan and power (a board without them), the real work (no GPM there, or an
            # exporter without profiling fields).
            sample = _sample(values, lost, now)
            if parts is None:
                rows = scrape.processes.get(remote_static.index)
                processes = tuple([process(row, index, static.uuid, now, host) for row in rows]) if rows else ()
            else:
                of_gpu = parts.get(remote_static.index)
                processes = _processes(of_gpu, index, static.uuid, now, host) if of_gpu else ()
            history = self._history.get(gpu_key)
            if history is None:
                history = self._history[gpu_key] = HistoryBuffer()
            history.append(static, sample)
            timeline = self._timelines.get(gpu_key)
            if timeline is None:
                timeline = self._timelines[gpu_key] = Timeline()
            timeline.record(static, sample)
            health = self.health(gpu_key, scrape.health.get(remote_static.index), index, now)
            if _STATE_BY_POSITION:  # GpuState's fields in order (see _STATE_BY_POSITION)
                state = _NEW_STATE(static, sample, processes, None, history.history(), None, None, health, timeline)
            else:
                state = GpuState(static, sample, processes, history=history.history(), health=health, timeline=timeline)
            gpus.append(state)
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

        The same GPU (and index) said the same as at the last refresh (a C-level comparison of two small dicts):
        the very GpuHealth made then, its Xid's date included. Health changes rarely, and a fleet reads 4,096
        GPUs a refresh.
        """
        if not said:
            self._xid_seen.pop(key, None)
            self._healths.pop(key, None)
            return OK_HEALTH
        last_made = self._healths.get(key)
        if last_made is not None and last_made[0] == index and last_made[1] == said:
            return last_made[2]
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
        made = GpuHealth(
            verdict=said.get("verdict") or Severity.OK,
            events=events,
            xid_counts=tuple(sorted(counts.items())),
            responding=True if responding is None else responding,
            stalled_seconds=said.get("stalled_seconds"),
            idle_held_bytes=said.get("idle_held_bytes"),
            suspected_hang_seconds=said.get("suspected_hang_seconds"),
        )
        self._healths[key] = (index, said, made)
        return made

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop what is kept of every GPU whose key ``keep`` refuses (a host gone for good)."""
        for kept in (self._history, self._timelines, self._xid_seen, self._statics, self._healths):
            for gpu_key in [k for k in kept if not keep(k)]:
                del kept[gpu_key]

    def __len__(self) -> int:
        """GPUs with a history kept."""
        return len(self._history)


def _sample(values: dict[str, Any], lost: bool, now: float) -> GpuSample:
    """A GPU's sample from the host's values (range-checked when read: None where out of range), dated ``now``.

    Not said by the host: fan and power (a board without them), the real work (no GPM there, or an exporter
    without profiling fields): "not available". Said and None: "out of range".
    """
    said = tuple(values)  # the names said, in order: a fleet has a handful of kinds of host, each its own
    unavailable = _NOT_SAID.get(said)
    if unavailable is None:
        unavailable = _not_said(said)
    if None in values.values() or unavailable is _UNSETTABLE:
        # said, out of range (a C-level test first: rare, and 40 values a GPU); or values the fast way cannot take
        reasons = {k: Reason.NOT_AVAILABLE for k in SAID_OR_NOT_AVAILABLE if k not in values}
        reasons.update({k: Reason.OUT_OF_RANGE for k, v in values.items() if v is None})
        return GpuSample(now, lost=lost, unavailable=freeze(reasons), **values)
    full = _SAMPLE_DEFAULTS.copy()
    full.update(values)
    full["timestamp"] = now
    full["lost"] = lost
    full["unavailable"] = unavailable
    return _NEW_SAMPLE(*_SAMPLE_ORDER(full))


def _processes(
    parts: list[ProcessParts], index: int, uuid: str | None, now: float, host: str | None
) -> tuple[GpuProcess, ...]:
    """A GPU's process rows from their parts: each the GpuProcess :func:`process` makes of the merged row.

    Why not merge them: a fleet has ~8,000 process rows a refresh (issue 27); the merged dict, a call of
    :func:`process` a row and its look-ups in a row of 14 keys were most of their building. Here, the common
    row (its identity as :func:`~nvtopy.formats.prometheus.parse.process_from_labels` makes one, its values
    ranged metrics only, none said out of range) is built in this one loop; any other goes to
    :func:`process` merged, as before.
    """
    made = []
    for pid, identity, values in parts:
        said_type = identity.get("type")
        kind = _PROCESS_TYPES.get(said_type) if type(said_type) is str else None
        if (
            kind is None
            or not _PROCESS_BY_POSITION
            or None in values.values()
            or identity.keys() != _IDENTITY_KEYS
            or not values.keys() <= _RANGED_KEYS
        ):
            made.append(process({"pid": pid, **identity, **values}, index, uuid, now, host))
            continue
        made.append(
            _positional(index, uuid, pid, kind, value=values.get, identity=identity.__getitem__, now=now, host=host)
        )
    return tuple(made)


def _not_said(said: tuple[str, ...]) -> Reasons:
    """The "not available" reasons of a host's values that name ``said`` (:data:`_UNSETTABLE`: values the fast
    way cannot take), kept for the next GPU that names the same. At most :data:`NOT_SAID_KINDS`: a fleet's hosts
    name their values in a few dozen orders (which of the timed groups a read asked, the board: 59 in the
    benchmark's 13 refreshes at 4,096 GPUs), but more may come over days or from a hostile fleet, so a full cache
    is emptied and filled again, never left full for good (where every GPU would pay this again)."""
    if not _SAMPLE_BY_POSITION or not _SAMPLE_SETTABLE.issuperset(said):
        unavailable = _UNSETTABLE
    else:
        unavailable = freeze({k: Reason.NOT_AVAILABLE for k in SAID_OR_NOT_AVAILABLE if k not in said})
    if len(_NOT_SAID) >= NOT_SAID_KINDS:
        _NOT_SAID.clear()
    _NOT_SAID[said] = unavailable
    return unavailable


def _positional(
    index: int,
    uuid: str | None,
    pid: int,
    kind: ProcessType,
    *,
    value: Callable[[str], Any],
    identity: Callable[[str], Any],
    now: float,
    host: str | None,
) -> GpuProcess:
    """A common process row's GpuProcess, its fields in order (_PROCESS_FIELDS_ORDER), each ranged value already
    checked (none said out of range): ``value(name)`` a ranged metric (None: not said), ``identity(name)`` what its
    labels say. The one place of the positional order, for :func:`process`'s merged row and :func:`_processes`'
    parts; the defaults of the fields a remote row never fills."""
    started = value("start_time_seconds")
    return _NEW_PROCESS(
        index,
        uuid,
        pid,
        kind,
        value("gpu_memory_bytes"),
        value("sm_utilization_percent"),
        value("memory_utilization_percent"),
        None,
        None,
        identity("user"),
        None,
        None,
        identity("command"),
        value("cpu_percent"),
        value("host_memory_bytes"),
        started,
        None if started is None else max(0.0, now - started),
        "running",
        False,
        EMPTY_REASONS,
        identity("owner"),
        None,
        None,
        None,
        (),
        value("idle_held_seconds"),
        identity("gpu_instance_id"),
        identity("compute_instance_id"),
        None,
        (),
        host,
    )


def process(row: dict[str, Any], index: int, uuid: str | None, now: float, host: str | None = None) -> GpuProcess:
    """A process row of another host's GPU; its values were range-checked when read (None, "out of range", where
    a series said one outside its range)."""
    started = row.get("start_time_seconds")
    if _PROCESS_BY_POSITION and (None not in row.values() or None not in list(map(row.get, *_RANGED_METRICS))):
        # the common row: no ranged metric said out of range (a row's MIG ids may be None: said as none)
        said_type = row["type"]
        kind = _PROCESS_TYPES.get(said_type) if type(said_type) is str else None
        kind = ProcessType(said_type) if kind is None else kind
        return _positional(index, uuid, row["pid"], kind, value=row.get, identity=row.get, now=now, host=host)
    said_out_of_range = [field for metric, field in PROCESS_FIELDS.items() if metric in row and row[metric] is None]
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

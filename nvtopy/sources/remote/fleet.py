"""``nvtopy --prometheus URL``: every GPU a Prometheus server knows of, read through its HTTP query API.

Where ``--remote`` scrapes a handful of exporters itself, a fleet already has a
Prometheus server scraping dcgm-exporter or ``nvtopy exporter`` on every node; this
source reads that server with **at most two queries per refresh, whatever the number
of hosts** (:data:`MAX_QUERIES_PER_REFRESH`):

1. :func:`newest_query`: each host's ``(instance, hostname or Hostname)`` with the ``timestamp()``
   of its newest GPU sample (``nvtopy_gpu_lost``, which nvtopy's exporter has for every
   GPU, or ``DCGM_FI_DEV_FB_USED``/``DCGM_FI_DEV_FB_USED_BYTES``, one of dcgm-exporter's defaults
   up to 4.8 and from 4.9). 64 rows for 64 hosts.
2. :func:`read_query`, only if some host has a sample newer than the last one read, and
   only of those hosts (an ``instance`` matcher, escaped): one answer ``or``-ed of the
   GPU series (``max by`` the labels that tell GPUs, GPU instances, MIG devices and Xids
   apart, which drops the labels every series of a GPU repeats), each GPU's identity
   (UUID, model, bus id, driver; dcgm-exporter's Kubernetes ``pod``/``namespace``/
   ``container`` and Slurm ``hpc_job``) once, with whether it is lost (``nvtopy_gpu_lost``) as that row's value
   rather than a row of its own, the ``nvtopy_process_*`` values and each
   process's identity (user, command, owner labels) once, its start time (a constant of the process) the
   identity row's value rather than a row of its own. Where every ``instance`` names one
   host (one host name: the first answer says so) the rows leave the host label out and are told
   apart by ``instance`` alone, some 20 bytes less of each of the answer's 50 rows a GPU.

**Every naming**, per host (:mod:`nvtopy.formats.dcgm_naming`): dcgm-exporter 3.x to 4.8 (legacy
names; the host label ``Hostname`` up to 4.8.2, ``hostname`` from 4.8.3), 4.9 (DCGM 4.7's names
and units; ``DCGM_FI_SYSTEM_DRIVER_VERSION``) and nvtopy's own. Both spellings of the host, driver
and UUID labels are asked for (``max by``/``count by`` both); a 4.9 series has a route of its own
that reads its value back into the legacy unit (:func:`~nvtopy.formats.dcgm_naming.legacy_reading`)
before the legacy field's range check, so a fleet in the middle of an upgrade shows each GPU
once, with the same figures whichever exporter it has.

A host with nothing new keeps the lines it had: a refresh costs in proportion to the
hosts that were scraped since the last one, not to the fleet. What the local monitor reads at a cadence of
its own (:data:`TIMED_GROUPS`: temperature, clocks and throttle reasons every 2 s, the P-state, NVLink and
energy 5 s, codecs and ECC counters 10 s, the power limit 15 s, PCIe throughput 20 s, the fan, the PCIe link
and a GPU's static values 30 s, row remapping and retired pages 60 s) is asked of a host when that cadence has
passed on the host's clock (its newest sample's time since they were last read), and kept in between (at most
that cadence older than the host's newest scrape, as on the host itself; every group at a host's first read and
at the read after one where a GPU came or went; a GPU instance's memory total, one of its own series, at every
refresh: :data:`INSTANCE_LIVE_NAMES`). Each host's first re-read of a group comes at a phase of its own
(:meth:`PrometheusFleet._phase`), so a fleet whose hosts were all first read at once reads about a cadence's
share of them a refresh rather than every host's group at the same refresh: at a 1 s refresh some 45 % fewer
rows than reading everything.

Series are grouped into hosts by ``(instance, host name)`` (``hostname``, else ``Hostname``), so two
exporters that report the same name (two containers named ``demo-node``) stay two hosts, titled
with their ``instance`` (host:port); a host is otherwise titled with its name
(``instance`` when it has none). GPUs are sorted by (host, index), hosts in natural
order (node2 before node10), and numbered from 0 in that order, each keeping its own
index as ``host_index``; process rows carry their host. What is read goes through the
same range checks and label cuts as a scraped exposition (the helpers of
:mod:`nvtopy.formats.prometheus`) and the same mapping to the model as ``--remote``
(:mod:`nvtopy.sources.remote.hostscrape`): nothing a server says is trusted.

**Bounded**: at most :data:`~nvtopy.formats.prometheus.parse.MAX_HOSTS` hosts are shown (the first by
name; a line says how many the server has), each with the GPUs and processes a ``--remote`` host
may have; the first answer (one row a host) is read up to :data:`HOST_LIST_BYTES`, and a longer one
is a one-line failure asking for ``--where``, never the memory and time of a million hosts. Hosts
that vanished are remembered for their "no longer reported" line only while the view has room.

**Stale**: a host whose newest sample is older than three of its scrape intervals
(learned from how its newest sample moves between refreshes; the fleet's median for a
host not seen moving yet; 60 s, Prometheus's default, before any) is shown stale, one
line per GPU with the age of its newest sample. A host that vanishes from the answers
(Prometheus ends the series of a target that stopped answering at once) is one line,
"no longer reported", for :data:`GONE_AFTER` seconds.

**Failures**: an unreachable server, a query error or a partial answer (Prometheus's
warnings) is one line in the GPU list and in the status line, and the next refresh asks
again. Queries run on the source's thread, each with its deadline
(:class:`~nvtopy.sources.remote.prometheus.PrometheusClient`); ``stop()`` cuts one in
progress off. **Read-only**: nothing can be signalled on another host.

``--where`` (:func:`~nvtopy.sources.remote.prometheus.parse_matchers`) is a list of label
matchers added to every selector, e.g. ``Hostname=~"node[1-4]"``. A matcher names one label spelling:
``Hostname=~...`` leaves out the hosts whose exporter says ``hostname`` (dcgm-exporter 4.8.3 on), and a
matcher on a label a series lacks compares with "" (``instance=~...`` is the same for every naming).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import heapq
import math
import re
import statistics
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ...formats.dcgm import FIELDS, INSTANCE_FIELDS
from ...formats.dcgm_naming import (
    DRIVER_LABELS,
    HOST_LABELS,
    NAMING_4_9,
    READ_ALIASES,
    UUID_LABELS,
    first_label,
    legacy_reading,
)
from ...formats.fields import field_part
from ...formats.prometheus.parse import (
    MAX_GPU_INDEX,
    MAX_GPUS_PER_HOST,
    MAX_HOSTS,
    MAX_INSTANCE_ID,
    MAX_MIG_PER_GPU,
    MAX_PID,
    MAX_PROCESSES_PER_HOST,
    PROCESS_VALUES,
    HostScrape,
    mig_device_sample,
    mig_of,
    process_from_labels,
    process_value,
    scraped_label,
    scraped_spelling,
    scraped_whole,
    xid_count,
)
from ...formats.prometheus.series import MIG_DEVICE_SERIES, NVTOPY_FIELDS, OWNER_LABELS
from ...interval import STALE_INTERVALS
from ...jsondecode import TaggedRows
from ...model import GROUP_OF_FIELD, GpuSample, GpuState, GpuStatic, HostInfo, Snapshot
from ..base import SnapshotSource
from ..gc_policy import paused_gc
from ..poller import CADENCE
from .hostscrape import HostGpus, ProcessParts
from .prometheus import (
    Matcher,
    PrometheusClient,
    PrometheusError,
    parse_matchers,
    selector,
)

__all__ = [
    "GONE_AFTER",
    "INSTANCE_LIVE_NAMES",
    "LIVE_NAMES",
    "MAX_QUERIES_PER_REFRESH",
    "STATIC_CADENCE",
    "TIMED_GROUPS",
    "PrometheusFleet",
    "newest_query",
    "read_query",
]

GONE_AFTER = 600.0  # seconds a host that vanished from the answers is still shown as "no longer reported"
DEFAULT_SCRAPE_INTERVAL = 60.0  # Prometheus's default, until a host's own is seen
MAX_QUERIES_PER_REFRESH = 2  # each host's newest sample; then, if any host has new ones, what is new
HOST_LIST_BYTES = 4 << 20  # the first answer (one row a host): some 40,000 hosts of ordinary names

# ----------------------------------------------------------------- what is asked for

_GPU_FIELDS = {f.name: f for f in (*FIELDS, *NVTOPY_FIELDS)}


def _aliased(name: str, read: Callable[[float], Any]) -> Callable[[float], Any]:
    """How a 4.9 series' value reads: in its legacy unit (:func:`legacy_reading`), then as the legacy field's."""

    def convert(value: float) -> Any:
        return read(legacy_reading(name, value)[1])

    return convert


# Every GPU value series read, by name -> (its model attribute, how a value reads): the legacy and nvtopy names,
# and dcgm-exporter 4.9's (READ_ALIASES), each converted back to its legacy unit before its legacy field's check.
_GPU_READS: dict[str, tuple[str, Callable[[float], Any]]] = {
    **{name: (f.attribute, f.from_metric) for name, f in _GPU_FIELDS.items()},
    **{
        new: (_GPU_FIELDS[legacy].attribute, _aliased(new, _GPU_FIELDS[legacy].from_metric))
        for new, (legacy, _) in READ_ALIASES.items()
    },
}


def _legacy(name: str) -> str:
    """A series' legacy name (a 4.9 series' READ_ALIASES entry; any other its own)."""
    return READ_ALIASES.get(name, (name,))[0]


STATIC_CADENCE = 30.0
"""Seconds between two reads of a GPU's static values (its memory total, slowdown temperature, PCIe maxima, MIG
mode and the mode pending), which the local monitor reads once: a fleet also sees a GPU's MIG mode changed, or its
board swapped under the same index, within this (a GPU that came or went has them read at the next refresh)."""


def _cadence(attribute: str) -> float:
    """Seconds between two reads of a sample's attribute on the local monitor (0: every refresh); a static value's
    :data:`STATIC_CADENCE`."""
    if field_part(attribute)[0] == "static":
        return STATIC_CADENCE
    return CADENCE.get(GROUP_OF_FIELD.get(attribute, ""), 0.0)


def _timed_groups() -> tuple[tuple[float, tuple[str, ...]], ...]:
    """The series the local monitor reads at a cadence of its own (:data:`~nvtopy.sources.poller.CADENCE`;
    a static value at :data:`STATIC_CADENCE`), grouped by that cadence, shortest first."""
    by_cadence: dict[float, list[str]] = {}
    for name, (attribute, _) in _GPU_READS.items():
        cadence = _cadence(attribute)
        if cadence > 0:
            by_cadence.setdefault(cadence, []).append(name)
    return tuple((cadence, tuple(names)) for cadence, names in sorted(by_cadence.items()))


# A host read again is asked for these when their cadence has passed on its clock (its newest sample's time since
# they were last read), as the local monitor reads them; they keep their last values in between.
TIMED_GROUPS = _timed_groups()
_TIMED = {name for _, group in TIMED_GROUPS for name in group}
# Every group whose values a host keeps between the reads that ask for it, by its index in TIMED_GROUPS.
_KEPT_GROUPS: tuple[tuple[str, ...], ...] = tuple(names for _, names in TIMED_GROUPS)
# A GPU instance's own series among the timed ones (its memory total: a GPU's is a static value, an instance's one
# of INSTANCE_FIELDS, read at every refresh): asked of the instances (GPU_I_ID!="") at every refresh, of the GPUs
# at their group's cadence.
INSTANCE_LIVE_NAMES = tuple(name for name in _GPU_READS if name in _TIMED and _legacy(name) in INSTANCE_FIELDS)
# The timed group a process's utilisation is asked with (_PROCESS_TIMED_NAMES): the one of its local cadence.
_PROCESS_TIMED_GROUP = next(
    group for group, (cadence, _) in enumerate(TIMED_GROUPS) if cadence == CADENCE["process_utilization"]
)
_MIG_DEVICE_NAMES = ("nvtopy_mig_device_info", *(name for name, _, _ in MIG_DEVICE_SERIES))
# Every refresh: what the views show, the GPU instances' series (INSTANCE_FIELDS), Xid counts, MIG devices (and
# whether a GPU is lost: the value of its identity row, GPU_LOST).
LIVE_NAMES: tuple[str, ...] = (
    *(name for name in _GPU_READS if name not in _TIMED),
    "nvtopy_xid_events_total",
    *_MIG_DEVICE_NAMES,
)
assert {_legacy(name) for name in INSTANCE_LIVE_NAMES} == {"DCGM_FI_DEV_FB_TOTAL"}, (
    "a GPU instance's own series are read at every refresh: of them, only the memory total is a timed one"
)

# Which hosts have GPUs, and the time of their newest sample: nvtopy's exporter has the first series for every GPU
# (a lost one too), dcgm-exporter's default counters the second (up to 4.8) or third (4.9). A GPU's identity comes
# from any of these: from the first with whether it is lost as the identity row's value (GPU_LOST), rather than a
# row of its own (4,096 rows fewer a refresh at 4,096 GPUs); from the others where it has no first (GPU_IDENTITY).
_NEWEST_SOURCES = ("nvtopy_gpu_lost", "DCGM_FI_DEV_FB_USED", NAMING_4_9.name("DCGM_FI_DEV_FB_USED"))
# A process's identity comes from one of these (every process has at least one of them, nvtopy's exporter
# leaving a value out only where it is unknown). The first is also its start time, a constant of the process: its
# identity row (PROCESS_STARTED) carries it as its value, rather than a row of its own (8,000 rows fewer a refresh
# at 4,096 GPUs). The second names the identity of a process without a start time (PROCESS_IDENTITY).
_START_TIME = "nvtopy_process_start_time_seconds"
_PROCESS_IDENTITY_SOURCES = (_START_TIME, "nvtopy_process_gpu_memory_bytes")
# A host: its instance and its name, spelt Hostname (dcgm-exporter up to 4.8.2, nvtopy) or hostname (4.8.3 on).
_HOST_KEY_LABELS = ("instance", *HOST_LABELS)
assert HOST_LABELS == ("hostname", "Hostname"), "_read's row loop reads them inline, the newer spelling first"
_VALUE_LABELS = (
    "__name__",
    *_HOST_KEY_LABELS,
    "gpu",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "xid",
    "mig_device",
    "compute_instance_id",
    "mig_uuid",
    "mig_profile",
)
_POD_LABELS = ("pod", "namespace", "container", "hpc_job")
_IDENTITY_LABELS = (
    *_HOST_KEY_LABELS,
    "gpu",
    "GPU_I_ID",
    *UUID_LABELS,
    "modelName",
    "pci_bus_id",
    *DRIVER_LABELS,
    *_POD_LABELS,
)
PROCESS_NAMES = tuple(f"nvtopy_process_{name}" for name in PROCESS_VALUES)
_PROCESS_VALUE_NAMES = tuple(name for name in PROCESS_NAMES if name != _START_TIME)  # asked as value rows
# A process's utilisation, which the local monitor reads every 2 s (CADENCE["process_utilization"]: NVML averages it
# over the time since the last read; nvtopy's exporter serves what its poller read, the same value at the scrapes in
# between): asked of a host with the timed group of that cadence, kept in between for the very process (its pid and
# start time), and N/A for a process that came since (as on the local monitor) until the group's next read.
_PROCESS_TIMED_READINGS = ("sm_utilization_percent", "memory_utilization_percent")
_PROCESS_TIMED_NAMES = tuple(f"nvtopy_process_{reading}" for reading in _PROCESS_TIMED_READINGS)
_PROCESS_LIVE_NAMES = tuple(name for name in _PROCESS_VALUE_NAMES if name not in _PROCESS_TIMED_NAMES)
# The names read_query gives the identity rows (aggregations, of no series): each its own row type (_ROWS).
GPU_IDENTITY = "nvtopy_fleet_gpu_identity"  # a GPU without nvtopy_gpu_lost (dcgm-exporter's): its identity alone
GPU_LOST = "nvtopy_fleet_gpu_lost"  # a GPU's identity, its value nvtopy_gpu_lost's (1: lost)
PROCESS_IDENTITY = "nvtopy_fleet_process_identity"  # a process without a start time: its identity alone
PROCESS_STARTED = "nvtopy_fleet_process_started"  # a process's identity, its value the process's start time
# GpuStatic <- the label's spellings
_IDENTITY = (("uuid", UUID_LABELS), ("bus_id", ("pci_bus_id",)), ("name", ("modelName",)))
_IDENTITY_ATTRIBUTES = tuple(attribute for attribute, _ in _IDENTITY)
_PROCESS_VALUE_LABELS = ("__name__", *_HOST_KEY_LABELS, "gpu", "pid")
_PROCESS_IDENTITY_LABELS = (
    *_HOST_KEY_LABELS,
    "gpu",
    "pid",
    "type",
    "user",
    "command",
    *OWNER_LABELS,
    "GPU_I_ID",
    "compute_instance_id",
)


def _regex(texts: Iterable[str]) -> str:
    """A regex (RE2, as Prometheus anchors it) matching exactly these texts: each escaped, never pasted."""
    return "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text) for text in texts)


def _selector(names: Iterable[str], where: Sequence[Matcher], instances: Sequence[str] | None = None) -> str:
    """``{__name__=~"a|b", <where>, instance=~"..."}``; ``instances`` None: every instance."""
    matchers = [Matcher("__name__", "=~", "|".join(names)), *where]
    if instances is not None:
        matchers.append(Matcher("instance", "=~", _regex(instances)))
    return selector(*matchers)


Part = tuple[Sequence[str], Sequence[str] | None]  # metric names, the instances to ask them of (None: all)


def newest_query(where: Sequence[Matcher] = ()) -> str:
    """The first query of every refresh: each host (instance, hostname or Hostname) with the time of its newest GPU
    sample (of any naming: a host's rows with either spelling are one host, :meth:`PrometheusFleet._newest`)."""
    newest = " or ".join(f"timestamp({selector(Matcher('__name__', '=', n), *where)})" for n in _NEWEST_SOURCES)
    return f"max by ({', '.join(_HOST_KEY_LABELS)}) ({newest})"


def read_query(
    where: Sequence[Matcher] = (),
    parts: Sequence[Part] = ((LIVE_NAMES, None),),
    instances: Sequence[str] | None = None,
    *,
    hostname: bool = True,
    process_parts: Sequence[Part] | None = None,
) -> str:
    """The second query, for the hosts with new samples (``instances``; None: all), one answer ``or``-ed of:

    - the GPUs' values: for each part (metric names, the instances to ask them of), ``max by`` the
      labels that tell one GPU (or GPU instance, MIG device, Xid) from another, the parts or-ed ``on`` those
      labels and ``__name__`` (a plain ``or`` matches rows on their labels but ``__name__``: a later part's rows
      of a GPU an earlier part has would be dropped); and a part of the GPU instances' own series among the timed
      ones (:data:`INSTANCE_LIVE_NAMES`, ``GPU_I_ID!=""``), asked of every host read whatever the parts ask;
    - each GPU's identity and pod, by its labels (no ``pid``): ``max by`` them of ``nvtopy_gpu_lost``, named
      :data:`GPU_LOST` (whether the GPU is lost is the row's value, not a row of its own), or where the GPU has
      none (dcgm-exporter's), ``count by`` them of its memory used, named :data:`GPU_IDENTITY`;
    - each process's values but its start time, ``max by`` its host, GPU and pid: for each of ``process_parts``
      (metric names, the instances to ask them of; None: every value of ``instances``), or-ed ``on`` those labels
      and ``__name__`` (as the value terms);
    - each process's identity (user, command, owner), by its labels (a ``pid``): ``max by`` them of its start
      time, named :data:`PROCESS_STARTED` (the start time is the row's value, not a row of its own: a constant of
      the process, one row a process fewer), or where it has none, ``count by`` them of its GPU memory, named
      :data:`PROCESS_IDENTITY` (``or on`` those labels: a process with both is one row). That part joins the rest
      ``or on(__name__)``: no row of another part is taken for one of its own (a plain ``or`` would drop a started
      row whose labels but ``__name__`` are a value row's, an exporter's process with no label but its pid's).

    The identity rows are of no series: ``label_replace`` names them only so that each kind of row is a type of its
    own when decoded (:data:`_ROWS`), the few labels a GPU's value has rather than every label of every row.

    ``hostname`` False: no host label (``Hostname`` nor ``hostname``) in the answer, where every ``instance``
    has one host name (the first query says so) and a row's ``instance`` names its host: some 20 bytes less
    of each of the answer's 50 rows a GPU, for the server to write and this process to decode.
    """

    def by(labels: tuple[str, ...]) -> str:
        return ", ".join(label for label in labels if hostname or label not in HOST_LABELS)

    def named(name: str, expr: str) -> str:  # the rows of no series named, for a row type of their own (_ROWS)
        return f'label_replace({expr}, "__name__", "{name}", "", "")'

    # The value terms or-ed `on` every label they keep, __name__ too: a plain `or` drops the right side's rows whose
    # labels but __name__ are the left's, every row of a GPU asked of its host in a later term.
    instance_only = (INSTANCE_LIVE_NAMES, (*where, Matcher("GPU_I_ID", "!=", "")), instances)
    values = f" or on({by(_VALUE_LABELS)}) ".join(
        f"max by ({by(_VALUE_LABELS)}) ({_selector(names, matchers, of)})"
        for names, matchers, of in [*((names, where, of) for names, of in parts), instance_only]
    )
    terms = [values]
    process = by(_PROCESS_VALUE_LABELS)
    terms.append(
        "("
        + f" or on({process}) ".join(
            f"max by ({process}) ({_selector(names, where, of)})"
            for names, of in (process_parts or ((_PROCESS_VALUE_NAMES, instances),))
        )
        + ")"
    )
    gpu = by(_IDENTITY_LABELS)
    lost, memory = _selector(_NEWEST_SOURCES[:1], where, instances), _selector(_NEWEST_SOURCES[1:], where, instances)
    gpus = (
        f"({named(GPU_LOST, f'max by ({gpu}) ({lost})')}"
        f" or on({gpu}) {named(GPU_IDENTITY, f'count by ({gpu}) ({memory})')})"
    )
    identity = by(_PROCESS_IDENTITY_LABELS)
    started, other = (_selector((source,), where, instances) for source in _PROCESS_IDENTITY_SOURCES)
    processes = (
        f"({named(PROCESS_STARTED, f'max by ({identity}) ({started})')}"
        f" or on({identity}) {named(PROCESS_IDENTITY, f'count by ({identity}) ({other})')})"
    )
    return " or ".join(terms) + f" or on(__name__) {gpus} or on(__name__) {processes}"


# ----------------------------------------------------------------- from the answers to HostScrapes

# name -> (where it goes: "static", "health" or "values"; the attribute; the field's range check and scale)
_ROUTES: dict[str, tuple[str, str, Callable[[float], Any]]] = {}
for _name, (_field_attribute, _read_value) in _GPU_READS.items():
    _part, _attribute = field_part(_field_attribute)
    _ROUTES[_name] = ("values" if _part == "sample" else _part, _attribute, _read_value)
_INDEX_CACHE: dict[str, int] = {str(i): i for i in range(MAX_GPUS_PER_HOST)}
# name -> _ROUTES's entry and its timed group (None: read at every refresh): _read's common row, in one look-up.
_FAST_ROUTES: dict[str, tuple[str, str, Callable[[float], Any], int | None]] = {
    name: (*route, next((g for g, names in enumerate(_KEPT_GROUPS) if name in names), None))
    for name, route in _ROUTES.items()
}


# The sample's ECC counters a GPU's values may hold (every key of them is one of _ROUTES's): a GPU with any of
# them has ECC on. A set, tested in C, rather than each of a GPU's 40 keys tested in Python.
_ECC_VALUES = frozenset(a for part, a, _ in _ROUTES.values() if part == "values" and a.startswith("ecc_"))
_PARTS = ("static", "health", "values")  # where a GPU's value goes: _Gpu.parts, in this order
MAX_PID_TEXTS = 1 << 16  # pids' texts whose number _read keeps between reads (8,239 processes at 4,096 GPUs)
MEMO_VALUES = 4096  # a field's values whose reading is kept (PrometheusFleet._memos), the first come
_UNSEEN = object()
# The read answer's rows (PrometheusClient.query_items): a row type per series name (TaggedRows), each of the labels
# its query's `by` clause keeps that rows of that name have: a GPU's value series the host's, the GPU's and a GPU
# instance's (six, where one type of every label would be some 30), an Xid count its `xid` too, a MIG device's the
# device's, a process's value its pid; the identity rows (named by read_query only for a type of their own: their
# `name` is None) their `by` clause's. An answer with a label outside its row's type (an exporter's series with a
# label this list does not expect) is read as before, each row of one type of every label: slower, the same.
_GPU_VALUE_LABELS = (*_HOST_KEY_LABELS, "gpu", "GPU_I_ID", "GPU_I_PROFILE")
assert _VALUE_LABELS[0] == _PROCESS_VALUE_LABELS[0] == "__name__", "the tagged union's rows: __name__ is the tag"
_ROWS = TaggedRows(
    {
        **dict.fromkeys((*_GPU_READS, "nvtopy_gpu_lost"), _GPU_VALUE_LABELS),
        "nvtopy_xid_events_total": (*_GPU_VALUE_LABELS, "xid"),
        **dict.fromkeys(_MIG_DEVICE_NAMES, _VALUE_LABELS[1:]),
        **dict.fromkeys(PROCESS_NAMES, _PROCESS_VALUE_LABELS[1:]),
        GPU_IDENTITY: _IDENTITY_LABELS,
        GPU_LOST: _IDENTITY_LABELS,
        PROCESS_IDENTITY: _PROCESS_IDENTITY_LABELS,
        PROCESS_STARTED: _PROCESS_IDENTITY_LABELS,
    },
    unnamed=(GPU_IDENTITY, PROCESS_IDENTITY),
)


_GPU_IDENTITIES = (None, GPU_LOST)  # the names a GPU's identity row reads as (GPU_IDENTITY's: None)


def _gpu_index(text: str | None) -> int | None:
    index = _INDEX_CACHE.get(text)  # type: ignore[arg-type]
    return index if index is not None else scraped_whole(text, MAX_GPU_INDEX)


@dataclass
class _Gpu:
    """What the answers say of one GPU of one host."""

    static: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    lost: bool = False
    instances: dict[int, dict[str, Any]] = field(default_factory=dict)  # GPU_I_ID -> its own series
    devices: dict[int, dict[str, Any]] = field(default_factory=dict)  # MIG device -> nvtopy_mig_device_*
    pod: dict[str, str] = field(default_factory=dict)  # dcgm-exporter's pod labels (or hpc_job) of the GPU
    parts: tuple[dict[str, Any], ...] = field(init=False)  # static, health, values: as _PARTS names them

    def __post_init__(self) -> None:
        self.parts = (self.static, self.health, self.values)


Kept = dict[tuple[str, str], Any]
"""One GPU's last values of a timed group: (part, attribute) -> value, part "static", "health" or "values"."""
ProcessesKept = dict[tuple[int, int], tuple[Any, tuple[Any, ...]]]
"""A host's processes' utilisation as last read (_PROCESS_TIMED_READINGS): (GPU index, pid) -> (its start time,
the readings in that order; _UNSEEN: none read)."""


@dataclass
class _Host:
    """What the answers say of one (instance, host name): the name ``hostname`` or ``Hostname`` says."""

    key: tuple[str, str]
    gpus: dict[int, _Gpu] = field(default_factory=dict)
    newest: float | None = None  # the newest sample of any of its GPUs (the server's clock)
    driver: str | None = None
    processes: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    process_labels: dict[tuple[int, int], Any] = field(default_factory=dict)  # each process's identity row's labels
    processes_left_out: int = 0
    gpus_reported: set[str] = field(default_factory=set)
    slow: list[dict[int, Kept]] | None = None  # per timed group: per GPU, its last values
    read_at: dict[int, float | None] = field(default_factory=dict)  # _Known.read_at as read now
    process_kept: ProcessesKept | None = None  # _Known.process_kept as read now

    def gpu(self, index: int) -> _Gpu:
        gpu = self.gpus.get(index)
        if gpu is None:
            gpu = self.gpus[index] = _Gpu()
        return gpu


def _route(gpu: _Gpu, name: str, labels: Any, value: float, slow: Kept | None) -> None:
    """One GPU value series into ``gpu``, as :func:`~nvtopy.formats.prometheus.parse.parse_exposition` reads it.

    ``labels``: the row's (:data:`_ROWS`), each an attribute; made a dict only for a function that reads one.

    A GPU instance's series (``GPU_I_ID``) carries the instance's own figures
    (:data:`~nvtopy.formats.dcgm.INSTANCE_FIELDS`); any other figure on it is its GPU's,
    used where the GPU has no series of its own. ``slow``: a value of a timed group,
    kept there too for the refreshes that do not ask for it.
    """
    if name == "nvtopy_gpu_lost":
        if not labels.GPU_I_ID:
            gpu.lost = value >= 1
        return
    if name == "nvtopy_xid_events_total":
        if not labels.GPU_I_ID:
            xid_count(gpu.health, labels.xid, value)
        return
    if name.startswith("nvtopy_mig_device_"):
        mig_device_sample(gpu.devices, name, labels.as_dict(), value)
        return
    name, value = legacy_reading(name, value)  # a 4.9 series: as its legacy one (INSTANCE_FIELDS' names)
    route = _ROUTES.get(name)
    if route is None:
        return
    kind, attribute, convert = route
    said = convert(value)  # None: not finite, or out of the field's range
    gi_text = labels.GPU_I_ID
    target = gpu.static if kind == "static" else gpu.health if kind == "health" else gpu.values
    if gi_text:
        gi = scraped_whole(gi_text, MAX_INSTANCE_ID)
        if gi is None:
            return  # an instance no GPU has: nothing of it is read
        if name in INSTANCE_FIELDS:
            instances = gpu.instances
            if gi not in instances and len(instances) >= MAX_MIG_PER_GPU:
                return
            instances.setdefault(gi, {"profile": scraped_label(labels.as_dict(), "GPU_I_PROFILE")})[name] = said
            return
        target.setdefault(attribute, said)  # the GPU's own series, where it has one, wins
        if slow is not None:
            slow.setdefault((kind, attribute), said)
        return
    target[attribute] = said
    if slow is not None:
        slow[(kind, attribute)] = said


def _later_start(row: dict[str, Any], said: Any) -> bool:
    """Whether a process's start time as read from one of its identity rows (:data:`PROCESS_STARTED`) is the one
    to keep: the largest read, as ``max by`` its host, GPU and pid was. Only a pid with two identities (rows of
    two label sets: two exporters' series of one pid) has two such rows."""
    last = row.get("start_time_seconds", _UNSEEN)
    return last is _UNSEEN or last is None or (said is not None and said > last)


ProcessesSaid = dict[tuple[int, int], tuple[Any, dict[str, Any]]]
"""A host's processes as last read: (GPU index, pid) -> their identity labels (a row's, :data:`_ROWS`; None:
none read), and what those say."""


def _scrape(
    host: _Host,
    name: str,
    said_before: ProcessesSaid | None = None,
    statics: dict[int, tuple[dict[str, Any], GpuStatic]] | None = None,
) -> tuple[HostScrape, ProcessesSaid, dict[int, list[ProcessParts]]]:
    """A host's HostScrape, as :func:`~nvtopy.formats.prometheus.parse.parse_exposition` would make it; its
    processes' identities as read, for the next time; and its process rows in parts, by GPU index.

    The process rows are not in the HostScrape: each is handed to :meth:`HostGpus.gpus` as its parts (pid,
    identity, values: :data:`~nvtopy.sources.remote.hostscrape.ProcessParts`) rather than merged into one
    dict a row that is read back key by key (8,000 rows a refresh at 4,096 GPUs).

    ``statics``: each GPU's static values as last read and the GpuStatic made of them, kept by the caller (and
    updated here): the same values again are the very same (frozen) GpuStatic, not one made and checked again.

    ``said_before``: the last read's. A process whose identity labels are the same as then (a C-level
    comparison of two rows' labels) keeps what they said (:func:`process_from_labels` is a function of them
    alone), rather than have its user, command and owner read again: 8,000 processes at 4,096 GPUs.
    """
    scrape = HostScrape(url=f"prometheus://{host.key[0]}", hostname=name, driver_version=host.driver)
    shown = sorted(host.gpus)[:MAX_GPUS_PER_HOST]
    if statics is not None and len(statics) > MAX_GPUS_PER_HOST:  # a host whose GPUs' indices come and go: bounded
        statics.clear()
    for index in shown:
        gpu = host.gpus[index]
        static, values = dict(gpu.static), gpu.values
        if gpu.instances or gpu.devices:
            static["mig_instances"], values["mig_usage"] = mig_of(gpu.instances, gpu.devices)
            static.setdefault("mig_mode", True)  # instances exist: MIG is on
        if not values.keys().isdisjoint(_ECC_VALUES):  # a view's test walks the smaller side: the few ECC names
            values["ecc_mode"] = True  # dcgm has no ECC-mode metric: counters are exported only when it is on
        made = statics.get(index) if statics is not None else None
        if made is not None and made[0] == static:  # a C-level comparison of two small dicts
            remote_static = made[1]
        else:
            remote_static = GpuStatic(index=index, **static)
            if statics is not None:
                statics[index] = (static, remote_static)
        scrape.gpus.append((remote_static, values, gpu.lost))
        if gpu.health:
            scrape.health[index] = gpu.health
    said_now: ProcessesSaid = {}
    before = said_before or {}
    rows: dict[int, list[ProcessParts]] = {}
    labels_of, gpus = host.process_labels.get, host.gpus
    for key, said in sorted(host.processes.items()):
        index, pid = key
        if index not in gpus:
            continue  # a process of a GPU without GPU series has nowhere to be shown
        labels = labels_of(key)
        last = before.get(key)
        if last is None or last[0] != labels:
            last = (labels, process_from_labels(labels.as_dict() if labels is not None else {}))
        said_now[key] = last  # the very pair while its labels are the same: no new object a process
        rows.setdefault(index, []).append((pid, last[1], said))
    notes = []
    reported = len(host.gpus_reported | {str(index) for index in host.gpus})
    if reported > len(shown):
        shown_count = f"{reported} GPUs" if reported < 100_000 else "over 100000 GPUs"
        notes.append(f"host reported {shown_count}; showing the first {len(shown)}")
    if host.processes_left_out:
        total = len(host.processes) + host.processes_left_out
        notes.append(f"host reported {total} processes; showing {len(host.processes)}")
    scrape.note = "; ".join(notes) or None
    return scrape, said_now, rows


def _pod_hint(pod: dict[str, str]) -> str | None:
    """The pod (or Slurm job) dcgm-exporter says holds a GPU, for a GPU without process rows."""
    name, namespace = scraped_label(pod, "pod"), scraped_label(pod, "namespace")
    job = scraped_label(pod, "hpc_job")
    if name:
        held = f"pod {namespace}/{name}" if namespace else f"pod {name}"
        container = scraped_label(pod, "container")
        return f"held by {held}" + (f" (container {container})" if container else "")
    if job:
        return f"held by Slurm job {job}"
    return None


def _natural(text: str) -> tuple[Any, ...]:
    """node2 before node10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# ----------------------------------------------------------------- the source


@dataclass
class _Known:
    """A host seen in an answer, and what is kept of it between refreshes."""

    key: tuple[str, str]
    name: str = ""
    newest: float | None = None  # its newest sample (the server's clock)
    seen_at: float = 0.0  # our clock, when it was last in an answer
    interval: float | None = None  # the shortest step of its newest sample seen so far: its scrape interval
    slow: list[dict[int, Kept]] = field(default_factory=lambda: [{} for _ in _KEPT_GROUPS])
    read_at: dict[int, float | None] = field(default_factory=dict)  # a timed group -> its newest sample when read
    process_kept: ProcessesKept = field(default_factory=dict)  # its processes' utilisation as last read
    gpus_read: frozenset[int] = frozenset()  # the GPUs of its last read
    every_group: bool = False  # a GPU came or went at its last read: every kept group asked at the next
    built: list[GpuState] | None = None  # its GPU lines of the last snapshot, while nothing new came
    processes_said: ProcessesSaid = field(default_factory=dict)  # its processes' identities as last read
    statics: dict[int, tuple[dict[str, Any], GpuStatic]] = field(default_factory=dict)  # _scrape's, by GPU index
    # _identity's, by GPU index: its identity row's labels, and what they said (uuid, bus id, name; pod; driver)
    identities: dict[int, tuple[Any, dict[str, str | None], dict[str, str], str | None]] = field(default_factory=dict)
    gpu_count: int = 0


class PrometheusFleet(SnapshotSource):
    """A snapshot source for the monitor: the fleet's GPUs and processes from a Prometheus server.

    At most two queries per refresh (:func:`newest_query`, then :func:`read_query` for the
    hosts with new samples), whatever the number of hosts; GPUs sorted by (host, index).
    Refuses to signal (read-only), and cannot step or change speed. ``where``: label
    matchers text (``--where``), checked now.
    """

    thread_name = "nvtopy-prometheus"
    signal_refusal = "read-only: processes on other hosts cannot be signalled from here"
    waiting_for = "the Prometheus server"
    max_queries_per_refresh = MAX_QUERIES_PER_REFRESH

    def __init__(
        self,
        url: str,
        *,
        where: str = "",
        interval: float = 2.0,
        timeout: float = 5.0,
        stale_after: float | None = None,
        client: PrometheusClient | None = None,
        ca_file: str | None = None,
    ) -> None:
        super().__init__(interval)
        self.where = parse_matchers(where)  # UsageError, at once
        self.client = client or PrometheusClient(url, timeout=timeout, ca_file=ca_file)
        self.stale_after = stale_after  # None: three of each host's scrape intervals
        self.refresh_seconds: float | None = None  # how long the last refresh took (its queries and the build)
        # The CPU this process spent on it (asking, reading and decoding the answers, building the snapshot): the
        # server's time not in it.
        self.refresh_cpu_seconds: float | None = None
        self.hosts_read = 0  # hosts whose values the last refresh read (the others had no new sample)
        self._mapper = HostGpus()
        # _read's routes of a GPU's value series and of a process's, each with its memo: a value -> what it reads
        # as (range-checked, converted). A fleet's 145,000 values a refresh at 4,096 GPUs are mostly values seen
        # before (utilizations, clocks, temperatures, memory sizes), and the reading is a function of the value
        # alone: a look-up rather than a call. At most MEMO_VALUES values a series name.
        # Each with the key of its value among a timed group's kept ones ((part, attribute)), made once here.
        self._routes: dict[str, tuple[int, str, Callable[[float], Any], int | None, dict[Any, Any], Any]] = {
            name: (_PARTS.index(part), attribute, convert, group, {}, (part, attribute))
            for name, (part, attribute, convert, group) in _FAST_ROUTES.items()
        }
        # Each process route says whether its rows are also the process's identity (PROCESS_STARTED's: the start
        # time is their value).
        self._process_routes: dict[str, tuple[str, dict[Any, Any], bool]] = {
            f"nvtopy_process_{metric}": (metric, {}, False) for metric in PROCESS_VALUES
        }
        self._process_routes[PROCESS_STARTED] = ("start_time_seconds", {}, True)
        self._known: dict[tuple[str, str], _Known] = {}
        self._pids: dict[str, int] = {}  # _read's: a pid's text -> its number, the same at every read of it
        self._sequence = 0
        self._status = "connecting"
        self._failure: PrometheusError | None = None  # why the last refresh read no GPU at all

    # ----------------------------------------------------------------- what the monitor shows

    def status_line(self) -> str:
        state = "⏸ " if self._paused else ""
        return f"{state}PROMETHEUS {self.client.label} {self._status} ⟳ {self._interval:g}s"

    def stop(self, timeout: float | None = 2.0) -> None:
        """Stop at once: a query in progress is cut off, never waited for."""
        self._stopping = True
        self.client.abort()
        super().stop(timeout)

    # ----------------------------------------------------------------- a refresh

    def poll_once(self) -> Snapshot:
        """Read what is new and publish the snapshot (unless stopping). Never raises for what the server does."""
        started, cpu, asked = time.monotonic(), time.thread_time(), self.client.exchange_cpu_seconds
        with paused_gc():  # the answers and the model made of them: no cycles, many objects
            snapshot = self._refresh()
        self.refresh_seconds = time.monotonic() - started
        # This thread's CPU and the queries' threads' (each answer asked, read and its gzip undone on a thread of
        # its own, so that a stuck server can be cut off): all of the refresh's own work.
        self.refresh_cpu_seconds = time.thread_time() - cpu + (self.client.exchange_cpu_seconds - asked)
        if not self._stopping:
            self._publish(snapshot)
        return snapshot

    def read_once(self) -> Snapshot:
        """One complete snapshot for ``--once``: everything asked for. Raises PrometheusError when the GPUs
        cannot be read at all (the caller says it in one line)."""
        with paused_gc():
            snapshot = self._refresh(everything=True)
        if self._failure is not None:
            raise self._failure
        return snapshot

    def _refresh(self, everything: bool = False) -> Snapshot:
        now = time.time()
        self._failure = None
        notes: list[str] = []
        try:
            hosts, claimed, one_name = self._newest(self._host_list())
            evaluated = self.client.evaluated_at or now
            notes.extend(f"partial answer: {w}" for w in self.client.warnings)
            if claimed > len(hosts):
                notes.append(
                    f"the server has {claimed} hosts: showing the first {len(hosts)} by name (narrow them with --where)"
                )
            changed = [
                key
                for key, host in hosts.items()
                if everything
                or key not in self._known
                or self._known[key].built is None
                or host.newest != self._known[key].newest
            ]
            if changed:
                self._read(hosts, changed, notes, everything, every_host=claimed == len(hosts), one_name=one_name)
        except PrometheusError as exc:
            self._failure = exc
            self._status = "✗ " + _short(exc)
            return self._failed_snapshot(now, f"{exc}; asked again every {self._interval:g} s")
        self.hosts_read = len(changed)
        snapshot = self._snapshot(now, hosts, set(changed), evaluated, notes)
        shown = f"{len(hosts)} of {claimed} hosts" if claimed > len(hosts) else f"{len(hosts)} hosts"
        self._status = shown + (" ⚠ partial" if notes else "")
        return snapshot

    def _host_list(self) -> list[tuple[dict[str, str], float]]:
        """The first query's answer, at most :data:`HOST_LIST_BYTES` of it: a server claiming a million hosts
        costs a refusal in one line, not the memory and time of decoding them."""
        try:
            return self.client.query(newest_query(self.where), max_bytes=HOST_LIST_BYTES)
        except PrometheusError as exc:
            if exc.kind != "size":
                raise
            raise PrometheusError(
                f"{exc}: far more hosts than the {MAX_HOSTS} shown; narrow them with --where", kind=exc.kind
            ) from None

    @staticmethod
    def _newest(rows: list[tuple[dict[str, str], float]]) -> tuple[dict[tuple[str, str], _Host], int, bool]:
        """The hosts the first query names, each with the time of its newest GPU sample (the server's clock),
        at most :data:`MAX_HOSTS` of them (the first by name, as they are shown); how many it names; and
        whether each of its instances has one host name (then a row's ``instance`` names its host)."""
        newest: dict[tuple[str, str], float | None] = {}
        for labels, value in rows:
            key = (labels.get("instance", ""), first_label(labels, HOST_LABELS) or "")
            said = value if math.isfinite(value) else None
            known = newest.get(key)
            if known is None or (said is not None and said > known):
                newest[key] = said
        keys: Iterable[tuple[str, str]] = newest
        if len(newest) > MAX_HOSTS:
            keys = heapq.nsmallest(MAX_HOSTS, newest, key=lambda k: (_natural(k[1] or k[0]), k))
        hosts = {key: _Host(key, newest=newest[key]) for key in keys}
        one_name = len({instance for instance, _ in newest}) == len(newest)
        return hosts, len(newest), one_name

    def _read(
        self,
        hosts: dict[tuple[str, str], _Host],
        changed: list[tuple[str, str]],
        notes: list[str],
        everything: bool,
        *,
        every_host: bool = True,
        one_name: bool = False,
    ) -> None:
        """Read what the ``changed`` hosts have (values, identities, processes) into ``hosts``: one query.

        ``every_host``: ``hosts`` are all the server has (not the first :data:`MAX_HOSTS`): a question
        about all of them needs no ``instance`` matcher. ``one_name``: every instance the server has
        names one host (one host name): the answer's rows are told apart by ``instance`` alone.
        """
        every = every_host and len(changed) == len(hosts)
        instances = None if every else sorted({key[0] for key in changed})
        asked: dict[tuple[str, str], tuple[int, ...]] = {}  # host -> the timed groups asked of it
        for key in changed:
            known = self._known.get(key)
            if everything or known is None or known.built is None or known.every_group:  # every group
                asked[key] = tuple(range(len(_KEPT_GROUPS)))
            else:
                asked[key] = self._due(known, hosts[key].newest)

        def asked_of(group: int) -> tuple[str, ...] | Literal[False] | None:
            """The instances of the hosts ``group`` is asked of (None: every host the server has; False: none)."""
            of = [key for key in changed if group in asked[key]]
            if not of:
                return False
            return None if every_host and len(of) == len(hosts) else tuple(sorted({key[0] for key in of}))

        # One selector per set of instances: the live series of every host read, with the groups asked
        # of the same hosts (all of them at the first read of a fleet), each other group on its own.
        by_instances: dict[tuple[str, ...] | None, list[str]] = {None if instances is None else tuple(instances): []}
        by_instances[next(iter(by_instances))].extend(LIVE_NAMES)
        for group, names in enumerate(_KEPT_GROUPS):
            chosen = asked_of(group)
            if chosen is not False:
                by_instances.setdefault(chosen, []).extend(names)
        parts: list[Part] = [(names, chosen) for chosen, names in by_instances.items()]
        process_parts: list[Part] = [(_PROCESS_LIVE_NAMES, instances)]
        chosen = asked_of(_PROCESS_TIMED_GROUP)
        if chosen is not False:
            process_parts.append((_PROCESS_TIMED_NAMES, chosen))
        client = self.client
        query = read_query(self.where, parts, instances, hostname=not one_name, process_parts=process_parts)
        items = client.query_items(query, rows=_ROWS)
        notes.extend(f"partial answer: {w}" for w in client.warnings)
        fresh: dict[tuple[str, str], list[dict[int, Kept]]] = {key: [{} for _ in _KEPT_GROUPS] for key in changed}
        # Some 50 rows a GPU (200,000 at 4,096 GPUs): each is read in this one loop, the common row (a GPU's
        # own value series) without a call, the others by the functions the rest of nvtopy reads a scrape
        # with. The rows' labels were checked as text by query_items (as it decoded them, or item by item), and
        # each value's text read as a number there (TaggedRows: msgspec's float, exactly float()'s).
        reading: dict[str | tuple[str, str], tuple[_Host, list[dict[int, Kept]]]] = {
            key[0] if one_name else key: (hosts[key], fresh[key]) for key in changed
        }
        routes, process_routes, index_of, isnan = self._routes, self._process_routes, _INDEX_CACHE.get, math.isnan
        pids = self._pids  # a pid's text -> its number (0: none), as scraped_whole reads it: kept between reads
        if len(pids) > MAX_PID_TEXTS:  # processes that come and go by the million: bounded
            pids.clear()
        # The run of rows of one GPU: the answer's rows come sorted by their labels, a GPU's some 13 in a row. A row
        # whose host and GPU labels are the very texts of the row before has its host and index (functions of those
        # texts alone) and the GPU's _Gpu (once one of its rows made it) as that row had them: two text comparisons
        # instead of a host key made and looked up, an index looked up and the GPU looked up. Any order still reads
        # the same (a row of another GPU starts a new run); only sorted answers are faster.
        run_instance: Any = _UNSEEN
        run_gpu: Any = _UNSEEN
        run_hostname: Any = _UNSEEN
        run_host_name: Any = _UNSEEN
        run_found: tuple[_Host, list[dict[int, Kept]]] | None = None
        run_index: int | None = None
        run_said: _Gpu | None = None  # the run's GPU, once a row of it made it (only a GPU value row makes one)
        for item in items:
            metric = item.metric  # the row's labels, each an attribute: None where the row has none
            _, value = item.value  # a float (TaggedRows read the number's text)
            instance = metric.instance
            gpu_label = metric.gpu
            if (
                instance == run_instance
                and gpu_label == run_gpu
                and (one_name or (metric.hostname == run_hostname and metric.Hostname == run_host_name))
            ):
                found, index = run_found, run_index
            else:
                found = reading.get(
                    (instance or "") if one_name else (instance or "", metric.hostname or metric.Hostname or "")
                )  # the host key's name as _newest reads it (first_label of HOST_LABELS), inlined: 200,000 rows
                index = index_of(gpu_label)
                run_instance, run_gpu, run_found, run_index, run_said = instance, gpu_label, found, index, None
                if not one_name:
                    run_hostname, run_host_name = metric.hostname, metric.Hostname
            name = metric.name
            route = routes.get(name)
            if found is not None and index is not None and route is not None and not metric.GPU_I_ID:
                # The common row, a GPU's own value (as _route reads it): a value seen before is a look-up of what
                # it read as. Not a NaN (no two are equal: each would take a place of its own). A zero reads as 0.0
                # whatever its sign (-0.0 == 0.0: one memo entry; msgspec reads the text "-0" as 0.0 anyway).
                part, attribute, convert, of_group, memo, kept_as = route
                said = memo.get(value, _UNSEEN)
                if said is _UNSEEN:
                    said = convert(value or 0.0)  # None: not finite, or out of the field's range
                    if len(memo) < MEMO_VALUES and not isnan(value):
                        memo[value] = said
                said_of = run_said
                if said_of is None:
                    said_of = run_said = found[0].gpu(index)
                said_of.parts[part][attribute] = said
                if of_group is not None:
                    group_kept = found[1][of_group]
                    values_kept = group_kept.get(index)
                    if values_kept is None:
                        values_kept = group_kept[index] = {}
                    values_kept[kept_as] = said
                continue
            read_as = process_routes.get(name) if route is None else None
            if found is not None and index is not None and read_as is not None:
                # A process's value (at most MAX_PROCESSES_PER_HOST a host): the same look-up of a value.
                reading_of, memo, started = read_as
                said = memo.get(value, _UNSEEN)
                pid_text = metric.pid
                number = pids.get(pid_text)
                if number is None:
                    number = pids[pid_text] = scraped_whole(pid_text, MAX_PID) or 0
                if not number:
                    continue
                host = found[0]
                if started:
                    host.process_labels[(index, number)] = metric  # read (as a dict) only when they change
                row = host.processes.get((index, number))
                if row is None:
                    if len(host.processes) >= MAX_PROCESSES_PER_HOST:
                        host.processes_left_out += 1
                        continue
                    row = host.processes[(index, number)] = {}
                if said is _UNSEEN:
                    said = process_value(reading_of, value or 0.0)
                    if len(memo) < MEMO_VALUES and not isnan(value):
                        memo[value] = said
                if started and not _later_start(row, said):
                    continue
                row[reading_of] = said
                continue
            if found is None:
                continue  # another host behind the same instance, with nothing new
            host, kept = found
            value = value or 0.0  # a zero as 0.0 whatever its sign, as above
            if index is None:
                gpu_text = metric.gpu
                index = scraped_whole(gpu_text, MAX_GPU_INDEX)
                if index is None:
                    reported = host.gpus_reported
                    if gpu_text and name in _GPU_IDENTITIES and metric.pid is None and len(reported) < 100_000:
                        reported.add(gpu_text)  # a GPU no host has: counted, never shown
                    continue
            if name in _GPU_IDENTITIES:
                if name is None and metric.pid is not None:
                    pid = scraped_whole(metric.pid, MAX_PID)
                    if pid:
                        host.process_labels[(index, pid)] = metric  # read (as a dict) only when they change
                else:
                    if name is not None and not metric.GPU_I_ID and value >= 1:  # GPU_LOST's: max by, as before
                        host.gpu(index).lost = True
                    self._identity(host, index, metric)
                continue
            if route is not None and not metric.GPU_I_ID:  # a GPU's own value of a GPU past the cache's
                said_of = host.gpus.get(index) or host.gpu(index)
                part, attribute, convert, of_group, memo, kept_as = route
                said = convert(value)
                said_of.parts[part][attribute] = said
                if of_group is not None:
                    kept[of_group].setdefault(index, {})[kept_as] = said
            elif name.startswith("nvtopy_process_") or name == PROCESS_STARTED:  # a GPU past the cache's, or unknown
                pid_text = metric.pid
                number = pids.get(pid_text)
                if number is None:
                    number = pids[pid_text] = scraped_whole(pid_text, MAX_PID) or 0
                read_as = process_routes.get(name)
                if not number or read_as is None:
                    continue
                reading_of, _, started = read_as
                if started:
                    host.process_labels[(index, number)] = metric
                row = host.processes.get((index, number))
                if row is None:
                    if len(host.processes) >= MAX_PROCESSES_PER_HOST:
                        host.processes_left_out += 1
                        continue
                    row = host.processes[(index, number)] = {}
                said = process_value(reading_of, value)
                if not started or _later_start(row, said):
                    row[reading_of] = said
            else:
                of_group = route[3] if route is not None else None
                slow_kept = None if of_group is None else kept[of_group].setdefault(index, {})
                _route(host.gpu(index), name, metric, value, slow_kept)
        for key in changed:  # the groups not asked this time: their last values
            known = self._known.get(key)
            slow = known.slow if known is not None else [{} for _ in _KEPT_GROUPS]
            read_at = known.read_at if known is not None else {}
            host = hosts[key]
            newest = host.newest
            for group in asked[key]:
                slow[group] = fresh[key][group]
                if newest is not None and read_at.get(group) is None:  # the group's first read: at the host's phase
                    read_at[group] = newest - self._phase(key, group)
                else:
                    read_at[group] = newest
            if known is not None:
                # A GPU came or went: its kept values, at the next read.
                known.every_group = known.gpus_read != host.gpus.keys()
                if known.every_group:
                    read_at.clear()
                known.gpus_read = frozenset(host.gpus)
            host.slow = slow
            host.read_at = read_at
            host.process_kept = self._process_kept(host, known, _PROCESS_TIMED_GROUP in asked[key])
            if known is not None:
                known.process_kept = host.process_kept
            for group, last in enumerate(slow):
                if group in asked[key]:
                    continue
                for gpu_index, values in last.items():
                    gpu = host.gpus.get(gpu_index)
                    if gpu is None:
                        continue
                    for (kind, attribute), said in values.items():
                        target = gpu.static if kind == "static" else gpu.health if kind == "health" else gpu.values
                        target.setdefault(attribute, said)

    @staticmethod
    def _process_kept(host: _Host, known: _Known | None, asked: bool) -> ProcessesKept:
        """A host's processes' utilisation (:data:`_PROCESS_TIMED_NAMES`) as read now, when it was ``asked``;
        else the last read's laid under each process that was there then (the same pid with the same start time:
        a pid reused since is another process, its utilisation N/A until the next read), and kept."""
        processes = host.processes
        if asked or known is None:
            return {
                key: (row.get("start_time_seconds"), tuple(row.get(r, _UNSEEN) for r in _PROCESS_TIMED_READINGS))
                for key, row in processes.items()
            }
        kept = known.process_kept
        for key, row in processes.items():
            last = kept.get(key)
            if last is not None and last[0] == row.get("start_time_seconds"):
                for reading, said in zip(_PROCESS_TIMED_READINGS, last[1], strict=True):
                    if said is not _UNSEEN:
                        row.setdefault(reading, said)
        return kept

    def _due(self, known: _Known, newest: float | None) -> tuple[int, ...]:
        """The timed groups (by their index among the kept ones) whose cadence has passed since a host's last read
        of them, on its clock (its newest sample's time), as the local poller reads them: with half a step of slack
        (the refresh interval, or the host's scrape interval where longer), so a 2 s group is read at every second
        refresh of a 1 s one despite jitter. A host without a newest time, a group never read, or a clock gone
        backwards: read now."""
        slack = max(self._interval, known.interval or 0.0) / 2
        due = []
        for group, (cadence, _) in enumerate(TIMED_GROUPS):
            at = known.read_at.get(group)
            if newest is None or at is None or not 0.0 <= newest - at < cadence - slack:
                due.append(group)
        return tuple(due)

    def _phase(self, key: tuple[str, str], group: int) -> float:
        """How much older than the host's newest sample a timed group's first read counts as: a whole number of
        refresh intervals under the group's cadence, a function of the host and the group alone (crc32: the same in
        every process, unlike ``hash``). So the group is next asked of each host at a phase of its own, at most its
        cadence after the first read (never later: the values are never older than the cadence), and a fleet whose
        hosts were all first read at once is asked about a cadence's share of its hosts for the group each refresh,
        not every host's at one refresh (a 60 s group's values of 4,096 GPUs: a refresh of a third more rows)."""
        steps = int(TIMED_GROUPS[group][0] / max(self._interval, 0.001) + 0.5)
        if steps <= 1:
            return 0.0
        return (zlib.crc32(f"{key[0]}\0{key[1]}\0{group}".encode("utf-8", "surrogatepass")) % steps) * self._interval

    def _identity(self, host: _Host, index: int, row: Any) -> None:
        """A GPU's identity (UUID, model, bus id, driver) and the pod dcgm-exporter says holds it, from its
        identity row's labels (``row``, :data:`_ROWS`'s).

        What they say is a function of the labels alone: a GPU whose identity row has the very labels of the last
        refresh's (a C-level comparison of two rows' labels) takes what they said then, rather than have them made
        a dict and read again (4,096 GPUs a refresh). Only for a GPU with nothing of its identity yet (its first
        identity row this refresh): then the labels' reading is all there is to it.
        """
        host.gpus_reported.add(str(index))
        gpu = host.gpu(index)
        static = gpu.static
        known = self._known.get(host.key)
        # Nothing of its identity yet: each identity attribute is None or a text (scraped_spelling's), so any() in C
        if known is not None and not gpu.pod and not any(map(static.get, _IDENTITY_ATTRIBUTES)):
            said = known.identities.get(index)
            if said is None or said[0] != row:
                labels = row.as_dict()
                said = (
                    row,
                    {attribute: scraped_spelling(labels, spellings) for attribute, spellings in _IDENTITY},
                    {k: labels[k] for k in _POD_LABELS if labels.get(k)},
                    scraped_spelling(labels, DRIVER_LABELS),
                )
                if index in known.identities or len(known.identities) < MAX_GPUS_PER_HOST:
                    known.identities[index] = said
            static.update(said[1])
            if said[2]:
                gpu.pod = dict(said[2])
            host.driver = said[3] or host.driver
            return
        labels = row.as_dict()
        for attribute, spellings in _IDENTITY:
            if static.get(attribute) is None:
                static[attribute] = scraped_spelling(labels, spellings)
        if not gpu.pod:
            gpu.pod = {k: labels[k] for k in _POD_LABELS if labels.get(k)}
        host.driver = scraped_spelling(labels, DRIVER_LABELS) or host.driver

    # ----------------------------------------------------------------- the snapshot

    def _titles(self) -> None:
        """Each host's title: its host name, or its instance (host:port) where the name is shared or missing."""
        said = {key: scraped_label({"h": key[1]}, "h") or key[0] or "unknown" for key in self._known}
        counts = collections.Counter(said.values())
        for key, name in said.items():
            title = (key[0] or name) if counts[name] > 1 else name
            known = self._known[key]
            if known.name != title:
                known.name = title
                known.built = None  # its lines carry the old title

    def _snapshot(
        self,
        now: float,
        hosts: dict[tuple[str, str], _Host],
        changed: set[tuple[str, str]],
        evaluated: float,
        notes: list[str],
    ) -> Snapshot:
        for key, host in hosts.items():
            known = self._known.get(key)
            if known is None:
                known = self._known[key] = _Known(key)
                known.slow = host.slow or known.slow
                known.process_kept = host.process_kept or known.process_kept
                known.read_at = host.read_at
                known.gpus_read = frozenset(host.gpus)
            if host.newest is not None and known.newest is not None and host.newest > known.newest:
                step = host.newest - known.newest
                known.interval = step if known.interval is None else min(known.interval, step)
            if host.newest is not None:
                known.newest = host.newest
            known.seen_at = now
        for key in [k for k, known in self._known.items() if k not in hosts and now - known.seen_at > GONE_AFTER]:
            del self._known[key]
        if len(self._known) > MAX_HOSTS:  # hosts that come and go by the thousand: the longest gone are forgotten
            gone = sorted((k for k in self._known if k not in hosts), key=lambda k: self._known[k].seen_at)
            for key in gone[: len(self._known) - MAX_HOSTS]:
                del self._known[key]
        self._titles()
        kept = set(self._known)
        if len(self._mapper) > 8 * MAX_GPUS_PER_HOST * max(1, len(kept)):  # hosts gone for good: their histories
            self._mapper.forget(lambda gpu_key: gpu_key[:2] in kept)  # type: ignore[index]
        fleet_interval = statistics.median(
            [k.interval for k in self._known.values() if k.interval] or [DEFAULT_SCRAPE_INTERVAL]
        )
        gpus: list[GpuState] = []
        stale_hosts = 0
        for key in sorted(self._known, key=lambda k: (_natural(self._known[k].name), k)):
            known = self._known[key]
            seen = hosts.get(key)
            if seen is None:
                known.built = None
                static = GpuStatic(index=len(gpus), host=known.name)
                ago = _age(now - known.seen_at)
                gpus.append(GpuState(static, GpuSample(now, lost=True), note=f"no longer reported ({ago} ago)"))
                continue
            limit = self.stale_after or STALE_INTERVALS * (known.interval or fleet_interval)
            age = None if seen.newest is None else evaluated - seen.newest
            if age is not None and age > limit:
                note = f"stale: newest sample {_age(age)} old (scraped every {_age(limit / STALE_INTERVALS)})"
                identities: list[tuple[int | None, dict[str, Any]]]
                if key in changed or not known.built:  # read now: its identities as read
                    identities = [
                        (index, {k: seen.gpus[index].static.get(k) for k, _ in _IDENTITY})
                        for index in sorted(seen.gpus)[:MAX_GPUS_PER_HOST]
                    ]
                else:  # as last shown
                    identities = [
                        (g.static.host_index, {k: getattr(g.static, k) for k, _ in _IDENTITY})
                        for g in known.built
                        if g.static.host_index is not None
                    ]
                lines = [
                    GpuState(
                        GpuStatic(index=len(gpus) + n, host=known.name, host_index=index, **identity),
                        GpuSample(now),
                        note=note,
                    )
                    for n, (index, identity) in enumerate(identities)
                ]
                if key in changed or not known.built:
                    known.built = lines  # not read again until a new sample comes
                gpus.extend(lines)
                stale_hosts += 1
                continue
            if key in changed or known.built is None:
                scrape, known.processes_said, parts = _scrape(seen, known.name, known.processes_said, known.statics)
                # Dated when measured (its newest sample, on this clock): a view tells old values by their age.
                taken = now - max(0.0, age or 0.0)
                made = self._mapper.gpus(scrape, len(gpus), taken, key=functools.partial(_gpu_key, key), parts=parts)
                known.built = [_with_pod(gpu, seen) for gpu in made]
            elif known.built and known.built[0].index != len(gpus):  # a seen came or went before it
                known.built = [_reindexed(gpu, len(gpus) + n) for n, gpu in enumerate(known.built)]
            gpus.extend(known.built)  # nothing new: the very same lines
        for note in notes:
            static = GpuStatic(index=len(gpus), host=self.client.label)
            gpus.append(GpuState(static, GpuSample(now), note=note))
        self._sequence += 1
        drivers = {host.driver for host in hosts.values() if host.driver}
        shown = [k.name for k in self._known.values()]
        info = HostInfo(
            hostname=shown[0] if len(shown) == 1 else f"{len(shown)} hosts",
            driver_version=drivers.pop() if len(drivers) == 1 else ("mixed" if drivers else None),
            cuda_driver_version=None,
            backend="prometheus",
        )
        # The interval of the data: a view calls a host stale whose values are a few of them old. Hosts scraped
        # every 15 s are not stale for being 10 s old at a 1 s refresh (each host's own staleness is said above).
        learned = [k.interval for k in self._known.values() if k.interval]
        interval = max(self._interval, max(learned) if learned else DEFAULT_SCRAPE_INTERVAL)
        return Snapshot(timestamp=now, host=info, gpus=tuple(gpus), sequence=self._sequence, interval=interval)

    def _failed_snapshot(self, now: float, note: str) -> Snapshot:
        """The server could not be read: one line saying why (the hosts known so far are not guessed at)."""
        self._sequence += 1
        static = GpuStatic(index=0, host=self.client.label)
        info = HostInfo(hostname=self.client.label, driver_version=None, cuda_driver_version=None, backend="prometheus")
        gpu = GpuState(static, GpuSample(now, lost=True), note=note)
        return Snapshot(timestamp=now, host=info, gpus=(gpu,), sequence=self._sequence, interval=self._interval)

    def _run(self) -> None:
        self._run_periodic(self.poll_once)


def _with_pod(gpu: GpuState, host: _Host) -> GpuState:
    """A GPU without process rows that dcgm-exporter says a pod (or Slurm job) holds: that, beside its process list."""
    said = host.gpus.get(gpu.static.host_index) if gpu.static.host_index is not None else None
    if said is None or not said.pod or gpu.processes or gpu.note:
        return gpu
    hint = _pod_hint(said.pod)
    return dataclasses.replace(gpu, processes_hint=hint) if hint else gpu


def _reindexed(gpu: GpuState, index: int) -> GpuState:
    """The same GPU line at another position of the fleet (a host came or went before it)."""
    static = dataclasses.replace(gpu.static, index=index)
    processes = tuple(dataclasses.replace(p, gpu_index=index) for p in gpu.processes)
    return dataclasses.replace(gpu, static=static, processes=processes)


def _short(exc: PrometheusError) -> str:
    return {"timeout": "no answer", "unreachable": "unreachable", "query": "query error"}.get(exc.kind, "error")


def _gpu_key(host: tuple[str, str], index: int) -> tuple[str, str, int]:
    """A GPU's identity across refreshes: its host's (instance, host name) and its index there."""
    return (*host, index)

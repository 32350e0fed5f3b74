"""CSV and JSON lines: the row formats of ``nvtopy log`` and ``nvtopy record``.

CSV: one row per GPU per sample (or per process), the header once; every
scalar of the JSON contract is a column, lists joined with ``;``. The GPU's
``health`` object is nested in JSON; CSV has it flat (:data:`HEALTH_FIELDS`:
the verdict, finding codes, the last Xid, the readings). JSONL: one JSON
object per snapshot in the contract's names (:mod:`nvtopy.formats.contract`);
with ``--fields``, a chosen health field is written under its flat name.

The real work (GPM, Hopper and newer) is columns like any other, under the JSON
contract's names and rounding (percentages to two decimals, whole bytes per second);
``sm_active_percent``, ``tensor_active_percent`` and ``dram_active_percent`` close the
default list (empty cells where GPM measures nothing). A MIG device's row has its own
(``mig_sm_active_percent``, ...).

Why each write is one call and flushed: a logger runs for days and gets killed;
a killed logger must lose at most the sample in progress and leave a file every
reader can parse.

MIG, in CSV: the GPU's row is written as always (its ``mig_devices`` cell holds
its MIG devices' UUIDs, ``;``-joined). When the chosen fields include one of
:data:`MIG_FIELDS` (``mig_index``, ``mig_profile``, ``mig_memory_used_bytes``,
...: ``mig_`` and the key of the JSON contract's MIG device object), each
MIG-enabled GPU's row is followed by one row per MIG device: the identity
columns (:data:`MIG_ROW_IDENTITY`: time, host, the GPU's index, UUID, name, bus
id) repeated, the ``mig_*`` columns filled, and every other GPU column empty.
Why empty and not repeated: a non-empty cell always describes its row's subject,
so a sum or an average over a column counts each GPU once, and the GPU's row
(``mig_index`` empty) and its devices' rows (``mig_index`` set) tell themselves
apart. Without a ``mig_*`` field, and on a GPU without MIG devices, nothing
changes. Process rows (``--processes``) carry ``gpu_instance_id``,
``compute_instance_id`` and ``instance_label`` (``0/1/0``; empty on a whole
GPU). JSONL nests the devices in each GPU's ``mig_devices``; with ``--fields``,
a ``mig_*`` field (or ``mig_devices``) keeps that list whole.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import IO, Any

from ..model import SAMPLE_GROUPS, GpuProcess, GpuState, Snapshot
from ..textsafe import escape_text, formula_safe
from .contract import (
    MIG_COUNT_KEYS,
    MIG_GPM_KEYS,
    MIG_MEMORY_KEYS,
    encode,
    gpu_to_dict,
    process_to_dict,
    snapshot_to_dict,
)
from .timestamps import iso_timestamp

__all__ = [
    "DEFAULT_GPU_FIELDS",
    "DEFAULT_PROCESS_FIELDS",
    "GPU_FIELDS",
    "HEALTH_FIELDS",
    "MIG_FIELDS",
    "MIG_ROW_IDENTITY",
    "OWNER_FIELDS",
    "PROCESS_FIELDS",
    "TOP_FIELDS",
    "CsvWriter",
    "JsonlWriter",
]


TOP_FIELDS = ("timestamp", "hostname", "driver_version", "cuda_driver_version")


DEFAULT_GPU_FIELDS = (
    "timestamp",
    "index",
    "name",
    "bus_id",
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_draw_w",
    "power_limit_w",
    "clock_sm_mhz",
    "clock_mem_mhz",
    "pstate",
    "fan_percent",
    "ecc_uncorrected_volatile",
    "throttle_reasons",
    "health_verdict",
    "health_findings",
    # The real work (GPM, Hopper and newer; empty cells elsewhere): how much of the GPU computes.
    "sm_active_percent",
    "tensor_active_percent",
    "dram_active_percent",
)


DEFAULT_PROCESS_FIELDS = (
    "timestamp",
    "gpu_index",
    "pid",
    "type",
    "user",
    "gpu_memory_bytes",
    "sm_percent",
    "cpu_percent",
    "host_memory_bytes",
    "running_seconds",
    "owner_name",
    "command",
)


def _gpu_keys() -> tuple[str, ...]:
    """The scalar keys of a GPU object of the JSON contract, in its order."""
    from ..model import GpuSample, GpuState, GpuStatic

    sample = gpu_to_dict(GpuState(GpuStatic(0), GpuSample(0.0)), processes=False)
    return tuple(k for k in sample if k not in ("unavailable", "processes_unavailable", "health"))


def _process_keys() -> tuple[str, ...]:
    from ..model import GpuProcess, ProcessType

    keys = process_to_dict(GpuProcess(0, None, 0, ProcessType.COMPUTE, None))
    return ("gpu_index", "gpu_uuid", *(k for k in keys if k not in ("unavailable", "owner")), *OWNER_FIELDS)


# The JSON contract's ``owner`` object, flat for CSV: its kind, its short label (an OWNER column's text) and names.
OWNER_FIELDS = (
    "owner_kind",
    "owner_name",
    "owner_namespace",
    "owner_pod",
    "owner_container",
    "owner_job",
    "owner_step",
)


def owner_cells(process: GpuProcess) -> dict[str, Any]:
    """The ``owner_*`` columns of one process row, every name escaped (empty cells: no owner known)."""
    owner = process.owner
    if owner is None:
        return {}
    return {
        "owner_kind": owner.kind.value,
        "owner_name": escape_text(owner.label),
        "owner_namespace": escape_text(owner.namespace),
        "owner_pod": escape_text(owner.pod),
        "owner_container": escape_text(owner.container),
        "owner_job": escape_text(owner.job),
        "owner_step": escape_text(owner.step),
    }


# The JSON contract's ``health`` object, flat: its scalars and the readings, under the model's field names.
HEALTH_FIELDS = (
    "health_verdict",  # OK, WARN or FAIL
    "health_findings",  # the findings' codes, joined with ';' ("remap-pending;pcie-downgrade")
    "last_xid",
    "xid_events",  # Xid events seen since nvtopy started, all Xids together (empty: events not watched)
    "responding",
    "stalled_seconds",
    "throttle_words",  # throttling in plain words ("HW slowdown: SM at 45 % of max"); empty: not throttled
    "idle_held_bytes",
    "suspected_hang_seconds",
    "events_note",
    *SAMPLE_GROUPS["remapped_rows"],
    *SAMPLE_GROUPS["retired_pages"],
    "pcie_link_gen",
    "pcie_link_width",
    "pcie_link_gen_max",
    "pcie_link_width_max",
    "pcie_replay_counter",
    "nvlink_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlinks_active",  # active links of all: "17/18"; "0/0" on a board without NVLink
)
_HEALTH_SET = frozenset(HEALTH_FIELDS)

# The health readings of HEALTH_FIELDS that are GpuSample fields, copied as they are.
_SAMPLE_READINGS = (
    *SAMPLE_GROUPS["remapped_rows"],
    *SAMPLE_GROUPS["retired_pages"],
    *SAMPLE_GROUPS["pcie_link"],
    "nvlink_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
)


def health_cells(gpu: GpuState) -> dict[str, Any]:
    """The :data:`HEALTH_FIELDS` of one GPU, JSON-typed (lists stay lists; CSV joins them); outside text escaped.

    Why ``xid_events`` and ``last_xid`` are empty (not 0) when events are not watched: 0 would
    claim "no Xid happened", which nvtopy cannot know then.
    """
    health, sample, static = gpu.health, gpu.sample, gpu.static
    unwatched = health.events_note is not None and not health.xid_counts and not health.events
    links = sample.nvlinks
    cells: dict[str, Any] = {
        "health_verdict": health.verdict.value,
        "health_findings": [escape_text(f.code) for f in health.findings],
        "last_xid": health.last_xid,
        "xid_events": None if unwatched else sum(count for _, count in health.xid_counts),
        "responding": health.responding,
        "stalled_seconds": health.stalled_seconds,
        "throttle_words": escape_text(health.throttle),
        "idle_held_bytes": health.idle_held_bytes,
        "suspected_hang_seconds": health.suspected_hang_seconds,
        "events_note": escape_text(health.events_note),
        "pcie_link_gen_max": static.pcie_link_gen_max,
        "pcie_link_width_max": static.pcie_link_width_max,
        "nvlinks_active": None if links is None else f"{sum(1 for link in links if link.active)}/{len(links)}",
    }
    for name in _SAMPLE_READINGS:
        cells[name] = getattr(sample, name)
    return cells


# The columns of a MIG device's row: ``mig_`` and the keys of the JSON contract's MIG device object
# (its process count and pids need the process list, which GPU rows do not read: not columns).
MIG_FIELDS = tuple(
    f"mig_{key}"
    for key in (
        "index",
        "uuid",
        "gpu_instance_id",
        "compute_instance_id",
        "label",
        "profile",
        *MIG_MEMORY_KEYS,
        *MIG_COUNT_KEYS,
        *MIG_GPM_KEYS,
    )
)
_MIG_SET = frozenset(MIG_FIELDS)

# What a MIG device's row repeats of its GPU's row: which GPU (and host, and when) it belongs to.
MIG_ROW_IDENTITY = ("index", "uuid", "name", "bus_id", "host", "host_index")

# Every scalar of the JSON contract's GPU (or process) object; lists are joined with ';' in CSV.
GPU_FIELDS = TOP_FIELDS + _gpu_keys() + HEALTH_FIELDS + MIG_FIELDS


PROCESS_FIELDS = ("timestamp", "hostname", *_process_keys())


def _list_item(text: str) -> str:
    """An escaped list item with ``;`` written as ``\\x3b``, so ``unescape_text`` of each part of the split is exact.

    In escape_text's output a backslash right before ``;`` is always a literal one:
    it is doubled, as escape_text doubles a backslash before an escape.
    """
    return text.replace("\\;", "\\\\;").replace(";", "\\x3b") if ";" in text else text


def _cell(value: Any) -> str:
    """One CSV cell. Strings (and list items) arrive escaped exactly once: the JSON
    contract's builders and :meth:`_CsvWriter.rows` apply ``escape_text``, so a cell
    is always valid UTF-8 with no control characters (no row broken in two); a text
    cell that a spreadsheet would run as a formula starts with ``'`` (``formula_safe``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return formula_safe(";".join(_list_item(str(v)) for v in value))
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else f"{value:.0f}"
    if isinstance(value, str):  # a process name, a command line, a user, a driver string: a spreadsheet's text
        return formula_safe(value)
    return str(value)  # an int: a negative one stays a number


class CsvWriter:
    def __init__(self, out: IO[str], fields: list[str], processes: bool, header: bool) -> None:
        self.out, self.fields, self.processes = out, fields, processes
        self.mig_rows = not processes and any(f in _MIG_SET for f in fields)  # a row per MIG device
        self.buffer = io.StringIO()
        self.writer = csv.writer(self.buffer, lineterminator="\n")
        if header:
            self.writer.writerow(fields)

    def rows(self, snapshot: Snapshot) -> Iterator[dict[str, Any]]:
        top = {
            "timestamp": iso_timestamp(snapshot.timestamp),
            "hostname": escape_text(snapshot.host.hostname),
            "driver_version": escape_text(snapshot.host.driver_version),
            "cuda_driver_version": escape_text(snapshot.host.cuda_driver_version),
        }
        for gpu in snapshot.gpus:
            if not self.processes:
                data = gpu_to_dict(gpu, processes=False)
                migs = data["mig_devices"]
                data["mig_devices"] = [m["uuid"] for m in migs if m["uuid"] is not None]  # the UUIDs, ;-joined
                yield {**top, **data, **health_cells(gpu)}
                if self.mig_rows and migs:
                    identity = {**top, **{key: data[key] for key in MIG_ROW_IDENTITY}}
                    for mig in migs:
                        yield {**identity, **{f"mig_{key}": value for key, value in mig.items()}}
                continue
            uuid = escape_text(gpu.static.uuid)
            for proc in gpu.processes:
                yield {**top, "gpu_index": gpu.index, "gpu_uuid": uuid, **process_to_dict(proc), **owner_cells(proc)}

    def write(self, snapshot: Snapshot) -> None:
        for row in self.rows(snapshot):
            self.writer.writerow([_cell(row.get(f)) for f in self.fields])
        self.out.write(self.buffer.getvalue())  # one write per sample: a sample is all or nothing
        self.buffer.seek(0)
        self.buffer.truncate()
        self.out.flush()


class JsonlWriter:
    def __init__(self, out: IO[str], fields: list[str] | None, processes: bool) -> None:
        self.out, self.fields, self.processes = out, fields, processes

    def write(self, snapshot: Snapshot) -> None:
        data = snapshot_to_dict(snapshot, processes=self.processes)
        if self.fields is not None:
            keep = set(self.fields) | {"index"}
            if not keep.isdisjoint(_MIG_SET):
                keep.add("mig_devices")  # the devices' objects, whole
            chosen = [f for f in self.fields if f in _HEALTH_SET]  # flat, as in CSV: the name asked for
            data = {k: v for k, v in data.items() if k in TOP_FIELDS or k not in GPU_FIELDS}
            gpus = []
            for state, gpu in zip(snapshot.gpus, data["gpus"], strict=True):
                kept = {k: v for k, v in gpu.items() if k in keep or k in ("processes", "unavailable")}
                if chosen:
                    cells = health_cells(state)
                    kept.update((f, cells[f]) for f in chosen)
                gpus.append(kept)
            data["gpus"] = gpus
        self.out.write(encode(data) + "\n")  # the encoder of --once --json; strings escaped by the builders
        self.out.flush()

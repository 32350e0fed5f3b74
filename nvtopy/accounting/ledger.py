"""Accounting: GPU-hours held, busy and idle-held, energy and peak memory per user, owner, GPU or host.

Pure: a :class:`Ledger` is fed observations (one GPU at one time, with the
processes on it), from recorded snapshots (:func:`observations`) or from a
Prometheus server's range queries (:mod:`nvtopy.sources.remote.prometheus_accounting`),
and sums them. No I/O, no threads, no clock: the same observations give the
same report, whichever source they came from. What each figure means is
:data:`DEFINITIONS` (the ``--help`` epilog of ``nvtopy report`` and the README
say the same):

- An *interval* is the time between two consecutive observations of one GPU.
  It is described by its later observation: the processes then on the GPU, its
  activity (NVML averages utilisation over the time before it, Prometheus'
  ``avg_over_time`` too), and the energy counter's growth since the earlier one.
- A *gap* -- an interval longer than :data:`GAP_FACTOR` times the median
  interval of that GPU (the recorder or exporter stopped, the host was down) --
  counts for nothing: who held the GPU then is not known.
- *Held*: a key holds a GPU during an interval when at least one of its
  processes is on it. Summed over GPUs, so four GPUs for an hour are 4 GPU-hours.
- *Busy*: held time times the GPU's activity: its SM activity (GPM, Hopper and
  newer) where measured, else its utilisation. Unknown activity counts as not busy.
- *Idle-held*: held time during which that activity was at most the idle-held
  health rule's ``idle_sm_percent`` (1 %): the GPU was held and did nothing.
- *Energy*: the growth of the GPU's total-energy counter over the interval; where
  the counter is missing, no value (DCGM's blank), went down (the driver reloaded)
  or grew by more than a GPU draws (:data:`MAX_GPU_WATTS`), power times the
  interval (the mean of both ends' power). What is skipped is counted
  (:data:`SKIPPED_READINGS`). A GPU shared by several keys is split by their
  shares of the memory its processes use at the interval's observation
  (equally per process where no memory is known).
- *Peak memory*: the most GPU memory the key's processes held together on one
  GPU at one observation.
- The *total* is the same figures for every process taken as one key, so a GPU
  shared by two users counts once in it (and once in each user's row).

Why buckets of interval lengths, not a list of intervals: the gap rule needs the
median interval, known only at the end, and a day of one-second samples of
eight GPUs is 700,000 intervals. Each GPU keeps its sums per interval length in
milliseconds (a recording's jitter gives a few dozen lengths, a range query one)
and which lengths are gaps is decided at the end, exactly: memory is bounded by
keys times distinct lengths, not by time.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import UsageError, unknown_name
from ..formats.contract import encode
from ..formats.contract_decoder import owner_from_dict, recorded_text
from ..formats.dcgm import INT64_BLANK, WATTS
from ..formats.timestamps import iso_timestamp
from ..health.verdict import HealthThresholds
from ..model import OwnerKind, ProcessOwner, Reason, Snapshot
from ..ranges import within
from ..textsafe import escape_text, formula_safe

__all__ = [
    "DEFINITIONS",
    "DIMENSIONS",
    "FIGURES",
    "GAP_FACTOR",
    "MAX_GPU_WATTS",
    "SKIPPED_READINGS",
    "SORT_COLUMNS",
    "Holding",
    "Ledger",
    "Observation",
    "Report",
    "Row",
    "key_columns",
    "observations",
    "observations_from_record",
    "owner_key",
    "report_csv",
    "report_json",
    "sort_rows",
]

DIMENSIONS = ("user", "owner", "gpu", "host")
"""What ``--by`` groups by. ``gpu`` brings ``host`` with it: GPU 0 of two hosts are two GPUs."""

FIGURES = ("gpus", "held_gpu_hours", "busy_gpu_hours", "idle_held_gpu_hours", "energy_kwh", "peak_memory_bytes")
"""The figures of each row, in output order, under their CSV and JSON names."""

SORT_COLUMNS: dict[str, str] = {
    "held": "held_gpu_hours",
    "busy": "busy_gpu_hours",
    "idle": "idle_held_gpu_hours",
    "energy": "energy_kwh",
    "memory": "peak_memory_bytes",
    "gpus": "gpus",
}
"""``--sort`` names of the figures (their CSV names are accepted too); a key column sorts by its name."""

GAP_FACTOR = 3.0
"""An interval longer than this many times its GPU's median interval is a gap: not counted."""

MAX_GPU_WATTS = float(WATTS[1])
"""The most power one GPU is taken to draw (the range ``--remote`` reads power in: a superchip module
draws a few kW). A power reading above it, or an energy counter that grew faster over an interval,
is no reading: skipped and counted, never summed."""

SKIPPED_READINGS = ("energy_blank", "energy_reset", "energy_implausible", "power", "activity")
"""What :attr:`Report.skipped` counts, by these names (JSON's ``skipped_readings``):

- ``energy_blank``: an energy counter reading that is no value: DCGM's blank (``DCGM_INT64_BLANK``,
  9223372036854775792, and its kin above it), NVML's "not available" (2**64 - 1), or negative;
- ``energy_reset``: the counter went down (the driver reloaded): power x time counts for that interval;
- ``energy_implausible``: the counter grew by more than :data:`MAX_GPU_WATTS` over the interval (one of
  its two readings is wrong, which is not known): power x time counts for that interval and the next;
- ``power``: a power reading that is negative or above :data:`MAX_GPU_WATTS` (DCGM's blank for a
  power field, 2**47 W, among them);
- ``activity``: an SM activity or utilisation outside 0-100 %: unknown, so neither busy nor idle.
"""

UNKNOWN_USER = "?"
NO_OWNER = "-"

DEFINITIONS = """\
How each figure is computed:
  interval   the time between two observations of one GPU, described by the later one (its processes,
             its activity, the energy used since the earlier one). An interval longer than 3 x the GPU's
             median interval is a gap (nothing recorded or scraped then) and counts for nothing.
  held       GPU-hours during which at least one process of the key was on the GPU, summed over GPUs.
  busy       held GPU-hours times the GPU's activity: SM activity (GPM, Hopper and newer) where
             measured, else GPU utilisation. Unknown activity counts as 0.
  idle-held  held GPU-hours during which that activity was at most 1 % (the idle-held health rule's
             threshold): the GPU was held and did nothing.
  energy     the GPU's total-energy counter's growth (power x time where the counter is missing, no
             value, went down or grew faster than 20 kW), split between the keys on a shared GPU by
             their share of its processes' memory at the observation; kWh. Readings skipped are
             counted under the report.
  peak mem   the most GPU memory the key's processes held together on one GPU at one observation.
  GPUs       how many GPUs the key's processes were seen on.
  TOTAL      the same figures for all processes as one key: a shared GPU counts once, so the total
             can be less than the sum of the rows.
A process on a MIG device holds its whole GPU. The user is '?' where unknown; the owner is the
Kubernetes pod (namespace/pod), the Slurm job ('slurm JOB', its steps together) or the container
(docker, podman), and '-' for anything else."""


@dataclass(frozen=True, slots=True)
class Holding:
    """One process (or several of one user and owner) on a GPU at one observation: whose, and the memory used."""

    user: str | None
    owner: str  # :func:`owner_key`'s words
    memory_bytes: int | None
    processes: int = 1  # how many processes it stands for (a server's answer counts those of one owner together)


@dataclass(frozen=True, slots=True)
class Observation:
    """One GPU at one time: its activity and energy readings and the processes on it."""

    host: str
    gpu: int  # its index on its host
    uuid: str | None
    timestamp: float
    activity_percent: float | None  # SM activity (GPM) where measured, else GPU utilisation
    energy_mj: float | None  # the total-energy counter (mJ)
    power_w: float | None
    holdings: tuple[Holding, ...] = ()
    # Readings that were there but no value (DCGM's blank, NaN, past their range), by the name the report's
    # notes count them under: the model and the line reader refuse them before the ledger sees them.
    refused: tuple[str, ...] = ()


def _refused(energy: bool, power: bool, activity: bool) -> tuple[str, ...]:
    """The notes' names of the readings refused: ``energy_blank``, ``power``, ``activity``."""
    return tuple(name for name, bad in (("energy_blank", energy), ("power", power), ("activity", activity)) if bad)


def owner_key(owner: ProcessOwner | None) -> str:
    """The OWNER column of a report: the pod, the Slurm job (its steps together) or the container; else ``-``.

    Only what nvtopy's exporter carries as labels (``pod``, ``namespace``, ``slurm_job``,
    ``container``), so a report from recordings and one from Prometheus name owners alike.
    """
    if owner is None:
        return NO_OWNER
    kind = owner.kind
    if kind is OwnerKind.KUBERNETES:
        if owner.pod:
            return f"{owner.namespace}/{owner.pod}" if owner.namespace else owner.pod
        return "kubernetes"
    if kind is OwnerKind.SLURM:
        return f"slurm {owner.job}" if owner.job else "slurm"
    if kind in (OwnerKind.DOCKER, OwnerKind.PODMAN):
        return owner.container or (owner.container_id[:12] if owner.container_id else None) or kind.value
    return NO_OWNER


def observations(snapshot: Snapshot) -> Iterator[Observation]:
    """Each GPU of a recorded snapshot as an :class:`Observation`."""
    hostname = snapshot.host.hostname
    for gpu in snapshot.gpus:
        sample = gpu.sample
        activity = sample.sm_active_percent
        if activity is None:
            activity = sample.utilization_gpu_percent
        why = sample.unavailable
        yield Observation(
            host=gpu.static.host or hostname,
            gpu=gpu.static.host_index if gpu.static.host_index is not None else gpu.index,
            uuid=gpu.static.uuid,
            timestamp=snapshot.timestamp,
            activity_percent=activity,
            energy_mj=sample.energy_mj,
            power_w=sample.power_draw_w,
            holdings=tuple(Holding(p.user, owner_key(p.owner), p.gpu_memory_bytes) for p in gpu.processes),
            refused=_refused(
                why.get("energy_mj") is Reason.OUT_OF_RANGE,
                why.get("power_draw_w") is Reason.OUT_OF_RANGE,
                activity is None
                and Reason.OUT_OF_RANGE in (why.get("sm_active_percent"), why.get("utilization_gpu_percent")),
            ),
        )


_LIMIT = 2**64  # a figure beyond this (or not finite) is no reading, as nvtopy replay reads it


def _figure(value: Any, name: str) -> float | None:
    """A recorded figure: a number, or None (null, not finite, beyond 2**64, outside the field's range as
    :mod:`nvtopy.ranges` has it, as replay's model reads it); anything else is damage."""
    if value is None:
        return None
    kind = type(value)
    if kind is not int and kind is not float:
        raise TypeError(f"{name} is not a number")
    return value if -_LIMIT < value < _LIMIT and within(name, value) else None  # NaN and the infinities fail this


def _was_refused(gpu: dict[str, Any], name: str) -> bool:
    """Whether a recorded GPU's ``name`` was there but no value: written out of range, or written as a figure
    the line reader refuses (as replay's model would refuse it)."""
    if gpu.get(name) is not None:
        return True  # called only where the figure was refused
    unavailable = gpu.get("unavailable")
    return type(unavailable) is dict and unavailable.get(name) == Reason.OUT_OF_RANGE.value


def observations_from_record(data: Any) -> list[Observation]:
    """The observations of one recorded snapshot (a line of ``nvtopy record``, parsed as JSON), read directly.

    The same as ``observations(snapshot_from_dict(data))`` (a test holds them equal) for
    a valid line, but reading only the dozen values accounting needs: a day's recording
    is read several times faster than by rebuilding each snapshot whole (health, NVLinks,
    MIG...). Every string is unescaped as the writers escaped it; a figure that is not
    finite or beyond 2**64 is missing. Raises KeyError, TypeError or ValueError for a
    line that is no snapshot.
    """
    if type(data) is not dict:
        raise TypeError("not an object")
    stamp = data["timestamp"]
    if type(stamp) is not str:
        raise TypeError("timestamp is not text")
    timestamp = datetime.fromisoformat(stamp[:64]).timestamp()
    if not math.isfinite(timestamp):
        raise ValueError("timestamp is not a time")
    hostname = recorded_text(data["hostname"], "hostname")
    if hostname is None:
        raise TypeError("hostname is not text")
    gpus = data["gpus"]
    if type(gpus) is not list:
        raise TypeError("gpus is not a list")
    out = []
    for gpu in gpus:
        if type(gpu) is not dict:
            raise TypeError("a GPU is not an object")
        index = gpu["index"]
        if type(index) is not int or not 0 <= index < 4096:
            raise ValueError("index is not a GPU index")
        host_index = gpu.get("host_index")
        if host_index is not None and (type(host_index) is not int or not -_LIMIT < host_index < _LIMIT):
            raise TypeError("host_index is not a whole number")
        activity = _figure(gpu.get("sm_active_percent"), "sm_active_percent")
        utilization = _figure(gpu.get("utilization_gpu_percent"), "utilization_gpu_percent")
        energy = _figure(gpu.get("energy_mj"), "energy_mj")
        power = _figure(gpu.get("power_draw_w"), "power_draw_w")
        listed = gpu.get("processes") or ()
        if type(listed) is not list and listed != ():
            raise TypeError("processes is not a list")
        holdings = []
        for process in listed:
            if type(process) is not dict:
                raise TypeError("a process is not an object")
            memory = _figure(process.get("gpu_memory_bytes"), "gpu_memory_bytes")
            holdings.append(
                Holding(
                    recorded_text(process.get("user"), "user"),
                    owner_key(owner_from_dict(process.get("owner"))),
                    None if memory is None else int(memory),
                )
            )
        out.append(
            Observation(
                host=recorded_text(gpu.get("host"), "host") or hostname,
                gpu=host_index if host_index is not None else index,
                uuid=recorded_text(gpu.get("uuid"), "uuid"),
                timestamp=timestamp,
                activity_percent=activity if activity is not None else utilization,
                energy_mj=energy,
                power_w=power,
                holdings=tuple(holdings),
                refused=_refused(
                    energy is None and _was_refused(gpu, "energy_mj"),
                    power is None and _was_refused(gpu, "power_draw_w"),
                    activity is None
                    and utilization is None
                    and (_was_refused(gpu, "sm_active_percent") or _was_refused(gpu, "utilization_gpu_percent")),
                ),
            )
        )
    return out


def key_columns(by: Iterable[str]) -> tuple[str, ...]:
    """The key columns of a report grouped ``by`` these dimensions, in the order given (``gpu``: ``host, gpu``).

    Raises :class:`~nvtopy.errors.UsageError` for an unknown dimension, or none.
    """
    columns: list[str] = []
    for name in by:
        if name not in DIMENSIONS:
            raise unknown_name("--by", "key", name, DIMENSIONS)
        for column in ("host", "gpu") if name == "gpu" else (name,):
            if column not in columns:
                columns.append(column)
    if not columns:
        raise UsageError(f"--by: no key given (known: {', '.join(DIMENSIONS)})")
    return tuple(columns)


Key = tuple[Any, ...]
_TOTAL: Key = ()  # every process as one key: the totals row


@dataclass(frozen=True, slots=True)
class Row:
    """One key's figures. Hours are GPU-hours; ``None``: not known (no energy reading at all)."""

    key: Key  # values of the report's key columns (text; the GPU index is an int)
    gpus: int
    held_gpu_hours: float
    busy_gpu_hours: float
    idle_held_gpu_hours: float
    energy_kwh: float | None
    peak_memory_bytes: int | None

    def figure(self, name: str) -> Any:
        return getattr(self, name)


@dataclass(frozen=True, slots=True)
class Report:
    """What a ledger found: a row per key, the total, and what was read."""

    columns: tuple[str, ...]  # the key columns
    rows: tuple[Row, ...]
    total: Row
    start: float | None  # the first and last observation counted (Unix time); None: none
    end: float | None
    observations: int
    gpus: int  # GPUs observed at all
    gaps: int  # intervals left out as gaps
    gap_gpu_hours: float
    out_of_order: int  # observations older than one already read of their GPU (overlapping inputs): skipped
    notes: tuple[str, ...] = field(default=())  # sentences about the input, added by the source
    skipped: tuple[tuple[str, int], ...] = ()  # readings skipped, by :data:`SKIPPED_READINGS` name (none: left out)


# Per key per interval length: held s, busy s, idle s, energy J, energy known (1/0).
_HELD, _BUSY, _IDLE, _ENERGY, _ENERGY_KNOWN = range(5)


class _GpuBook:
    """One GPU's sums, by interval length (ms), until the median is known."""

    __slots__ = ("energy_mj", "lengths", "peaks", "power_w", "seen", "sums", "timestamp")

    def __init__(self) -> None:
        self.timestamp: float | None = None
        self.energy_mj: float | None = None
        self.power_w: float | None = None
        self.lengths: dict[int, int] = {}  # interval length (ms) -> intervals of that length
        self.sums: dict[int, dict[Key, list[float]]] = {}  # length -> key -> the sums above
        self.peaks: dict[Key, int] = {}
        self.seen: set[Key] = set()

    def max_gap_ms(self) -> float:
        """The longest interval that is no gap: :data:`GAP_FACTOR` times the median (lower median)."""
        total = sum(self.lengths.values())
        if not total:
            return math.inf
        middle = (total + 1) // 2
        running = 0
        for length in sorted(self.lengths):
            running += self.lengths[length]
            if running >= middle:
                return GAP_FACTOR * max(length, 1)
        raise AssertionError("unreachable")


class Ledger:
    """Sums observations into per-key figures (see the module docstring for each definition).

    Feed it with :meth:`add` (or :meth:`add_snapshot`) in time order per GPU; an
    observation older than the last one of its GPU is skipped and counted.
    """

    def __init__(self, by: Sequence[str], *, idle_percent: float | None = None) -> None:
        self.columns = key_columns(by)
        self.idle_percent = HealthThresholds().idle_sm_percent if idle_percent is None else idle_percent
        self._books: dict[tuple[str, str], _GpuBook] = {}
        self._observations = 0
        self._out_of_order = 0
        self._start: float | None = None
        self._end: float | None = None
        self._key = _key_maker(self.columns)
        self._skipped: dict[str, int] = {}

    def add_snapshot(self, snapshot: Snapshot) -> None:
        for observation in observations(snapshot):
            self.add(observation)

    def add(self, observation: Observation) -> None:
        """Fold in one observation: the interval since its GPU's previous one, and its peaks."""
        ident = (observation.host, observation.uuid or f"#{observation.gpu}")
        book = self._books.get(ident)
        if book is None:
            book = self._books[ident] = _GpuBook()
        now = observation.timestamp
        if book.timestamp is not None and now <= book.timestamp:
            self._out_of_order += 1
            return
        self._observations += 1
        for name in observation.refused:
            self._skip(name)
        if self._start is None or now < self._start:
            self._start = now
        if self._end is None or now > self._end:
            self._end = now
        # Who holds the GPU now, with how much memory.
        memory: dict[Key, int | None] = {}
        processes: dict[Key, int] = {}
        known_total = 0
        key_of = self._key
        for holding in observation.holdings:
            key = key_of(observation, holding)
            processes[key] = processes.get(key, 0) + holding.processes
            used = holding.memory_bytes
            if used is not None and used >= 0:  # a negative figure (a damaged input) is no reading
                known_total += used
                memory[key] = (memory.get(key) or 0) + used
            else:
                memory.setdefault(key, None)
        if observation.holdings:
            known = any(h.memory_bytes is not None and h.memory_bytes >= 0 for h in observation.holdings)
            memory[_TOTAL] = known_total if known else None
            processes[_TOTAL] = sum(h.processes for h in observation.holdings)
        for key, used in memory.items():
            book.seen.add(key)
            if used is not None and used > book.peaks.get(key, -1):
                book.peaks[key] = used
        previous = book.timestamp
        counter = self._reading(observation.energy_mj, 0.0, INT64_BLANK - 1, "energy_blank")
        power = self._reading(observation.power_w, 0.0, MAX_GPU_WATTS, "power")
        activity = self._reading(observation.activity_percent, 0.0, 100.0, "activity")
        if previous is None:
            book.timestamp, book.energy_mj, book.power_w = now, counter, power
            return
        seconds = now - previous
        energy = self._energy(book, counter, power, seconds)
        book.timestamp, book.power_w = now, power
        length = round(seconds * 1000)
        book.lengths[length] = book.lengths.get(length, 0) + 1
        if not processes:
            return
        busy = seconds * activity / 100 if activity is not None else 0.0
        idle = seconds if activity is not None and activity <= self.idle_percent else 0.0
        count = max(1, processes[_TOTAL])
        sums = book.sums.setdefault(length, {})
        for key, number in processes.items():
            row = sums.get(key)
            if row is None:
                row = sums[key] = [0.0, 0.0, 0.0, 0.0, 0.0]
            row[_HELD] += seconds
            row[_BUSY] += busy
            row[_IDLE] += idle
            if energy is not None:
                used = memory[key]
                if key == _TOTAL:
                    share = 1.0
                elif known_total > 0:
                    share = (used or 0) / known_total
                else:
                    share = number / count
                row[_ENERGY] += energy * share
                row[_ENERGY_KNOWN] = 1.0

    def _reading(self, value: float | None, low: float, high: float, name: str) -> float | None:
        """``value`` when it is a reading (from ``low`` to ``high``); else None, counted under ``name``.

        Why here, for both sources: a recording and a Prometheus server carry whatever the
        driver, DCGM or a damaged file gave (DCGM's blank, NaN, a negative figure), and one
        such value summed is the whole report (2.56 billion kWh from one blank).
        """
        if value is None:
            return None
        if low <= value <= high:  # NaN fails this too
            return value
        self._skip(name)
        return None

    def _skip(self, name: str) -> None:
        self._skipped[name] = self._skipped.get(name, 0) + 1

    def _energy(self, book: _GpuBook, counter: float | None, power: float | None, seconds: float) -> float | None:
        """Joules the GPU used over the ``seconds`` since its previous observation: the counter's growth,
        else power x time (the mean of both ends' power); None when neither is known.

        Keeps the counter's reading as the next interval's start, except after an increment no
        GPU could draw: which of its two readings is wrong is not known, so neither is trusted
        (that interval and the next count power x time).
        """
        before, book.energy_mj = book.energy_mj, counter
        if before is not None and counter is not None:
            grown = counter - before
            if grown < 0:
                self._skip("energy_reset")
            elif grown > MAX_GPU_WATTS * 1000 * seconds:
                self._skip("energy_implausible")
                book.energy_mj = None
            else:
                return grown / 1000
        powers = [p for p in (book.power_w, power) if p is not None]
        if not powers:
            return None
        return sum(powers) / len(powers) * seconds

    def report(self, notes: Sequence[str] = ()) -> Report:
        """The figures so far: a row per key seen, and the total."""
        figures: dict[Key, list[float]] = {}
        peaks: dict[Key, int] = {}
        gpus: dict[Key, int] = {}
        gaps = 0
        gap_seconds = 0.0
        for book in self._books.values():
            limit = book.max_gap_ms()
            for length, count in book.lengths.items():
                if length > limit:
                    gaps += count
                    gap_seconds += count * length / 1000
            for length, sums in book.sums.items():
                if length > limit:
                    continue
                for key, values in sums.items():
                    total = figures.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
                    for i, value in enumerate(values):
                        total[i] = max(total[i], value) if i == _ENERGY_KNOWN else total[i] + value
            for key, peak in book.peaks.items():
                peaks[key] = max(peaks.get(key, 0), peak)
            for key in book.seen:
                gpus[key] = gpus.get(key, 0) + 1

        def row(key: Key) -> Row:
            values = figures.get(key, [0.0, 0.0, 0.0, 0.0, 0.0])
            return Row(
                key=key,
                gpus=gpus.get(key, 0),
                held_gpu_hours=values[_HELD] / 3600,
                busy_gpu_hours=values[_BUSY] / 3600,
                idle_held_gpu_hours=values[_IDLE] / 3600,
                energy_kwh=values[_ENERGY] / 3.6e6 if values[_ENERGY_KNOWN] else None,
                peak_memory_bytes=peaks.get(key),
            )

        keys = sorted((k for k in gpus if k != _TOTAL), key=_key_order)
        return Report(
            columns=self.columns,
            rows=tuple(row(k) for k in keys),
            total=row(_TOTAL),
            start=self._start,
            end=self._end,
            observations=self._observations,
            gpus=len(self._books),
            gaps=gaps,
            gap_gpu_hours=gap_seconds / 3600,
            out_of_order=self._out_of_order,
            notes=tuple(notes),
            skipped=tuple((name, self._skipped[name]) for name in SKIPPED_READINGS if name in self._skipped),
        )


_KEY_PARTS: dict[str, Callable[[Observation, Holding], Any]] = {
    "user": lambda observation, holding: holding.user or UNKNOWN_USER,
    "owner": lambda observation, holding: holding.owner or NO_OWNER,
    "host": lambda observation, holding: observation.host,
    "gpu": lambda observation, holding: observation.gpu,
}


def _key_maker(columns: Sequence[str]) -> Callable[[Observation, Holding], Key]:
    """The function giving a holding's key (its values of ``columns``): built once, called per process."""
    parts = tuple(_KEY_PARTS[c] for c in columns)
    if len(parts) == 1:
        (part,) = parts
        return lambda observation, holding: (part(observation, holding),)
    return lambda observation, holding: tuple(part(observation, holding) for part in parts)


def _key_order(key: Key) -> tuple[Any, ...]:
    return tuple((0, v, "") if isinstance(v, int) else (1, 0, str(v)) for v in key)


def sort_column(name: str, columns: Sequence[str]) -> str:
    """What ``--sort NAME`` sorts by: a key column, or a figure (short or CSV name); else a one-line error."""
    if name in columns:
        return name
    if name in SORT_COLUMNS:
        return SORT_COLUMNS[name]
    if name in FIGURES:
        return name
    raise unknown_name("--sort", "column", name, [*columns, *SORT_COLUMNS])


def sort_rows(report: Report, name: str, *, reverse: bool = False) -> tuple[Row, ...]:
    """The rows sorted by ``name`` (:func:`sort_column`): figures largest first, keys A to Z; ``reverse`` flips.

    Ties keep the key order. An unknown figure (no energy reading) sorts after every known one.
    """
    column = sort_column(name, report.columns)
    rows = sorted(report.rows, key=lambda r: _key_order(r.key))
    if column in report.columns:
        at = report.columns.index(column)
        return tuple(sorted(rows, key=lambda r: _key_order((r.key[at],)), reverse=reverse))
    known = [r for r in rows if r.figure(column) is not None]
    unknown = [r for r in rows if r.figure(column) is None]
    known.sort(key=lambda r: r.figure(column), reverse=not reverse)
    return tuple(known + unknown)


# ----------------------------------------------------------------- CSV and JSON


def _text_cell(value: str) -> str:
    """Outside text (a user, an owner, a host) for a CSV cell: escaped as every nvtopy file is
    (:func:`~nvtopy.textsafe.escape_text`), and never read as a formula by a spreadsheet
    (:func:`~nvtopy.textsafe.formula_safe`). The lone ``-`` (no owner) is left as it is: it is
    ours, and no formula.
    """
    text = escape_text(value) or ""
    return text if text == NO_OWNER else formula_safe(text)


def _number(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def row_dict(report: Report, row: Row, text: Callable[[str], str | None] = escape_text) -> dict[str, Any]:
    """A row under the CSV and JSON names: key columns (outside text, through ``text``), then the figures."""
    data: dict[str, Any] = {}
    for column, value in zip(report.columns, row.key or (None,) * len(report.columns), strict=True):
        data[column] = value if column == "gpu" or value is None else text(value)
    data["gpus"] = row.gpus
    data["held_gpu_hours"] = _number(row.held_gpu_hours)
    data["busy_gpu_hours"] = _number(row.busy_gpu_hours)
    data["idle_held_gpu_hours"] = _number(row.idle_held_gpu_hours)
    data["energy_kwh"] = _number(row.energy_kwh)
    data["peak_memory_bytes"] = row.peak_memory_bytes
    return data


def report_json(report: Report, rows: Sequence[Row], source: dict[str, Any]) -> str:
    """The report as one JSON document (the JSON contract's encoder; every outside string escaped).

    ``source`` says where the observations came from (``{"files": [...]}`` or
    ``{"prometheus": URL, ...}``); its strings are escaped here.
    """
    data = {
        "report_version": 1,
        "by": list(report.columns),
        "source": {k: _escaped(v) for k, v in source.items()},
        "start": None if report.start is None else iso_timestamp(report.start),
        "end": None if report.end is None else iso_timestamp(report.end),
        "observations": report.observations,
        "gpus_observed": report.gpus,
        "gaps": report.gaps,
        "gap_gpu_hours": _number(report.gap_gpu_hours),
        "out_of_order": report.out_of_order,
        "skipped_readings": dict(report.skipped),
        "notes": [escape_text(n) for n in report.notes],
        "rows": [row_dict(report, r) for r in rows],
        "total": {k: v for k, v in row_dict(report, report.total).items() if k not in report.columns},
    }
    return encode(data, indent=2)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    return value


def report_csv(report: Report, rows: Sequence[Row]) -> str:
    """The report as CSV: a header, a row per key, then the total, whose key cells are empty.

    Why empty: a real key never is (an unknown user is ``?``, no owner ``-``), so a
    reader tells the total from a user who calls themselves "TOTAL".
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*report.columns, *FIGURES])

    def cells(data: dict[str, Any]) -> list[str]:
        out = []
        for name in (*report.columns, *FIGURES):
            value = data.get(name)
            if value is None:
                out.append("")
            elif isinstance(value, float):
                out.append(f"{value:.6f}".rstrip("0").rstrip(".") if value else "0")
            else:
                out.append(str(value))
        return out

    for row in rows:
        writer.writerow(cells(row_dict(report, row, _text_cell)))
    writer.writerow(cells(row_dict(report, report.total)))  # the total's key: () -> empty cells
    return buffer.getvalue()

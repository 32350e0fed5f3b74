"""``nvtopy report --prometheus URL``: the accounting figures from a Prometheus server's history.

First what the server holds of the period (:func:`data_span`: one or two small range
queries counting the busiest GPU series' samples): where its data starts and how often
it is scraped, which give the step (:func:`step_for`) and, for a server younger than
the period, where the queries start. Then six range queries, whatever the size of the
fleet (one per metric group, each answering for every host at once), over
``[end - since, end]`` at one ``step``:

- which processes exist: ``count by (GPU, user, owner labels) (last_over_time(nvtopy_process_X[step])
  or ...)`` over a few of nvtopy's ``nvtopy_process_*`` series (any one of them may be N/A): per GPU,
  user and owner, how many processes it has (one series for all processes of one owner on a GPU:
  what the figures need, and a smaller answer than one series per process);
- their GPU memory: ``sum by (the same) (last_over_time(nvtopy_process_gpu_memory_bytes[step]))``;
- per GPU, dcgm-exporter's (and nvtopy's) SM activity, utilisation and power averaged over each
  step (``avg_over_time(...[step])``: NVML's own utilisation is an average over the past too),
  and the total-energy counter (``last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[step])``, mJ).

Every naming of dcgm-exporter, host by host: each GPU query is the legacy series ``or`` its 4.9
name (:mod:`nvtopy.formats.dcgm_naming`) brought back to the legacy unit in PromQL, e.g.
``avg_over_time(DCGM_FI_DEV_GPU_UTIL[w]) or (avg_over_time(DCGM_FI_DEV_GPU_UTIL_RATIO[w]) * 100)``
and the energy in J ``* 1000``; a series' host is its ``hostname`` or ``Hostname`` label (4.8.3
renamed it), its UUID ``UUID`` or ``uuid``. The processes are grouped by both host spellings.

Whole GPUs only (``GPU_I_ID=""``: a MIG instance's series are not the GPU's). The
answers are turned into the same :class:`~nvtopy.accounting.ledger.Observation`
a recording gives, one per GPU per step, and summed by the same
:class:`~nvtopy.accounting.ledger.Ledger`: the figures mean exactly what they
mean for recordings. A host that stopped reporting has no points for those steps:
a gap, not counted (staleness does this on the server, ``[step]`` windows bound the look-back).

Everything in an answer is outside text and outside numbers: labels are cut and
unescaped as nvtopy's exporter escaped them, values out of range or not finite
are missing, and the series read are bounded (:data:`MAX_SERIES` per query).
The server is reached only through the client given (``PrometheusClient``), whose
every request has a deadline.
"""

from __future__ import annotations

import itertools
import math
import statistics
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ...accounting.ledger import Holding, Ledger, Observation, Report, owner_key
from ...errors import UsageError
from ...formats.dcgm_naming import HOST_LABELS, NAMING_4_9, READ_ALIASES, UUID_LABELS
from ...formats.prometheus.parse import MAX_GPU_INDEX, owner_from_labels, scraped_label, scraped_spelling
from ...formats.prometheus.series import OWNER_LABELS
from .prometheus import parse_matchers

__all__ = [
    "MAX_POINTS",
    "MAX_SERIES",
    "DataSpan",
    "RangeClient",
    "account",
    "check_points",
    "data_span",
    "default_step",
    "queries",
    "step_for",
    "where_text",
]

MAX_POINTS = 11_000
"""Points a range query may ask per series: Prometheus refuses more (its own limit)."""

MAX_SERIES = 200_000
"""Series read per query; more are left out (and said so): an answer that large is a broken server."""

MIN_STEP = 15.0
"""Prometheus' usual scrape interval: the window of the first look at a period of up to 6 h (a tenth of one
under 150 s; :func:`data_span`), and the step where the scrape interval is not known."""

GROUP_LABELS = ", ".join((*HOST_LABELS, "instance", "gpu", "UUID", "user", *OWNER_LABELS))
"""What the process queries keep of a process's labels: its host (either spelling), GPU, user and owner (all any key
needs)."""

PROCESS_SERIES = ("gpu_memory_bytes", "start_time_seconds", "cpu_percent", "sm_utilization_percent")
"""``nvtopy_process_*`` series whose presence shows a process: one is enough (each can be N/A)."""


class RangeClient(Protocol):
    """What is used of :class:`nvtopy.sources.remote.prometheus.PrometheusClient`."""

    queries: int

    warnings: list[str]

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]: ...


def where_text(text: str | None) -> str:
    """``--where``: PromQL label matchers (``Hostname=~"node[1-4]",job="gpu"``), parsed and written back quoted.

    Parsed (:func:`~nvtopy.sources.remote.prometheus.parse_matchers`), never pasted: they
    go inside each query's braces, where a ``}`` or an unclosed quote would change the
    query itself. ``""`` for none; a one-line usage error for what is not matchers.
    """
    if text is None:
        return ""
    return ", ".join(str(m) for m in parse_matchers(text))


def default_step(seconds: float) -> float:
    """About 1,440 points over the period (a minute per point for a day), at least :data:`MIN_STEP`: the first
    look at what a server holds. A report's step comes from what it found (:func:`step_for`)."""
    return max(MIN_STEP, float(math.ceil(seconds / 1440)))


def check_points(period: float, step: float) -> None:
    """A :class:`~nvtopy.errors.UsageError` when ``step`` gives more than :data:`MAX_POINTS` points over ``period``."""
    if period / step > MAX_POINTS:
        raise UsageError(
            f"--step {_duration(step)} gives more than {MAX_POINTS} points over the period "
            f"(Prometheus' limit): use --step {_duration(math.ceil(period / MAX_POINTS))} or more"
        )


def step_for(span: DataSpan, period: float) -> float:
    """The step of a report over ``period`` seconds: about 1,440 points over the data the server holds of it
    (a minute per point for a day), never shorter than its scrape interval (a shorter step only repeats points).

    Why from the data, not the period alone: a server scraping every second that has run for ten
    seconds holds no two points 15 s apart, and a day's step (60 s) on it finds nothing at all.
    """
    held = min(period, span.seconds)
    interval = span.interval or MIN_STEP
    floor = round(interval) if interval >= 1 else round(interval, 3)  # whole seconds: a scrape's jitter
    return float(max(floor, math.ceil(held / 1440), 0.001))


def queries(step: float, where: str = "") -> dict[str, str]:
    """The range queries, by what they read (``where``: label matchers as :func:`where_text` writes them)."""
    window = f"[{_duration(step)}]"
    extra = f",{where}" if where else ""
    gpu = f'{{GPU_I_ID=""{extra}}}'
    # One series per process and its GPU, user and owner: any of its series (or: the first that has it), counted
    # per GPU, user and owner (processes of one owner on one GPU are one series: a bounded answer).
    processes = " or ".join(f"last_over_time(nvtopy_process_{name}{{{where}}}{window})" for name in PROCESS_SERIES)
    return {
        "processes": f"count by ({GROUP_LABELS}) ({processes})",
        "memory": f"sum by ({GROUP_LABELS}) (last_over_time(nvtopy_process_gpu_memory_bytes{{{where}}}{window}))",
        "sm_active": _any_naming("avg_over_time", "DCGM_FI_PROF_SM_ACTIVE", f"{gpu}{window}"),
        "utilization": _any_naming("avg_over_time", "DCGM_FI_DEV_GPU_UTIL", f"{gpu}{window}"),
        "energy": _any_naming("last_over_time", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", f"{gpu}{window}"),
        "power": _any_naming("avg_over_time", "DCGM_FI_DEV_POWER_USAGE", f"{gpu}{window}"),
    }


def _any_naming(function: str, legacy: str, argument: str) -> str:
    """``function(legacy...)`` or the same of dcgm-exporter 4.9's name, in the legacy unit: one answer for a fleet of
    both (a GPU's series carry one of the names; their label sets differ, so ``or`` keeps each)."""
    new = NAMING_4_9.name(legacy)
    if new == legacy:
        return f"{function}({legacy}{argument})"
    factor = READ_ALIASES[new][1]
    renamed = f"{function}({new}{argument})" if factor == 1 else f"({function}({new}{argument}) * {factor:g})"
    return f"{function}({legacy}{argument}) or {renamed}"


def _duration(seconds: float) -> str:
    """A PromQL duration: whole milliseconds (``60s``, ``1500ms``)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


# ----------------------------------------------------------------- labels and values, trusting nothing


def _gpu_index(labels: dict[str, str]) -> int | None:
    text = labels.get("gpu")
    if not isinstance(text, str) or not text or len(text) > 4 or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= MAX_GPU_INDEX else None


def _gpu_ident(labels: dict[str, str]) -> tuple[str, str, int] | None:
    """(host, identity on the host, index) of a series' GPU: its UUID where given, else its index."""
    index = _gpu_index(labels)
    if index is None:
        return None
    host = scraped_spelling(labels, HOST_LABELS) or scraped_label(labels, "instance") or "?"
    uuid = scraped_spelling(labels, UUID_LABELS)
    return host, uuid or f"#{index}", index


_NUMBERS = frozenset((int, float))  # a value of another type (bool, text) from a fake or broken client: none


def _series_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A process series' identity: its labels without the metric name (the queries' answers differ in it)."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def _points(
    answer: Sequence[tuple[dict[str, str], Sequence[tuple[float, float]]]], name: str, notes: list[str]
) -> Sequence[tuple[dict[str, str], Sequence[tuple[float, float]]]]:
    if len(answer) > MAX_SERIES:
        notes.append(f"{name}: {len(answer) - MAX_SERIES} series beyond {MAX_SERIES} left out")
        return answer[:MAX_SERIES]
    return answer


# ----------------------------------------------------------------- what the server holds


PROBE_SERIES = tuple(
    name
    for legacy in (
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_PROF_SM_ACTIVE",
    )
    for name in dict.fromkeys((legacy, NAMING_4_9.name(legacy)))
)
"""Per-GPU series whose samples are counted to find the data's span and scrape interval: the first one a
GPU has (the others may be N/A on it: utilisation under MIG, SM activity before Hopper), each under its
legacy and its 4.9 name (a count has no unit)."""


@dataclass(frozen=True, slots=True)
class DataSpan:
    """What a server holds of a period: from when, until when, how many samples and how often (:func:`data_span`).

    From the busiest GPU series, window by window: ``earliest`` is the start of the first window with a
    sample, so the first sample is at most ``resolution`` later (never earlier: a range query from there
    misses nothing).
    """

    earliest: float  # no sample of the period before this
    last: float  # the end of the last window with a sample
    end: float  # the end of the period
    resolution: float  # the windows' length
    samples: int  # samples of the busiest GPU series, window by window, summed
    interval: float | None  # seconds between two samples (the scrape interval); None: a single sample

    @property
    def seconds(self) -> float:
        """How much of the period the data covers (up to its end), at most ``resolution`` too long."""
        return self.end - self.earliest


def data_span(client: RangeClient, *, start: float, end: float, where: str = "") -> DataSpan | None:
    """What the server holds of ``[start, end]`` (None: no GPU series at all), in one or two small range queries.

    Each asks, per window, how many samples the busiest GPU series has (``max(count_over_time(...))``:
    one series of at most 1,441 points, whatever the fleet). The first looks at the whole period; where
    the data is younger than the period (a server started ten seconds ago), the second looks at that
    data alone, windows of a second, to find where it starts and how often it is scraped.
    """
    resolution = min(default_step(end - start), max(1.0, (end - start) / 10))
    found = _sample_counts(client, start, end, resolution, where)
    if not found:
        return None
    if found[0][0] - resolution > start:  # younger than the period: a closer look at it
        closer = max(1.0, float(math.ceil((end - found[0][0] + resolution) / 1440)))
        if closer * 2 <= resolution:  # (a day's data in a week: the first look was close enough)
            closely = _sample_counts(client, found[0][0] - resolution, end, closer, where)
            if closely:
                found, resolution = closely, closer
    earliest = max(start, found[0][0] - resolution)
    return DataSpan(
        earliest=earliest,
        last=found[-1][0],
        end=end,
        resolution=resolution,
        samples=sum(count for _, count in found),
        interval=_scrape_interval(found, resolution),
    )


def _sample_counts(client: RangeClient, start: float, end: float, step: float, where: str) -> list[tuple[float, int]]:
    """The windows ``(t - step, t]`` of ``[start, end]`` holding samples, and how many the busiest GPU series has."""
    window = f"[{_duration(step)}]"
    selector = f'{{GPU_I_ID=""{f",{where}" if where else ""}}}'
    counted = " or ".join(f"count_over_time({name}{selector}{window})" for name in PROBE_SERIES)
    answer = client.query_range(f"max({counted})", start, end, step)
    limit = round((end - start) / step) + 1  # what a server honest about the query answers, at most
    found = []
    for _, series in answer[:1]:  # max(): one series without labels
        for timestamp, count in series[:limit]:
            if (
                type(timestamp) in _NUMBERS
                and type(count) in _NUMBERS
                and 1 <= count <= 1e9
                and start - step < timestamp <= end + step
            ):
                found.append((float(timestamp), int(count)))
    return sorted(found)


def _scrape_interval(found: Sequence[tuple[float, int]], resolution: float) -> float | None:
    """The seconds between two samples: the median over consecutive windows with samples of their distance
    divided by the later one's count (windows longer than the interval: its length / the samples in it;
    shorter: the distance between the windows that have one). None: a single sample."""
    guesses = [(t - before) / count for (before, _), (t, count) in itertools.pairwise(found)]
    if guesses:
        return statistics.median(guesses)
    ((_, count),) = found
    return resolution / count if count >= 2 else None


# ----------------------------------------------------------------- the report


class _Gpu:
    """One GPU's readings on the query's time grid (NaN: no point), and its processes per grid point."""

    __slots__ = ("energy", "index", "power", "processes", "sm", "utilization")

    def __init__(self, index: int, points: int) -> None:
        self.index = index
        empty = array("d", [math.nan]) * points
        self.sm = array("d", empty)
        self.utilization = array("d", empty)
        self.energy = array("d", empty)
        self.power = array("d", empty)
        self.processes: dict[int, list[Holding]] = {}


def account(
    client: RangeClient,
    *,
    by: Sequence[str],
    start: float,
    end: float,
    step: float,
    where: str = "",
    idle_percent: float | None = None,
) -> Report:
    """The report of ``[start, end]`` at ``step`` from the server ``client`` reaches (:data:`queries`).

    Each answer is folded into arrays on the time grid (8 bytes a point) and dropped
    before the next query: a day of a fleet of 512 GPUs is a few tens of megabytes
    here, not the hundreds its answers take as Python objects.

    Raises whatever the client raises (``PrometheusError``: one line) and
    :class:`~nvtopy.errors.UsageError` for a period of more than :data:`MAX_POINTS` steps.
    """
    check_points(end - start, step)
    ledger = Ledger(by, idle_percent=idle_percent)  # usage errors (--by) before any query
    asked = queries(step, where)
    notes: list[str] = []
    points = round((end - start) / step) + 1
    gpus: dict[tuple[str, str], _Gpu] = {}

    def gpu_of(labels: dict[str, str]) -> _Gpu | None:
        ident = _gpu_ident(labels)
        if ident is None:
            return None
        host, on_host, index = ident
        gpu = gpus.get((host, on_host))
        if gpu is None:
            gpu = gpus[(host, on_host)] = _Gpu(index, points)
        return gpu

    def slot(timestamp: object) -> int | None:
        """The grid point of a sample's time (a range query answers on the grid; anything else is ignored)."""
        if type(timestamp) not in _NUMBERS:
            return None
        at = (timestamp - start) / step  # type: ignore[operator]
        i = round(at)
        return i if 0 <= i < points and abs(at - i) < 1e-3 else None

    def ask(name: str) -> Sequence[tuple[dict[str, str], Sequence[tuple[float, float]]]]:
        answer = _points(client.query_range(asked[name], start, end, step), name, notes)
        # A partial answer (a shard or a remote-read source failed): said, not hidden.
        notes.extend(f"prometheus warned ({name}): {warning}" for warning in getattr(client, "warnings", ())[:3])
        return answer

    # Any number below 2**64 either way is kept (NaN and the infinities are no point): the ledger tells a
    # reading from DCGM's blank, a negative one or one no GPU gives, and counts in the report what it skips.
    readings: dict[str, tuple[Callable[[_Gpu], array[float]], float]] = {
        "sm_active": (lambda g: g.sm, 100.0),  # a ratio: as a percentage
        "utilization": (lambda g: g.utilization, 1.0),
        "energy": (lambda g: g.energy, 1.0),
        "power": (lambda g: g.power, 1.0),
    }
    for name, (field, scale) in readings.items():
        for labels, series in ask(name):
            gpu = gpu_of(labels)
            if gpu is None:
                continue
            values = field(gpu)
            for timestamp, value in series:  # a loop per point: inlined checks (a day of a fleet is millions)
                if type(value) in _NUMBERS and -(2**64) < value < 2**64 and type(timestamp) in _NUMBERS:
                    at = (timestamp - start) / step
                    point = round(at)
                    if 0 <= point < points and abs(at - point) < 1e-3:  # on the grid (a range query's points are)
                        values[point] = value * scale
    memory: dict[tuple[tuple[str, str], ...], dict[int, int]] = {}
    for labels, series in ask("memory"):
        used = memory[_series_key(labels)] = {}
        for timestamp, value in series:
            if type(value) in _NUMBERS and 0 <= value < 2**64:
                i = slot(timestamp)
                if i is not None:
                    used[i] = int(value)
    any_process = False
    for labels, series in ask("processes"):
        any_process = True
        gpu = gpu_of(labels)
        if gpu is None:
            continue
        user, owner = scraped_label(labels, "user"), owner_key(owner_from_labels(labels))
        used = memory.pop(_series_key(labels), {})
        made: dict[tuple[int | None, int], Holding] = {}  # one Holding per figure, not per point
        held = gpu.processes
        for timestamp, count in series:
            if type(count) not in _NUMBERS or not 1 <= count <= MAX_SERIES:
                continue
            i = slot(timestamp)
            if i is None:
                continue
            bytes_used = used.get(i)
            holding = made.get((bytes_used, int(count)))
            if holding is None:
                holding = made[(bytes_used, int(count))] = Holding(user, owner, bytes_used, int(count))
            entry = held.get(i)
            if entry is None:
                held[i] = [holding]
            else:
                entry.append(holding)
    memory.clear()
    nan = math.isnan
    observed = bool(gpus)
    while gpus:  # each GPU's arrays go once it is folded in
        (host, on_host), gpu = gpus.popitem()
        uuid = None if on_host.startswith("#") else on_host
        sm, utilization, energy, power, processes = gpu.sm, gpu.utilization, gpu.energy, gpu.power, gpu.processes
        for i in range(points):
            held_now = processes.get(i)
            if held_now is None and nan(sm[i]) and nan(utilization[i]) and nan(energy[i]) and nan(power[i]):
                continue  # no point at all: the GPU did not report then
            activity = sm[i] if not nan(sm[i]) else utilization[i]
            ledger.add(
                Observation(
                    host=host,
                    gpu=gpu.index,
                    uuid=uuid,
                    timestamp=start + i * step,
                    activity_percent=None if nan(activity) else activity,
                    energy_mj=None if nan(energy[i]) else energy[i],
                    power_w=None if nan(power[i]) else power[i],
                    holdings=tuple(held_now or ()),
                )
            )
    if observed and not any_process:
        notes.append(
            "no nvtopy_process_* series: dcgm-exporter reports no processes, so no GPU is held "
            "(run 'nvtopy exporter' on the nodes for per-user figures)"
        )
    return ledger.report(notes)

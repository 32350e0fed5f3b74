"""Flags that need time: idle-held processes, a suspected hang, counters that grow.

A GPU at "100 %" can be doing nothing useful, and a GPU at 0 % can be held by a
process that forgot it (a notebook kernel with 40 GiB allocated). Neither is
visible in one sample; both are in a few minutes of them. :class:`GpuWatch`
keeps, per GPU, just enough state to say so -- when each process started idling,
when the GPU started looking hung, recent readings of the PCIe replay counter
and NVLink error counters -- and is fed one snapshot's readings at a time by
the collector (so its memory is bounded by the processes alive and a few
counter readings, not by time).

Idle-held: a process holding at least ``idle_held_bytes`` whose SM use stays at
most ``idle_sm_percent`` for ``idle_held_seconds``. Per-process SM use is not
reported under MIG or on some boards: the GPU's utilisation stands in for it
then, and with neither nothing is flagged (unknown is not idle).

Suspected hang: GPU utilisation at least ``hang_utilization_percent`` while
almost nothing is computed, for ``hang_seconds`` -- what a collective
deadlocked in a spin-wait looks like (kernels "running", nothing computed).
"Almost nothing" is judged by the best evidence the sample has:

- SM activity, where GPM measures it (Hopper and newer): under
  ``hang_sm_active_percent`` of the SMs active. It is the direct measurement, so
  it wins over power: a GPU whose SMs are busy is not flagged even at low power
  (a memory-bound or small-batch job can draw little), and one whose SMs idle is
  flagged whatever it draws.
- Power, where SM activity is N/A (before Hopper, GPM not permitted, the first
  GPM interval not measured yet): under ``hang_power_share`` of the power limit.

A sample that can tell neither (utilisation N/A -- as under MIG --, or neither
SM activity nor power readable) keeps a running clock running and starts none.
Which evidence the finding rests on is the current sample's:
:func:`~nvtopy.health.verdict.assess` words it accordingly.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from ..model import GpuProcess, GpuSample, fast_replacer
from ..records import dataclass
from .verdict import HealthThresholds

__all__ = ["GpuWatch", "WatchResult", "looks_hung"]

IDLE_HELD = "idle-held"
SUSPECTED_HANG = "suspected-hang"
_COUNTER_READINGS = 1024  # per counter: changes within the window; a cap whatever the cadence


@dataclass(frozen=True, slots=True)
class WatchResult:
    """What one observation found: the rows with their flags, and the GPU-level facts for :func:`assess`."""

    rows: tuple[GpuProcess, ...]
    idle_held_bytes: int | None
    idle_held_processes: int
    suspected_hang_seconds: float | None
    replay_growth: int | None
    nvlink_error_growth: tuple[int, ...]


class GpuWatch:
    """One GPU's time-dependent health state. Not thread-safe: the collector's thread owns it."""

    __slots__ = ("_errors", "_hang_since", "_idle_since", "_last_links", "_replays", "thresholds")

    def __init__(self, thresholds: HealthThresholds | None = None) -> None:
        self.thresholds = thresholds or HealthThresholds()
        self._idle_since: dict[tuple[int, float | None], float] = {}
        self._hang_since: float | None = None
        self._replays: collections.deque[tuple[float, int]] = collections.deque(maxlen=_COUNTER_READINGS)
        self._errors: dict[int, collections.deque[tuple[float, int]]] = {}
        # The NVLink reading last folded in, and what it gave: the group is read every few seconds, and
        # between two reads the sample carries the same tuple (18 links a GPU are not walked again).
        self._last_links: tuple[object, tuple[int, ...]] | None = None

    def observe(self, sample: GpuSample, rows: Sequence[GpuProcess], now: float) -> WatchResult:
        """Fold in one sample and its process rows (taken at ``now``); flag what has lasted long enough."""
        limits = self.thresholds
        hang_seconds = self._hang(sample, now)
        flagged: list[GpuProcess] = []
        alive: set[tuple[int, float | None]] = set()
        held_bytes = 0
        held_count = 0
        for row in rows:
            key = (row.pid, row.create_time)
            alive.add(key)
            idle_for = self._idle(row, sample, key, now)
            flags: list[str] = []
            if idle_for is not None and idle_for >= limits.idle_held_seconds:
                flags.append(IDLE_HELD)
                held_bytes += row.gpu_memory_bytes or 0
                held_count += 1
            if hang_seconds is not None:
                flags.append(SUSPECTED_HANG)
            if flags or idle_for is not None:
                # dataclasses.replace(row, flags=..., idle_seconds=...) without reading out and checking all 31
                # fields again: only the two changed values are range-checked (row's own are in range already).
                row = fast_replacer(GpuProcess)(row, {"flags": tuple(flags), "idle_seconds": idle_for})
            flagged.append(row)
        for key in list(self._idle_since):
            if key not in alive:
                del self._idle_since[key]  # the process exited: forget it (bounded by the living)
        return WatchResult(
            rows=tuple(flagged),
            idle_held_bytes=held_bytes if held_count else None,
            idle_held_processes=held_count,
            suspected_hang_seconds=hang_seconds,
            replay_growth=self._replay_growth(sample, now),
            nvlink_error_growth=self._error_growth(sample, now),
        )

    def _idle(self, row: GpuProcess, sample: GpuSample, key: tuple[int, float | None], now: float) -> float | None:
        """Seconds this process has held memory at ~0 % SM (None: not idle, or cannot tell)."""
        limits = self.thresholds
        memory = row.gpu_memory_bytes
        activity = row.sm_percent if row.sm_percent is not None else sample.utilization_gpu_percent
        if memory is None or memory < limits.idle_held_bytes or activity is None or activity > limits.idle_sm_percent:
            self._idle_since.pop(key, None)
            return None
        since = self._idle_since.setdefault(key, now)
        return now - since

    def _hang(self, sample: GpuSample, now: float) -> float | None:
        """Seconds the GPU has looked busy computing nothing, once that has lasted ``hang_seconds``."""
        hung = looks_hung(sample, self.thresholds)
        if hung is None:
            if self._hang_since is None:  # unknown: keep the clock running (if it runs), never start it
                return None
        elif hung:
            if self._hang_since is None:
                self._hang_since = now
        else:
            self._hang_since = None
            return None
        lasted = now - self._hang_since
        return lasted if lasted >= self.thresholds.hang_seconds else None

    def _replay_growth(self, sample: GpuSample, now: float) -> int | None:
        return _growth(self._replays, sample.pcie_replay_counter, now, self.thresholds.counter_window_s)

    def _error_growth(self, sample: GpuSample, now: float) -> tuple[int, ...]:
        last = self._last_links
        if last is not None and last[0] is sample.nvlinks and sample.nvlinks:
            return last[1]
        grown = []
        for link in sample.nvlinks or ():
            readings = self._errors.setdefault(link.link, collections.deque(maxlen=_COUNTER_READINGS))
            if _growth(readings, link.errors, now, self.thresholds.counter_window_s):
                grown.append(link.link)
        self._last_links = (sample.nvlinks, tuple(grown))
        return self._last_links[1]


def looks_hung(sample: GpuSample, thresholds: HealthThresholds) -> bool | None:
    """Whether this one sample looks like a hang (busy, computing nothing); None: it cannot tell.

    SM activity decides where the sample has it; power only where it does not (see the module docstring).
    """
    util = sample.utilization_gpu_percent
    if util is None:
        return None
    busy = util >= thresholds.hang_utilization_percent
    sm = sample.sm_active_percent
    if sm is not None:
        return busy and sm < thresholds.hang_sm_active_percent
    power, cap = sample.power_draw_w, sample.power_limit_w
    if power is None or not cap:
        return None
    return busy and power < thresholds.hang_power_share * cap


def _growth(readings: collections.deque[tuple[float, int]], value: int | None, now: float, window: float) -> int | None:
    """How much a counter grew within the last ``window`` seconds; None when it cannot be read now.

    ``readings`` keeps the counter's changes (time, value) within the window plus
    the last one before it: the value at the window's start. A counter that went
    down (the driver reloaded) starts over.
    """
    if value is None:
        return None
    if readings and value < readings[-1][1]:
        readings.clear()
    if not readings or readings[-1][1] != value:
        readings.append((now, value))
    while len(readings) > 1 and readings[1][0] <= now - window:
        readings.popleft()
    return value - readings[0][1]

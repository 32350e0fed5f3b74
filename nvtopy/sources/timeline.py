"""A GPU's long history for the charts: min / mean / max per time bucket, at three resolutions.

Why buckets, not points: the charts zoom from a minute to a day. A day of
one-second points is 86,400 per metric per GPU; a chart 100 cells wide draws
200 braille dots. So each GPU keeps three tiers (:data:`TIERS`): 1-second
buckets for the last 10 minutes, 10-second buckets for the last hour and
1-minute buckets for the last 24 hours. Every sample goes into all three, and a
bucket keeps the lowest, mean and highest value of its samples: a one-second
spike still shows at the 24-hour zoom, as the top of its minute.

Memory is bounded and nothing is allocated ahead: a tier grows to its capacity
(plus :data:`SLACK` buckets, cut off in one go), then stays there. A bucket is
its number (8 bytes) and three 4-byte floats per metric (:data:`METRICS`, 8):
104 bytes. The most a live GPU holds is :func:`bound_bytes`, 286 kB; a full day
of samples measures about 273 kB (``tests/sources/test_timeline.py`` fills 24 hours with
tracemalloc watching). A replay keeps the whole recording instead
(``bounded=False``: the charts of any position of it are there at once), about
120 bytes per recorded second per GPU.

Threads: one thread appends (the poller's, the replay's index pass, the remote
scraper's), the UI thread reads. Both take the timeline's lock, held for a few
array writes or for copying the slices a chart asks for (C-level copies of at
most ~1,500 floats), so neither waits noticeably. Snapshots share the timeline
of their GPU instead of copying it: a view reads it *as of* the snapshot's time
(``end``), so an older snapshot still draws what it showed -- as long as its
window has not been dropped from the tiers.

Not the short history (:class:`nvtopy.history.SampleRing`, the last N samples as they came, for
the sparklines and the process screen): a sample here is folded into buckets, and a tier is bounded
by time, not by count -- what lets a chart zoom from a minute to a day in bounded memory.

Values are stored as float32: percentages, watts and bytes per second to 7
significant digits, more than a chart cell can show. A bucket where a metric
had no value (N/A, a lost GPU) holds NaN for it: a gap, never a zero.
"""

from __future__ import annotations

import math
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from ..model import GpuSample, GpuStatic, memory_used_percent_of

__all__ = [
    "METRICS",
    "SLACK",
    "TIERS",
    "WINDOWS",
    "Series",
    "Timeline",
    "bound_bytes",
    "metric_values",
]

METRICS: tuple[str, ...] = (
    "utilization",  # utilization_gpu_percent
    "memory",  # memory used, % of the total
    "power",  # power_draw_w
    "sm_active",  # GPM sm_active_percent (Hopper and newer)
    "pcie_rx",  # bytes/s: NVML's PCIe counter, else GPM's
    "pcie_tx",
    "nvlink_rx",  # bytes/s, all links
    "nvlink_tx",
)
_INDEX = {name: i for i, name in enumerate(METRICS)}

TIERS: tuple[tuple[int, int], ...] = ((1, 600), (10, 360), (60, 1440))
"""(bucket seconds, buckets kept): 10 minutes at 1 s, 1 hour at 10 s, 24 hours at 1 min."""

WINDOWS: tuple[float, ...] = (60.0, 600.0, 3600.0, 86400.0)
"""The chart windows the monitor cycles through: 1 min, 10 min, 1 h, 24 h."""

SLACK = 32
"""Buckets a full tier may grow past its capacity before its oldest are cut in one go (amortised)."""

MAX_POINTS = 1500
"""A window is read from the finest tier that covers it in at most this many buckets."""

_NAN = float("nan")
_WIDTH = len(METRICS)

PENDING = 16
"""Samples of a tier's newest bucket that may wait before they are folded into it (see :class:`_Tier`)."""
_BUCKET_BYTES = 8 + 3 * 4 * len(METRICS)


_COLUMNS = 1 + 3 * len(METRICS)  # array objects per tier counted (a bound: a tier has 4 since they hold every metric)
_ARRAY_OVERHEAD = 64 + 8 * 8  # an array object, and the most room it reserves beyond 1/16 of its length


def bound_bytes(tiers: Sequence[tuple[int, int]] = TIERS) -> int:
    """The most a bounded timeline's buckets take: (capacity + slack + 1) buckets per tier, 104 bytes each,
    plus the room arrays reserve as they grow (1/16) and the array objects themselves."""
    buckets = sum(capacity + SLACK + 1 for _, capacity in tiers)
    return buckets * _BUCKET_BYTES * 17 // 16 + len(tiers) * _COLUMNS * _ARRAY_OVERHEAD


class Series(NamedTuple):
    """One metric over a window, from one tier, oldest first. A bucket starts at ``bucket * step`` seconds.

    Buckets without any sample are absent; a bucket with samples but none of this
    metric has NaN in ``lo``, ``mean`` and ``hi``.
    """

    step: float
    buckets: Sequence[int]
    lo: Sequence[float]
    mean: Sequence[float]
    hi: Sequence[float]


EMPTY_SERIES = Series(1.0, (), (), (), ())


def metric_values(static: GpuStatic, sample: GpuSample) -> tuple[float | None, ...]:
    """A sample's value of each of :data:`METRICS` (None: not read, not supported, or the GPU is lost)."""
    if sample.lost:
        return (None,) * len(METRICS)
    pcie_rx = sample.pcie_rx_bytes_per_s
    pcie_tx = sample.pcie_tx_bytes_per_s
    nvlink_rx = sample.nvlink_rx_bytes_per_s
    nvlink_tx = sample.nvlink_tx_bytes_per_s
    return (
        sample.utilization_gpu_percent,
        memory_used_percent_of(static, sample),
        sample.power_draw_w,
        sample.sm_active_percent,
        pcie_rx if pcie_rx is not None else sample.gpm_pcie_rx_bytes_per_s,
        pcie_tx if pcie_tx is not None else sample.gpm_pcie_tx_bytes_per_s,
        nvlink_rx if nvlink_rx is not None else sample.gpm_nvlink_rx_bytes_per_s,
        nvlink_tx if nvlink_tx is not None else sample.gpm_nvlink_tx_bytes_per_s,
    )


class _Tier:
    """Buckets of one size, oldest first: their numbers, and each metric's min / mean / max (float32).

    Why this layout: a sample costs a few C calls, not a Python step per metric and tier
    (a fleet of 4,096 GPUs records 4,096 samples a refresh). ``lo``, ``mean`` and ``hi``
    hold :data:`METRICS` values a bucket, bucket after bucket (a metric's column is an
    extended slice, copied in C). A sample that opens a bucket is written whole, one
    ``extend`` each -- at a sample a second, every sample of the 1-s tier. A sample that
    falls in the newest bucket (nine in ten of the 10-s tier's, 59 in 60 of the minute's)
    waits in ``pending`` and is folded into the bucket's lowest, mean and highest -- a
    metric at a time over all of them (``min``, ``max``, ``sum`` in C) -- when the bucket
    is read, when the next one opens, or when :data:`PENDING` samples wait (bounded memory).
    """

    __slots__ = ("buckets", "capacity", "counts", "hi", "lo", "mean", "opened", "pending", "step", "sums")

    def __init__(self, step: int, capacity: int | None) -> None:
        self.step = step
        self.capacity = capacity  # None: keep every bucket (a replay)
        self.buckets: array[int] = array("q")
        self.lo: array[float] = array("f")  # _WIDTH values a bucket, in METRICS order
        self.mean: array[float] = array("f")
        self.hi: array[float] = array("f")
        # The newest bucket's samples not folded in yet; the sample that opened it, until another one comes;
        # else the running sum and count per metric of those folded in.
        self.pending: list[Sequence[float]] = []
        self.opened: Sequence[float] | None = None
        self.sums: list[float] = [0.0] * _WIDTH
        self.counts: list[int] = [0] * _WIDTH

    def add(self, when: float, values: Sequence[float]) -> None:
        """Take in ``values``: one number a metric, NaN for none."""
        bucket = math.floor(when / self.step)
        buckets = self.buckets
        if buckets and bucket <= buckets[-1]:  # the same bucket, or the clock went back: folded into the newest
            pending = self.pending
            pending.append(values)
            if len(pending) >= PENDING:
                self.fold()
            return
        if self.pending:
            self.fold()
        buckets.append(bucket)
        # One sample: its bucket's lowest, mean and highest (NaN: none). Converted to float32 once: extend of a
        # tuple converts and grows item by item, a microsecond a column (1-s tier: 3.35 -> 1.30 us a sample).
        row = array("f", values)
        self.lo.extend(row)
        self.mean.extend(row)
        self.hi.extend(row)
        self.opened = values  # its running sums and counts are made when another sample comes
        if self.capacity is not None and len(buckets) > self.capacity + SLACK:
            self._cut(bucket - self.capacity)

    def fold(self) -> None:
        """The waiting samples into the newest bucket's lowest, mean and highest."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        if self.opened is not None:  # the bucket's first sample: folded in again with the others, from nothing
            pending.insert(0, self.opened)
            self.opened = None
            self.sums = [0.0] * _WIDTH
            self.counts = [0] * _WIDTH
        base = len(self.lo) - _WIDTH
        lo, mean, hi, sums, counts = self.lo, self.mean, self.hi, self.sums, self.counts
        for m, column in enumerate(zip(*pending, strict=True)):
            total = sum(column, sums[m])  # NaN when one value is NaN (sums never are): else every value was said
            if total == total:  # noqa: PLR0124 -- the common case: no value missing, nothing to filter
                said: Sequence[float] = column
            else:
                said = [value for value in column if value == value]  # noqa: PLR0124 -- NaN: no reading
                if not said:
                    continue
                total = sum(said, sums[m])
            at = base + m
            if counts[m]:
                lo[at] = min(lo[at], *said)
                hi[at] = max(hi[at], *said)
            else:
                lo[at] = min(said)
                hi[at] = max(said)
            sums[m] = total
            counts[m] += len(said)
            mean[at] = total / counts[m]

    def _cut(self, oldest: int) -> None:
        """Drop the buckets before ``oldest``."""
        cut = bisect_left(self.buckets, oldest)
        if cut:
            del self.buckets[:cut]
            for column in (self.lo, self.mean, self.hi):
                del column[: cut * _WIDTH]

    def covers(self, window: float) -> bool:
        return self.capacity is None or self.capacity * self.step >= window

    def read(self, metric: int, start: float, end: float) -> Series:
        if self.pending:
            self.fold()
        first = bisect_left(self.buckets, math.floor(start / self.step))
        last = bisect_right(self.buckets, math.floor(end / self.step))
        at, stop = first * _WIDTH + metric, last * _WIDTH
        return Series(
            float(self.step),
            self.buckets[first:last],
            self.lo[at:stop:_WIDTH],
            self.mean[at:stop:_WIDTH],
            self.hi[at:stop:_WIDTH],
        )

    def nbytes(self) -> int:
        return sum(sys.getsizeof(column) for column in (self.buckets, self.lo, self.mean, self.hi))


class Timeline:
    """One GPU's history at every tier. Thread-safe: one writer, any number of readers (see the module)."""

    __slots__ = ("_lock", "_tiers", "appended", "newest")

    def __init__(self, tiers: Sequence[tuple[int, int]] = TIERS, *, bounded: bool = True) -> None:
        """``bounded=False``: keep every bucket (a replay keeps its whole recording)."""
        self._lock = threading.Lock()
        self._tiers = tuple(_Tier(step, capacity if bounded else None) for step, capacity in tiers)
        self.appended = 0  # samples taken in: a view can tell new data from none
        self.newest: float | None = None  # the time of the newest sample

    def __repr__(self) -> str:  # a GpuState's repr names it; its contents would be thousands of numbers
        return f"Timeline({self.appended} samples)"

    def record(self, static: GpuStatic, sample: GpuSample) -> None:
        """Take in ``sample``'s values (:func:`metric_values`) at its time."""
        self.add(sample.timestamp, metric_values(static, sample))

    def add(self, when: float, values: Sequence[float | None]) -> None:
        """Take in one value per metric (in :data:`METRICS` order; None: none) at Unix time ``when``."""
        if not math.isfinite(when):
            return
        if type(values) is not tuple or len(values) != _WIDTH or None in values:  # once, not per tier
            given = [_NAN if value is None else value for value in values[:_WIDTH]]  # NaN: "no reading"
            values = (*given, *(_NAN,) * (_WIDTH - len(given)))
        with self._lock:
            for tier in self._tiers:
                tier.add(when, values)  # type: ignore[arg-type]
            self.appended += 1
            if self.newest is None or when > self.newest:
                self.newest = when

    def series(self, metric: str, window: float, end: float) -> Series:
        """``metric`` over the ``window`` seconds up to ``end`` (Unix time), from the finest tier that covers it.

        A tier covers a window when it keeps that long and gives at most
        :data:`MAX_POINTS` buckets for it: 1 min and 10 min come from the 1-s
        buckets, 1 h from the 10-s ones, 24 h from the minutes.
        """
        index = _INDEX[metric]
        with self._lock:
            tiers = self._tiers
            chosen = tiers[-1]
            for tier in tiers:
                if tier.covers(window) and window / tier.step <= MAX_POINTS:
                    chosen = tier
                    break
            return chosen.read(index, end - window, end)

    def nbytes(self) -> int:
        """Bytes the buckets take now: the arrays, with the room they reserved."""
        with self._lock:
            return sum(tier.nbytes() for tier in self._tiers)

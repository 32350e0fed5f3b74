"""Xid events within the verdict's window, counted whole in bounded memory, whatever their rate.

Why apart from the timeline: a GPU's timeline (``GpuHealth.events``) keeps its
last :data:`~nvtopy.model.EVENTS_PER_GPU` events for people to read. A verdict
taken from it forgot a reset-level Xid as soon as 64 minor ones followed it (a
storm of Xid 13 or 119 within minutes is common): FAIL dropped to WARN and an
alert on FAIL cleared itself; and a count taken from it stopped at 64 ("Xid 119
x6" while 1,635 had come). So every event is also counted here, per Xid, in
time buckets of a sixtieth of the window (a minute of the hour), with the
newest arrival of each Xid.

Bounds: the buckets of one window (61 at most, older ones are dropped as new
ones open), each counting at most :data:`~nvtopy.health.xid.MAX_XIDS_PER_GPU`
keys: about 1 MiB a GPU at the very worst (256 numbers every minute of the
hour), a few kB for a real storm (ten numbers). An Xid number past that many
distinct numbers within the window is counted with the others of its severity
(:attr:`XidCount.xid` None): a flood of made-up numbers can grow neither memory
nor the findings, and cannot push a FAIL-level Xid out of the verdict.

Precision: whether an Xid is within the window is exact (its newest arrival is
kept, so a FAIL lasts exactly ``xid_window_s`` after the last one); its count
has every event of the window and may have those of up to one bucket before it
(the oldest bucket is counted whole).

Not thread-safe: :class:`~nvtopy.sources.events.EventLog` holds its lock around it.
"""

from __future__ import annotations

import collections
import math
from typing import NamedTuple

from ..model import Severity
from .xid import MAX_XIDS_PER_GPU, describe_xid

__all__ = ["BUCKETS", "XID_WINDOW_S", "XidCount", "XidWindow"]

XID_WINDOW_S = 3600.0
"""How long an Xid weighs on the verdict after it arrived (``HealthThresholds.xid_window_s``)."""

BUCKETS = 60
"""Buckets per window: an hour is counted by the minute."""


class XidCount(NamedTuple):
    """One Xid's events within the window: how many, and when the newest arrived.

    ``xid`` None: the events of Xid numbers past the per-GPU cap of distinct numbers,
    of one ``severity``, together.
    """

    xid: int | None
    severity: Severity
    count: int  # type: ignore[assignment]  # a field named as the figure is; it shadows tuple.count, unused here
    newest: float  # Unix time


_Key = int | Severity  # an Xid number, or the severity its uncounted numbers are counted under


class XidWindow:
    """Per Xid, the events of the last ``window_s`` seconds and the newest arrival (see the module)."""

    __slots__ = ("_buckets", "_newest", "_step", "_totals", "window_s")

    def __init__(self, window_s: float = XID_WINDOW_S, buckets: int = BUCKETS) -> None:
        if not (math.isfinite(window_s) and window_s > 0 and buckets > 0):
            raise ValueError(f"an Xid window of {window_s} s in {buckets} buckets")
        self.window_s = window_s
        self._step = window_s / buckets
        # (bucket number, events per key), oldest first; bucket n holds [n * step, (n + 1) * step).
        self._buckets: collections.deque[tuple[int, dict[_Key, int]]] = collections.deque()
        self._newest: dict[_Key, float] = {}  # key -> its newest arrival
        # key -> its events in all the buckets kept: a read subtracts the few buckets that fell out of its
        # window instead of adding up all 61 (at 256 numbers a minute, 0.7 ms instead of 7 a GPU and snapshot).
        self._totals: dict[_Key, int] = {}

    def add(self, when: float, xid: int) -> None:
        """Count one Xid ``xid`` that arrived at Unix time ``when`` (a clock gone back folds into the newest bucket)."""
        if not math.isfinite(when):
            return
        newest = self._newest
        key: _Key = xid if xid in newest or len(newest) < MAX_XIDS_PER_GPU else describe_xid(xid).severity
        number = math.floor(when / self._step)
        buckets = self._buckets
        if not buckets or number > buckets[-1][0]:
            buckets.append((number, {}))
            self._forget(when)
        counts = buckets[-1][1]
        counts[key] = counts.get(key, 0) + 1
        self._totals[key] = self._totals.get(key, 0) + 1
        last = newest.get(key)
        if last is None or when > last:
            newest[key] = when

    def _forget(self, now: float) -> None:
        """Drop the buckets and the Xids that no window ending at ``now`` or later can reach."""
        since = now - self.window_s
        first = math.floor(since / self._step)
        buckets, totals = self._buckets, self._totals
        while buckets and buckets[0][0] < first:
            for key, count in buckets.popleft()[1].items():
                left = totals[key] - count
                if left:
                    totals[key] = left
                else:
                    del totals[key]
        newest = self._newest
        for key in [key for key, when in newest.items() if when < since]:
            del newest[key]

    def size(self) -> tuple[int, int]:
        """(buckets, counts) kept: what its memory grows with, bounded as the module says."""
        return len(self._buckets), sum(len(counts) for _, counts in self._buckets)

    def recent(self, now: float, window_s: float | None = None) -> tuple[XidCount, ...]:
        """The Xids that arrived within ``window_s`` (at most the window kept) before ``now``, newest first."""
        window = self.window_s if window_s is None else min(window_s, self.window_s)
        since = now - window
        first = math.floor(since / self._step)
        totals = dict(self._totals)
        for number, counts in self._buckets:  # oldest first: those before the window, usually none or one
            if number >= first:
                break
            for key, count in counts.items():
                totals[key] -= count
        found = []
        for key, count in totals.items():
            newest = self._newest.get(key)
            if newest is None or newest < since or not count:
                continue
            if isinstance(key, Severity):
                found.append(XidCount(None, key, count, newest))
            else:
                found.append(XidCount(key, describe_xid(key).severity, count, newest))
        found.sort(key=lambda entry: -entry.newest)
        return tuple(found)

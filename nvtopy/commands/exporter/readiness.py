"""Whether the exporter's figures are fresh: ``GET /health``'s answer and the ``nvtopy_exporter_ready`` gauge.

Why it is worked out from the published snapshots and not from the poller's thread:
a hung driver does not stop the poller. Each GPU is read on a thread of its own
(:class:`~nvtopy.sources.workers.GpuWorkers`), so the poller keeps publishing a
snapshot every interval, and a GPU whose call is stuck keeps its last values (its
sample's timestamp stays behind the snapshot's) and, after ``--timeout``, is marked
not responding. Measured on the fake driver (``FAKE_NVML_HANG='*:20@3'``, interval
0.5 s): snapshots kept coming every 0.5 s, every GPU stale from the hang on and
"not responding" 5 s later. So "a collection completed" here means: a snapshot was
published in which at least one GPU answered (its sample was read in that collection
and it is not marked not responding), or one with no GPU to read at all.

The answer: 503 until the first such collection, 200 while the last one is at most
:func:`stale_after` old (three intervals, at least :data:`STALE_FLOOR_S`, as
dcgm-exporter-lite does), 503 again past it (a hung driver: every GPU stuck).
Where some GPUs answer and others do not, the answer is 200 and the reason names
those that do not: the others' metrics are still good, and ``nvtopy_gpu_responding``
says which ones are not. Times are ``time.monotonic()`` at publication: a clock
step or a simulated backend's clock does not make figures look fresh or stale.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ...formats.prometheus.collect import SnapshotHolder
from ...interval import DEFAULT_INTERVAL, STALE_INTERVALS
from ...model import GpuState, Snapshot
from ...sources.base import SnapshotSource

__all__ = ["STALE_FLOOR_S", "Readiness", "Verdict", "stale_after"]

STALE_FLOOR_S = 10.0
"""...but never fewer seconds than this: a short interval must not turn one slow poll into a failed probe."""
MAX_NAMED = 8
"""GPUs named in a reason line; more are counted ("and 56 more"), so the line stays one short line."""


def stale_after(interval: float) -> float:
    """Seconds without a completed collection after which the exporter is not ready: max(3 intervals, 10 s).

    Three intervals: :data:`~nvtopy.interval.STALE_INTERVALS`, when the monitor calls a host's reading stale.
    """
    return max(STALE_INTERVALS * interval, STALE_FLOOR_S)


class Verdict(NamedTuple):
    """``/health``'s answer: ready (200) or not (503), and why, in one line of plain text."""

    ready: bool
    reason: str


class Readiness:
    """Follows a snapshot source's publications and says whether its figures are fresh.

    :meth:`observe` is the source's subscriber (the poller's thread); :meth:`verdict`
    and the figures are read from the server's threads. A source that does not publish
    (a test's holder of one snapshot) is caught up with at each question.
    """

    def __init__(
        self,
        source: SnapshotHolder,
        *,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``source``: anything with a ``latest`` snapshot (a Poller: subscribed to here).

        ``interval``: the collection interval (default: the source's, else 1 s).
        """
        self._source = source
        if interval is None:
            interval = source.interval if isinstance(source, SnapshotSource) else DEFAULT_INTERVAL
        self.stale_after = stale_after(interval)
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self._latest: Snapshot | None = None
        self._completed_at: float | None = None  # when the last completed collection was published
        self._answered_at: dict[int, float] = {}  # GPU index -> when a collection last had its answer
        self._marked: frozenset[int] = frozenset()  # GPUs the latest snapshot marks not responding
        self.collections = 0
        self.collection_seconds: float | None = None  # how long the latest collection took
        if isinstance(source, SnapshotSource):
            source.subscribe(self.observe)

    def observe(self, snapshot: Snapshot) -> None:
        """Take a published snapshot into account (once: a snapshot seen before changes nothing)."""
        with self._lock:
            self._observe(snapshot)

    def _observe(self, snapshot: Snapshot) -> None:
        if snapshot is self._latest:
            return
        now = self._clock()
        answered = [g.index for g in snapshot.gpus if _answered(g, snapshot)]
        for index in answered:
            self._answered_at[index] = now
        if answered or not snapshot.gpus:
            self._completed_at = now
        self._marked = frozenset(g.index for g in snapshot.gpus if not g.health.responding)
        self._latest = snapshot
        self.collections += 1
        self.collection_seconds = snapshot.collect_seconds

    def _catch_up(self) -> None:
        """Observe the source's latest snapshot if no publication brought it (the lock is held).

        Read under the lock, so it is never older than one a publication already brought.
        """
        latest: Snapshot | None = self._source.latest
        if latest is not None:
            self._observe(latest)

    def verdict(self) -> Verdict:
        """Ready or not, now, with the reason in one line."""
        with self._lock:
            self._catch_up()
            now = self._clock()
            silent = self._not_answering(now)
            if self._completed_at is None:
                since = now - self.started
                detail = f"; {_gpu_list(silent)} not responding" if silent else ""
                return Verdict(False, f"not ready: no collection completed yet (started {since:.1f} s ago{detail})")
            age = now - self._completed_at
            if age > self.stale_after:
                who = f": {_gpu_list(silent)} not responding" if silent else ""
                reason = f"not ready: no collection completed in {age:.0f} s (the driver does not answer{who})"
                return Verdict(False, reason)
            assert self._latest is not None
            count = len(self._latest.gpus)
            gpus = "no GPUs" if count == 0 else f"{count} GPU{'s' if count != 1 else ''}"
            reason = f"ok: {gpus}, last collection {age:.1f} s ago"
            if silent:
                longest = max(silent.values())
                reason += f"; not responding: {_gpu_list(silent)} (for up to {longest:.0f} s)"
            return Verdict(True, reason)

    def _not_answering(self, now: float) -> dict[int, float]:
        """GPU index -> seconds without an answer, for the GPUs of the latest snapshot that do not answer.

        Those it marks not responding, and those without an answer for longer than :attr:`stale_after`.
        """
        latest = self._latest
        if latest is None:
            return {}
        silent = {}
        for gpu in latest.gpus:
            answered = self._answered_at.get(gpu.index)
            seconds = now - (self.started if answered is None else answered)
            if gpu.index in self._marked or seconds > self.stale_after:
                silent[gpu.index] = seconds
        return silent

    def not_responding(self) -> int:
        """How many GPUs do not answer (those :meth:`verdict` names)."""
        with self._lock:
            self._catch_up()
            return len(self._not_answering(self._clock()))

    def completed_age(self) -> float | None:
        """Seconds since the last completed collection; None before the first."""
        with self._lock:
            self._catch_up()
            return None if self._completed_at is None else self._clock() - self._completed_at

    def families(self) -> list[Any]:
        """``nvtopy_exporter_ready``: 1 when :meth:`verdict` is ready, else 0; there before any collection too."""
        return _ready_families(self.verdict().ready)

    def text(self) -> bytes:
        """:meth:`families` as the text format: one of two texts, each made once (a scrape asks for it each time)."""
        return _ready_text(self.verdict().ready)


def _ready_families(ready: bool) -> list[Any]:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(
        "nvtopy_exporter_ready",
        "1 when a collection completed within the last few intervals (GET /health answers 200), else 0.",
    )
    family.add_metric([], 1.0 if ready else 0.0)
    return [family]


@functools.cache
def _ready_text(ready: bool) -> bytes:
    """prometheus-client's text of :func:`_ready_families` (``ready``: True or False, so two texts)."""
    from prometheus_client.exposition import generate_latest

    class Families:
        def collect(self) -> list[Any]:
            return _ready_families(ready)

    return generate_latest(Families())


def _answered(gpu: GpuState, snapshot: Snapshot) -> bool:
    """Whether ``gpu`` answered in the collection of ``snapshot``.

    A GPU whose read is still outstanding keeps its last sample (older than the
    snapshot); one that never answered gets a fresh placeholder marked not responding.
    """
    return gpu.health.responding and gpu.sample.timestamp >= snapshot.timestamp


def _gpu_list(seconds: dict[int, float]) -> str:
    """``GPU 1``, ``GPU 1, 3``, ``GPU 0, 1, ... 7 and 56 more``: the GPUs in ``seconds``, by index."""
    indices = sorted(seconds)
    named = ", ".join(str(i) for i in indices[:MAX_NAMED])
    more = f" and {len(indices) - MAX_NAMED} more" if len(indices) > MAX_NAMED else ""
    return f"GPU{'s' if len(indices) > 1 else ''} {named}{more}"

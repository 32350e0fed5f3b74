"""GPU events (Xid errors) on a thread of their own, kept as a bounded timeline per GPU.

Why a thread: NVML delivers events through a blocking wait
(``nvmlEventSetWait``), which must not hold up the poll, and polling for them
would cost CPU while nothing happens. :class:`EventWatcher` waits with a short
timeout (:data:`WAIT_S`), so it costs nothing while idle and notices a stop
within that time; it is a daemon and is never joined (a wait stuck in the
driver must not hold up quit). :class:`EventLog` is what it fills and what the
collector reads each snapshot: per GPU the last :data:`~nvtopy.model.EVENTS_PER_GPU`
events (the timeline people read), a count per Xid that only grows (the
exporter's ``nvtopy_xid_events_total``), and every Xid of the verdict's window
counted whole (:class:`~nvtopy.health.xid_window.XidWindow`): the verdict and
its counts come from what happened in the window, never from the bounded
timeline, which a storm of minor Xids turns over in seconds.

NVML reports only events that happen while a set is registered: the timeline
starts when nvtopy does (``--once`` has none; it says so).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backends.base import Backend, EventStream
from ..health.xid import MAX_XIDS_PER_GPU
from ..health.xid_window import XID_WINDOW_S, XidCount, XidWindow
from ..model import EVENTS_PER_GPU, GpuEvent

if TYPE_CHECKING:
    import logging

__all__ = ["WAIT_S", "EventLog", "EventWatcher"]

WAIT_S = 0.45
"""The longest one wait for events lasts: the watcher stops within this after :meth:`EventWatcher.stop`."""


def _logger() -> logging.Logger:
    """This module's logger, :mod:`logging` imported at the first failure: ``nvtopy --once`` never logs, and
    the import is 3 ms of its start."""
    import logging

    return logging.getLogger(__name__)


class EventLog:
    """Per-GPU bounded event timelines, whole counts per Xid, and the Xids of the verdict's window;
    safe to share between two threads."""

    def __init__(self, per_gpu: int = EVENTS_PER_GPU, *, window_s: float = XID_WINDOW_S) -> None:
        """``window_s``: how long an Xid weighs on the verdict (``HealthThresholds.xid_window_s``)."""
        self._lock = threading.Lock()
        self._per_gpu = max(1, per_gpu)
        self.window_s = window_s
        self._events: dict[int, collections.deque[GpuEvent]] = {}
        self._counts: dict[int, collections.Counter[int]] = {}
        self._recent: dict[int, XidWindow] = {}
        self.notes: dict[int | None, str] = {}
        self.watching = False  # True once a watcher has opened its stream

    def add(self, events: list[GpuEvent]) -> None:
        with self._lock:
            for event in events:
                index = event.gpu_index
                timeline = self._events.get(index)
                if timeline is None:
                    timeline = self._events[index] = collections.deque(maxlen=self._per_gpu)
                timeline.append(event)
                if event.xid is None:
                    continue
                counts = self._counts.setdefault(index, collections.Counter())
                if event.xid in counts or len(counts) < MAX_XIDS_PER_GPU:  # a flood of numbers stays bounded
                    counts[event.xid] += 1
                window = self._recent.get(index)
                if window is None:
                    window = self._recent[index] = XidWindow(self.window_s)
                window.add(event.timestamp, event.xid)

    def timeline(self, index: int) -> tuple[tuple[GpuEvent, ...], tuple[tuple[int, int], ...]]:
        """GPU ``index``'s events (oldest first) and its (xid, count) pairs (by xid)."""
        with self._lock:
            events = tuple(self._events.get(index, ()))
            counts = tuple(sorted(self._counts.get(index, {}).items()))
        return events, counts

    def read(
        self, index: int, now: float, window_s: float | None = None
    ) -> tuple[tuple[GpuEvent, ...], tuple[tuple[int, int], ...], tuple[XidCount, ...]]:
        """GPU ``index``'s :meth:`timeline` and its Xids within ``window_s`` (at most the log's window) before
        ``now``, each counted whole, newest first: read at once, so the counts since the start and those of
        the window agree."""
        with self._lock:
            window = self._recent.get(index)
            recent = () if window is None else window.recent(now, window_s)
            return tuple(self._events.get(index, ())), tuple(sorted(self._counts.get(index, {}).items())), recent

    def note(self, index: int) -> str | None:
        """Why GPU ``index``'s events are not watched (None: they are)."""
        if not self.watching:
            return self.notes.get(None, "Xid events are watched only while nvtopy runs (monitor, log, exporter)")
        return self.notes.get(index, self.notes.get(None))


class EventWatcher:
    """A daemon thread that opens a backend's event stream and fills an :class:`EventLog`."""

    def __init__(self, backend: Backend | Callable[[], Backend | None], log_: EventLog) -> None:
        """``backend``: the backend, or a function giving it once it is open (None until then)."""
        self._backend = backend
        self.log = log_
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvtopy-events", daemon=True)

    def start(self) -> EventWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end (within :data:`WAIT_S`); never waits for it."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """True when the thread has ended within ``timeout`` (a command waits for it before nvmlShutdown)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _open(self) -> EventStream | None:
        backend = self._backend
        while not self._stop.is_set():
            opened = backend if isinstance(backend, Backend) else backend()
            if opened is not None:
                return opened.open_events()
            self._stop.wait(WAIT_S)
        return None

    def _run(self) -> None:
        try:
            stream = self._open()
        except Exception as exc:  # noqa: BLE001 - the driver's problem, said once, never the monitor's end
            self.log.notes = {None: f"Xid events cannot be watched: {exc}"}
            self.log.watching = True
            return
        if stream is None:
            return
        self.log.notes = dict(stream.notes)
        self.log.watching = True
        try:
            while not self._stop.is_set():
                try:
                    events = stream.wait(WAIT_S)
                except Exception:  # noqa: BLE001 - logged, and the watch goes on
                    _logger().exception("waiting for GPU events failed")
                    self._stop.wait(WAIT_S)
                    continue
                if events:
                    self.log.add(events)
        finally:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - logged: the watch is over anyway
                _logger().exception("closing the event stream failed")

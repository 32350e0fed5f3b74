"""What the monitor and the exporter read snapshots from: a thread that publishes them.

Three sources share this: the :class:`~nvtopy.sources.poller.Poller` (a backend, live),
:class:`~nvtopy.sources.replay.ReplayPlayer` (a recording) and
:class:`~nvtopy.sources.remote.RemoteHosts` (other hosts' exporters). Each says how to
make its next snapshot; the subscription, publication, pausing and the
thread's lifecycle are here, once. ``stop()`` returns at once: the thread waits
on an event, never on ``time.sleep``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..model import Snapshot

__all__ = ["SnapshotSource"]

log = logging.getLogger(__name__)

SnapshotCallback = Callable[[Snapshot], None]


class SnapshotSource:
    """Base of snapshot sources: subscribers, ``latest``, pause/resume/refresh, a daemon thread."""

    thread_name = "nvtopy-source"

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._subscribers: list[SnapshotCallback] = []
        self._wake = threading.Event()
        self._stopping = False
        self._paused = False
        self._refresh_once = False
        self._thread: threading.Thread | None = None
        self.latest: Snapshot | None = None

    # ----------------------------------------------------------------- control

    @property
    def interval(self) -> float:
        return self._interval

    def set_interval(self, seconds: float) -> None:
        """Change the interval; takes effect at once (the current wait is cut short)."""
        self._interval = seconds
        self._wake.set()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def refresh(self) -> None:
        """Publish a new snapshot now instead of at the end of the wait (also while paused: one)."""
        self._refresh_once = True
        self._wake.set()

    def subscribe(self, callback: SnapshotCallback) -> None:
        """``callback(snapshot)`` runs on the source's thread for every snapshot published."""
        self._subscribers.append(callback)

    def start(self) -> SnapshotSource:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 2.0) -> None:
        """Stop the thread; returns as soon as the snapshot in progress (if any) is done."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> SnapshotSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- for subclasses

    def _publish(self, snapshot: Snapshot) -> None:
        self.latest = snapshot
        for callback in list(self._subscribers):
            try:
                callback(snapshot)
            except Exception:  # one broken subscriber must not starve the others or stop the source
                log.exception("snapshot subscriber failed")

    def _run_periodic(self, produce: Callable[[], object], before: Callable[[], None] | None = None) -> None:
        """Call ``produce`` every interval (once per ``refresh()`` while paused) until stopped."""
        while not self._stopping:
            if before is not None:
                before()
            timeout: float | None = None
            if not self._paused or self._refresh_once:
                self._refresh_once = False
                started = time.monotonic()
                try:
                    produce()
                    self.last_error: BaseException | None = None
                except Exception as exc:  # a failing backend must not kill the monitor silently
                    log.exception("%s failed", self.thread_name)
                    self.last_error = exc
                if not self._paused:
                    timeout = max(0.0, self._interval - (time.monotonic() - started))
            self._wake.wait(timeout)
            self._wake.clear()

    def _run(self) -> None:
        raise NotImplementedError

"""The snapshot source contract: what the monitor and the exporter read snapshots from.

Three sources implement it: the :class:`~nvtopy.sources.poller.Poller` (a local
backend, live), :class:`~nvtopy.sources.replay.ReplayPlayer` (a recording) and
:class:`~nvtopy.sources.remote.exporters.RemoteHosts` (other hosts' exporters). Each says
how to make its next snapshot and what it can do besides; the subscription,
publication, pausing and the thread's lifecycle are here, once. ``stop()``
returns at once: the thread waits on an event, never on ``time.sleep``.

Light on purpose: what only a running source needs (logging, futures, the model)
is imported where it is used, so naming the contract costs an importer nothing.
The pace of the thread is :class:`~nvtopy.sources.ticker.Ticker`'s; the
interval's limits are :mod:`nvtopy.interval`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .ticker import Ticker

if TYPE_CHECKING:
    import logging
    from concurrent.futures import Future

    from ..backends.base import SignalOutcome
    from ..model import ProcessDetails, Snapshot

__all__ = ["SnapshotSource"]

_CANNOT_SIGNAL = "this source cannot signal processes"

SnapshotCallback = Callable[["Snapshot"], None]
FailureCallback = Callable[[BaseException], None]


class SnapshotSource:
    """A stream of snapshots made on a daemon thread, and what else the source offers.

    The monitor takes any source and uses only what is declared here: it never
    probes for a method or reaches into a source's parts.

    **Every source**

    - ``subscribe(callback)``: ``callback(snapshot)`` runs on the source's thread
      for each snapshot published; ``latest`` is the last one (None before the first).
    - ``start()``, ``stop(timeout)``, ``running``; also a context manager.
    - ``pause()``, ``resume()``, ``paused``; ``refresh()`` publishes one now (also while paused).
    - ``interval`` / ``set_interval(seconds)``: seconds between snapshots of a live source.
    - ``status_line()``: a short description for the monitor's header (a replay's
      position and speed, how many remote hosts answer), or None: the monitor then
      shows the refresh interval or that it is paused.
    - ``startup_notice``: one sentence to show once when the view starts (a recording
      read only up to its damage), or None.
    - ``gpus_found``: how many GPUs the source found, selected or not; 0 when it found
      none (the monitor says "No NVIDIA GPU found" rather than "No GPUs selected");
      None until known.

    **Starting and waiting** (a source may open a slow driver on its own thread)

    - ``busy_since``: ``time.monotonic()`` when the read in progress began (opening
      the backend, or a poll); None when idle. ``waiting_for`` names what it waits
      for ("the NVIDIA driver"): the monitor says how long it has been waiting.
    - ``subscribe_failure(callback)``: ``callback(error)`` runs on the source's thread
      if the source could not start (the backend did not open, no GPU matched the
      selection); the thread has ended and ``open_error`` holds the error.

    **Capabilities**: a flag says whether the source offers them.

    - ``can_signal``; ``signal(pid, create_time, signum)`` returns a future of the
      :class:`~nvtopy.backends.base.SignalOutcome`. A source that cannot signal
      completes it at once with a refusal saying ``signal_refusal``; one that can
      sends the signal on its own thread (the one that owns the backend).
    - ``can_inspect``; ``process_details(pid, create_time)`` returns a future of the
      :class:`~nvtopy.model.ProcessDetails` the process screen shows (cwd, argv,
      parents, children), read on the source's thread; None when the source has no
      host to ask (a replay, remote hosts) or the process is gone.
    - ``can_step``; ``step(count)`` shows the snapshot ``count`` away (negative: back).
    - ``can_change_speed``; ``speed``, ``faster()``, ``slower()``: the playing speed.

    ``step``, ``speed``, ``faster`` and ``slower`` raise NotImplementedError on a
    source whose flag is False; ``signal`` itself never raises (its future holds
    the error of a send that failed).

    A subclass implements ``_run`` (the thread's body, usually ``_run_periodic``),
    publishes with ``_publish`` and reports a failed start with ``_fail``.
    """

    thread_name = "nvtopy-source"
    can_step = False
    can_change_speed = False
    signal_refusal: str | None = _CANNOT_SIGNAL
    """Why ``signal`` refuses (a sentence for the user); None for a source that can signal."""
    waiting_for = "the source"

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._subscribers: list[SnapshotCallback] = []
        self._failure_callbacks: list[FailureCallback] = []
        self._wake = threading.Event()
        self._stopping = False
        self._paused = False
        self._refresh_once = False
        # Set by a wake that only hands the thread a request to run (process details): no snapshot follows it.
        self._quiet_wake = False
        self._thread: threading.Thread | None = None
        self.latest: Snapshot | None = None
        self.open_error: BaseException | None = None
        # time.monotonic() when the read in progress began; None when idle.
        self.busy_since: float | None = None

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

    def subscribe_failure(self, callback: FailureCallback) -> None:
        """``callback(error)`` runs on the source's thread if the source could not start."""
        self._failure_callbacks.append(callback)

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

    def settle(self, timeout: float) -> bool:
        """After :meth:`stop`: wait at most ``timeout`` s for the source's threads to end; True when they have.

        Why: a command closes its backend after its source stopped, and ``nvmlShutdown`` while
        a thread is still inside the driver is undefined; False tells it to leave the backend open.
        """
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(max(0.0, timeout))
        return not thread.is_alive()

    @property
    def thread(self) -> threading.Thread | None:
        """The source's thread once started (its name says which source: ``thread_name``)."""
        return self._thread

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> SnapshotSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- what the source says

    def status_line(self) -> str | None:
        """A short description of the source for the monitor's header; None: the monitor shows the interval."""
        return None

    @property
    def startup_notice(self) -> str | None:
        """One sentence to show once when the view starts; None when there is nothing to say."""
        return None

    @property
    def gpus_found(self) -> int | None:
        """How many GPUs the source found, selected or not: 0 when none, None until known.

        By default those of the latest snapshot (a replay or remote hosts show what they get).
        """
        latest = self.latest
        return None if latest is None else len(latest.gpus)

    # ----------------------------------------------------------------- capabilities

    @property
    def can_signal(self) -> bool:
        return self.signal_refusal is None

    def signal(self, pid: int, create_time: float | None, signum: int) -> Future[SignalOutcome]:
        """Send ``signum`` to ``pid`` if it is still the process created at ``create_time``.

        Here: refused at once with :attr:`signal_refusal` (a source that can signal overrides this).
        """
        from concurrent.futures import Future

        from ..backends.base import SignalOutcome

        future: Future[SignalOutcome] = Future()
        future.set_result(SignalOutcome(False, self.signal_refusal or _CANNOT_SIGNAL))
        return future

    can_inspect = False
    """Whether :meth:`process_details` can answer (a live local source)."""

    def process_details(self, pid: int, create_time: float | None) -> Future[ProcessDetails | None]:
        """Read what the process screen shows of ``pid`` beyond the snapshot, if it is still that process.

        Here: None at once (a source without a host to ask overrides nothing). Never raises;
        the future may hold the error of a read that failed.
        """
        from concurrent.futures import Future

        future: Future[ProcessDetails | None] = Future()
        future.set_result(None)
        return future

    def step(self, count: int) -> None:
        """Pause and show the snapshot ``count`` away (negative: back); only when :attr:`can_step`."""
        raise NotImplementedError(f"{type(self).__name__} cannot step")

    @property
    def speed(self) -> float:
        """How many times faster than recorded it plays; only when :attr:`can_change_speed`."""
        raise NotImplementedError(f"{type(self).__name__} has no playing speed")

    def faster(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no playing speed")

    def slower(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no playing speed")

    # ----------------------------------------------------------------- for subclasses

    def _publish(self, snapshot: Snapshot) -> None:
        self.latest = snapshot
        for callback in list(self._subscribers):
            try:
                callback(snapshot)
            except Exception:  # noqa: BLE001 - logged: one broken subscriber must not starve the others
                _log().exception("snapshot subscriber failed")

    def _fail(self, error: BaseException) -> None:
        """The source could not start: keep ``error`` in :attr:`open_error` and tell the failure subscribers."""
        self.open_error = error
        for callback in list(self._failure_callbacks):
            try:
                callback(error)
            except Exception:  # noqa: BLE001 - logged, as for snapshot subscribers
                _log().exception("failure subscriber failed")

    def _run_periodic(self, produce: Callable[[], object], before: Callable[[], None] | None = None) -> None:
        """Call ``produce`` every interval (once per ``refresh()`` while paused) until stopped."""
        ticker = Ticker()
        while not self._stopping:
            if before is not None:
                before()
            timeout: float | None = None
            if not self._paused or self._refresh_once:
                self._refresh_once = False
                ticker.tick()
                try:
                    produce()
                except Exception:  # noqa: BLE001 - logged: a failing backend must not kill the monitor silently
                    _log().exception("%s failed", self.thread_name)
                if not self._paused:
                    timeout = ticker.remaining(self._interval)
            self._wait(timeout, before)

    def _wait(self, timeout: float | None, before: Callable[[], None] | None) -> None:
        """Wait ``timeout`` (None: until woken); a quiet wake runs ``before`` (the requests) and waits on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._wake.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            self._wake.clear()
            quiet, self._quiet_wake = self._quiet_wake, False
            if not quiet or self._stopping or self._refresh_once or (deadline is None and not self._paused):
                return
            if before is not None:
                before()
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _run(self) -> None:
        raise NotImplementedError


def _log() -> logging.Logger:
    """This module's logger; logging is imported only when something goes wrong."""
    import logging

    return logging.getLogger(__name__)

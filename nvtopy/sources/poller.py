"""The poller: a background thread that turns a backend into a stream of snapshots.

Why here and not in the backends: each field group is read at its own cadence
(what users watch every second, what changes slowly every few seconds, static
fields once -- see :data:`CADENCE`), and a view polls only the groups it shows,
the same for NVML and simulated GPUs. Views only ever see the immutable
:class:`~nvtopy.model.Snapshot` this module publishes (built by
:class:`~nvtopy.sources.collector.Collector`).

Threading: :class:`Poller` owns a daemon thread that does every backend call
(the lifecycle is :class:`~nvtopy.sources.base.SnapshotSource`'s). Callers read
``poller.latest`` or subscribe a callback (called on the poller thread -- a UI
must hand the snapshot over to its own thread, e.g. with Textual's thread-safe
``post_message``).

A slow or stuck driver: given an ``opener`` instead of a backend, the thread
also opens the backend and reads what the GPU selection needs before its first
poll, so a UI draws (and quits) at once while ``nvmlInit`` takes its time;
:attr:`~nvtopy.sources.base.SnapshotSource.busy_since` says how long the driver
has kept it waiting. Signals (:meth:`Poller.signal`) are sent on the same
thread, between two polls: one thread uses the backend. Such a
poller owns its backend: its thread closes it when it stops, after the call in
progress returned -- never another thread while this one is inside the driver.
Nobody waits for that: a process that exits first leaves the driver to clean up.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from typing import Any, TypeAlias, TypeVar

from ..backends.base import Backend, SignalOutcome, driver_in_words
from ..health.verdict import HealthThresholds
from ..interval import DEFAULT_INTERVAL, MIN_INTERVAL
from ..model import ALL_GROUPS, HISTORY_LENGTH, ProcessDetails, Snapshot
from ..selection import Selection
from .base import SnapshotSource
from .collector import Collector
from .events import WAIT_S, EventWatcher

__all__ = [
    "CADENCE",
    "FAST_GROUPS",
    "MONITOR_GROUPS",
    "SLOW_GROUPS",
    "STALL_INTERVALS",
    "WAIT_SHARE",
    "Poller",
    "SelectGpus",
]

# What the monitor's panels show. Persistence/compute mode and energy are not drawn, so the
# monitor never asks the driver for them. PCIe throughput is (the interconnect
# line and the health screen): it samples for 20 ms a call, at its slow cadence.
MONITOR_GROUPS = ALL_GROUPS - {"modes", "energy"}

# Seconds between two reads of each field group; 0 = every tick. An interval
# longer than a group's cadence reads it every tick. Chosen from how fast each
# value moves and what a user watches (issue 27 cut the driver calls by slowing
# what changes slowly, never what users watch each second):
# - every tick: utilisation, memory, power, processes and GPM change second by second;
# - 2 s: temperature (thermal mass), clocks and throttle reasons (read together: the
#   health verdict compares them), per-process utilisation (NVML averages it over the
#   time since the last read anyway);
# - 5 s: the P-state (shown, not judged; the backend re-reads the memory clock when it
#   moves), NVLink;
# - 10-30 s: what moves over minutes or on an administrator's command: codec
#   utilisation, ECC counters (a double-bit error also arrives at once as Xid 48), the
#   enforced power limit, fan speed (follows temperature over tens of seconds), PCIe
#   throughput (samples for 20 ms a call), the PCIe link, persistence/compute mode;
# - 60 s: memory health (remapped rows, retired pages) changes over days.
CADENCE: dict[str, float] = {
    "memory": 0.0,
    "utilization": 0.0,
    "power": 0.0,
    "processes": 0.0,
    "gpm": 0.0,  # one GPM sample per GPU per interval: the pair of the last two gives the interval's figures
    "mig": 0.0,  # per-instance memory: one call per MIG instance, none on a GPU without MIG
    "temperature": 2.0,
    "clocks": 2.0,
    "throttle": 2.0,
    "process_utilization": 2.0,
    "pstate": 5.0,
    "nvlink": 5.0,
    "energy": 5.0,
    "codec": 10.0,
    "ecc": 10.0,
    "modes": 10.0,
    "power_limit": 15.0,
    "pcie": 20.0,
    "fan": 30.0,
    "pcie_link": 30.0,
    "remapped_rows": 60.0,
    "retired_pages": 60.0,
}
STALL_INTERVALS = 2.0
"""A GPU whose driver call has been outstanding this many intervals is shown "not responding"."""
WAIT_SHARE = 0.8
"""The share of an interval a poll waits for slow GPUs before it publishes without them."""
FAST_GROUPS: frozenset[str] = frozenset(g for g in ALL_GROUPS if CADENCE[g] == 0.0)
SLOW_GROUPS: frozenset[str] = ALL_GROUPS - FAST_GROUPS

T = TypeVar("T")

SelectGpus: TypeAlias = Callable[[Collector], Sequence[int] | Selection]
"""Picks the GPUs to poll from a collector's statics: indices, or a :class:`~nvtopy.selection.Selection`
(the GPUs and the MIG devices a GPU is limited to), as ``Collector.select`` takes them."""

log = logging.getLogger(__name__)


class Poller(SnapshotSource):
    """Collects snapshots of a backend on a background thread at an adjustable interval.

    The live source: it signals processes (on its thread, which owns the backend),
    cannot step or change speed, and has no status line of its own.
    """

    thread_name = "nvtopy-poller"
    signal_refusal = None
    can_inspect = True

    def __init__(
        self,
        backend: Backend | None,
        *,
        interval: float = DEFAULT_INTERVAL,
        indices: Sequence[int] | None = None,
        history: int = HISTORY_LENGTH,
        groups: Collection[str] = ALL_GROUPS,
        cadence: dict[str, float] | None = None,
        processes: bool = True,
        join: bool = True,
        collector: Collector | None = None,
        opener: Callable[[], Backend] | None = None,
        select: SelectGpus | None = None,
        waiting_for: str | None = None,
        events: bool = False,
        isolate: bool = True,
        stall_after: float | None = None,
        thresholds: HealthThresholds | None = None,
    ) -> None:
        """``groups``: the field groups the view shows (others are never read after the first collect).

        ``opener`` (with ``backend=None``): opens the backend on the poller's thread
        before the first poll; ``select`` then picks the GPUs to poll from the
        collector's :meth:`~nvtopy.sources.collector.Collector.statics`. An error of either
        ends the thread: it is in :attr:`open_error` and goes to the callbacks of
        :meth:`subscribe_failure`. The poller owns (and closes) a backend it opened.
        ``waiting_for`` names the driver a slow start waits for (by default
        the simulated one for a simulated backend, else the NVIDIA driver).

        ``events``: watch the backend's GPU events (Xid errors) on a thread of their
        own while the poller runs (:class:`~nvtopy.sources.events.EventWatcher`).
        ``isolate``: read each GPU on its own thread, so a GPU whose driver call
        hangs keeps its last values and is marked "not responding" after
        :data:`STALL_INTERVALS` intervals while the others keep updating
        (:class:`~nvtopy.sources.workers.GpuWorkers`); False reads them in turn.
        ``stall_after``: seconds after which a stuck GPU is "not responding" (default
        :data:`STALL_INTERVALS` intervals; the exporter passes ``--timeout``, ``nvtopy log`` 0:
        marked in the first interval its read misses).
        ``thresholds``: of the health flags, for a collector the poller makes.
        """
        super().__init__(max(MIN_INTERVAL, interval))
        if opener is None:
            if backend is None:
                raise ValueError("Poller needs a backend or an opener")
            collector = collector or Collector(backend, indices, history, thresholds=thresholds)
            if select is not None:
                collector.select(select(collector))
        # None until the opener has run (a poller given a backend has both at once).
        self.collector: Collector | None = collector
        self.backend: Backend | None = backend
        self._opener = opener
        self._select = select
        self._indices = indices
        self._history = history
        self.waiting_for = waiting_for or driver_in_words(None if backend is None else backend.kind)
        self._groups = frozenset(groups)
        self._cadence = {**CADENCE, **(cadence or {})}
        self._due: dict[str, float] = {}
        self._processes = processes
        self._join = join
        self._thresholds = thresholds
        self._isolate = isolate
        self._stall_after = stall_after
        self._watch_events = events
        self._watcher: EventWatcher | None = None
        self._requests: collections.deque[tuple[Callable[[], Any], Future[Any]]] = collections.deque()
        self.polls = 0
        self._gpus_found: int | None = None if backend is None else backend.device_count()

    @classmethod
    def for_monitor(
        cls,
        backend: Backend | None,
        *,
        interval: float = DEFAULT_INTERVAL,
        opener: Callable[[], Backend] | None = None,
        select: SelectGpus | None = None,
        waiting_for: str | None = None,
        events: bool = True,
        thresholds: HealthThresholds | None = None,
        isolate: bool = True,
    ) -> Poller:
        """The interactive monitor's poller: the field groups its panels show (:data:`MONITOR_GROUPS`).

        Why here, not in the app: the CLI makes and starts it before Textual is imported, so the
        driver is opened and the first poll taken while the UI's modules load (the first frame
        then shows the GPUs and their processes at once); the app's ``for_backend`` makes the
        same one for a caller that starts it with the app.
        """
        return cls(
            backend,
            interval=interval,
            groups=MONITOR_GROUPS,  # what the panels show (see MONITOR_GROUPS)
            opener=opener,
            select=select,
            waiting_for=waiting_for,
            events=events,
            thresholds=thresholds,
            isolate=isolate,
        )

    def wait_for_first(self, timeout: float) -> bool:
        """Wait at most ``timeout`` s for the first snapshot, or for the thread to end (an open error); True once
        there is a snapshot. Polled in short sleeps, so nothing is added to the poller's own work."""
        deadline = time.monotonic() + max(0.0, timeout)
        while self.latest is None and self.open_error is None and self.running:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(0.002, left))
        return self.latest is not None

    def set_interval(self, seconds: float) -> None:
        super().set_interval(max(MIN_INTERVAL, seconds))

    @property
    def opened(self) -> bool:
        """True once the backend is open and the GPUs selected (at once when given a backend)."""
        return self.collector is not None

    @property
    def gpus_found(self) -> int | None:
        """The GPUs the backend has, polled or not (a selection may leave them all out); None until it is open."""
        return self._gpus_found

    def signal(self, pid: int, create_time: float | None, signum: int) -> Future[SignalOutcome]:
        """Send the signal from the poller thread, between two polls (see :meth:`submit`)."""

        def send() -> SignalOutcome:
            backend = self.backend
            if backend is None:
                raise RuntimeError("the backend is not open yet")
            return backend.send_signal(pid, create_time, signum)

        return self.submit(send)

    def process_details(self, pid: int, create_time: float | None) -> Future[ProcessDetails | None]:
        """Read ``pid``'s details on the poller thread, between two polls; no poll follows.

        The caller waits with a deadline of its own: a thread stuck in the driver
        answers late (the future completes then), never the UI thread.
        """

        def read() -> ProcessDetails | None:
            backend = self.backend
            return None if backend is None else backend.process_details(pid, create_time)

        return self.submit(read, refresh=False)

    def submit(self, function: Callable[[], T], *, refresh: bool = True) -> Future[T]:
        """Run ``function`` on the poller thread (which owns the backend) between two polls.

        Why: a backend is used by one thread only; actions such as sending a
        signal go through here instead of racing the poll. Without a running
        thread the function runs at once on the caller's thread. A poll follows
        (``refresh=False``: none, for a read that changes nothing), so the effect
        shows up in the next snapshot.
        """
        future: Future[T] = Future()
        if not self.running:
            _run_into(function, future)
            return future
        self._requests.append((function, future))
        if refresh:
            self._refresh_once = True
        else:
            self._quiet_wake = True
        self._wake.set()
        return future

    def _drain_requests(self) -> None:
        while self._requests:
            function, future = self._requests.popleft()
            _run_into(function, future)

    def _due_groups(self, now: float) -> tuple[set[str], bool]:
        """Groups whose cadence has elapsed (and whether process utilisation is due), then reschedule them.

        Half an interval of slack keeps a 2 s cadence at every second tick of a
        1 s interval despite jitter.
        """
        slack = self._interval / 2
        due = {g for g in self._groups if now >= self._due.get(g, 0.0)}
        utilization = now >= self._due.get("process_utilization", 0.0)
        for group in due:
            self._due[group] = now + self._cadence[group] - slack
        if utilization:
            self._due["process_utilization"] = now + self._cadence["process_utilization"] - slack
        return due, utilization

    def poll_once(self, *, slow: bool | None = None) -> Snapshot:
        """Collect one snapshot on the calling thread and publish it.

        ``slow=None`` reads the groups whose cadence is due (what the thread does),
        ``True`` every group the view shows, ``False`` only the every-tick ones.
        """
        if slow is None:
            groups, utilization = self._due_groups(time.monotonic())
        elif slow:
            groups, utilization = set(self._groups), True
        else:
            groups, utilization = set(self._groups & FAST_GROUPS), False
        collector = self.collector
        if collector is None:
            raise RuntimeError("the backend is not open yet")
        self.busy_since = time.monotonic()
        interval = self._interval
        try:
            snapshot = collector.collect(
                groups,
                processes=self._processes,
                process_utilization=utilization,
                join=self._join,
                interval=interval,
                deadline=WAIT_SHARE * interval if self._isolate else None,
                stall_after=STALL_INTERVALS * interval if self._stall_after is None else self._stall_after,
            )
        finally:
            self.busy_since = None
        self.polls += 1
        self._publish(snapshot)
        return snapshot

    def _run(self) -> None:
        try:
            if self._opener is not None and not self._open():
                return
            if self._watch_events:
                self.watch_events()
            self._run_periodic(self.poll_once, before=self._drain_requests)
            self._drain_requests()
        finally:
            self._wind_down()

    def watch_events(self) -> None:
        """Start watching the backend's GPU events (Xid errors) on their own thread, once.

        The poller's thread does it by itself when built with ``events=True``; a
        caller that polls on its own thread (``nvtopy log``) calls this, and
        :meth:`stop` ends it.
        """
        if self._watcher is None and self.collector is not None and self.backend is not None:
            self._watcher = EventWatcher(self.backend, self.collector.events).start()

    def stop(self, timeout: float | None = 2.0) -> None:
        watcher = self._watcher
        if watcher is not None:
            watcher.stop()
        super().stop(timeout)

    def settle(self, timeout: float) -> bool:
        """The poller's thread and its event thread (which waits in the driver up to :data:`WAIT_S` at a time)."""
        until = time.monotonic() + max(0.0, timeout)
        ended = super().settle(timeout)
        watcher = self._watcher
        if watcher is not None:
            ended = watcher.join(max(0.0, until - time.monotonic())) and ended
        return ended

    def _wind_down(self) -> None:
        """Stop the event and GPU threads; close a backend this poller opened, unless a thread is still inside it.

        nvmlShutdown while another thread waits in the driver is asking for trouble: the
        event thread gets one wait's time to end, and a GPU thread stuck in a call
        leaves the backend open (the driver cleans up after an exiting process).
        """
        watcher, collector = self._watcher, self.collector
        if watcher is not None:
            watcher.stop()
        if collector is not None:
            collector.close()
        if self._opener is None:
            return
        if watcher is not None and not watcher.join(2 * WAIT_S):
            log.warning("the event thread is still in the driver: the backend is left open")
            return
        if collector is not None and collector.busy():
            log.warning("a GPU's driver call is still outstanding: the backend is left open")
            return
        self._close_backend()

    def _open(self) -> bool:
        """Open the backend and select the GPUs (on this thread); False if that failed or the poller stopped."""
        assert self._opener is not None
        self.busy_since = time.monotonic()
        try:
            self.backend = self._opener()
            if self._stopping:
                return False
            collector = Collector(self.backend, self._indices, self._history, thresholds=self._thresholds)
            if self._select is not None:
                collector.select(self._select(collector))
            self._gpus_found = self.backend.device_count()
        except BaseException as exc:  # noqa: BLE001 - handed to the failure callbacks, whatever it is
            self._fail_requests(exc)
            self._fail(exc)
            return False
        finally:
            self.busy_since = None
        self.collector = collector
        return not self._stopping

    def _fail_requests(self, error: BaseException) -> None:
        while self._requests:
            _, future = self._requests.popleft()
            if future.set_running_or_notify_cancel():
                future.set_exception(error)

    def _close_backend(self) -> None:
        if self.backend is None:
            return
        try:
            self.backend.close()  # idempotent
        except Exception:
            log.exception("closing the backend failed")


def _run_into(function: Callable[[], T], future: Future[T]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(function())
    except Exception as exc:  # noqa: BLE001 - handed to whoever waits on the future
        future.set_exception(exc)

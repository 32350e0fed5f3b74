"""The one small interface every GPU backend implements.

Why this shape: the poller decides *what* to read and *when* (static once,
fast groups every tick, slow groups every few seconds); a backend only knows
*how* to read a group. So cadence, caching and history live in one place and
both backends -- NVML and simulated -- get them for free, and call counts can
be compared between them.

A backend's GPUs may be read from several threads at once, one thread per GPU
(the collector isolates a GPU whose driver call hangs, see
``nvtopy.sources.workers``): reads of *different* GPUs must not share mutable
state without a lock; reads of one GPU never overlap.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Collection
from typing import Any, NamedTuple

from ..model import GpuEvent, GpuStatic, HostInfo, HostProcess, HostUsage, ProcessDetails, RawGpuProcess, Reason

__all__ = ["Backend", "EventStream", "NoEvents", "ProcessReading", "Reading", "SignalOutcome", "driver_in_words"]


class Reading:
    """Values of the requested field groups of one GPU, plus why any are missing."""

    __slots__ = ("lost", "unavailable", "values")

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.unavailable: dict[str, Reason] = {}
        self.lost = False


class ProcessReading:
    """NVML's process lists for one GPU, merged by pid (C, G or C+G)."""

    __slots__ = ("lost", "processes", "unavailable")

    def __init__(
        self,
        processes: list[RawGpuProcess] | None = None,
        unavailable: Reason | None = None,
        lost: bool = False,
    ) -> None:
        self.processes: list[RawGpuProcess] = processes if processes is not None else []
        self.unavailable = unavailable  # why the list itself could not be read
        self.lost = lost


class SignalOutcome(NamedTuple):
    """What happened when a signal was sent: ``ok`` plus a sentence for the user."""

    ok: bool
    message: str


class EventStream(abc.ABC):
    """A backend's GPU events (Xid critical errors), read on a thread of its own.

    Why a separate object: waiting for events blocks (NVML's ``nvmlEventSetWait``)
    and must not hold up the poll; the thread that owns a stream calls only
    :meth:`wait` and :meth:`close`, and may be abandoned at exit (a daemon).
    """

    notes: dict[int | None, str]
    """Why events are not watched, per GPU index (``None``: every GPU), as a sentence: said once."""

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> list[GpuEvent]:
        """Events that arrived, waiting at most ``timeout_s`` for the first; [] when none came.

        Costs nothing while idle (a blocking wait, no polling loop of its own).
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the event set. Idempotent; only from the thread that waits."""


class NoEvents(EventStream):
    """A backend (or a driver) that cannot report events: waits out the timeout, says why once."""

    def __init__(self, note: str) -> None:
        self.notes = {None: note}
        self._closed = threading.Event()

    def wait(self, timeout_s: float) -> list[GpuEvent]:
        self._closed.wait(timeout_s)
        return []

    def close(self) -> None:
        self._closed.set()


class Backend(abc.ABC):
    """Reads GPUs. Implementations: :class:`NvmlBackend`, :class:`SimulatedBackend`."""

    kind: str = "abstract"
    one_shot: bool = False
    """A single reading follows (``nvtopy --once``, ``nvtopy.snapshot()``): a measurement over an
    interval (GPM) waits for it once rather than say N/A; a monitor or logger never waits."""

    @abc.abstractmethod
    def host_info(self) -> HostInfo:
        """Host-wide facts (hostname, driver and CUDA versions)."""

    def host_usage(self) -> HostUsage | None:
        """The host's CPU, load, memory and swap now, read with each poll; None: this backend does not know."""
        return None

    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of GPUs, including ones that cannot be opened."""

    @abc.abstractmethod
    def read_static(self, index: int) -> GpuStatic:
        """Fields that do not change while the driver is loaded."""

    @abc.abstractmethod
    def read_sample(self, index: int, groups: Collection[str]) -> Reading:
        """Read the named field groups (keys of :data:`nvtopy.model.SAMPLE_GROUPS`)."""

    @abc.abstractmethod
    def read_processes(self, index: int, utilization: bool = True) -> ProcessReading:
        """The GPU's compute and graphics processes, with per-process utilisation.

        ``utilization=False``: reuse the per-process utilisation of the last read
        that had it (new pids get ``None``) instead of asking the driver again.
        """

    @abc.abstractmethod
    def inspect_processes(self, pids: Collection[int]) -> dict[int, HostProcess | None]:
        """Host facts per pid; ``None`` for a pid that no longer exists."""

    @abc.abstractmethod
    def send_signal(self, pid: int, create_time: float | None, signum: int) -> SignalOutcome:
        """Signal ``pid`` only if it is still the process created at ``create_time``."""

    def process_details(self, pid: int, create_time: float | None) -> ProcessDetails | None:
        """What the process screen shows beyond the snapshot (cwd, argv, parents, children, ...), read now.

        None when ``pid`` is no longer the process started at ``create_time``, belongs to
        another PID namespace, or this backend cannot tell (here: always). Never raises
        for a process that vanished or is not readable; unreadable fields are None.
        Called on the thread that owns the backend (the poller's), on demand.
        """
        return None

    def now(self) -> float:
        """The Unix time of this backend's readings (simulated time for the simulation)."""
        return time.time()

    def pids_are_foreign(self) -> bool:
        """True when the GPU pids belong to another PID namespace (never joined nor signalled)."""
        return False

    def map_host_pids(self, lists: dict[int, Collection[int]]) -> dict[int, int]:
        """Foreign pids only: host pid -> local pid where proven (see ``pidmap``); {} when none or on the host.

        ``lists``: the pids listed per GPU index. A mapped row is joined and signalled as its local pid.
        """
        return {}

    def open_events(self) -> EventStream:
        """A stream of this backend's GPU events (Xid errors); :class:`NoEvents` where there are none.

        Called once, on the thread that will wait on it. Never raises: a driver
        that cannot register events gives a stream whose ``notes`` say why.
        """
        return NoEvents("this backend reports no events")

    def call_counts(self) -> dict[str, int]:
        """Driver calls made so far, per function (for benchmarks and tests)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the driver. Idempotent."""

    def abandon(self) -> None:  # noqa: B027 - optional hook
        """Give the driver up without closing it, now or at exit: a thread is stuck inside a call.

        Closing (``nvmlShutdown``) while another thread is in the driver is asking
        for a second hang; the driver cleans up after an exiting process.
        """

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def driver_in_words(kind: str | None) -> str:
    """What a slow start waits for, as the monitor says it: "waiting for the NVIDIA driver: 12 s"."""
    return "the simulated driver" if kind == "simulated" else "the NVIDIA driver"

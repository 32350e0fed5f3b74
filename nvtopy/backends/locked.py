"""A backend shared between threads: every call holds one lock.

Why: backends are written for one thread at a time, and a training script using
the Python API may run a sampler thread, a track thread and its own calls at
once, all on the one process-wide backend (:mod:`nvtopy.api.state`). Each call
is short (microseconds to a few milliseconds), so nobody waits long.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from ..model import GpuStatic, HostInfo, HostProcess, HostUsage
from .base import Backend, EventStream, ProcessReading, Reading, SignalOutcome

__all__ = ["LockedBackend"]


class LockedBackend(Backend):
    """A backend whose every call holds one lock: safe to share between threads."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.kind = inner.kind
        self._lock = threading.RLock()

    def host_info(self) -> HostInfo:
        with self._lock:
            return self.inner.host_info()

    def host_usage(self) -> HostUsage | None:
        return self.inner.host_usage()  # no driver call: nothing to serialise

    def device_count(self) -> int:
        with self._lock:
            return self.inner.device_count()

    def read_static(self, index: int) -> GpuStatic:
        with self._lock:
            return self.inner.read_static(index)

    def read_sample(self, index: int, groups: Collection[str]) -> Reading:
        with self._lock:
            return self.inner.read_sample(index, groups)

    def read_processes(self, index: int, utilization: bool = True) -> ProcessReading:
        with self._lock:
            return self.inner.read_processes(index, utilization)

    def inspect_processes(self, pids: Collection[int]) -> dict[int, HostProcess | None]:
        with self._lock:
            return self.inner.inspect_processes(pids)

    def send_signal(self, pid: int, create_time: float | None, signum: int) -> SignalOutcome:
        with self._lock:
            return self.inner.send_signal(pid, create_time, signum)

    def now(self) -> float:
        return self.inner.now()

    def pids_are_foreign(self) -> bool:
        return self.inner.pids_are_foreign()

    def map_host_pids(self, lists: dict[int, Collection[int]]) -> dict[int, int]:
        with self._lock:
            return self.inner.map_host_pids(lists)

    def call_counts(self) -> dict[str, int]:
        with self._lock:
            return self.inner.call_counts()

    def open_events(self) -> EventStream:
        # The stream makes its own calls on its own thread (waits that block): never under the lock.
        return self.inner.open_events()

    def abandon(self) -> None:
        self.inner.abandon()

    def close(self) -> None:
        with self._lock:
            self.inner.close()

"""The process-wide backend behind the Python API: one NVML initialisation, shared safely.

Why one: snippets that call ``nvmlInit`` per sample re-attach to the driver
every time (slow, and it resets volatile state). The API's functions,
:class:`~nvtopy.api.sampler.Sampler` and :func:`~nvtopy.api.tracking.track` all use the
backend returned by :func:`shared_backend`, created on first use.

Why a lock: backends are written for one thread at a time, and a training
script may run a sampler thread, a track thread and its own calls at once.
:class:`LockedBackend` serialises every call; each call is short (microseconds
to a few milliseconds), so nobody waits long.

Choosing the backend: :func:`configure`, or the environment --
``NVTOPY_BACKEND=simulated`` (with ``NVTOPY_SIM_GPUS``, ``NVTOPY_SIM_MODEL``,
``NVTOPY_SIM_SEED``) runs everything on simulated GPUs, where this process is
reported as a GPU process on GPU 0 so "this job's GPUs" features work without
a GPU.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from typing import Any

from ..backends.base import Backend, ProcessReading, Reading, SignalOutcome
from ..errors import UsageError
from ..model import GpuStatic, HostInfo, HostProcess

__all__ = ["LockedBackend", "configure", "reset", "shared_backend"]

_lock = threading.RLock()
_backend: LockedBackend | None = None


class LockedBackend(Backend):
    """A backend whose every call holds one lock: safe to share between threads."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.kind = inner.kind
        self._lock = threading.RLock()

    def host_info(self) -> HostInfo:
        with self._lock:
            return self.inner.host_info()

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

    def call_counts(self) -> dict[str, int]:
        with self._lock:
            return self.inner.call_counts()

    def close(self) -> None:
        with self._lock:
            self.inner.close()


def _from_environment() -> Backend:
    choice = os.environ.get("NVTOPY_BACKEND", "nvml").strip().lower()
    if choice in ("sim", "simulated", "demo"):
        return _simulated(
            gpus=int(os.environ.get("NVTOPY_SIM_GPUS", "4")),
            model=os.environ.get("NVTOPY_SIM_MODEL", "H100 80GB HBM3"),
            seed=int(os.environ.get("NVTOPY_SIM_SEED", "0")),
        )
    if choice != "nvml":
        raise UsageError(f"NVTOPY_BACKEND={choice!r}: use 'nvml' or 'simulated'")
    from ..backends.nvml import NvmlBackend

    return NvmlBackend()


def _simulated(**kwargs: Any) -> Backend:
    from ..backends.simulated import SimulatedBackend

    kwargs.setdefault("real_pids", [os.getpid()])  # this process is a GPU process of the simulation
    kwargs.setdefault("lifetime_scale", 0.25)
    return SimulatedBackend(**kwargs)


def configure(backend: Backend | str | None = None, **simulated: Any) -> Backend:
    """Choose the backend the API uses: a :class:`Backend`, ``"nvml"`` or ``"simulated"``.

    ``simulated`` keyword arguments go to :class:`~nvtopy.backends.simulated.SimulatedBackend`
    (``gpus``, ``model``, ``seed``, ``faults``, ...). Replaces (and closes) the current one.
    """
    global _backend
    with _lock:
        if backend is None or backend == "nvml":
            from ..backends.nvml import NvmlBackend

            chosen: Backend = NvmlBackend()
        elif backend in ("simulated", "sim", "demo"):
            chosen = _simulated(**simulated)
        elif isinstance(backend, Backend):
            chosen = backend
        else:
            raise UsageError(f"configure(backend={backend!r}): pass a Backend, 'nvml' or 'simulated'")
        reset()
        _backend = chosen if isinstance(chosen, LockedBackend) else LockedBackend(chosen)
        return _backend


def shared_backend() -> LockedBackend:
    """The process-wide backend, created on first use (NVML unless configured otherwise)."""
    global _backend
    with _lock:
        if _backend is None:
            _backend = LockedBackend(_from_environment())
        return _backend


def reset() -> None:
    """Close and forget the shared backend (the next use creates a new one)."""
    global _backend
    with _lock:
        if _backend is not None:
            _backend.close()
        _backend = None
        from . import usage as api

        api.forget_collectors()

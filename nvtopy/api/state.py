"""The Python API's one shared state, behind one lock.

What every API call in the process shares:

- the backend (:func:`shared_backend`): one NVML initialisation, static fields
  read once. Snippets that call ``nvmlInit`` per sample re-attach to the driver
  every time (slow, and it resets volatile state). It is a
  :class:`~nvtopy.backends.locked.LockedBackend`, so the threads below and the
  job's own calls may use it at once;
- the collectors of the plain functions, one per purpose (:func:`shared_collector`),
  so repeated calls reuse cached static fields;
- the sampling thread of :func:`~nvtopy.api.tracking.track` (:func:`watch`,
  :func:`unwatch`): one thread samples the GPUs of every active watcher and ends
  when the last one leaves.

One re-entrant lock guards all three. A shared collector is only used while it
is held (collectors are single-threaded by design); each use is short (a few
backend calls), so nobody waits long. :class:`~nvtopy.api.sampler.Sampler` runs
its own poller on the shared backend and shares nothing else.

Choosing the backend: :func:`configure`, or the environment --
``NVTOPY_BACKEND=simulated`` (with ``NVTOPY_SIM_GPUS``, ``NVTOPY_SIM_MODEL``,
``NVTOPY_SIM_SEED``) runs everything on simulated GPUs, where this process is
reported as a GPU process on GPU 0 so "this job's GPUs" features work without
a GPU. Either way the backend is opened by the one factory,
:mod:`nvtopy.backends.open`, with the defaults the CLI's ``--demo`` uses.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from ..backends.base import Backend
from ..backends.locked import LockedBackend
from ..backends.open import DEMO_GPUS, DEMO_MODEL, DEMO_SEED, BackendSpec, backend_kind, nvml_spec, open_backend
from ..backends.open import simulated_spec as _simulated_spec
from ..errors import UsageError
from ..model import Snapshot
from ..sources.collector import Collector

__all__ = [
    "Watcher",
    "configure",
    "reset",
    "shared_backend",
    "shared_collector",
    "unwatch",
    "watch",
    "watching_thread",
]

log = logging.getLogger("nvtopy.track")

SAMPLING_THREAD = "nvtopy-track"

_lock = threading.RLock()
_backend: LockedBackend | None = None
_collectors: dict[str, Collector] = {}  # purpose -> collector, all on ``_backend``
_watchers: list[Watcher] = []
_thread: threading.Thread | None = None
_wake = threading.Event()  # set when the last watcher leaves: the thread ends without finishing its wait


# --------------------------------------------------------------------------- the backend


def _simulated(**settings: Any) -> BackendSpec:
    settings.setdefault("real_pids", [os.getpid()])  # this process is a GPU process of the simulation
    return _simulated_spec(**settings)


def _from_environment() -> BackendSpec:
    name = os.environ.get("NVTOPY_BACKEND", "nvml").strip().lower()
    kind = backend_kind(name)
    if kind == "simulated":
        return _simulated(
            gpus=int(os.environ.get("NVTOPY_SIM_GPUS", str(DEMO_GPUS))),
            model=os.environ.get("NVTOPY_SIM_MODEL", DEMO_MODEL),
            seed=int(os.environ.get("NVTOPY_SIM_SEED", str(DEMO_SEED))),
        )
    if kind != "nvml":
        raise UsageError(f"NVTOPY_BACKEND={name!r}: use 'nvml' or 'simulated'")
    return nvml_spec()


def configure(backend: Backend | str | None = None, **simulated: Any) -> Backend:
    """Choose the backend the API uses: a :class:`Backend`, ``"nvml"`` or ``"simulated"``.

    ``simulated`` keyword arguments go to :func:`~nvtopy.backends.open.simulated_spec`
    (``gpus``, ``model``, ``seed``, ``faults``, ...; the rest to
    :class:`~nvtopy.backends.simulated.backend.SimulatedBackend`). Replaces (and closes) the current one.
    """
    global _backend
    with _lock:
        if isinstance(backend, Backend):
            chosen = backend
        else:
            kind = "nvml" if backend is None else backend_kind(backend) if isinstance(backend, str) else None
            if kind is None:
                raise UsageError(f"configure(backend={backend!r}): pass a Backend, 'nvml' or 'simulated'")
            chosen = open_backend(_simulated(**simulated) if kind == "simulated" else nvml_spec())
        reset()
        _backend = chosen if isinstance(chosen, LockedBackend) else LockedBackend(chosen)
        return _backend


def shared_backend() -> LockedBackend:
    """The process-wide backend, created on first use (NVML unless configured otherwise)."""
    global _backend
    with _lock:
        if _backend is None:
            _backend = LockedBackend(open_backend(_from_environment()))
        return _backend


def reset() -> None:
    """Close and forget the shared backend and its collectors (the next use creates a new one)."""
    global _backend
    with _lock:
        if _backend is not None:
            _backend.close()
        _backend = None
        _collectors.clear()


# --------------------------------------------------------------------------- the plain functions' collectors


@contextmanager
def shared_collector(purpose: str) -> Iterator[Collector]:
    """The shared backend's collector for ``purpose`` (``"snapshot"``, ``"job"``, ...), used under the lock.

    One per purpose, so a selection made for one purpose never disturbs another's
    cached figures; forgotten when the backend changes.
    """
    with _lock:
        collector = _collectors.get(purpose)
        if collector is None:
            collector = _collectors[purpose] = Collector(shared_backend(), timeline=False)
        yield collector


# --------------------------------------------------------------------------- the sampling thread


class Watcher(Protocol):
    """What the sampling thread feeds: a snapshot of ``indices`` with ``groups`` every ``interval`` seconds."""

    @property
    def indices(self) -> Sequence[int]: ...

    @property
    def groups(self) -> Collection[str]: ...

    @property
    def interval(self) -> float: ...

    def observe(self, snapshot: Snapshot) -> None: ...


def watch(watcher: Watcher) -> None:
    """Have the sampling thread feed ``watcher`` (started if not running); watchers share its snapshots."""
    global _thread
    with _lock:
        _watchers.append(watcher)
        _wake.clear()  # a thread told to end by the previous last watcher goes on
        if _thread is None:
            # The backend now, not on the thread: one started late must not open a new one after a reset.
            backend = shared_backend()
            _thread = threading.Thread(target=_sample, args=(backend,), name=SAMPLING_THREAD, daemon=True)
            _thread.start()


def unwatch(watcher: Watcher) -> None:
    """Stop feeding ``watcher``; the thread ends with the last one."""
    with _lock:
        if watcher in _watchers:
            _watchers.remove(watcher)
        if not _watchers:
            _wake.set()


def watching_thread() -> threading.Thread | None:
    """The sampling thread while it runs."""
    return _thread


def _sample(backend: Backend) -> None:
    global _thread
    collector: Collector | None = None
    while True:
        with _lock:
            active = list(_watchers)
            if not active:
                _thread = None
                _wake.clear()
                return
            if _backend is not None and _backend is not backend:
                # configure() chose another backend while this thread was between rounds (a watcher
                # added then kept it going): its watchers asked for the new one, not the closed one.
                backend, collector = _backend, None
        try:
            if collector is None:
                collector = Collector(backend, indices=[], history=1, timeline=False)
            collector.select(sorted({i for w in active for i in w.indices}))
            groups = frozenset().union(*(w.groups for w in active))
            snapshot = collector.collect(groups, join=False, process_utilization=False)
            for watcher in active:
                watcher.observe(snapshot)
        except Exception:  # a failing driver must not kill the job being measured
            log.debug("track sampling failed", exc_info=True)
        _wake.wait(min(w.interval for w in active))

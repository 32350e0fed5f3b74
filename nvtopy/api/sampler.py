"""``nvtopy.Sampler``: GPU figures sampled in the background of a training loop.

    with nvtopy.Sampler(interval=1.0) as sampler:
        for step in range(steps):
            train_step()
        print(sampler.summary())

Why it does not slow the loop: it is the TUI's poller -- one thread, one NVML
initialisation for the process, static fields cached, each field group at its
own cadence, no subprocesses -- with the groups a job cares about and without
the psutil join (this process's own GPU memory comes from NVML's process list).
The caller's thread only reads results. ``benchmarks/bench_sampler.py``
measures the cost on a CPU-bound loop.

The real work (Hopper and newer): ``sm_active_percent`` and
``tensor_active_percent`` come from NVML's GPM, each sample the mean over the
interval since the previous one; the summary's mean of them is how much of the
GPU the job really used. On a GPU the sampler is limited to MIG devices of, they
are the instances' own (weighted by their SMs when there are several). Where GPM
does not measure them the summary has no entry for them -- never a 0.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..interval import DEFAULT_INTERVAL
from ..model import ALL_GROUPS, GpuState, Snapshot
from ..sources.collector import Collector
from ..sources.poller import Poller
from .state import shared_backend
from .usage import activity, choose_gpus

__all__ = ["METRICS", "Sampler", "Stats"]

# What a training job watches. PCIe throughput (20 ms per call) and modes are left out; "gpm" (SM and
# tensor activity, Hopper and newer) and "mig" (a slice's own memory and activity) are in.
SAMPLER_GROUPS = ALL_GROUPS - {"pcie", "modes"}
assert {"gpm", "mig"} <= SAMPLER_GROUPS
METRICS = (
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_bytes",
    "memory_used_percent",
    "process_memory_bytes",
    "temperature_c",
    "power_draw_w",
    "clock_sm_mhz",
    "sm_active_percent",  # GPM (Hopper and newer): the share of SMs active; a MIG slice's own
    "tensor_active_percent",  # GPM: the share of time tensor pipes were active
)
_ACTIVITY = ("sm_active_percent", "tensor_active_percent")


@dataclass(frozen=True, slots=True)
class Stats:
    """min / mean / max of one metric over the samples that had a value."""

    min: float
    mean: float
    max: float
    samples: int


def _value(snapshot_gpu: GpuState, metric: str, pid: int, limited: bool = False) -> float | None:
    if metric == "memory_used_percent":
        return snapshot_gpu.memory_used_percent
    if metric == "process_memory_bytes":
        for proc in snapshot_gpu.processes:
            if proc.pid == pid:
                return proc.gpu_memory_bytes
        return None
    if metric in _ACTIVITY and limited:
        return _slices_activity(snapshot_gpu, _ACTIVITY.index(metric))
    value: float | None = getattr(snapshot_gpu.sample, metric)  # a metric name checked when the sampler was made
    return value


def _slices_activity(gpu: GpuState, which: int) -> float | None:
    """SM (``which`` 0) or tensor (1) activity of the MIG devices shown of ``gpu``: one's own, several by SMs.

    None unless every device measured it (a mean over some of them would pass for all of them).
    """
    values: list[float] = []
    weights: list[int] = []
    for mig in gpu.mig:
        value = activity(gpu, mig)[which]
        if value is None:
            return None
        values.append(float(value))
        weights.append(mig.instance.sm_count or 0)
    if not values:
        return None
    if all(weights):
        return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)
    return sum(values) / len(values)


class Sampler:
    """Samples the chosen GPUs every ``interval`` seconds on a background thread.

    Args:
        interval: seconds between samples.
        gpus: NVML indices, PCI bus ids, UUID prefixes or MIG devices (the GPU limited to
            them); default: all GPUs, or with ``only_visible`` those CUDA_VISIBLE_DEVICES exposes.
        only_visible: limit to what this job can see (CUDA's rules: one MIG device at most).
        history: snapshots kept (oldest dropped first).
        callbacks: called with each snapshot, on the sampler's thread.
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        gpus: str | Sequence[int | str] | None = None,
        only_visible: bool = True,
        history: int = 3600,
        callbacks: Iterable[Callable[[Snapshot], None]] = (),
    ) -> None:
        self.interval = interval
        self.gpus = gpus
        self.only_visible = only_visible
        self._history: collections.deque[Snapshot] = collections.deque(maxlen=max(1, history))
        self._callbacks = list(callbacks)
        self._poller: Poller | None = None
        self._lock = threading.Lock()
        self._limited: frozenset[int] = frozenset()  # GPUs limited to MIG devices: their activity is the slices'

    def add_callback(self, callback: Callable[[Snapshot], None]) -> None:
        self._callbacks.append(callback)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> Sampler:
        """Start sampling (again); a no-op while running."""
        return self._start(stacklevel=3)

    def _start(self, stacklevel: int) -> Sampler:
        with self._lock:
            if self._poller is not None:
                return self
            backend = shared_backend()
            collector = Collector(backend, history=1, timeline=False)  # the sampler keeps its own history of snapshots
            selection = choose_gpus(collector.statics(), self.gpus, self.only_visible, stacklevel=stacklevel)
            collector.select(selection)
            self._limited = frozenset(selection.instances)
            poller = Poller(backend, interval=self.interval, groups=SAMPLER_GROUPS, join=False, collector=collector)
            poller.subscribe(self._received)
            poller.start()
            self._poller = poller
            return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread to end; a no-op when stopped."""
        with self._lock:
            poller, self._poller = self._poller, None
        if poller is not None:
            poller.stop(timeout=5.0)

    @property
    def running(self) -> bool:
        poller = self._poller
        return poller is not None and poller.running

    @property
    def thread(self) -> threading.Thread | None:
        poller = self._poller
        return None if poller is None else poller.thread

    def __enter__(self) -> Sampler:
        return self._start(stacklevel=3)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _received(self, snapshot: Snapshot) -> None:
        self._history.append(snapshot)
        for callback in self._callbacks:
            callback(snapshot)

    # ----------------------------------------------------------------- results

    def latest(self) -> Snapshot | None:
        return self._history[-1] if self._history else None

    @property
    def history(self) -> list[Snapshot]:
        return list(self._history)

    def summary(self) -> dict[int, dict[str, Stats]]:
        """Per GPU index, per metric (:data:`METRICS`): min, mean and max over the kept samples.

        A metric no sample had a value of has no entry (``sm_active_percent`` and
        ``tensor_active_percent`` before Hopper, say): absent, never a 0.
        """
        pid = os.getpid()
        limited = self._limited
        values: dict[int, dict[str, list[float]]] = {}
        for snapshot in list(self._history):
            for gpu in snapshot.gpus:
                per_gpu = values.setdefault(gpu.index, {})
                for metric in METRICS:
                    value = _value(gpu, metric, pid, gpu.index in limited)
                    if value is not None:
                        per_gpu.setdefault(metric, []).append(float(value))
        return {
            index: {m: Stats(min(v), sum(v) / len(v), max(v), len(v)) for m, v in metrics.items() if v}
            for index, metrics in values.items()
        }

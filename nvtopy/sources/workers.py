"""One thread per GPU, so a driver call stuck on one GPU stops nothing else.

Why: NVML calls can block for as long as the driver likes -- a GPU in a bad
state makes ``nvidia-smi`` hang, and a monitor that reads its GPUs one after
the other freezes with it (measured: nvtop freezes entirely, nvitop's rows
freeze and its quit waits). Here each GPU's reads run on that GPU's own daemon
thread; the collector hands each idle GPU its next read, waits for them until
a deadline, and goes on with the ones that answered. A GPU whose read is still
outstanding is not given another (one call in flight per GPU, never a pile of
stuck threads); its late answer is taken at the next collection.

The threads are daemons and are never joined: a thread stuck in the driver
cannot be interrupted, and quitting must not wait for it (the driver cleans up
after an exiting process). An idle worker costs nothing (it blocks on an event).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["GpuWorkers"]


class _Slot:
    """One GPU's worker: its thread, the job in progress, and the last answer not yet taken."""

    __slots__ = ("answer", "job", "started", "thread", "wake")

    def __init__(self) -> None:
        self.job: Callable[[], Any] | None = None
        self.started: float | None = None  # time.monotonic() the job in progress began
        self.answer: tuple[Any, BaseException | None] | None = None
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None


class GpuWorkers:
    """Runs one job at a time per GPU index on that GPU's daemon thread; waits for them with a deadline."""

    def __init__(self, name: str = "nvtopy-gpu") -> None:
        self._name = name
        self._slots: dict[int, _Slot] = {}
        self._done = threading.Condition()
        self._closed = False

    def busy_since(self, index: int) -> float | None:
        """``time.monotonic()`` when the GPU's job in progress began; None when it has none."""
        slot = self._slots.get(index)
        return None if slot is None else slot.started

    def start(self, index: int, job: Callable[[], Any]) -> bool:
        """Give GPU ``index`` its next job; False (nothing started) while its last one is still running."""
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _Slot()
        with self._done:
            if slot.started is not None or self._closed:
                return False
            slot.job = job
            slot.started = time.monotonic()
        if slot.thread is None:
            slot.thread = threading.Thread(target=self._work, args=(slot,), name=f"{self._name}-{index}", daemon=True)
            slot.thread.start()
        slot.wake.set()
        return True

    def wait(self, indices: Iterable[int], deadline: float) -> None:
        """Return when no GPU of ``indices`` has a job running, or at ``deadline`` (``time.monotonic()``)."""
        wanted = [self._slots[i] for i in indices if i in self._slots]
        with self._done:
            while any(slot.started is not None for slot in wanted):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._done.wait(remaining)

    def take(self, index: int) -> tuple[Any, BaseException | None] | None:
        """The answer of GPU ``index``'s last finished job (its value, or the exception it raised), once."""
        slot = self._slots.get(index)
        if slot is None:
            return None
        with self._done:
            answer, slot.answer = slot.answer, None
        return answer

    def close(self) -> None:
        """Let idle workers end; a worker inside the driver ends when its call returns. Never waits."""
        with self._done:
            self._closed = True
        for slot in self._slots.values():
            slot.wake.set()

    def _work(self, slot: _Slot) -> None:
        while True:
            slot.wake.wait()
            slot.wake.clear()
            if self._closed:
                return
            job = slot.job
            if job is None:
                continue
            answer: tuple[Any, BaseException | None]
            try:
                answer = (job(), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the collector, which decides
                answer = (None, exc)
            with self._done:
                slot.answer = answer
                slot.job = None
                slot.started = None
                self._done.notify_all()

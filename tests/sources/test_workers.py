"""GpuWorkers: one thread per GPU, a wait with a deadline, and handoffs that never lose or double a job."""

from __future__ import annotations

import threading
import time

from nvtopy.sources.workers import GpuWorkers


def _blocker() -> tuple[threading.Event, threading.Event]:
    """(entered, release): a job that says it began, then blocks until released (a driver call that hangs)."""
    return threading.Event(), threading.Event()


def test_each_gpu_runs_on_its_own_thread_and_the_wait_ends_with_the_last_read():
    workers = GpuWorkers()
    names: dict[int, str] = {}

    def job(index: int, seconds: float):
        def run() -> int:
            time.sleep(seconds)
            names[index] = threading.current_thread().name
            return index * 10

        return run

    try:
        for index, seconds in ((0, 0.0), (1, 0.05), (2, 0.15)):
            assert workers.start(index, job(index, seconds))
        began = time.monotonic()
        workers.wait([0, 1, 2], began + 5)
        waited = time.monotonic() - began
        assert 0.1 <= waited < 2, "returns when the slowest read is done, not at the deadline"
        assert names == {0: "nvtopy-gpu-0", 1: "nvtopy-gpu-1", 2: "nvtopy-gpu-2"}
        assert [workers.take(i) for i in range(3)] == [(0, None), (10, None), (20, None)]
        assert workers.take(0) is None, "an answer is taken once"
    finally:
        workers.close()


def test_a_stuck_gpu_costs_the_deadline_once_and_its_late_answer_is_kept():
    workers = GpuWorkers()
    entered, release = _blocker()

    def stuck() -> str:
        entered.set()
        release.wait(10)
        return "late"

    try:
        assert workers.start(0, stuck)
        assert workers.start(1, lambda: "quick")
        assert entered.wait(5)
        began = time.monotonic()
        workers.wait([0, 1], began + 0.2)
        assert time.monotonic() - began >= 0.15, "waited for the stuck GPU until the deadline"
        assert workers.busy_since(0) is not None and workers.busy_since(1) is None
        assert workers.take(1) == ("quick", None)
        assert not workers.start(0, lambda: "second"), "one call in flight per GPU: no pile of stuck threads"
        # The next collection waits only for what it started: the healthy GPU, not the stuck one.
        assert workers.start(1, lambda: "again")
        began = time.monotonic()
        workers.wait([1], began + 5)
        assert time.monotonic() - began < 1
        assert workers.take(1) == ("again", None)
        release.set()
        deadline = time.monotonic() + 5
        while workers.busy_since(0) is not None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert workers.take(0) == ("late", None), "the late answer is there for the next collection"
        assert workers.start(0, lambda: "free again")
        workers.wait([0], time.monotonic() + 5)
        assert workers.take(0) == ("free again", None)
    finally:
        release.set()
        workers.close()


def test_a_job_that_raises_hands_over_its_exception():
    workers = GpuWorkers()
    error = RuntimeError("a bug in a backend")

    def broken() -> None:
        raise error

    try:
        workers.start(3, broken)
        workers.wait([3], time.monotonic() + 5)
        assert workers.take(3) == (None, error)
    finally:
        workers.close()


def test_many_rounds_lose_and_double_nothing():
    """Thousands of handoffs, as a monitor makes in an hour: every job runs exactly once, every wait ends early."""
    workers = GpuWorkers()
    runs = [0] * 8

    def job(index: int):
        def run() -> int:
            runs[index] += 1
            return runs[index]

        return run

    try:
        for round_ in range(1, 301):
            for index in range(8):
                assert workers.start(index, job(index))
            workers.wait(range(8), time.monotonic() + 5)
            assert all(workers.busy_since(i) is None for i in range(8)), f"round {round_} ended before its reads"
            assert [workers.take(i) for i in range(8)] == [(round_, None)] * 8
        assert runs == [300] * 8
    finally:
        workers.close()


def test_wait_for_nothing_returns_at_once():
    workers = GpuWorkers()
    began = time.monotonic()
    workers.wait([], began + 5)
    workers.wait([7], began + 5)  # a GPU never started
    assert time.monotonic() - began < 0.5


def test_close_ends_idle_workers_and_a_busy_one_after_its_call():
    workers = GpuWorkers(name="nvtopy-test-close")
    entered, release = _blocker()

    def stuck() -> None:
        entered.set()
        release.wait(10)

    workers.start(0, lambda: None)
    workers.wait([0], time.monotonic() + 5)
    workers.start(1, stuck)
    assert entered.wait(5)
    workers.close()
    workers.close()  # twice is harmless
    assert not workers.start(0, lambda: None), "a closed pool starts nothing"

    def alive() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("nvtopy-test-close")}

    deadline = time.monotonic() + 5
    while "nvtopy-test-close-0" in alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert alive() == {"nvtopy-test-close-1"}, "the idle worker ended; the one inside the driver is still there"
    release.set()
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert alive() == set(), "it ended when its call returned"

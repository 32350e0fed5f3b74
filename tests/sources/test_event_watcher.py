"""GPU events on a thread of their own: a bounded timeline, counts that only grow, a prompt stop."""

from __future__ import annotations

import threading
import time

import pytest

from nvtopy.backends.base import EventStream, NoEvents
from nvtopy.model import EVENTS_PER_GPU, GpuEvent, Severity
from nvtopy.sources.collector import Collector
from nvtopy.sources.events import WAIT_S, EventLog, EventWatcher
from nvtopy.sources.poller import Poller

from ..waiting import until


class ScriptedStream(EventStream):
    """Delivers the events put in ``queue`` (one wait's worth at a time); counts its waits."""

    def __init__(self, notes: dict[int | None, str] | None = None) -> None:
        self.notes = notes or {}
        self.queue: list[GpuEvent] = []
        self.lock = threading.Lock()
        self.waits = 0
        self.closed = threading.Event()

    def wait(self, timeout_s: float) -> list[GpuEvent]:
        self.waits += 1
        assert timeout_s <= WAIT_S
        with self.lock:
            events, self.queue = self.queue, []
        if not events:
            self.closed.wait(timeout_s)
        return events

    def close(self) -> None:
        self.closed.set()


def _xid(gpu: int, xid: int, at: float = 0.0) -> GpuEvent:
    return GpuEvent(timestamp=at or time.time(), gpu_index=gpu, xid=xid)


def test_the_timeline_is_bounded_and_the_counts_are_whole():
    log = EventLog(per_gpu=4)
    log.add([_xid(0, 13, at=float(i + 1)) for i in range(10)] + [_xid(1, 79, at=5.0)])
    events, counts = log.timeline(0)
    assert [e.timestamp for e in events] == [7.0, 8.0, 9.0, 10.0], "the oldest are dropped first"
    assert counts == ((13, 10),), "counts keep every event"
    assert log.timeline(1)[1] == ((79, 1),)
    assert log.timeline(2) == ((), ())
    assert EVENTS_PER_GPU >= 32


def test_without_a_watcher_the_note_says_when_events_are_watched():
    log = EventLog()
    assert "only while nvtopy runs" in log.note(0)


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_the_watcher_fills_the_log_and_stops_within_half_a_second(sim):
    stream = ScriptedStream(notes={2: "Xid events not supported on this GPU"})
    backend = sim(gpus=3)
    backend.open_events = lambda: stream  # type: ignore[method-assign]
    log = EventLog()
    watcher = EventWatcher(backend, log).start()
    until(lambda: log.watching, what="the watcher watching")
    assert log.note(0) is None and log.note(2) == "Xid events not supported on this GPU"
    with stream.lock:
        stream.queue.append(_xid(1, 48))
    until(lambda: log.timeline(1)[1] == ((48, 1),), what="the Xid 48 in GPU 1's timeline")
    started = time.monotonic()
    watcher.stop()
    assert watcher.join(0.5), "the event thread ends within 0.5 s of the stop"
    assert time.monotonic() - started < 0.5
    assert stream.closed.is_set(), "the event set is released"


def test_an_idle_watcher_waits_instead_of_spinning(sim):
    stream = ScriptedStream()
    backend = sim(gpus=1)
    backend.open_events = lambda: stream  # type: ignore[method-assign]
    watcher = EventWatcher(backend, EventLog()).start()
    time.sleep(1.0)
    watcher.stop()
    watcher.join(1)
    assert stream.waits <= 1.0 / WAIT_S + 2, f"{stream.waits} waits in 1 s: the thread polls"


def test_a_driver_that_cannot_open_events_is_said_once(sim):
    backend = sim(gpus=2)

    def broken():
        raise RuntimeError("event set creation failed")

    backend.open_events = broken  # type: ignore[method-assign]
    log = EventLog()
    watcher = EventWatcher(backend, log).start()
    assert watcher.join(2)
    assert log.watching and "event set creation failed" in log.note(1)


def test_no_events_backend_says_why():
    stream = NoEvents("this backend reports no events")
    started = time.monotonic()
    assert stream.wait(0.05) == []
    assert time.monotonic() - started >= 0.04
    assert stream.notes == {None: "this backend reports no events"}


def test_events_reach_the_snapshot_and_the_verdict(sim, clock):
    backend = sim(gpus=2)
    log = EventLog()
    collector = Collector(backend, events=log)
    assert collector.collect().gpu(0).health.verdict is Severity.OK
    log.add([GpuEvent(timestamp=clock(), gpu_index=0, xid=79)])
    snapshot = collector.collect()
    health = snapshot.gpu(0).health
    assert health.last_xid == 79 and health.xid_counts == ((79, 1),)
    assert health.verdict is Severity.FAIL
    assert any(f.code == "xid" and "fallen off the bus" in f.text for f in health.findings)
    assert snapshot.gpu(1).health.verdict is Severity.OK, "events belong to their GPU"
    clock.advance(2 * 3600)
    later = collector.collect().gpu(0).health
    assert later.verdict is Severity.OK, "an old Xid stays in the timeline but no longer weighs"
    assert later.last_xid == 79


def test_a_poller_with_events_starts_and_stops_the_watcher(sim):
    stream = ScriptedStream()
    backend = sim(gpus=1)
    backend.open_events = lambda: stream  # type: ignore[method-assign]
    poller = Poller(backend, interval=0.25, events=True).start()
    try:
        until(lambda: poller.collector.events.watching, what="the poller's watcher watching")
        with stream.lock:
            stream.queue.append(_xid(0, 31))
        until(
            lambda: poller.latest is not None and poller.latest.gpu(0).health.last_xid == 31,
            what="Xid 31 in a snapshot",
        )
    finally:
        poller.stop()
    until(stream.closed.is_set, 1.0, "the event set released")

"""The dispatcher: the caller never waits, each channel has its own bounded queue, problems are said once."""

from __future__ import annotations

import threading
import time

import pytest

from nvtopy.alerts.events import AlertEvent
from nvtopy.notify import ChannelError, ChannelUnavailable, Dispatcher, Overflow
from nvtopy.notify import dispatcher as dispatcher_module

from .helpers import DEADLINE_S, Problems, make_event, wait_for

pytestmark = pytest.mark.timeout(60)


class Recording:
    """A channel that keeps what it was sent, with the deadline it was given."""

    def __init__(self, name: str = "recording") -> None:
        self.name = name
        self.description = name
        self.events: list[AlertEvent] = []
        self.deadlines: list[float] = []

    def send(self, event: AlertEvent, deadline: float) -> None:
        self.events.append(event)
        self.deadlines.append(deadline)


class Blocked(Recording):
    """A channel whose send waits until released, ignoring its deadline (the worst a channel can do)."""

    def __init__(self, name: str = "blocked") -> None:
        super().__init__(name)
        self.entered = threading.Event()
        self.release = threading.Event()

    def send(self, event: AlertEvent, deadline: float) -> None:
        self.entered.set()
        self.release.wait(DEADLINE_S * 2)
        super().send(event, deadline)


class Failing(Recording):
    """Raises ``error`` while ``failing`` is set."""

    def __init__(self, name: str, error: Exception) -> None:
        super().__init__(name)
        self.error = error
        self.failing = True
        self.attempts = 0

    def send(self, event: AlertEvent, deadline: float) -> None:
        self.attempts += 1
        if self.failing:
            raise self.error
        super().send(event, deadline)


def test_a_blocked_channel_delays_neither_the_caller_nor_the_others():
    blocked, fast = Blocked(), Recording("fast")
    problems = Problems()
    dispatcher = Dispatcher([blocked, fast], problems)
    try:
        for n in range(20):
            dispatcher.send(make_event(n))  # returns although one channel is stuck in its first send
        assert not blocked.release.is_set()
        wait_for(lambda: len(fast.events) == 20, "the fast channel to get all 20 events")
        assert [event.key for event in fast.events] == [make_event(n).key for n in range(20)]
        assert blocked.events == []
    finally:
        blocked.release.set()
        assert dispatcher.close(DEADLINE_S)


@pytest.mark.parametrize("overflow", [Overflow.DROP_OLDEST, Overflow.DROP_NEWEST])
def test_a_full_queue_is_bounded_drops_and_says_so_once(overflow):
    blocked = Blocked()
    problems = Problems()
    dispatcher = Dispatcher([blocked], problems, capacity=10, overflow=overflow)
    try:
        dispatcher.send(make_event(0))
        wait_for(blocked.entered.is_set, "the first send to start")
        for n in range(1, 1000):
            dispatcher.send(make_event(n))
        (stats,) = dispatcher.stats()
        assert stats.queued == 10  # bounded: 999 events offered, 10 kept
        assert stats.dropped == 989
        wait_for(lambda: problems.about("blocked", "queue full"), "the queue-full report")
        blocked.release.set()
        wait_for(lambda: problems.about("blocked", "caught up"), "the caught-up report")
        assert problems.about("blocked") == [
            "queue full (10 alerts waiting): dropping the "
            + ("oldest" if overflow is Overflow.DROP_OLDEST else "newest")
            + " until it catches up",
            "caught up; 989 alerts dropped while its queue was full",
        ]
        wait_for(lambda: len(blocked.events) == 11, "the queued events to be sent")
        kept = range(990, 1000) if overflow is Overflow.DROP_OLDEST else range(1, 11)
        assert [event.key for event in blocked.events] == [make_event(n).key for n in (0, *kept)]
    finally:
        blocked.release.set()
        assert dispatcher.close(DEADLINE_S)


def test_a_failure_is_reported_once_and_so_is_the_recovery():
    failing = Failing("flaky", ChannelError("connection refused"))
    problems = Problems()
    dispatcher = Dispatcher([failing], problems)
    try:
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: failing.attempts == 3, "three attempts")
        wait_for(lambda: problems.about("flaky"), "the failure report")
        failing.failing = False
        dispatcher.send(make_event(3))
        wait_for(lambda: problems.about("flaky", "works again"), "the recovery report")
        assert problems.about("flaky") == [
            "failed: connection refused (not reported again until it works)",
            "works again (3 alerts not delivered)",
        ]
        assert dispatcher.stats()[0].failed == 3 and dispatcher.stats()[0].sent == 1
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_an_unavailable_channel_is_said_once_and_then_skipped():
    gone = Failing("gone", ChannelUnavailable("no session bus"))
    problems = Problems()
    dispatcher = Dispatcher([gone], problems)
    try:
        for n in range(5):
            dispatcher.send(make_event(n))
        wait_for(lambda: dispatcher.stats()[0].skipped == 5, "every event to be skipped")
        assert gone.attempts == 1
        wait_for(lambda: problems.about("gone"), "the report")
        assert problems.about("gone") == ["unavailable: no session bus (no more alerts are sent to it)"]
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_an_unexpected_exception_is_reported_by_type_only_and_the_worker_lives_on():
    buggy = Failing("buggy", RuntimeError("https://user:Sup3rS3cret@example.com"))
    problems = Problems()
    dispatcher = Dispatcher([buggy], problems)
    try:
        dispatcher.send(make_event(0))
        wait_for(lambda: problems.about("buggy"), "the report")
        assert "Sup3rS3cret" not in problems.all_text()
        assert "unexpected RuntimeError" in problems.about("buggy")[0]
        buggy.failing = False
        dispatcher.send(make_event(1))
        wait_for(lambda: buggy.events, "the next event to be sent by the same worker")
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_problems_come_from_the_reporter_thread_and_a_raising_callback_does_not_stop_them():
    seen: list[str] = []

    def on_problem(channel: str, text: str) -> None:
        seen.append(threading.current_thread().name)
        raise RuntimeError("the caller's bug")

    dispatcher = Dispatcher([Failing("a", ChannelError("x")), Failing("b", ChannelUnavailable("y"))], on_problem)
    try:
        dispatcher.send(make_event(0))
        wait_for(lambda: len(seen) == 2, "both reports despite the first raising")
        assert set(seen) == {"nvtopy-notify-reports"}
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_close_returns_by_its_deadline_while_a_send_hangs_and_the_thread_ends_after(monkeypatch):
    monkeypatch.setattr(dispatcher_module, "STUCK_GRACE", 0.2)
    blocked = Blocked()
    problems = Problems()
    dispatcher = Dispatcher([blocked], problems, send_timeout=0.1)
    dispatcher.send(make_event(0))
    dispatcher.send(make_event(1))
    wait_for(blocked.entered.is_set, "the send to start")
    wait_for(lambda: problems.about("blocked", "has not returned"), "the stuck-send report")
    started = time.monotonic()
    assert dispatcher.close(0.3) is False  # the worker is still in its send
    assert time.monotonic() - started < 0.3 + 5  # close kept its deadline (5 s: slack for a loaded machine)
    worker = next(thread for thread in threading.enumerate() if thread.name == "nvtopy-notify[blocked]")
    assert worker.daemon
    blocked.release.set()
    wait_for(lambda: not worker.is_alive(), "the worker to end once its send returned")
    assert [event.key for event in blocked.events] == [make_event(0).key]  # the queued one was skipped
    assert dispatcher.stats()[0].skipped == 1
    assert len(problems.about("blocked", "has not returned")) == 1


def test_sends_after_close_get_the_close_deadline_and_later_events_are_skipped():
    recording = Recording()
    dispatcher = Dispatcher([recording], send_timeout=1000)
    dispatcher.send(make_event(0))
    before = time.monotonic()
    assert dispatcher.close(DEADLINE_S)
    assert len(recording.events) == 1
    assert recording.deadlines[0] <= before + DEADLINE_S + 1  # not the 1000 s send timeout
    dispatcher.send(make_event(1))
    assert dispatcher.stats()[0].skipped == 1 and len(recording.events) == 1


def test_every_thread_ends_on_close():
    before = set(threading.enumerate())
    with Dispatcher([Recording("a"), Recording("b")]) as dispatcher:
        dispatcher.send(make_event(0))
    wait_for(lambda: set(threading.enumerate()) <= before, "the dispatcher's threads to end")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity must be at least 1"),
        ({"send_timeout": 0}, "send_timeout must be a positive number"),
        ({"send_timeout": float("nan")}, "send_timeout must be a positive number"),
        ({"overflow": "drop-all"}, "drop-all"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Dispatcher([Recording()], **kwargs)


def test_two_channels_with_one_name_are_refused():
    with pytest.raises(ValueError, match="two channels named 'same'"):
        Dispatcher([Recording("same"), Recording("same")])

"""Sending alerts without ever waiting on a channel: one worker and one bounded queue per channel.

Why this shape: a webhook that hangs, a desktop that is gone or a script that loops must not
delay the TUI's frame, ``nvtopy watch``'s loop, or the bell that would have rung meanwhile.
So :meth:`Dispatcher.send` only appends the event to each channel's queue and returns; each
channel's daemon worker sends one event at a time with a deadline (``send_timeout``), which the
channel enforces its own way (a socket timeout, a killed process). A queue that is full drops
(the oldest, or the newest) and counts it.

Problems reach the caller once per episode, not once per alert, through ``on_problem(channel,
text)``: a channel that starts failing is reported once, and again once when it works again
(with how many alerts it did not deliver meanwhile); a queue that overflows once when it starts
dropping and once when it has caught up (with the count); a channel that cannot work here
(:class:`~nvtopy.notify.channel.ChannelUnavailable`) once, after which it is skipped; a send
that has not returned well past its deadline (a channel that ignores it) once. ``on_problem`` is
called from the dispatcher's own reporter thread, never from the caller's: a TUI hands it to
its event loop (Textual's ``call_from_thread``), a command prints it.

:meth:`Dispatcher.close` lets the queues drain until its deadline, then returns whatever still
hangs: every thread is a daemon and ends when its send does.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..alerts.events import AlertEvent
from .channel import Channel, ChannelError, ChannelUnavailable

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_SEND_TIMEOUT",
    "ChannelStats",
    "Dispatcher",
    "Overflow",
    "ProblemCallback",
]

ProblemCallback = Callable[[str, str], None]
"""``on_problem(channel_name, text)``: one line about one channel, secret-free."""

DEFAULT_CAPACITY = 100
"""Alerts waiting per channel: far more than a burst of real transitions, a few kB each at most."""
DEFAULT_SEND_TIMEOUT = 10.0
"""Seconds one send may take: a webhook across the internet, a slow SMTP server, a notification daemon."""
STUCK_GRACE = 2.0
"""Seconds past its deadline before a send that has not returned is reported as stuck."""
_REPORTS_KEPT = 256  # problem reports waiting for on_problem: they come once per episode, so this is generous
_log = logging.getLogger(__name__)


class Overflow(str, enum.Enum):
    """Which alert a full queue gives up."""

    DROP_OLDEST = "drop-oldest"  # the news is newer: a stale "GPU free" matters less than the next alert
    DROP_NEWEST = "drop-newest"  # keep what was queued first (the order of the story)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ChannelStats:
    """One channel's counts since the dispatcher started (for a status line or a test)."""

    name: str
    sent: int
    failed: int
    dropped: int  # given up because the queue was full
    skipped: int  # not sent because the channel is unavailable, or the dispatcher closed first
    queued: int
    failing: bool
    unavailable: bool


class _Lane:
    """One channel's queue and worker thread."""

    def __init__(
        self,
        channel: Channel,
        capacity: int,
        overflow: Overflow,
        send_timeout: float,
        report: Callable[[str, str], None],
    ) -> None:
        self.channel = channel
        self.name = channel.name
        self._capacity = capacity
        self._overflow = overflow
        self._send_timeout = send_timeout
        self._report = report
        self._queue: collections.deque[AlertEvent] = collections.deque()
        self._cond = threading.Condition()
        self._close_deadline: float | None = None
        self.sent = self.failed = self.dropped = self.skipped = 0
        self.failing = False
        self.unavailable = False
        self._failed_meanwhile = 0  # alerts not delivered since the failure was reported
        self._dropping = False
        self._dropped_meanwhile = 0
        self.busy_deadline: float | None = None  # the running send's deadline; None when idle
        self.stuck_reported = False
        self.thread = threading.Thread(target=self._run, name=f"nvtopy-notify[{self.name}]", daemon=True)

    # --- the caller's side: never blocks beyond a short lock

    def put(self, event: AlertEvent) -> None:
        started_dropping = False
        with self._cond:
            if self._close_deadline is not None or self.unavailable:
                self.skipped += 1
                return
            if len(self._queue) >= self._capacity:
                self.dropped += 1
                self._dropped_meanwhile += 1
                started_dropping = not self._dropping
                self._dropping = True
                if self._overflow is Overflow.DROP_OLDEST:
                    self._queue.popleft()
                    self._queue.append(event)
            else:
                self._queue.append(event)
                self._cond.notify()
        if started_dropping:
            self._report_drop_start()

    def _report_drop_start(self) -> None:
        self._report(
            self.name,
            f"queue full ({self._capacity} alerts waiting): dropping the {self._overflow_word()} until it catches up",
        )

    def _overflow_word(self) -> str:
        return "oldest" if self._overflow is Overflow.DROP_OLDEST else "newest"

    def close(self, deadline: float) -> None:
        with self._cond:
            self._close_deadline = deadline
            self._cond.notify()

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    # --- the worker's side

    def _next(self) -> tuple[AlertEvent, float] | None:
        with self._cond:
            while not self._queue and self._close_deadline is None:
                self._cond.wait()
            now = time.monotonic()
            if not self._queue or (self._close_deadline is not None and now >= self._close_deadline):
                self.skipped += len(self._queue)
                self._queue.clear()
                return None
            event = self._queue.popleft()
            deadline = now + self._send_timeout
            if self._close_deadline is not None:
                deadline = min(deadline, self._close_deadline)
            self.busy_deadline = deadline
            return event, deadline

    def _run(self) -> None:
        while (item := self._next()) is not None:
            event, deadline = item
            error: str | None = None
            unavailable = False
            try:
                self.channel.send(event, deadline)
            except ChannelUnavailable as exc:
                error, unavailable = str(exc) or "unavailable", True
            except ChannelError as exc:
                error = str(exc) or type(exc).__name__
            except Exception as exc:  # noqa: BLE001 - a channel's bug must not end its worker; its text may hold a secret
                error = f"unexpected {type(exc).__name__} (a bug in nvtopy's channel)"
                _log.debug("channel %s raised", self.name, exc_info=True)
            with self._cond:
                self.busy_deadline = None
                was_stuck, self.stuck_reported = self.stuck_reported, False
            if was_stuck:
                self._report(self.name, "the stuck send returned")
            if unavailable:
                self._become_unavailable(error or "unavailable")
            elif error is not None:
                self.failed += 1
                self._failed_meanwhile += 1
                if not self.failing:
                    self.failing = True
                    self._report(self.name, f"failed: {error} (not reported again until it works)")
            else:
                self.sent += 1
                if self.failing:
                    self.failing = False
                    missed, self._failed_meanwhile = self._failed_meanwhile, 0
                    self._report(self.name, f"works again ({missed} alert{'s' * (missed != 1)} not delivered)")
                self._failed_meanwhile = 0
            self._check_caught_up()

    def _become_unavailable(self, error: str) -> None:
        with self._cond:
            self.unavailable = True
            self.skipped += 1 + len(self._queue)
            self._queue.clear()
        self._report(self.name, f"unavailable: {error} (no more alerts are sent to it)")

    def _check_caught_up(self) -> None:
        with self._cond:
            if not self._dropping or self._queue:
                return
            self._dropping = False
            dropped, self._dropped_meanwhile = self._dropped_meanwhile, 0
        self._report(self.name, f"caught up; {dropped} alert{'s' * (dropped != 1)} dropped while its queue was full")

    def stats(self) -> ChannelStats:
        with self._cond:
            return ChannelStats(
                name=self.name,
                sent=self.sent,
                failed=self.failed,
                dropped=self.dropped,
                skipped=self.skipped,
                queued=len(self._queue),
                failing=self.failing,
                unavailable=self.unavailable,
            )


class Dispatcher:
    """Sends each :class:`AlertEvent` to every channel, each on its own worker, never blocking the caller.

    ``on_problem(channel_name, text)`` hears about failures, recoveries, drops and unavailable
    channels, once per episode, from the dispatcher's reporter thread (default: this module's
    logger). ``capacity`` bounds each channel's queue; ``overflow`` says which alert a full queue
    drops; ``send_timeout`` is each send's deadline, in seconds.

    Usable as a context manager (``close()`` on exit). Thread-safe: any thread may call :meth:`send`.
    """

    def __init__(
        self,
        channels: Sequence[Channel],
        on_problem: ProblemCallback | None = None,
        *,
        capacity: int = DEFAULT_CAPACITY,
        overflow: Overflow | str = Overflow.DROP_OLDEST,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        if not 0 < send_timeout < threading.TIMEOUT_MAX:
            raise ValueError(f"send_timeout must be a positive number of seconds, not {send_timeout}")
        overflow = Overflow(overflow)  # ValueError for a word that is none of its values
        names = [channel.name for channel in channels]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"two channels named {duplicates[0]!r}: each channel needs its own name")
        self._on_problem = on_problem or _log_problem
        self._reports: collections.deque[tuple[str, str]] = collections.deque(maxlen=_REPORTS_KEPT)
        self._report_cond = threading.Condition()
        self._closing = False
        self._lanes = [_Lane(channel, capacity, overflow, send_timeout, self._report) for channel in channels]
        self._reporter = threading.Thread(target=self._run_reporter, name="nvtopy-notify-reports", daemon=True)
        self._reporter.start()
        for lane in self._lanes:
            lane.thread.start()

    @property
    def channels(self) -> list[Channel]:
        return [lane.channel for lane in self._lanes]

    def send(self, event: AlertEvent) -> None:
        """Queue ``event`` for every channel and return at once (after :meth:`close`: counted as skipped)."""
        for lane in self._lanes:
            lane.put(event)

    def stats(self) -> list[ChannelStats]:
        """Each channel's counts, in the order the channels were given."""
        return [lane.stats() for lane in self._lanes]

    def close(self, timeout: float = 3.0) -> bool:
        """Let the queues drain for up to ``timeout`` seconds, then return; True when every worker ended.

        Sends that start after ``close`` get at most what is left of ``timeout`` as their
        deadline; alerts still queued at the deadline are skipped. A send that ignores its
        deadline keeps its daemon thread until it returns; this call does not wait for it.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        for lane in self._lanes:
            lane.close(deadline)
        for lane in self._lanes:
            lane.thread.join(max(0.0, deadline - time.monotonic()))
        with self._report_cond:
            self._closing = True
            self._report_cond.notify()
        self._reporter.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads())

    def _threads(self) -> list[threading.Thread]:
        return [*(lane.thread for lane in self._lanes), self._reporter]

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- problems: gathered from every worker, handed to on_problem on one thread

    def _report(self, name: str, text: str) -> None:
        with self._report_cond:
            self._reports.append((name, text))
            self._report_cond.notify()

    def _run_reporter(self) -> None:
        while True:
            with self._report_cond:
                if not self._reports and not self._closing:
                    self._report_cond.wait(timeout=STUCK_GRACE / 2)
                pending = list(self._reports)
                self._reports.clear()
                closing = self._closing
            self._check_stuck()
            for name, text in pending:
                try:
                    self._on_problem(name, text)
                except Exception:  # noqa: BLE001 - the caller's callback failing must not silence later reports
                    _log.debug("on_problem raised", exc_info=True)
            if closing and not pending:
                with self._report_cond:
                    if not self._reports:
                        return

    def _check_stuck(self) -> None:
        now = time.monotonic()
        for lane in self._lanes:
            with lane._cond:
                busy, reported = lane.busy_deadline, lane.stuck_reported
                if busy is None or reported or now < busy + STUCK_GRACE:
                    continue
                lane.stuck_reported = True
            self._report(lane.name, f"a send has not returned {now - busy:.0f} s past its deadline; alerts queue")


def _log_problem(name: str, text: str) -> None:
    _log.warning("alert channel %s: %s", name, text)

"""The one drift-compensated tick: every source's thread and ``nvtopy log`` wait the same way.

A tick is due one interval after the previous one *began*, so the time a poll
takes does not add up into drift (a 1 s logger writes a row a second, not one
every 1.05 s). A tick that ran late is not made up for: when a poll took longer
than the interval the next one starts at once, and the ticks missed meanwhile
are skipped, never run back to back (a stuck driver must not be followed by a
burst of polls).

The interval is read when the wait is computed: a source whose interval changed
during a poll waits the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Ticker"]


class Ticker:
    """The next deadline of a periodic task: :meth:`tick` when a round begins, :meth:`remaining` to wait after it."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        """``clock``: seconds on a steady scale (default ``time.monotonic``, looked up at each call)."""
        self._clock_given = clock
        self._began: float | None = None

    def _clock(self) -> float:
        return self._clock_given() if self._clock_given is not None else time.monotonic()

    def tick(self) -> None:
        """A round begins now: the next is due one interval from here."""
        self._began = self._clock()

    def next_deadline(self, interval: float) -> float:
        """When the next round is due (on the clock's scale): an interval after this one began."""
        began = self._clock() if self._began is None else self._began
        return began + interval

    def remaining(self, interval: float) -> float:
        """Seconds to wait before the next round; 0 when it is due or overdue (missed ticks are skipped)."""
        return max(0.0, self.next_deadline(interval) - self._clock())

"""Waiting in a test for something another thread or process makes true: :func:`until`, one loop for all.

Why one: the suites each had a copy (a deadline, a short sleep, a message), and the copies drifted: one
returned False for the caller to assert, one never looked again after its last sleep, one named no value.
A test waits on a condition, never on a sleep for luck; this loop bounds the wait and says what it waited
for. (The Textual app's waits go through the pilot: :func:`tests.tui_helpers.wait_until`.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["until"]

T = TypeVar("T")

_SHOWN = 200  # characters of the last value in the failure message (a falsy value is short, but may not be)


def until(
    condition: Callable[[], T | None],
    timeout: float = 10.0,
    what: str | Callable[[], str] = "the condition",
    *,
    step: float = 0.02,
) -> T:
    """``condition()``'s first true value, asked every ``step`` s; AssertionError naming ``what`` after ``timeout`` s.

    The condition is asked once more after the deadline has passed, so a value that came during the last sleep
    counts. ``what`` may be a function, called only on failure, for a message that shows the state at the end.
    """
    __tracebackhide__ = True  # pytest: the failure points at the test's wait, not at this loop
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"not within {timeout:g} s: {said} (last: {repr(value)[:_SHOWN]})")
        time.sleep(step)

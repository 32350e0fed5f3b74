"""Waiting in a test for something another thread or process makes true: :func:`until`, one loop for all.

Why one: the suites each had a copy (a deadline, a short sleep, a message), and the copies drifted: one
returned False for the caller to assert, one never looked again after its last sleep, one named no value.
A test waits on a condition, never on a sleep for luck; this loop bounds the wait and says what it waited
for. (The Textual app's waits go through the pilot: :func:`tests.tui_helpers.wait_until`.) :func:`exec_shown` waits
for a spawned child's new program to show in ``/proc``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["exec_shown", "until"]

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


def _filled(path: str) -> bool:
    """Whether the ``/proc`` file ``path`` has a first byte (False where it cannot be read: not there yet, gone)."""
    try:
        with open(path, "rb") as file:
            return bool(file.read(1))
    except OSError:
        return False


def exec_shown(pid: int, timeout: float = 10.0, *, environ: bool = False) -> int:
    """``pid`` once the kernel shows its exec'd program's argv (and environment, with ``environ``); AssertionError
    after ``timeout`` s.

    Why: ``subprocess.Popen`` returns once the child's exec has closed its close-on-exec descriptors, before the
    kernel has set the new program's argv and environment: until then ``/proc/<pid>/cmdline`` and ``environ`` are
    empty (read right after ``Popen``: empty in 47,895 of 50,628 spawns on a loaded 2-core VM). A test that
    expects a reader (nvtopy, psutil) to see the child's command or environment at once waits here first, after
    every ``Popen`` of such a child. (The name and executable are set earlier in the exec: they need no wait.)
    ``environ``: wait for it too (it is filled after the argv): only for a child spawned with some environment.
    """
    __tracebackhide__ = True
    names = ("cmdline", "environ") if environ else ("cmdline",)
    until(
        lambda: all(_filled(f"/proc/{pid}/{name}") for name in names),
        timeout,
        f"pid {pid}'s exec'd {' and '.join(names)} in /proc",
        step=0.002,
    )
    return pid

"""The terminal driver: Textual's Linux driver, whose input thread stops at once when the app quits.

Why: Textual's input thread polls the terminal in 0.1 s waits and, once told to
stop, waits one more 0.1 s for input that may still come; quitting joins that
thread, so 0.1 to 0.2 s of every quit was spent waiting for it (measured with
``--demo`` in a pty: 200 ms of the 460 ms from ``q`` to the shell prompt). Here
the thread also waits on a pipe that :meth:`disable_input` writes to: it wakes,
sees the exit flag and ends within a millisecond. Input still pending then is
discarded, as Textual does (``tcflush``) -- a key typed after ``q`` is not
replayed into the shell.

It also sleeps while there is nothing to wait for: Textual's loop wakes ten times a
second to tick its parser (an escape sequence cut short ends after a timeout), whether
or not the parser holds one -- about 1 ms of CPU a second, idle, a tenth of a
one-GPU monitor's whole steady CPU (measured per thread, 1 GPU x 1 process on the
fake driver: the input thread 0.98 ms/s of 8.5). Here the wait is unbounded while the
parser awaits nothing and lasts until its timeout when it does (:func:`input_wait`).

Only the input loop is replaced; everything else (modes, resize, suspend with
ctrl+z, the writer thread) is Textual's. A platform whose driver is not the
Linux one (Windows, a driver named in ``TEXTUAL_DRIVER``, headless tests) keeps
its own: :func:`prompt_driver`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
from codecs import getincrementaldecoder
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

__all__ = ["PromptExitDriver", "input_wait", "prompt_driver"]

_POLL_S = 0.1  # the input thread's longest wait while the parser awaits a timeout (as Textual's every wait)


def input_wait(parser: object) -> float | None:
    """How long the input thread may wait for input: None (until some comes, or the wake pipe) while the
    parser awaits no timeout; else until that timeout is due, at most :data:`_POLL_S`.

    The parser's due time is Textual's private ``_timeout_time`` (set while an escape sequence is cut
    short, None otherwise); a parser without it is ticked at Textual's own pace.
    """
    if not hasattr(parser, "_timeout_time"):
        return _POLL_S
    due = parser._timeout_time
    if due is None:
        return None
    return min(_POLL_S, max(0.0, float(due) - get_time()))


class PromptExitDriver(LinuxDriver):
    """:class:`LinuxDriver` whose input thread wakes on a pipe when input is disabled (quit, suspend)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    def run_input_thread(self) -> None:
        """Read keys and mouse events until :attr:`exit_event` is set; wake at once when it is."""
        self._drain_wake()  # a wake left over from a suspend
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        with selectors.SelectSelector() as selector:  # as Textual: epoll refuses a regular file on stdin
            selector.register(self.fileno, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self.exit_event.is_set():
                for key, _ in selector.select(input_wait(parser)):
                    if key.fd != self.fileno or self.exit_event.is_set():
                        continue
                    data = decode(os.read(self.fileno, 1024 * 4))
                    if not data:  # stdin closed (piped)
                        return
                    for event in parser.feed(data):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)

    def disable_input(self) -> None:
        """Wake the input thread before Textual sets the exit flag and joins it."""
        if not self.exit_event.is_set():
            with contextlib.suppress(OSError):  # a full pipe: the thread is awake already
                os.write(self._wake_write, b"\0")
        super().disable_input()

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_read, 64):
                pass


def prompt_driver(driver: type[Driver]) -> type[Driver]:
    """The driver to run with: :class:`PromptExitDriver` where Textual would use its Linux driver, else ``driver``."""
    return PromptExitDriver if driver is LinuxDriver else driver

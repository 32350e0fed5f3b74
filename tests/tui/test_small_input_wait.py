"""The terminal driver's input thread sleeps while there is no input, yet still ends a lone ``esc`` on time.

Textual's input loop woke ten times a second to tick its parser whether or not the parser awaited a
timeout (about 1 ms of CPU a second on a one-GPU monitor, a tenth of its steady CPU);
:func:`~nvtopy.tui.terminal_driver.input_wait` waits without a bound while the parser awaits nothing,
and until the parser's timeout when an escape sequence was cut short (a lone ``esc`` is the key).
"""

from __future__ import annotations

import os
import selectors
import signal
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual import events

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.terminal_driver import input_wait


def _until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class _Driver:
    """The app's driver reading a pipe that stands for the terminal; what it parses, and its waits, recorded."""

    def __init__(self) -> None:
        driver_class = NvtopyApp.for_backend(None, opener=lambda: None).get_driver_class()  # type: ignore[arg-type]
        self.keys, self.typed = os.pipe()
        self.driver: Any = driver_class(app=None)  # type: ignore[arg-type]
        self.driver.fileno = self.keys
        self.driver.write = self.driver.flush = lambda *data: None  # no terminal to write the mode changes to
        self.events: list[events.Event] = []
        self.driver.process_message = self.events.append
        self.thread = threading.Thread(target=self.driver._run_input_thread, daemon=True)
        self.driver._key_thread = self.thread

    def stop(self) -> None:
        self.driver.disable_input()
        os.close(self.keys)
        os.close(self.typed)


@pytest.fixture
async def driver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[_Driver, list[float | None]]]:
    """Made in the event loop (Textual's driver takes the running loop)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT, signal.SIGWINCH)}
    waits: list[float | None] = []
    select = selectors.SelectSelector.select

    def recorded(self: selectors.SelectSelector, timeout: float | None = None) -> Any:
        if threading.current_thread() is made.thread:
            waits.append(timeout)
        return select(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", recorded)
    made = _Driver()
    try:
        yield made, waits
    finally:
        made.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


async def test_the_input_thread_sleeps_while_nothing_is_typed(driver: tuple[_Driver, list[float | None]]) -> None:
    """Idle for 0.35 s: one unbounded wait (Textual's loop woke every 0.1 s: four times here)."""
    made, waits = driver
    made.thread.start()
    _until(lambda: waits, timeout=5.0)  # the thread is in its first wait (a loaded machine may take a while)
    time.sleep(0.35)  # the time the thread is given to wake needlessly: what is measured, not a wait for luck
    assert waits == [None], f"the input thread waited {waits}"
    made.driver.disable_input()
    assert not made.thread.is_alive()


async def test_a_lone_escape_is_still_a_key_after_its_delay(driver: tuple[_Driver, list[float | None]]) -> None:
    """An ``esc`` with nothing after it: the parser awaits its escape delay; the thread wakes for it, bounded
    by Textual's 0.1 s tick, and the key arrives (with an unbounded wait it would not until the next input)."""
    made, waits = driver
    made.thread.start()
    os.write(made.typed, b"\x1b")
    _until(lambda: any(isinstance(e, events.Key) and e.key == "escape" for e in made.events), timeout=3.0)
    assert any(wait is not None and wait <= 0.1 for wait in waits), f"the input thread waited {waits}"


def test_the_wait_follows_the_parser() -> None:
    """None while the parser awaits nothing; until its due time (at most 0.1 s) while it awaits a timeout;
    Textual's 0.1 s for a parser without the attribute."""

    class Parser:
        _timeout_time: float | None = None

    parser = Parser()
    assert input_wait(parser) is None
    parser._timeout_time = time.monotonic() + 0.05
    wait = input_wait(parser)
    assert wait is not None and 0.0 < wait <= 0.05
    parser._timeout_time = time.monotonic() + 5.0
    assert input_wait(parser) == 0.1
    parser._timeout_time = time.monotonic() - 1.0
    assert input_wait(parser) == 0.0
    assert input_wait(object()) == 0.1

"""SIGINT and SIGTERM set the commands' stop event, also when they land while the main thread waits on it.

Why: ``nvtopy watch`` once hung for good on SIGTERM. faulthandler showed the handler's ``stop.set()`` on the main
thread, interrupting that thread's own ``stop.wait()`` at the instant it held the event's lock: ``set`` then waited
for a lock its own thread held. The handler now sets the event from a thread of its own.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from nvtopy.commands.signals import stop_on_signals


def test_the_handler_returns_at_once_while_the_events_lock_is_held_and_the_event_is_set_after():
    with stop_on_signals() as stop:
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        returned = threading.Event()

        def interrupted_inside_wait() -> None:
            # What the main thread looked like when the signal came: inside Event.wait, holding its lock.
            with stop._cond:  # type: ignore[attr-defined]
                handler(signal.SIGTERM, None)
                returned.set()

        thread = threading.Thread(target=interrupted_inside_wait, daemon=True)
        thread.start()
        assert returned.wait(5), "the handler waited for the lock its own thread held"
        assert stop.wait(5), "the event is set once the lock is let go"


def test_a_real_signal_sets_the_event_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
    assert signal.getsignal(signal.SIGINT) is before


def test_only_the_commands_signal_module_sets_a_handler():
    """Every stop handler of nvtopy's is this module's (one home): a lambda that sets an event from the handler
    hung the exporter on a SIGTERM right after its port opened (a fresh clone's CI run, 2026-11-30)."""
    root = Path(__file__).resolve().parents[2] / "nvtopy"
    setters = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "signal.signal(" in path.read_text(encoding="utf-8")
    )
    assert setters == ["commands/signals.py"]

"""Stop signals as a request to stop, for the commands that run until told (log, record, watch, exporter,
serve-stdio).

Why an event and not KeyboardInterrupt: a signal that raises lands anywhere -- in the middle
of a write, a driver call, a source's start -- and leaves a half-written line or a thread
behind. Setting an event lets the work in progress complete; the loop looks at the event
between two steps and ends cleanly (exit 0, the source stopped, the file whole).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["STOP_SIGNALS", "stop_on_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[threading.Event]:
    """An event ``signals`` set while the block runs (SIGINT and SIGTERM unless told); the previous handlers come
    back after it.

    The handler sets the event from a thread of its own, never itself: a handler runs on the main
    thread between two of its steps, and when that step was inside ``stop.wait()`` holding the event's
    lock (``Condition._is_owned`` takes it for an instant), ``stop.set()`` waited for that lock forever --
    ``nvtopy watch`` hung on SIGTERM, once in some twenty test runs, until faulthandler showed where. The exporter
    and ``serve-stdio`` still set their event in the handler, and could hang alike (a fresh clone's CI run,
    2026-11-30, saw the exporter not stop within 5 s of a SIGTERM right after its port opened; not reproduced in
    150 runs): they take this handler now.
    """
    stop = threading.Event()

    def request_stop(*_: object) -> None:
        threading.Thread(target=stop.set, name="nvtopy-stop", daemon=True).start()

    handlers = {sig: signal.signal(sig, request_stop) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

"""The garbage collector for the monitors: paused while a fleet's large answer is decoded, settled for a long run.

Where it lives: ``sources/``, beside the sources whose objects it is tuned for -- the fleet views'
(``remote/``) and, since 2026-11-30, the local monitor's (:func:`settle_for_monitor`).

Why the fleet's own policy: a fleet refresh (``--prometheus``, ``--remote``, ``--ssh``)
builds thousands of short-lived objects a second -- at 64 hosts x 8 GPUs some 13,000 a
refresh (samples, processes, GPU states) -- and CPython's collector, set off every 700
allocations, walks every object alive each time it reaches the oldest generation: Textual's
widgets, the modules, the histories. None of that work frees anything: the model holds no
cycles. Measured with ``benchmarks/bench_ssh.py`` (64 x 8, 15 s, this 2-core machine under
load, two runs each): 168-177 ms of the monitor's CPU a refresh with the default collector,
124-137 ms settled (:data:`FLEET_THRESHOLDS`, everything alive at the start frozen), 143 ms
with no automatic collection at all.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["FLEET_THRESHOLDS", "MONITOR_THRESHOLDS", "paused_gc", "settle_for_fleet", "settle_for_monitor"]

FLEET_THRESHOLDS = (50_000, 20, 100)
"""gc.set_threshold for a fleet monitor: a young collection every 50,000 allocations (not 700), the oldest
generation 100 times rarer again. Cyclic garbage waits longer; the fleet's model makes none."""

MONITOR_THRESHOLDS = (10_000, 10, 10)
"""gc.set_threshold for the local monitor: a young collection every 10,000 allocations (not 700). Measured in
tmux (200x50, 8 GPUs x 64 processes, 61 s after a 3 s start, :func:`gc.callbacks`): with CPython's 700/10/10
the collector ran 131 times for 244 ms (about a tenth of the monitor's CPU; one full collection alone 71 ms);
settled, 7 times for 64 ms, peak RSS 0.3 MiB higher. Textual's cyclic garbage (events, widgets' closures)
waits seconds longer; the oldest generation is still collected, about every quarter of an hour."""

_gc_lock = threading.Lock()
_gc_pauses = 0  # callers inside paused_gc() now
_gc_was_enabled = False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a large answer is decoded and turned into the model.

    Why: an answer about 500 GPUs is some 30,000 JSON objects, and allocating them
    sets off collections that walk every object alive, again and again -- more than
    half the time of a refresh (measured: 600-800 ms with, 250-400 ms without). What
    is made there holds no cycles; the collector runs as usual once the last caller
    (of any thread) leaves.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def settle_for_fleet() -> None:
    """Before a fleet monitor's long run: what is alive now frozen out of every collection, the thresholds raised.

    ``gc.freeze`` moves every object alive (the modules, the source, the app before it mounts) to a
    generation no collection walks; a collection first, so no garbage is frozen with them. For a
    process that runs a fleet view until it quits (``nvtopy --ssh/--remote/--prometheus``), never for a
    library caller's process.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*FLEET_THRESHOLDS)


def settle_for_monitor() -> None:
    """Before the local monitor's long run: what is alive now frozen out of every collection, the young
    generation's threshold raised (:data:`MONITOR_THRESHOLDS`). For the ``nvtopy`` program's monitor only,
    never a library caller's process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*MONITOR_THRESHOLDS)

"""The garbage collector for the monitors: paused while a fleet's large answer is decoded, settled for a long run;
and, for a fleet view, the C allocator told to keep the large blocks it frees (:func:`keep_freed_blocks`).

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
import sys
import threading
from collections.abc import Iterator

__all__ = [
    "FLEET_THRESHOLDS",
    "KEPT_BLOCK_BYTES",
    "MONITOR_THRESHOLDS",
    "keep_freed_blocks",
    "paused_gc",
    "settle_for_fleet",
    "settle_for_monitor",
]

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
    keep_freed_blocks()


KEPT_BLOCK_BYTES = 32 << 20
"""glibc's ``M_MMAP_THRESHOLD`` for a fleet view: a block of up to 32 MiB (its largest setting) comes from the heap and
goes back to it when freed, not from a mapping of its own unmapped at its free."""
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # mallopt's parameters (glibc's malloc.h)
_TRIM_BYTES = 512 << 20  # the free memory at the heap's top (and a thread's heap) kept rather than given back
_TOP_PAD_BYTES = 64 << 20  # the heap grown this much more at once: one refresh's answer, not 200 steps of 128 KiB


def keep_freed_blocks() -> bool:
    """Tell glibc's allocator to keep the large blocks a fleet refresh frees for the next refresh; True if it took.

    Why: a fleet refresh at 4,096 GPUs receives a 21 MB answer (undone from its gzip in 1 MiB pieces and joined) on
    its query's thread and frees it a few hundred ms later, every second, among some 30 MB of other blocks. glibc
    serves a block past its mapping threshold from a mapping of its own and unmaps it at its free; the threshold
    follows the largest such block freed so far, so the first refreshes' answers and each one larger than any
    before are mapped afresh, and the heap's free top past twice the threshold is given back. Each time, every page
    is taken from the kernel again (a fault and a zeroed page each 4 KiB). Measured live
    (``bench_fleet.py --sizes 512 --refreshes 10``, interleaved, 2026-12-01 03:02-03:18): 423.5, 444.2 and 431.0 ms
    a refresh with these settings, 459.2, 495.7 and 453.0 ms without; the queries' threads 35-39 ms against 61-62
    ms; the slowest refresh 456-563 ms against 495-694 ms.

    The price: memory freed stays the process's (its resident size stays near its peak, what the largest
    refresh needed) rather than going back to the system between refreshes. Only for a process that runs a
    fleet view until it quits (``settle_for_fleet``), never a library caller's. Python's own small objects are
    not the C allocator's (pymalloc's arenas): unchanged. glibc only: other C libraries (musl's ``mallopt``
    does nothing, macOS and Windows have none) keep their own ways, and False says so.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only here: the one-shot and the local monitor never import it for this

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES), (_M_TRIM_THRESHOLD, _TRIM_BYTES), (_M_TOP_PAD, _TOP_PAD_BYTES))
    took = [mallopt(parameter, value) for parameter, value in settings]  # each tried, whatever the one before said
    return all(result == 1 for result in took)


def settle_for_monitor() -> None:
    """Before the local monitor's long run: what is alive now frozen out of every collection, the young
    generation's threshold raised (:data:`MONITOR_THRESHOLDS`). For the ``nvtopy`` program's monitor only,
    never a library caller's process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*MONITOR_THRESHOLDS)

"""How long each NVML call nvtopy makes takes on this machine's driver, one table.

Why it exists: the fake driver answers every call in microseconds, so the benchmarks
count calls but cannot say which ones a real driver makes slow. On a machine with a
real GPU this runs the very poller the TUI runs (the monitor's field groups, at their
cadences, a real second apart), with every ``nvml*`` function of the bindings wrapped
in a timer, and prints each call's count, mean, median and worst latency and its share
of the NVML time, plus each poll's wall and CPU time:

    PYTHONPATH=. python3 devcheck/nvml_timing.py --polls 10

Only a reader: it sets nothing on the GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any


def wrap_bindings(nvml: Any, seconds: dict[str, list[float]]) -> int:
    """Replace each ``nvml*`` function of the bindings with one that records its latency; how many were wrapped.

    nvtopy calls some C symbols directly (the process lists, through ``_nvmlGetFunctionPointer``,
    one call instead of pynvml's two): those are timed as ``NAME (direct)``. A symbol the bindings'
    own functions look up is not timed twice: only calls made outside a wrapped function count.
    """
    depth = threading.local()
    wrapped = 0
    for name in dir(nvml):
        function = getattr(nvml, name)
        if not name.startswith("nvml") or not callable(function) or isinstance(function, type):
            continue
        setattr(nvml, name, _timed(function, seconds[name], depth))
        wrapped += 1
    lookup = nvml._nvmlGetFunctionPointer

    def timed_lookup(symbol: str) -> Any:
        function = lookup(symbol)
        if getattr(depth, "level", 0):
            return function
        return _timed(function, seconds[f"{symbol} (direct)"], depth)

    nvml._nvmlGetFunctionPointer = timed_lookup
    return wrapped


def _timed(function: Callable[..., Any], record: list[float], depth: threading.local) -> Callable[..., Any]:
    clock = time.perf_counter

    def timed(*args: Any, **kwargs: Any) -> Any:
        level = getattr(depth, "level", 0)
        depth.level = level + 1
        start = clock()
        try:
            return function(*args, **kwargs)
        finally:
            if not level:
                record.append(clock() - start)
            depth.level = level

    return timed


def table(seconds: dict[str, list[float]], polls: int) -> list[str]:
    """One line per call, the costliest first: calls a poll, mean/median/worst microseconds, share of the time."""
    total = sum(sum(values) for values in seconds.values()) or 1.0
    lines = [f"{'call':52} {'calls':>6} {'/poll':>6} {'mean us':>9} {'p50 us':>9} {'max us':>9} {'share':>6}"]
    ranked = sorted(((sum(v), name, v) for name, v in seconds.items() if v), reverse=True)
    for spent, name, values in ranked:
        lines.append(
            f"{name:52} {len(values):6d} {len(values) / polls:6.1f} {1e6 * spent / len(values):9.1f} "
            f"{1e6 * statistics.median(values):9.1f} {1e6 * max(values):9.1f} {100 * spent / total:5.1f}%"
        )
    lines.append(
        f"{'all NVML calls':52} {sum(len(v) for v in seconds.values()):6d}  {1e3 * total / polls:.2f} ms a poll"
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=10, help="polls to time after 2 to warm up (default 10)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    args = parser.parse_args()

    from nvtopy.backends.nvml.backend import import_pynvml
    from nvtopy.backends.open import backend_opener, nvml_spec
    from nvtopy.sources.poller import MONITOR_GROUPS, Poller

    seconds: dict[str, list[float]] = defaultdict(list)
    wrapped = wrap_bindings(import_pynvml(), seconds)
    started = time.perf_counter()
    backend = backend_opener(nvml_spec())()
    opened = time.perf_counter() - started
    poller = Poller(backend, interval=args.interval, groups=MONITOR_GROUPS)
    poller.subscribe(lambda snapshot: None)
    walls: list[float] = []
    cpus: list[float] = []
    for index in range(2 + args.polls):
        if index == 2:  # the warm-up's calls out (each wrapper holds its own list)
            for values in seconds.values():
                values.clear()
        wall, cpu = time.perf_counter(), time.thread_time()
        poller.poll_once()
        if index >= 2:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
        time.sleep(args.interval)
    if poller.collector is not None:
        poller.collector.close()
    backend.close()
    print(f"nvml_timing: {wrapped} bindings wrapped; opening the backend took {1e3 * opened:.1f} ms")
    print(
        f"a poll: wall median {1e3 * statistics.median(walls):.2f} ms (max {1e3 * max(walls):.2f}), "
        f"CPU median {1e3 * statistics.median(cpus):.2f} ms, over {args.polls} polls {args.interval:g} s apart"
    )
    print("\n".join(table(seconds, args.polls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

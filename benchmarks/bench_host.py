"""``make bench``: the cost of reading the host facts of GPU processes once per refresh.

64 real ``sleep`` processes; each round reads every one of them as the monitor's
poller does on a steady refresh (:class:`nvtopy.backends.host.processes.PsutilInspector`),
against psutil's own steady path for the same facts (``is_running()`` then
``status``/``cpu_times``/``memory_info``/``ppid`` under ``oneshot()``), which the
inspector used before it read ``/proc/<pid>/stat`` itself. Median of 7 runs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import psutil

from nvtopy.backends.host.processes import PsutilInspector

PROCESSES = 64
ROUNDS = 50


def _psutil_steady(processes: list[psutil.Process]) -> None:
    for process in processes:
        process.is_running()
        with process.oneshot():
            process.status()
            process.cpu_times()
            process.memory_info()
            process.ppid()


def main() -> int:
    if sys.platform != "linux":
        print("bench_host skipped: /proc is Linux's")
        return 0
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(PROCESSES)]
    try:
        pids = [s.pid for s in sleepers]
        inspector = PsutilInspector()
        inspector.inspect(pids)  # first sight: the static facts, once
        processes = [psutil.Process(pid) for pid in pids]
        runs: dict[str, list[float]] = {"nvtopy inspector": [], "psutil steady path": []}
        for _ in range(7):
            for name, call in (
                ("nvtopy inspector", lambda: inspector.inspect(pids)),
                ("psutil steady path", lambda: _psutil_steady(processes)),
            ):
                started = time.perf_counter()
                for _ in range(ROUNDS):
                    call()
                runs[name].append((time.perf_counter() - started) / ROUNDS)
        print(f"# host facts of {PROCESSES} processes per refresh, median of 7 x {ROUNDS} rounds")
        for name, values in runs.items():
            median = statistics.median(values)
            print(f"  {name:20s} {median * 1e3:6.2f} ms  ({median / PROCESSES * 1e6:5.1f} µs per process)")
        ratio = statistics.median(runs["nvtopy inspector"]) / statistics.median(runs["psutil steady path"])
        print(f"  ratio                {ratio:.2f}x")
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

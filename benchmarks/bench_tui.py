"""``make bench``: what the TUI costs, on the simulated backend (no GPU, no ../shared needed).

Measured:

1. Time to first frame and to the first frame with data, in a real pseudo-terminal.
2. Steady CPU and peak RSS of ``nvtopy --demo`` in a real 200x50 pseudo-terminal
   (8 GPUs x 64 processes, 1 s refresh), as a user would run it.
3. Per refresh, headless and in-process: UI-thread CPU time (filter, sort, draw)
   and poller CPU time (collect + psutil-equivalent join), for 8 GPUs x 64/200/250
   and 16 GPUs x 1000 processes -- the curve shows how cost grows with processes.
   ``thread_time`` counts only the thread's own CPU, so waiting is not counted.
4. An idle refresh: a snapshot identical to the last one (nothing to redraw).

Results: a table on stdout and ``benchmarks/results/tui.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import psutil
from ptyrun import PtyRun

RESULTS = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------- real terminal


def nvtopy_argv(*extra: str) -> list[str]:
    return [sys.executable, "-m", "nvtopy", "--demo", "--demo-gpus", "8", "--demo-procs", "8", "--demo-steady", *extra]


def first_frame(repeats: int) -> dict[str, float]:
    paints, data = [], []
    for _ in range(repeats):
        run = PtyRun(nvtopy_argv())
        try:
            paints.append(run.wait_for([b"nvtopy", b"COMMAND"]))
            data.append(run.wait_for([b"MEM", b"python"]))
        finally:
            run.stop()
    return {"first_paint_s": statistics.median(paints), "first_data_frame_s": statistics.median(data)}


def steady_cpu(seconds: float) -> dict[str, float]:
    run = PtyRun(nvtopy_argv("--interval", "1"))
    try:
        run.wait_for([b"MEM", b"python"])
        time.sleep(3)  # past start-up
        process = psutil.Process(run.pid)
        before = process.cpu_times()
        t0 = time.perf_counter()
        time.sleep(seconds)
        after = process.cpu_times()
        elapsed = time.perf_counter() - t0
        cpu = 100 * ((after.user + after.system) - (before.user + before.system)) / elapsed
        with open(f"/proc/{run.pid}/status", encoding="ascii") as status:
            peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    finally:
        run.stop()
    return {"steady_cpu_percent": cpu, "peak_rss_mib": peak_kib / 1024}


# --------------------------------------------------------------------------- headless refresh cost


async def refresh_costs(gpus: int, processes: int, samples: int) -> dict[str, float]:
    from nvtopy.backends.simulated.backend import SimulatedBackend
    from nvtopy.tui.app import NvtopyApp

    now = [1_795_000_000.0]
    backend = SimulatedBackend(
        gpus=gpus,
        seed=1,
        clock=lambda: now[0],
        processes_per_gpu=processes // gpus,
        steady=True,
        viewer="alice",
    )
    app = NvtopyApp.for_backend(backend, poll=False)
    ui, poll, idle = [], [], []
    async with app.run_test(size=(200, 50)) as pilot:
        for i in range(samples + 5):
            now[0] += 1.0
            t0 = time.thread_time()
            app.source.poll_once(slow=i % 5 == 0)
            t1 = time.thread_time()
            await pilot.pause()
            t2 = time.thread_time()
            if i >= 5:  # skip warm-up
                poll.append(t1 - t0)
                ui.append(t2 - t1)
        rows = len(app.snapshot.processes) if app.snapshot else 0
        for _ in range(200):  # nothing changes: let every sparkline window fill with the idle values
            app.source.poll_once(slow=False)
            await pilot.pause()
        floor = []
        for _ in range(samples):  # the same instant again: nothing changed
            t1 = time.thread_time()
            app.source.poll_once(slow=False)
            t2 = time.thread_time()
            await pilot.pause()
            idle.append(time.thread_time() - t2)
            t3 = time.thread_time()
            await pilot.pause()  # the test harness's own cost, with no snapshot at all
            floor.append(time.thread_time() - t3)
    return {
        "gpus": gpus,
        "processes": rows,
        "ui_ms_median": 1000 * statistics.median(ui),
        "ui_ms_p95": 1000 * sorted(ui)[int(0.95 * (len(ui) - 1))],
        "poller_ms_median": 1000 * statistics.median(poll),
        "idle_ui_ms_median": 1000 * statistics.median(idle),
        "harness_floor_ms_median": 1000 * statistics.median(floor),
    }


async def fixed_refreshes(count: int, warm: int = 30, gpus: int = 8, processes: int = 8) -> None:
    """``count`` refreshes after ``warm`` of the headless 200x50 monitor (simulated 8 GPUs x 8 processes, seed 1,
    charts on screen), each a new second on a manual clock, the garbage collector settled as the monitor settles
    it: the same work on every run, for an instruction count (``--refreshes``)::

        PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            .venv/bin/python benchmarks/bench_tui.py --refreshes 42   # and --refreshes 2: (a - b) / 40 a refresh

    Python's clocks move a second a refresh too (the charts' window and the process table's TIME follow them).
    ``--gpus 1 --procs 1``: a small machine's refresh (one GPU, one process).
    """
    from nvtopy.backends.simulated.backend import SimulatedBackend
    from nvtopy.sources.gc_policy import settle_for_monitor
    from nvtopy.tui.app import NvtopyApp

    monotonic, wall, ahead = time.monotonic, time.time, [0.0]
    time.monotonic = lambda: monotonic() + ahead[0]  # type: ignore[assignment]
    time.time = lambda: wall() + ahead[0]  # type: ignore[assignment]
    now = [1_764_500_000.0]
    backend = SimulatedBackend(gpus=gpus, seed=1, clock=lambda: now[0], processes_per_gpu=processes, viewer="alice")
    app = NvtopyApp.for_backend(backend, poll=False, isolate=False, events=False)
    settle_for_monitor()
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            for _ in range(warm + count):
                now[0] += 1.0
                ahead[0] += 1.0
                app.source.poll_once()
                await pilot.pause()
    finally:
        time.monotonic, time.time = monotonic, wall  # type: ignore[assignment]


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--seconds", type=float, default=20.0, help="steady-CPU measurement length")
    parser.add_argument(
        "--refreshes", type=int, metavar="N", help="only N fixed refreshes, headless, for callgrind (fixed_refreshes)"
    )
    parser.add_argument("--gpus", type=int, default=8, help="with --refreshes: simulated GPUs (default 8)")
    parser.add_argument("--procs", type=int, default=8, help="with --refreshes: processes a GPU (default 8)")
    args = parser.parse_args()
    if args.refreshes is not None:
        asyncio.run(fixed_refreshes(args.refreshes, gpus=args.gpus, processes=args.procs))
        return 0
    samples = 10 if args.quick else 30
    results: dict[str, object] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print("nvtopy TUI benchmark (simulated backend)")
    results.update(first_frame(3 if args.quick else 5))
    print(f"  time to first paint            {results['first_paint_s'] * 1000:7.0f} ms")
    print(f"  time to first frame with data  {results['first_data_frame_s'] * 1000:7.0f} ms")
    results.update(steady_cpu(min(args.seconds, 10) if args.quick else args.seconds))
    print(f"  steady CPU, 200x50, 8 GPUs x 64 processes, 1 s   {results['steady_cpu_percent']:5.1f} %")
    print(f"  peak RSS                                         {results['peak_rss_mib']:5.1f} MiB")
    curve = []
    print("  per refresh (headless 200x50, CPU ms):")
    print("    GPUs  procs   UI median   UI p95   poller   idle UI   (harness floor)")
    for gpus, processes in ((8, 64), (8, 200), (8, 256), (16, 1008)):
        row = asyncio.run(refresh_costs(gpus, processes, samples))
        curve.append(row)
        print(
            f"    {row['gpus']:4d} {row['processes']:6d} {row['ui_ms_median']:10.1f} {row['ui_ms_p95']:8.1f}"
            f" {row['poller_ms_median']:8.1f} {row['idle_ui_ms_median']:9.1f}"
            f"   ({row['harness_floor_ms_median']:.1f})"
        )
    results["refresh"] = curve
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tui.json").write_text(json.dumps(results, indent=2))
    print(f"  written to {RESULTS / 'tui.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The TUI's drawing, by thread: this checkout's monitor against another checkout's and nvitop, same run.

Why a benchmark of its own: ``make bench-peers`` gives each monitor's whole steady CPU, which mixes
the UI thread (building lines, Textual's compositor, writing to the terminal) with the poller and the
GPU readers. A change to the drawing shows on the UI thread alone, and this machine is noisy, so
each monitor runs in turn (interleaved, several repeats, medians) in a detached tmux of 200x50 on
the fake driver (8 GPUs x 64 real ``sleep`` processes reported as GPU processes, 1 s refresh), and
its CPU is read after a warm-up and at the end: the main thread's (the UI thread: Textual's event
loop) from ``/proc/PID/task/PID/schedstat`` (nanoseconds on a CPU), the whole process's from
``/proc/PID/stat`` (clock ticks; threads that ended and children reaped count too, as in ``make
bench-peers``); the rest is the other threads' (the poller, the GPU readers, the Xid watcher). The screen is captured
at the end: a row whose nvtopy screen has no chart axis (``┤``) says so (the figure would not be the one with charts).

``--floor`` adds two rows run the same way: ``textual-floor`` (``textual_floor.py --serve --dirty
all``: Textual redrawing a 200x50 screen each second, no data) and ``collection``
(``collect_only.py``: the monitor's poller, no UI); their sum is the least a Textual monitor on
this collection can spend.

    .venv/bin/python benchmarks/bench_draw.py --checkout /work/main \\
        --peers /work/main/.cache/peers-venv -r 5 -d 15 -w 5 --floor
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SOCKET = f"bench-draw-{os.getpid()}"
CHART_AXIS = "┤"  # a chart's value axis: the charts are on screen


def _tmux(*args: str, capture: bool = False) -> str:
    out = subprocess.run(["tmux", "-L", SOCKET, *args], check=False, text=True, capture_output=True)
    return out.stdout if capture else ""


def _threads(pid: int) -> dict[int, int]:
    """Nanoseconds each live thread of ``pid`` has run (its schedstat's first field), by thread id.

    Precise to the nanosecond, where ``/proc/PID/stat`` counts clock ticks: the UI thread's figure."""
    times: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return times
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                times[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return times


def _process_seconds(pid: int) -> float:
    """CPU seconds of the whole process (user + system), with its threads that ended and its children that
    it reaped (as ``make bench-peers`` counts them): a sum over the live threads would miss nvitop's."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime (fields 14-17)
    return ticks / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return float("nan")


def fake_library() -> Path:
    """The fake libnvidia-ml's build folder: this checkout's, /work/main's, or built by bench_peers."""
    for candidate in (ROOT / ".cache" / "fake-nvml" / "build", ROOT.parent / "main" / ".cache" / "fake-nvml" / "build"):
        if (candidate / "libnvidia-ml.so.1").exists():
            return candidate
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_peers

    return bench_peers.prepare_fake() / "build"


def run_one(
    name: str, command: str, env: dict[str, str], *, warmup: float, duration: float, out: Path
) -> dict[str, object]:
    """One monitor in tmux: steady CPU of its UI (main) thread and of its other threads, peak RSS, screen."""
    session = f"{name}-{os.getpid()}".replace(".", "_")
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    _tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", f"exec env {assignments} {command}")
    try:
        pid = int(_tmux("display-message", "-p", "-t", session, "#{pane_pid}", capture=True).strip())
        time.sleep(warmup)
        before, total0, t0 = _threads(pid), _process_seconds(pid), time.monotonic()
        time.sleep(duration)
        after, total1, t1 = _threads(pid), _process_seconds(pid), time.monotonic()
        rss = _peak_rss_mib(pid)
        screen = _tmux("capture-pane", "-p", "-t", session, capture=True)
    finally:
        _tmux("kill-session", "-t", session)
    (out / f"{name}.screen.txt").write_text(screen)
    elapsed = t1 - t0
    main = (after.get(pid, 0) - before.get(pid, 0)) / 1e9
    others = max(0.0, total1 - total0 - main)  # the poller, GPU readers, Xid watcher (and any that ended)
    return {
        "ui_ms_s": 1000 * main / elapsed,
        "other_ms_s": 1000 * others / elapsed,
        "cpu_pct": 100 * (main + others) / elapsed,
        "rss_mib": rss,
        "charts": CHART_AXIS in screen,
        "alive": bool(after),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, help="another checkout to compare (its .venv is used)")
    parser.add_argument("--peers", type=Path, help="a venv with nvitop (make bench-peers' .cache/peers-venv)")
    parser.add_argument("-r", "--repeat", type=int, default=3, help="interleaved repetitions (medians)")
    parser.add_argument("-d", "--duration", type=float, default=15.0, help="seconds measured per run")
    parser.add_argument("-w", "--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--floor", action="store_true", help="add Textual's floor and the collection alone")
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs (1 with --pids 1: a small machine)")
    parser.add_argument("--pids", type=int, default=64, help="GPU processes (real sleeps) the fake driver reports")
    args = parser.parse_args()

    python = ROOT / ".venv" / "bin" / "python"
    tools: dict[str, str] = {"this": f"{ROOT / '.venv' / 'bin' / 'nvtopy'} --interval 1"}
    for checkout in [ROOT] + ([args.checkout] if args.checkout else []):
        compile_ = [str(checkout / ".venv" / "bin" / "python"), "-m", "compileall", "-q", str(checkout / "nvtopy")]
        subprocess.run(compile_, check=True)  # bytecode, as an installed package has
    if args.checkout:
        tools["other"] = f"{args.checkout / '.venv' / 'bin' / 'nvtopy'} --interval 1"
    if args.peers:
        tools["nvitop"] = f"{args.peers / 'bin' / 'nvitop'} --interval 1"  # its default is 2 s
    if args.floor:
        tools["textual-floor"] = f"{python} {ROOT / 'benchmarks' / 'textual_floor.py'} --serve --dirty all"
        tools["collection"] = f"{python} {ROOT / 'benchmarks' / 'collect_only.py'} --interval 1"

    build = fake_library()
    sleepers = [subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL) for _ in range(args.pids)]
    env = {
        "LD_LIBRARY_PATH": str(build),
        "FAKE_NVML_GPUS": str(args.gpus),
        "FAKE_NVML_PIDS": ",".join(str(s.pid) for s in sleepers),
    }
    out = RESULTS / "draw"
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in tools}
    # A session that outlives the runs keeps one tmux server up (a server quitting as the last
    # session ends can refuse the next run's new session).
    _tmux("new-session", "-d", "-s", "hold", "-x", "200", "-y", "50", "sleep 86400")
    try:
        for r in range(args.repeat):
            for name, command in tools.items():
                result = run_one(name, command, env, warmup=args.warmup, duration=args.duration, out=out)
                runs[name].append(result)
                print(
                    f"  run {r + 1} {name:14s} UI {result['ui_ms_s']:6.1f} ms/s  others {result['other_ms_s']:6.1f}"
                    f" ms/s  CPU {result['cpu_pct']:5.2f} %  RSS {result['rss_mib']:5.1f} MiB"
                    + ("" if result["charts"] or name not in ("this", "other") else "  (NO CHARTS ON SCREEN)"),
                    flush=True,
                )
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], check=False, capture_output=True)

    def median(name: str, key: str) -> float:
        return statistics.median(float(run[key]) for run in runs[name])  # type: ignore[arg-type]

    size = f"{args.gpus} GPUs x {args.pids} processes"
    print(f"\n# tmux 200x50, fake driver {size}, 1 s; median of {args.repeat} interleaved runs")
    print("| tool | UI thread ms/s | other threads ms/s | CPU % | / nvitop | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    nvitop = median("nvitop", "cpu_pct") if "nvitop" in runs else None
    summary: dict[str, object] = {"repeat": args.repeat, "duration_s": args.duration, "runs": runs}
    for name in tools:
        cpu = median(name, "cpu_pct")
        ratio = f"{cpu / nvitop:.2f}x" if nvitop else "-"
        print(
            f"| {name} | {median(name, 'ui_ms_s'):.1f} | {median(name, 'other_ms_s'):.1f} | {cpu:.2f} | {ratio} |"
            f" {median(name, 'rss_mib'):.1f} |"
        )
    if nvitop and args.floor:
        floor = (median("textual-floor", "cpu_pct") + median("collection", "cpu_pct")) / nvitop
        summary["floor_ratio"] = floor
        print(f"| floor (textual-floor + collection) | | | | {floor:.2f}x | |")
    if "other" in runs:
        # Paired per repeat: the runs of one repeat share the machine's load of the moment.
        print()
        for key, figure, label in (
            ("ui_ms_s", "ui_ratio_paired", "UI thread"),
            ("cpu_pct", "cpu_ratio_paired", "Whole process"),
        ):
            pairs = [
                float(a[key]) / float(b[key])  # type: ignore[arg-type]
                for a, b in zip(runs["this"], runs["other"], strict=True)
                if float(b[key]) > 0  # type: ignore[arg-type]
            ]
            summary[figure] = statistics.median(pairs)
            print(f"{label}, this / other: {statistics.median(pairs):.2f}x (median of paired runs)")
    (out / "draw.json").write_text(json.dumps(summary, indent=2))
    print(f"details: {out / 'draw.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

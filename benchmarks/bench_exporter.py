"""The exporters side by side: ``nvtopy exporter`` against nvitop-exporter, scraped as Prometheus scrapes them.

Both run on ../shared/fake-nvml (8 simulated GPUs, 64 real ``sleep`` processes
reported as GPU processes, ``FAKE_NVML_PIDS``) at a 1 s interval, and a scraper
here fetches ``/metrics`` once a second for ``--duration`` seconds with
Prometheus's own request headers (OpenMetrics preferred, gzip), a new connection
each time, reading the whole answer. Measured per exporter: steady CPU % of its
process (``/proc/PID/stat``, after ``--warmup`` seconds), peak RSS (``VmHWM``),
and the scrape latency (connect to last byte), median and p95. The exporters
take turns (interleaved), ``--repeat`` times; the table shows the medians of the
repeats. Then nvtopy alone with 512 processes (64 per GPU): its scrape median.
First, the rendering alone (simulated GPUs, no driver needed): the CPU to build and
write one snapshot's text, nvtopy's renderer against prometheus-client's
``generate_latest``, and its gzip at level 1 against level 9.

Standalone (``.venv/bin/python benchmarks/bench_exporter.py``) or as part of
``make bench-peers``; skips (exit 0) where ../shared/fake-nvml is absent. With
``--baseline NVTOPY`` (another install's ``nvtopy``, e.g. ``../main/.venv/bin/nvtopy``):
paired runs of the two exporters instead, interleaved, each pair's CPU ratio printed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# What Prometheus 2.x/3.x sends (scrape_protocols' defaults), so each exporter answers as it answers Prometheus.
ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)

# The aims: nvtopy's steady CPU against nvitop-exporter's in the same run, and its scrape at 512 processes.
CPU_RATIO_TARGET = 0.2
SCRAPE_MEDIAN_512_MS = 10.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _thread_cpu_seconds(pid: int) -> float:
    """The CPU its threads ran, summed from ``/proc/PID/task/*/schedstat`` (nanoseconds: no 10 ms ticks).

    Why beside :func:`_cpu_seconds`: an exporter spends about 1 % of a core, 0.2 s in 20 s, which clock ticks
    measure to +-5 %; a paired A/B of two trees needs finer. Threads that ended are not counted (an exporter's
    live for its whole run).
    """
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as file:
                total += int(file.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            pass
    return total / 1e9


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _scrape(port: int, timeout: float = 5.0) -> tuple[float, int]:
    """(seconds from connect to the last byte, bytes) of one scrape as Prometheus makes it."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
    finally:
        conn.close()
    return time.perf_counter() - started, len(body)


def _wait_ready(proc: subprocess.Popen[bytes], port: int, needle: bytes, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/metrics")
            if needle in conn.getresponse().read():
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.2)
    raise RuntimeError(f"no metrics on port {port} after {timeout:g} s")


def exporter_commands(venv: Path, nvtopy: str, port: int) -> dict[str, tuple[list[str], bytes]]:
    """name -> (argv serving /metrics on 127.0.0.1:port at a 1 s interval, a metric name its answer holds)."""
    return {
        "nvitop-exporter": (
            [str(venv / "bin" / "nvitop-exporter"), "--bind-address=127.0.0.1", f"--port={port}", "--interval=1"],
            b"gpu_utilization_Percentage",
        ),
        "nvtopy exporter": (
            [nvtopy, "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "1"],
            b"nvtopy_process_gpu_memory_bytes",
        ),
    }


def run_exporter(
    argv: list[str], needle: bytes, port: int, env: dict[str, str], *, duration: float, warmup: float, log: Path
) -> dict[str, Any]:
    """Start an exporter, scrape it once a second, measure it; stop it."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_ready(proc, port, needle)
        started = time.monotonic()
        latencies: list[float] = []
        sizes: list[int] = []
        cpu_start = t_start = None
        threads_start = 0.0
        tick = 0
        while True:
            now = time.monotonic()
            if cpu_start is None and now - started >= warmup:
                cpu_start, t_start, threads_start = _cpu_seconds(proc.pid), now, _thread_cpu_seconds(proc.pid)
            if now - started >= warmup + duration:
                break
            latency, size = _scrape(port)
            if cpu_start is not None:
                latencies.append(latency)
                sizes.append(size)
            tick += 1
            time.sleep(max(0.0, started + tick - time.monotonic()))
        cpu_end, t_end, threads_end = _cpu_seconds(proc.pid), time.monotonic(), _thread_cpu_seconds(proc.pid)
        assert cpu_start is not None and t_start is not None
        rss = _peak_rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    ordered = sorted(latencies)
    return {
        "cpu_pct_steady": round(100 * (cpu_end - cpu_start) / (t_end - t_start), 2),
        "cpu_ms_per_s_threads": round(1000 * (threads_end - threads_start) / (t_end - t_start), 3),
        "peak_rss_mib": round(rss, 1),
        "scrape_median_ms": round(1000 * statistics.median(ordered), 2),
        "scrape_p95_ms": round(1000 * ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 2),
        "scrapes": len(ordered),
        "bytes_median": int(statistics.median(sizes)),
    }


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs]
        merged[key] = round(statistics.median(values), 2)
        merged[f"{key}_runs"] = values
    return merged


def _sleepers_on_fake(
    fake: Path, processes: int, seconds: float
) -> tuple[list[subprocess.Popen[bytes]], dict[str, str]]:
    """``processes`` real sleeping processes that outlive the runs, and the environment that shows them on 8 of the
    fake driver's GPUs: every exporter of a comparison sees the same processes."""
    sleepers = [subprocess.Popen(["sleep", str(int(seconds))]) for _ in range(processes)]
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(fake / "build"),
        FAKE_NVML_GPUS="8",
        FAKE_NVML_PIDS=",".join(str(p.pid) for p in sleepers),
    )
    env.pop("NVTOPY_DEBUG", None)
    return sleepers, env


def compare(
    fake: Path, venv: Path, nvtopy: str, *, repeat: int = 3, duration: float = 20.0, warmup: float = 5.0
) -> dict[str, Any]:
    """Both exporters at 64 processes (interleaved, ``repeat`` times), then nvtopy at 512; medians."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for processes, names in ((64, ("nvitop-exporter", "nvtopy exporter")), (512, ("nvtopy exporter",))):
        sleepers, env = _sleepers_on_fake(fake, processes, 4 * (duration + warmup) * repeat + 600)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        try:
            for rep in range(repeat):
                for name in names:
                    port = _free_port()
                    argv, needle = exporter_commands(venv, nvtopy, port)[name]
                    log = RESULTS / f"exporter-{name.split()[0]}-{processes}-{rep + 1}.log"
                    runs[name].append(run_exporter(argv, needle, port, env, duration=duration, warmup=warmup, log=log))
        finally:
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()
        for name in names:
            results[f"{name} @{processes}"] = _median_of(runs[name])
    return results


def paired(
    fake: Path, nvtopy: str, baseline: str, *, pairs: int = 4, duration: float = 30.0, warmup: float = 5.0
) -> dict[str, Any]:
    """``nvtopy exporter`` of two installs (``baseline`` first in odd pairs, second in even ones), 64 processes.

    What a change to the exporter is measured with: the same scrapes as :func:`compare`, CPU from the
    threads' schedstat (:func:`_thread_cpu_seconds`), and the ratio of each pair, so that the load of a
    shared machine, which moves both runs of a pair alike, cancels out of it.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    sleepers, env = _sleepers_on_fake(fake, 64, 3 * (duration + warmup) * pairs + 600)
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "nvtopy": []}
    try:
        for pair in range(pairs):
            order = ("baseline", "nvtopy") if pair % 2 == 0 else ("nvtopy", "baseline")
            for name in order:
                port = _free_port()
                argv = [baseline if name == "baseline" else nvtopy, "exporter", "--listen", f"127.0.0.1:{port}"]
                log = RESULTS / f"exporter-ab-{name}-{pair + 1}.log"
                result = run_exporter(
                    [*argv, "--interval", "1"], b"nvtopy_process_gpu_memory_bytes", port, env,
                    duration=duration, warmup=warmup, log=log,
                )  # fmt: skip
                runs[name].append(result)
                print(
                    f"  pair {pair + 1} {name:8s} {result['cpu_ms_per_s_threads']:7.3f} ms CPU/s  "
                    f"scrape {result['scrape_median_ms']} ms  {result['bytes_median']} B",
                    flush=True,
                )
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
    ratios = [
        new["cpu_ms_per_s_threads"] / max(old["cpu_ms_per_s_threads"], 1e-9)
        for old, new in zip(runs["baseline"], runs["nvtopy"], strict=True)
    ]
    return {
        "baseline": _median_of(runs["baseline"]),
        "nvtopy": _median_of(runs["nvtopy"]),
        "cpu_ratio_pairs": [round(r, 3) for r in ratios],
        "cpu_ratio_median": round(statistics.median(ratios), 3),
    }


def report(results: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Print the table and the verdicts; returns {"ratios": ..., "verdicts": ...}."""
    print(f"\n# exporters: 8 GPUs, 1 s interval, one Prometheus-like scrape a second, median of {repeat} runs")
    print("| exporter @ processes | steady CPU % | peak RSS MiB | scrape median ms | scrape p95 ms | answer bytes |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(
            f"| {name} | {r['cpu_pct_steady']} | {r['peak_rss_mib']} | {r['scrape_median_ms']} | "
            f"{r['scrape_p95_ms']} | {r['bytes_median']} |"
        )
    peer, mine, big = results["nvitop-exporter @64"], results["nvtopy exporter @64"], results["nvtopy exporter @512"]
    ratios = {
        "exporter_cpu": mine["cpu_pct_steady"] / max(peer["cpu_pct_steady"], 1e-9),
        "exporter_rss": mine["peak_rss_mib"] / max(peer["peak_rss_mib"], 1e-9),
        "exporter_scrape_median": mine["scrape_median_ms"] / max(peer["scrape_median_ms"], 1e-9),
    }
    verdicts = {
        "exporter_cpu": ratios["exporter_cpu"] <= CPU_RATIO_TARGET,
        "exporter_scrape_512": big["scrape_median_ms"] <= SCRAPE_MEDIAN_512_MS,
    }
    print("\n# nvtopy exporter / nvitop-exporter (same run) against the targets")
    print(
        f"  steady CPU     {ratios['exporter_cpu']:5.2f}x  (target <= {CPU_RATIO_TARGET}x)  "
        f"{'ok' if verdicts['exporter_cpu'] else 'MISSED'}"
    )
    print(f"  peak RSS       {ratios['exporter_rss']:5.2f}x")
    print(f"  scrape median  {ratios['exporter_scrape_median']:5.2f}x")
    print(
        f"  scrape median at 512 processes: {big['scrape_median_ms']} ms (target <= {SCRAPE_MEDIAN_512_MS:g} ms)  "
        f"{'ok' if verdicts['exporter_scrape_512'] else 'MISSED'}"
    )
    return {"ratios": ratios, "verdicts": verdicts}


def render_cost(processes_per_gpu: int, runs: int = 30) -> dict[str, float]:
    """CPU ms (median of ``runs``) to render a new snapshot of 8 simulated GPUs: nvtopy's way and the library's."""
    import gzip
    import zlib

    from prometheus_client.exposition import generate_latest

    from nvtopy.backends.simulated.backend import SimulatedBackend
    from nvtopy.commands.exporter.command import EXPORTER_GROUPS
    from nvtopy.formats.prometheus.collect import SnapshotCollector
    from nvtopy.formats.prometheus.expose import TextRenderer
    from nvtopy.sources.collector import Collector
    from nvtopy.sources.poller import Poller

    backend = SimulatedBackend(gpus=8, processes_per_gpu=processes_per_gpu, steady=True)
    poller = Poller(backend, interval=1.0, groups=EXPORTER_GROUPS, collector=Collector(backend, history=1))
    snapshot = poller.poll_once(slow=True)
    collector, renderer = SnapshotCollector(poller), TextRenderer()

    class Families:
        def collect(self) -> list[Any]:
            return collector.families(snapshot)

    def cpu_ms(work: Any) -> float:
        for _ in range(5):  # warm: an exporter renders every second, its allocator and caches are warm
            work()
        times = []
        for _ in range(runs):
            started = time.process_time()
            work()
            times.append(1000 * (time.process_time() - started))
        return round(statistics.median(times), 2)

    renderer.render(collector.families(snapshot))  # as in a running exporter: the series seen before
    text = renderer.render(collector.families(snapshot))
    assert text == generate_latest(Families())  # type: ignore[arg-type]
    # Each timed render is of a new snapshot, as an exporter's is: a family whose inputs did not change
    # since the last one is reused (and its text), the others are built and written again.
    later = iter([poller.poll_once() for _ in range(runs + 5)])
    fresh = iter([poller.poll_once() for _ in range(runs + 5)])
    reference = SnapshotCollector(poller)

    class Fresh:
        def collect(self) -> list[Any]:
            return reference.families(next(fresh))

    def deflate() -> None:
        packer = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
        packer.compress(text)
        packer.flush(zlib.Z_SYNC_FLUSH)
        zlib.crc32(text)

    return {
        "processes": sum(len(gpu.processes) for gpu in snapshot.gpus),
        "text_bytes": len(text),
        "nvtopy_ms": cpu_ms(lambda: renderer.render(collector.families(next(later)))),
        "generate_latest_ms": cpu_ms(lambda: generate_latest(Fresh())),  # type: ignore[arg-type]
        "gzip1_ms": cpu_ms(deflate),
        "gzip9_ms": cpu_ms(lambda: gzip.compress(text)),
    }


def report_render(costs: list[dict[str, float]]) -> None:
    print("\n# rendering one snapshot, 8 simulated GPUs (CPU ms, median of 30)")
    print("| processes | text bytes | nvtopy | generate_latest | gzip level 1 | gzip level 9 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c in costs:
        print(
            f"| {c['processes']} | {c['text_bytes']} | {c['nvtopy_ms']} | {c['generate_latest_ms']} | "
            f"{c['gzip1_ms']} | {c['gzip9_ms']} |"
        )


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_peers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--repeat", type=int, default=3, help="interleaved repetitions (medians)")
    parser.add_argument("-d", "--duration", type=float, default=20.0, help="seconds of scraping per run")
    parser.add_argument("-w", "--warmup", type=float, default=5.0, help="seconds left out of the CPU figure")
    parser.add_argument(
        "--baseline",
        metavar="NVTOPY",
        help="instead of the peers: paired runs (-r pairs, -d seconds each) of this nvtopy (e.g. "
        "../main/.venv/bin/nvtopy) and this tree's, interleaved; prints each pair's CPU ratio",
    )
    args = parser.parse_args()
    if args.baseline is None:
        costs = [render_cost(8), render_cost(64)]
        report_render(costs)
    skipped = bench_peers.why_skip()
    if skipped:
        print(f"bench-exporter skipped: {skipped}")
        return 0
    fake = bench_peers.prepare_fake()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "nvtopy")], check=True)
    nvtopy = str(Path(sys.executable).with_name("nvtopy"))
    if args.baseline is not None:
        print(f"# nvtopy exporter, this tree against {args.baseline}: 8 GPUs x 64 processes, {args.repeat} pairs")
        ab = paired(fake, nvtopy, args.baseline, pairs=args.repeat, duration=args.duration, warmup=args.warmup)
        for name in ("baseline", "nvtopy"):
            r = ab[name]
            print(
                f"  {name:8s} CPU {r['cpu_ms_per_s_threads']} ms/s (median), scrape {r['scrape_median_ms']} ms, "
                f"{r['bytes_median']} B, peak RSS {r['peak_rss_mib']} MiB"
            )
        print(f"  this tree / baseline, per pair: {ab['cpu_ratio_pairs']}, median {ab['cpu_ratio_median']}")
        (RESULTS / "exporter-ab.json").write_text(json.dumps(ab, indent=2))
        return 0
    venv = bench_peers.prepare_peers()
    results = compare(fake, venv, nvtopy, repeat=args.repeat, duration=args.duration, warmup=args.warmup)
    summary = report(results, args.repeat)
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    record = {"when": when, "render": costs, "results": results, **summary}
    (RESULTS / "exporters.json").write_text(json.dumps(record, indent=2))
    print(f"\n  details: {RESULTS / 'exporters.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``make bench``: a fleet refresh (``nvtopy --prometheus URL``) against a real Prometheus, at 512 and 4,096 GPUs.

Hosts of 8 simulated GPUs each (``nvtopy exporter --demo``'s exposition, the names
dcgm-exporter and nvtopy's exporter use, about 1,100 samples a host) are served from a
child process, one port per host, and scraped by Debian's ``prometheus`` on loopback
(the helpers of ``tests/prometheus_fixtures.py``). Each host serves its GPUs at
:data:`TICKS` successive seconds in turn, one a scrape, so its values move between reads as
a busy fleet's do (about a sixth of the series a second: utilisation, power, memory, the
profiling ratios, the processes'); until 2026-11-30 every scrape served the same text, and
every value's text was one the fleet's reading had seen before. Measured, per refresh of a
:class:`~nvtopy.sources.remote.fleet.PrometheusFleet` at a 1 s interval:

- **CPU**: the refresh's own CPU time (``PrometheusFleet.refresh_cpu_seconds``): the refreshing
  thread's (``time.thread_time``: the JSON decode and the snapshot build) and that of each query's
  own thread (asking, reading the answer, undoing its gzip) -- the server's evaluation is not in it.
  Until 2026-12-01 the query threads' CPU was left out (some 30-40 ms a refresh at 4,096 GPUs,
  most of it undoing the gzip of a 21 MB answer): the figures before then are that much low;
- **wall** time of the refresh (both queries, the server's evaluation included);
- **page faults** a refresh (the process's minor faults, every thread's: pages taken from the kernel afresh) and
  the process's **peak RSS** (since 2026-12-01: ``gc_policy.keep_freed_blocks`` keeps freed large blocks);
- **queries**: HTTP requests the refresh made; **bytes**: the answers as received
  (gzip) and their JSON; **rows**: the answers' rows (series), what the refresh decodes and reads.

Medians over ``--refreshes`` refreshes after a first (full) one, and their mean.

The garbage collector is set as ``nvtopy --prometheus`` sets it before its first refresh
(``gc_policy.settle_for_fleet``: what is alive frozen, a young collection every 50,000 new
objects), as ``bench_ssh.py`` does for ``--ssh``. Until 2026-11-30 this benchmark left CPython's
default (a young collection every 700): each refresh then paid a collection over the ~55,000
objects it keeps, and older-generation ones over everything alive, which the monitor does not.
A refresh that sets off the monitor's collection (about one in four at 4,096 GPUs) pays it in
its measured CPU, so the mean is printed beside the median, with the collections counted and
timed on the refreshing thread. ``--python-gc`` measures with CPython's default, as before.

64 hosts (512 GPUs) are scraped every 1 s: every host has a new sample at every
refresh, so every refresh reads every host. 512 hosts (4,096 GPUs) at 1 s would be
560,000 samples a second for Prometheus to ingest, more than a 2-core machine shared
with other work keeps up with (scrapes time out), so they are scraped every 10 s and
each measured refresh is made to read every host as a 1 s scrape would (each host's
newest sample is forgotten before it, so it counts as new): the same two queries, the
same answer, the same decoding and building. The measured refreshes are a scrape apart
(10 s), so each reads every host's next values; and each host's clock since each timed
group was last read is set 1 s on, however far its newest sample moved (the server's
newest samples are asked before each measured refresh, outside its measure), so the groups
are asked as at a 1 s scrape (``fleet.TIMED_GROUPS``: the 2 s group at every other
refresh of a host, the 5 s one at every fifth, the rarer ones later, each host at its
phase). Until 2026-11-30 evening the clock was set 9 s on whatever the host's newest
sample had moved: a host scraped twice since (the refreshes are some 14 s apart with
their own time) was 11 s on and asked every group of 10 s or less, one not scraped again
-9 s (a clock gone back: every group). With ``--every-group-due`` every timed group is
asked at every refresh, as a refresh 10 s after the last asks them (this benchmark's
pacing from h-fleet9's change until h-fleet10's, both 2026-11-30).

``--profile`` adds a cProfile of the refreshes at the larger size (top functions by
own time). Run: ``.venv/bin/python benchmarks/bench_fleet.py [--sizes 64,512]``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPUS_PER_HOST = 8
TICKS = 3  # the seconds of values each host serves in turn
SCRAPE_S = 10.0  # Prometheus's scrape interval of the 512 hosts (4,096 GPUs), and the measured refreshes' spacing


def serve(hosts: int) -> None:
    """Child process: one exposition per host, each on a port of its own; prints the ports, serves until stdin ends."""
    import http.server

    from tests.prometheus_fixtures import served_expositions, simulated_expositions

    # A scrape that Prometheus gives up on (its timeout) resets the connection: not worth a traceback here.
    http.server.ThreadingHTTPServer.handle_error = lambda self, request, address: None  # type: ignore[method-assign]
    bodies = [
        [body.encode() for body in simulated_expositions(f"node{n:03d}", n, GPUS_PER_HOST, TICKS)] for n in range(hosts)
    ]
    with served_expositions(bodies) as targets:
        print(json.dumps(targets), flush=True)
        sys.stdin.read()
        os._exit(0)  # at once: shutting 512 servers down one by one takes a poll interval each


def _received(client: object) -> int:
    return getattr(client, "bytes_received", 0)  # 0 on a version that does not count (a comparison with main)


def _json(client: object) -> int:
    return getattr(client, "json_bytes", 0)


def _exchange_cpu(client: object) -> float:
    """The CPU seconds of the client's query threads so far (asking, reading, undoing the gzip); 0 on a version
    that does not count them (and left them out of the refresh's CPU)."""
    return float(getattr(client, "exchange_cpu_seconds", 0.0))


def _rows(client: object) -> int:
    return getattr(client, "rows_received", 0)  # 0 on a version that does not count


class _Collections:
    """The garbage collector's runs on one thread (``gc.callbacks``): how many, and their CPU time."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.count = 0
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.count += 1
            self.seconds += time.thread_time() - self._started


def measure(
    hosts: int, refreshes: int, profile: bool, history: int, *, python_gc: bool = False, every_group_due: bool = False
) -> dict[str, float | str]:
    from nvtopy.sources.gc_policy import settle_for_fleet
    from nvtopy.sources.remote.fleet import PrometheusFleet
    from tests.prometheus_fixtures import DATA_S, prometheus, scrape_config, targets_up, wait

    live = hosts <= 64
    interval = "1s" if live else f"{SCRAPE_S:g}s"
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(hosts)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        targets = json.loads(child.stdout.readline())
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
            logs: list[Path] = []
            with prometheus(Path(tmp), scrape_config(targets, interval=interval), targets, logs) as server:
                wait("every target scraped", DATA_S + 30, lambda: targets_up(server), logs)
                gpus = hosts * GPUS_PER_HOST
                wait(
                    f"{gpus} GPUs in Prometheus",
                    DATA_S + 30,
                    lambda: server.values("count(nvtopy_gpu_lost)") == [float(gpus)],
                    logs,
                )
                fleet = PrometheusFleet(server.url, interval=1.0, timeout=30.0)
                if not python_gc:
                    settle_for_fleet()  # as nvtopy --prometheus does before its first refresh (monitor.py)
                fleet.poll_once()
                first = (fleet.refresh_seconds or 0.0, fleet.refresh_cpu_seconds or 0.0)
                for buffer in fleet._mapper._history.values():  # every sparkline as full as after its minutes
                    for n in range(history):
                        buffer._ring.append(n - history, (None,) * 7)
                shown = len(fleet.latest.gpus) if fleet.latest else 0
                rows: list[tuple[float, float, int, int, int, int, int, float, int]] = []
                profiler = cProfile.Profile() if profile else None
                collections = _Collections()
                gc.callbacks.append(collections)
                for _ in range(refreshes):
                    time.sleep(1.0 if live else SCRAPE_S)  # at 10 s: every host scraped again, its next values
                    if not live:  # as a 1 s scrape would have it: every host has a sample newer than the last read
                        now_newest = {} if every_group_due else fleet._newest(fleet._host_list())[0]
                        for key, known in fleet._known.items():
                            host = now_newest.get(key)
                            if host is not None and host.newest is not None and known.newest is not None:
                                moved = host.newest - known.newest  # and its clock 1 s on since each group was read
                                known.read_at = {
                                    group: None if at is None else at + moved - 1.0
                                    for group, at in known.read_at.items()
                                }
                            known.newest = None
                    client = fleet.client
                    queries, sent, decoded, series = client.queries, _received(client), _json(client), _rows(client)
                    asked = _exchange_cpu(client)
                    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt  # every thread's: pages taken fresh
                    if profiler is not None:
                        profiler.enable()
                    fleet.poll_once()
                    if profiler is not None:
                        profiler.disable()
                    rows.append(
                        (
                            (fleet.refresh_cpu_seconds or 0.0) * 1000,
                            (fleet.refresh_seconds or 0.0) * 1000,
                            client.queries - queries,
                            _received(client) - sent,
                            _json(client) - decoded,
                            fleet.hosts_read,
                            _rows(client) - series,
                            (_exchange_cpu(client) - asked) * 1000,
                            resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                        )
                    )
                gc.callbacks.remove(collections)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    cpu, wall, queries, sent, decoded, read, series, exchanges, faults = (
        statistics.median(column) for column in zip(*rows, strict=True)
    )
    mean = statistics.mean(r[0] for r in rows)
    print(
        f"{hosts:4d} hosts x {GPUS_PER_HOST} = {gpus:5d} GPUs ({_mode(live, every_group_due)}): "
        f"CPU {cpu:6.1f} ms (mean {mean:.1f}, max {max(r[0] for r in rows):.1f}; the queries' threads "
        f"{exchanges:.1f} ms of it; collector "
        f"{'CPython default' if python_gc else 'as the monitor sets it'}: {collections.count} collections, "
        f"{collections.seconds * 1000:.0f} ms in {len(rows)} refreshes), wall {wall:6.1f} ms, "
        f"{queries:.0f} queries, {sent / 1024:.0f} KiB received ({decoded / 1024:.0f} KiB JSON, {series:.0f} rows), "
        f"hosts read {read:.0f}, GPUs shown {shown}; first refresh {first[1] * 1000:.0f} ms CPU, "
        f"{first[0] * 1000:.0f} ms wall; {faults:.0f} page faults a refresh, peak RSS "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    print("  each refresh, CPU ms / rows: " + ", ".join(f"{r[0]:.0f}/{r[6]:,}" for r in rows))
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
    return {
        "hosts": hosts,
        "gpus": gpus,
        "cpu_ms": cpu,
        "cpu_mean_ms": mean,
        "exchange_cpu_ms": exchanges,
        "page_faults": faults,
        "pacing": _mode(live, every_group_due),
        "collections": collections.count,
        "collection_ms": collections.seconds * 1000,
        "wall_ms": wall,
        "queries": queries,
        "bytes_received": sent,
        "json_bytes": decoded,
        "hosts_read": read,
        "rows": series,
    }


def _mode(live: bool, every_group_due: bool) -> str:
    if live:
        return "1 s scrape"
    return "10 s scrape, all read, every timed group due" if every_group_due else "10 s scrape, all read as at 1 s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512", help="hosts of 8 GPUs, comma-separated")
    parser.add_argument("--refreshes", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="cProfile the refreshes at the largest size")
    parser.add_argument(
        "--python-gc",
        action="store_true",
        help="leave CPython's default collector (before 2026-11-30's benchmark) rather than the monitor's",
    )
    parser.add_argument(
        "--every-group-due",
        action="store_true",
        help="at 4,096 GPUs, ask every timed group at every refresh (a refresh 10 s after the last, as before "
        "2026-11-30's pacing) rather than as a 1 s scrape paces them",
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--history",
        type=int,
        default=300,
        help="points put in every GPU's sparkline history after the first refresh (default: full, as after 5 min)",
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    from tests.prometheus_fixtures import PROMETHEUS

    if PROMETHEUS is None:
        print("bench_fleet skipped: no prometheus on PATH (apt-get install prometheus)")
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    results = [
        measure(
            hosts,
            args.refreshes,
            args.profile and hosts == max(sizes),
            args.history,
            python_gc=args.python_gc,
            every_group_due=args.every_group_due,
        )
        for hosts in sizes
    ]
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

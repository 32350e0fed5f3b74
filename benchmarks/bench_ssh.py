"""``make bench``: ``nvtopy --ssh`` at 64 hosts x 8 GPUs: the monitor's own CPU per refresh, its threads and files.

Issue 29's bound: the monitor's own CPU per refresh under 100 ms at 64 hosts of 8 GPUs,
with threads and file descriptors bounded. The hosts are a transport double
(``tests/sources/remote/ssh/fake_ssh.py``: a stand-in for ``ssh`` whose far side
sends prepared snapshot lines of 8 simulated GPUs and their processes, one a second,
as serve-stdio sends them: the first whole, about 60 kB, then patches), because 64
far nvtopys on one 2-core machine would measure the far sides, not the monitor; the
end-to-end tests show the same path through a real sshd.

Measured in this process (which is the monitor, without a screen to draw, its garbage
collector settled as the monitor settles it: ``gc_policy.settle_for_fleet``): CPU time
(``time.process_time``: the I/O thread reading every host's bytes, and the refreshes
decoding and building the snapshot) over ``--seconds`` seconds of 1 s refreshes,
divided by the refreshes made; the refresh's own share (``time.thread_time`` in
``poll_once``) beside it; threads and open files at the end.

Run: ``.venv/bin/python benchmarks/bench_ssh.py [--hosts 64] [--gpus 8] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from nvtopy.model import HISTORY_LENGTH

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=None, help="process slots per GPU (default: the demo's)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--history",
        type=int,
        default=HISTORY_LENGTH,
        help="points put in every GPU's sparkline history before measuring (default: full, as after 5 minutes)",
    )
    args = parser.parse_args()

    from nvtopy.sources.gc_policy import settle_for_fleet
    from nvtopy.sources.remote.ssh.hosts import SshHosts
    from nvtopy.sources.remote.ssh.session import State
    from nvtopy.sources.remote.ssh.targets import expand
    from tests.sources.remote.ssh import fake_ssh

    with tempfile.TemporaryDirectory() as tmp:
        # a line a second, none sent twice while measured: the far side's first line is whole, then patches
        # (serve-stdio sends a whole line every 300; a fake that cycled back to its first line would send more)
        lines = int(args.seconds) + 10
        program = fake_ssh.install(Path(tmp), gpus=args.gpus, processes=args.processes, period=1.0, lines=lines)
        sizes = [path.stat().st_size for path in sorted((Path(tmp) / "lines").iterdir())]
        line_bytes = sum(sizes) / len(sizes)
        threads_before = threading.active_count()
        fds_before = len(os.listdir("/proc/self/fd"))
        source = SshHosts(
            expand([f"node{n:03d}" for n in range(args.hosts)], {}), 1.0, program=str(program), max_connecting=64
        )
        refresh_cpu: list[float] = []
        settle_for_fleet()  # as nvtopy --ssh does before its app runs
        source.streams.start()
        try:
            began = time.monotonic()
            while not all(s.latest for s in source.streams.sessions):
                if time.monotonic() - began > 60:
                    print("not every host streamed within 60 s", file=sys.stderr)
                    return 1
                time.sleep(0.05)
            connected = time.monotonic() - began
            snapshot = source.poll_once()  # the first: every GPU's history and chart begun
            for buffer in source._history.values():  # every sparkline's history as full as after its minutes
                for n in range(args.history):
                    buffer._ring.append(n - args.history, (None,) * 7)
            io_clock = time.pthread_getcpuclockid(source.streams._thread.ident)  # type: ignore[union-attr]
            io_start = time.clock_gettime(io_clock)
            cpu_start, wall_start = time.process_time(), time.monotonic()
            refreshes = 0
            while time.monotonic() - wall_start < args.seconds:
                time.sleep(max(0.0, wall_start + refreshes + 1 - time.monotonic()))
                thread_start = time.thread_time()
                snapshot = source.poll_once()
                refresh_cpu.append(time.thread_time() - thread_start)
                refreshes += 1
            cpu = time.process_time() - cpu_start
            io_cpu = time.clock_gettime(io_clock) - io_start
            live = sum(1 for s in source.streams.sessions if s.status.state is State.LIVE)
            threads = threading.active_count() - threads_before
            fds = len(os.listdir("/proc/self/fd")) - fds_before
        finally:
            source.stop()
    gpus = sum(1 for g in snapshot.gpus if g.note is None)
    processes = sum(len(g.processes) for g in snapshot.gpus)
    print(
        f"nvtopy --ssh, {args.hosts} hosts x {args.gpus} GPUs ({gpus} GPUs, {processes} processes, "
        f"{line_bytes / 1024:.0f} kB a host a second): all streaming after {connected:.1f} s; "
        f"{refreshes} refreshes in {args.seconds:g} s"
    )
    print(
        f"  monitor CPU per refresh (I/O thread + refresh): {cpu / refreshes * 1000:.0f} ms; "
        f"the refresh alone: median {statistics.median(refresh_cpu) * 1000:.0f} ms, "
        f"mean {statistics.mean(refresh_cpu) * 1000:.0f} ms, max {max(refresh_cpu) * 1000:.0f} ms; "
        f"the I/O thread {io_cpu / refreshes * 1000:.0f} ms a refresh"
    )
    print("  each refresh (ms):", " ".join(f"{c * 1000:.0f}" for c in refresh_cpu))
    print(f"  live hosts {live}/{args.hosts}; threads added {threads}; open files added {fds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

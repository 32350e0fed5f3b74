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

``--offline N``: no ssh and no I/O thread: the far sides' lines are read in this process as the I/O
thread reads them (``StreamReader.read``, ``Session.publish``), then a refresh, N times, on a clock
that steps a second a refresh whatever the pace (the charts' buckets fill as they would live). Its
figures (CPU per refresh of the reading and of the refresh) move less than the live run's, and it
runs under callgrind, where instruction counts are steady to a percent or two (set PYTHONHASHSEED):
the per-refresh count is the difference of two runs over their refreshes, e.g.
``valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python benchmarks/bench_ssh.py
--offline 10`` less the same with ``--offline 0``, divided by 10.
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
    parser.add_argument("--offline", type=int, default=None, metavar="N", help="N refreshes without ssh (see above)")
    args = parser.parse_args()
    if args.offline is not None:
        return offline(args)

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


def offline(args: argparse.Namespace) -> int:
    """``--offline N``: the lines read and the refreshes made in this thread, on a stepped clock (see the module)."""
    import types
    from unittest import mock

    from nvtopy.formats.stream import StreamReader
    from nvtopy.sources.gc_policy import settle_for_fleet
    from nvtopy.sources.remote.ssh import hosts as hosts_module
    from nvtopy.sources.remote.ssh.hosts import SshHosts
    from nvtopy.sources.remote.ssh.session import Mode, State
    from nvtopy.sources.remote.ssh.targets import expand
    from tests.sources.remote.ssh import fake_ssh

    warm = 3
    texts = fake_ssh.snapshot_lines(args.gpus, args.processes, count=args.offline + warm + 1)
    lines = [text.rstrip("\n").encode() for text in texts]
    clock = types.SimpleNamespace(wall=1_795_000_000.25, mono=1000.0)
    stepped = types.SimpleNamespace(time=lambda: clock.wall, monotonic=lambda: clock.mono, sleep=time.sleep)
    source = SshHosts(expand([f"node{n:03d}" for n in range(args.hosts)], {}), 1.0, program="false")
    for session in source.streams.sessions:  # live, as the I/O thread leaves a host after its hello
        session.mode = Mode.NVTOPY
        session.stream = StreamReader()
        session.hostname = session.target.label
        session.set_status(State.LIVE, mode=Mode.NVTOPY)

    def read(line: bytes) -> None:
        """Every host's next line, as the I/O thread reads it, a second after the last."""
        clock.wall += 1.0
        clock.mono += 1.0
        for session in source.streams.sessions:
            said = session.stream.read(line)
            session.publish(said, clock.mono, session.stream.patch)

    settle_for_fleet()
    reading: list[float] = []
    refresh: list[float] = []
    with mock.patch.object(hosts_module, "time", stepped):
        read(lines[0])
        source.poll_once()
        for buffer in source._history.values():  # every sparkline's history as full as after its minutes
            for n in range(args.history):
                buffer._ring.append(n - args.history, (None,) * 7)
        for n, line in enumerate(lines[1:]):
            began = time.thread_time()
            read(line)
            read_at = time.thread_time()
            snapshot = source.poll_once()
            if n >= warm:
                reading.append(read_at - began)
                refresh.append(time.thread_time() - read_at)
    if refresh:
        gpus = sum(1 for g in snapshot.gpus if g.note is None)
        print(f"nvtopy --ssh offline, {args.hosts} hosts x {args.gpus} GPUs ({gpus} GPUs): {len(refresh)} refreshes")
        print(
            f"  CPU per refresh: reading the lines median {statistics.median(reading) * 1000:.1f} ms; the refresh "
            f"median {statistics.median(refresh) * 1000:.1f} ms, mean {statistics.mean(refresh) * 1000:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A live process's per-refresh facts straight from ``/proc/<pid>/stat`` and ``statm`` (Linux).

``statm`` stays, though the stat line has an ``rss`` field: on recent kernels the two
differ (40 to 50 pages for a shell on Linux 6.18), ``stat`` reading the batched per-CPU
RSS counters where ``statm`` sums them, an error that grows with threads and cores; and
``statm`` is what psutil, top and nvitop show.

Why not psutil here: the monitor reads every GPU process once a second, and
psutil's steady path for one process -- ``is_running()`` (which builds a second
``Process`` to compare create times) then ``status``/``cpu_times``/``ppid``/
``memory_info`` under ``oneshot()`` -- opens four files and costs about
134 µs; the inspector's whole steady read with these two files costs about 29 µs
(``make bench``: ``benchmarks/bench_host.py``, 64 processes; 42 µs before the files
were read with ``os.read`` rather than ``open()``). At 64 processes
psutil's path was most of the poller's CPU. psutil still reads everything else (user, command line, the first sight of
a pid, other systems): this module only answers for a pid psutil opened, and the
inspector falls back to psutil whenever it returns ``None``.

The PID-reuse guard stays exact: the kernel's start time of the process (field
22, in clock ticks since boot) is compared with the one read when the pid was
first seen; psutil derives ``create_time()`` from the same field.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import psutil

__all__ = ["CLOCK_TICKS", "PAGE_SIZE", "Stat", "read_stat"]

try:
    CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
    PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # not POSIX: never used (no /proc)
    CLOCK_TICKS, PAGE_SIZE = 100, 4096

# /proc/<pid>/stat's state letter -> psutil's status words (as psutil itself maps them on Linux).
_STATUS = {
    "R": psutil.STATUS_RUNNING,
    "S": psutil.STATUS_SLEEPING,
    "D": psutil.STATUS_DISK_SLEEP,
    "T": psutil.STATUS_STOPPED,
    "t": psutil.STATUS_TRACING_STOP,
    "Z": psutil.STATUS_ZOMBIE,
    "X": psutil.STATUS_DEAD,
    "x": psutil.STATUS_DEAD,
    "K": "wake-kill",  # psutil.STATUS_WAKE_KILL is not exported
    "W": psutil.STATUS_WAKING,
    "I": psutil.STATUS_IDLE,
    "P": psutil.STATUS_PARKED,
}


class Stat(NamedTuple):
    """What a refresh needs of a live process."""

    status: str  # psutil's word: "running", "sleeping", "zombie", ...
    ppid: int
    cpu_seconds: float  # user + system, this process only (as psutil's cpu_times().user + .system)
    start_ticks: int  # clock ticks after boot: the process's identity with its pid
    rss_bytes: int


def read_stat(pid: int, proc: str = "/proc") -> Stat | None:
    """``pid``'s :class:`Stat`, or None where it cannot be read this way (gone, no /proc, unreadable).

    None never says the process is gone: the caller asks psutil, which tells a
    vanished process from an unreadable one.
    """
    try:
        data = _read_line(f"{proc}/{pid}/stat")
        statm = _read_line(f"{proc}/{pid}/statm")
        # The command name (field 2) is in parentheses and may hold spaces or ')': cut at the last one.
        fields = data[data.rindex(b")") + 2 :].split()
        state = fields[0].decode("ascii", "replace")
        return Stat(
            status=_STATUS.get(state, "?"),  # psutil says "?" for a letter it does not know
            ppid=int(fields[1]),
            cpu_seconds=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
            start_ticks=int(fields[19]),
            rss_bytes=int(statm.split()[1]) * PAGE_SIZE,
        )
    except (OSError, ValueError, IndexError):
        return None


_READ_SIZE = 4096  # /proc/<pid>/stat is about 300 bytes (its command name at most 64), statm about 40
_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def _read_line(path: str) -> bytes:
    """The one line of a small /proc file, in one ``read`` system call; ValueError if it did not end.

    Why not ``open()``: it builds a FileIO and a BufferedReader around the descriptor
    and stats the file, twice the cost of the read itself (11 against 22 µs a file here,
    twice a process a refresh). procfs makes the whole text at the first read.
    """
    fd = os.open(path, _FLAGS)
    try:
        data = os.read(fd, _READ_SIZE)
    finally:
        os.close(fd)
    if not data.endswith(b"\n"):
        raise ValueError(f"{path}: no whole line in one read")
    return data

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
psutil's path was most of the poller's CPU. The refreshes read the two files through
descriptors kept open (:class:`StatFiles`: one ``pread`` each, no open or close).

The first sight of a pid (:func:`read_first_sight`: its name, command line and user besides) and
the host's CPU time and memory (:func:`read_cpu_times`, :func:`read_meminfo`) are read here too,
by psutil's own rules, and psutil is not imported at all while every answer comes from here:
``nvtopy --once`` spent about 25 ms importing it and ~0.3 ms a process in its layers. Anything
unusual (a zombie, an empty command line, a file that cannot be read, a field missing) is
``None``, and the caller asks psutil, which classifies it (gone, denied, zombie) as before.

The PID-reuse guard stays exact: the kernel's start time of the process (field
22, in clock ticks since boot) is compared with the one read when the pid was
first seen; psutil derives ``create_time()`` from the same field.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Collection
from typing import NamedTuple

__all__ = [
    "CLOCK_TICKS",
    "PAGE_SIZE",
    "FirstSight",
    "Stat",
    "StatFiles",
    "pid_absent",
    "read_cpu_times",
    "read_first_sight",
    "read_meminfo",
    "read_stat",
]

try:
    CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
    PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # not POSIX: never used (no /proc)
    CLOCK_TICKS, PAGE_SIZE = 100, 4096

# /proc/<pid>/stat's state letter -> psutil's status words (as psutil itself maps them on Linux; its
# STATUS_* constants are these strings: tests/backends/test_procstat.py holds them to it).
_STATUS = {
    "R": "running",
    "S": "sleeping",
    "D": "disk-sleep",
    "T": "stopped",
    "t": "tracing-stop",
    "Z": "zombie",
    "X": "dead",
    "x": "dead",
    "K": "wake-kill",  # psutil.STATUS_WAKE_KILL is not exported
    "W": "waking",
    "I": "idle",
    "P": "parked",
}


# The functional form, its field types given as objects: the class form's annotations are text here (``from
# __future__ import annotations``), and typing compiles each one (a ForwardRef) as the class is made, which
# every start pays (callgrind of ``nvtopy --once``: 0.75 M instructions for each of this module's two).
Stat = NamedTuple(  # noqa: UP014 - see above
    "Stat",
    [
        ("status", str),  # psutil's word: "running", "sleeping", "zombie", ...
        ("ppid", int),
        ("cpu_seconds", float),  # user + system, this process only (as psutil's cpu_times().user + .system)
        ("start_ticks", int),  # clock ticks after boot: the process's identity with its pid
        ("rss_bytes", int),
    ],
)
Stat.__doc__ = """What a refresh needs of a live process."""


def read_stat(pid: int, proc: str = "/proc") -> Stat | None:
    """``pid``'s :class:`Stat`, or None where it cannot be read this way (gone, no /proc, unreadable).

    None never says the process is gone: the caller asks psutil, which tells a
    vanished process from an unreadable one.
    """
    try:
        return _parse_stat(_read_line(f"{proc}/{pid}/stat"), _read_line(f"{proc}/{pid}/statm"))
    except (OSError, ValueError, IndexError):
        return None


def _parse_stat(data: bytes, statm: bytes) -> Stat:
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


def _keep_open() -> int:
    """How many processes' two files are kept open: 256, or fewer where the descriptor limit is low.

    At most a quarter of the soft ``RLIMIT_NOFILE`` goes to them (128 processes under the common
    1,024), so the rest of the program never runs short; more processes are read by path.
    """
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 64
    return 256 if soft == resource.RLIM_INFINITY else max(0, min(256, soft // 8))


KEEP_OPEN = _keep_open()
"""At most this many processes' ``stat`` and ``statm`` are kept open (two descriptors each)."""


class StatFiles:
    """``read_stat`` of the pids read every refresh, through ``stat`` and ``statm`` kept open.

    Why: opening a ``/proc`` file (a path walk, a new inode and file) and closing it cost
    twice the read; a descriptor kept open and read with ``pread`` at offset 0 makes procfs
    write the line afresh each time. It also pins the process: a descriptor of an exited
    process answers ESRCH, even once its pid is reused, so a reused pid is never read as the
    old process (the caller still compares start ticks). Any failure closes the pid's pair
    and answers None, as :func:`read_stat` does; the next read opens them again.
    One thread at a time (the inspector's: the poller's).
    """

    def __init__(self, proc: str = "/proc", limit: int = KEEP_OPEN) -> None:
        self._proc = proc
        self._limit = limit
        self._files: dict[int, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._files)

    def read(self, pid: int) -> Stat | None:
        """``pid``'s :class:`Stat` (see :func:`read_stat`); None where it cannot be read."""
        if pid not in self._files and len(self._files) >= self._limit:
            return read_stat(pid, self._proc)
        lines = self.lines(pid)
        if lines is None:
            return None
        try:
            return _parse_stat(*lines)
        except (ValueError, IndexError):
            self.forget(pid)
            return None

    def lines(self, pid: int) -> tuple[bytes, bytes] | None:
        """``pid``'s ``stat`` and ``statm`` lines, their files opened and kept if they were not; None where they
        cannot be read so (at the limit of kept files, gone, unreadable, not a whole line: the pair is closed)."""
        files = self._files.get(pid)
        if files is None:
            if len(self._files) >= self._limit:
                return None
            files = self._open(pid)
            if files is None:
                return None
        try:
            data, statm = os.pread(files[0], _READ_SIZE, 0), os.pread(files[1], _READ_SIZE, 0)
            if data.endswith(b"\n") and statm.endswith(b"\n"):
                return data, statm
        except OSError:
            pass
        self.forget(pid)
        return None

    @property
    def proc(self) -> str:
        """The ``/proc`` these files are read from."""
        return self._proc

    def _open(self, pid: int) -> tuple[int, int] | None:
        try:
            stat = os.open(f"{self._proc}/{pid}/stat", _FLAGS)
        except OSError:
            return None
        try:
            statm = os.open(f"{self._proc}/{pid}/statm", _FLAGS)
        except OSError:
            os.close(stat)
            return None
        files = self._files[pid] = (stat, statm)
        return files

    def forget(self, pid: int) -> None:
        """Close ``pid``'s files, if open."""
        files = self._files.pop(pid, None)
        if files is not None:
            os.close(files[0])
            os.close(files[1])

    def keep(self, pids: Collection[int]) -> None:
        """Close the files of every pid not in ``pids``."""
        for pid in [pid for pid in self._files if pid not in pids]:
            self.forget(pid)

    def close(self) -> None:
        """Close every file (idempotent)."""
        for pid in list(self._files):
            self.forget(pid)

    def __del__(self) -> None:
        """A reader dropped unclosed (an inspector the Python API or a test made) leaves no descriptor open."""
        with contextlib.suppress(OSError, TypeError, AttributeError):  # at interpreter exit, ``os`` may be gone
            self.close()


FirstSight = NamedTuple(  # noqa: UP014 - the functional form, as Stat's
    "FirstSight",
    [("stat", Stat), ("name", str), ("cmdline", list[str]), ("uid", int), ("create_time", float), ("status", bytes)],
)
FirstSight.__doc__ = """What the inspector reads of a pid it has not seen: psutil's ``name()``, ``cmdline()``,
``uids().real`` and ``create_time()``, the refresh's :class:`Stat`, and ``status`` as read (the owner resolver's
``NSpid`` comes from it: one read of the file, not two)."""


_ENCODING = sys.getfilesystemencoding()  # how psutil decodes names and command lines
_ERRORS = sys.getfilesystemencodeerrors()
_NAME_CUT = 15  # the kernel's TASK_COMM_LEN - 1: a name this long may be cut (psutil then looks at the argv)


def read_first_sight(pid: int, proc: str = "/proc", stats: StatFiles | None = None) -> FirstSight | None:
    """``pid``'s facts as psutil reads them, from ``stat``, ``statm``, ``status`` and ``cmdline``.

    ``stats``: the refreshes' kept files (of the same ``proc``): ``stat`` and ``statm`` are opened there
    and kept, so the next refresh reads them with no second open (by path where they cannot be kept).

    None where psutil must answer: the process is gone or unreadable, a zombie or dead (psutil tells
    those apart), its command line is empty (a kernel thread, or a process caught between fork and
    exec: the inspector reads it again), or it holds a carriage return (psutil reads it as text,
    with universal newlines). The create time is psutil's: the boot time plus the start ticks.
    """
    try:
        lines = stats.lines(pid) if stats is not None and stats.proc == proc else None
        if lines is None:
            lines = _read_line(f"{proc}/{pid}/stat"), _read_line(f"{proc}/{pid}/statm")
        data = lines[0]
        stat = _parse_stat(*lines)
        if stat.status in ("zombie", "dead", "?"):
            return None
        raw = _read_all(f"{proc}/{pid}/cmdline")
        if not raw or b"\r" in raw:
            return None
        status = _read_all(f"{proc}/{pid}/status")
        uid = _uid(status)
        booted = _boot_time(proc)
    except (OSError, ValueError, IndexError):
        return None
    if uid is None or booted is None:
        return None
    name = data[data.find(b"(") + 1 : data.rindex(b")")].decode(_ENCODING, _ERRORS)
    cmdline = _split_cmdline(raw.decode(_ENCODING, _ERRORS))
    if len(name) >= _NAME_CUT and cmdline:  # psutil's name(): the argv's first word when the name is its start
        extended = os.path.basename(cmdline[0])
        if extended.startswith(name):
            name = extended
    create_time = float(stat.start_ticks) / CLOCK_TICKS + booted
    return FirstSight(stat, name, cmdline, uid, create_time, status)


def pid_absent(pid: int, proc: str = "/proc") -> bool:
    """True when ``/proc`` is there and ``/proc/<pid>`` is not: no process has this pid (in this namespace).

    Why: psutil answers the same (``NoSuchProcess``) from the same fact, and a GPU process that ended
    between the driver's list and its first sight is common enough that a one-shot should not import
    psutil (about 10 ms) to hear it. Anything else (a pid unreadable, /proc missing) is psutil's to tell.
    """
    try:
        os.stat(f"{proc}/{int(pid)}")
    except FileNotFoundError:
        return os.path.isdir(f"{proc}/self")
    except (OSError, ValueError):
        return False
    return False


def _split_cmdline(data: str) -> list[str]:
    """psutil's ``cmdline()`` of the text of ``/proc/<pid>/cmdline`` (a retitled process separates by spaces)."""
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    cmdline = data.split(sep)
    if sep == "\x00" and len(cmdline) == 1 and " " in data:
        cmdline = data.split(" ")
    return cmdline


def _uid(status: bytes) -> int | None:
    """The real uid of ``/proc/<pid>/status``'s ``Uid:`` line (psutil's ``uids().real``)."""
    for line in status.split(b"\n"):
        if line.startswith(b"Uid:\t"):
            return int(line.split(b"\t")[1])
    return None


_BOOT_TIME: dict[str, float] = {}


def _boot_time(proc: str) -> float | None:
    """``btime`` of ``/proc/stat`` (psutil's ``boot_time()``), read once: it does not change while the host runs."""
    booted = _BOOT_TIME.get(proc)
    if booted is None:
        for line in _read_all(f"{proc}/stat").split(b"\n"):
            if line.startswith(b"btime"):
                booted = _BOOT_TIME[proc] = float(line.split()[1])
                break
    return booted


def read_cpu_times(proc: str = "/proc") -> list[float] | None:
    """psutil's ``cpu_times()`` (user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice: seconds)
    from ``/proc/stat``'s first line; None where it cannot be read so."""
    try:
        fd = os.open(f"{proc}/stat", _FLAGS)
        try:
            first = os.read(fd, 512).split(b"\n", 1)[0].split()
        finally:
            os.close(fd)
        if first[:1] != [b"cpu"] or len(first) < 11:
            return None
        return [float(value) / CLOCK_TICKS for value in first[1:11]]
    except (OSError, ValueError):
        return None


def read_meminfo(proc: str = "/proc") -> dict[bytes, int] | None:
    """``/proc/meminfo`` in bytes, keyed as psutil keys it (``b"MemTotal:"``); None where it cannot be read."""
    try:
        mems = {}
        for line in _read_all(f"{proc}/meminfo").splitlines():
            fields = line.split()
            mems[fields[0]] = int(fields[1]) * 1024
        return mems
    except (OSError, ValueError, IndexError):
        return None


_READ_SIZE = 4096  # /proc/<pid>/stat is about 300 bytes (its command name at most 64), statm about 40
_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def _read_all(path: str) -> bytes:
    """A whole /proc file (``status``, ``cmdline``: a few KiB at most, an argv up to the kernel's limit)."""
    fd = os.open(path, _FLAGS)
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


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

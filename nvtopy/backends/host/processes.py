"""Host-side facts about GPU processes (user, command, CPU, RSS), read with psutil.

Why a stateful inspector rather than ``psutil.Process(pid)`` per row:

- CPU % needs two readings of a process's CPU time; we keep the previous one.
- The command line, user and create time of a pid never change while it lives,
  so they are read once per (pid, create time) and reused -- the hot path per
  refresh is one ``/proc/<pid>/stat`` + ``statm`` read (:mod:`.procstat`; psutil
  where that cannot answer).
- PIDs are reused: an entry is only trusted while the create time matches (the
  kernel's start time in clock ticks, on the hot path).
- psutil is imported only when /proc cannot answer (:mod:`.procstat`: a first sight, the host's
  CPU and memory, by psutil's rules): most runs of ``nvtopy --once`` never import it.

It also answers whether NVML's pids can be resolved here at all: NVML reports
host pids, so inside a container without ``--pid=host`` they belong to another
PID namespace and must never be joined with (or signalled as) local processes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ...model import (
    CHILDREN_SHOWN,
    HostProcess,
    HostUsage,
    ProcessDetails,
    ProcessRelative,
    Reason,
    fast_constructor,
    freeze,
)
from .procstat import (
    CLOCK_TICKS,
    Stat,
    StatFiles,
    pid_absent,
    read_cpu_times,
    read_first_sight,
    read_meminfo,
    read_stat,
)

if TYPE_CHECKING:
    import psutil

    from .owners import OwnerResolver, ResolvedOwner

__all__ = ["HostUsageReader", "PsutilInspector", "in_foreign_pid_namespace", "read_process_details", "username_for_uid"]

_USERNAMES: dict[int, str] = {}


def username_for_uid(uid: int) -> str:
    """The login name for ``uid`` (cached; the numeric uid when it has no passwd entry)."""
    name = _USERNAMES.get(uid)
    if name is None:
        try:
            import pwd

            name = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            name = str(uid)
        _USERNAMES[uid] = name
    return name


# The initial PID namespace's inode (the kernel's PROC_PID_INIT_INO, 0xEFFFFFFC: fixed since Linux 3.8).
_INIT_PID_NAMESPACE = f"pid:[{0xEFFFFFFC}]"


def in_foreign_pid_namespace(status_path: str = "/proc/self/status", namespace_path: str = "/proc/self/ns/pid") -> bool:
    """True when this process does not live in the initial PID namespace, whose pids NVML reports.

    Inside a nested namespace NVML's pids are either invisible or, worse, collide with
    unrelated local processes. The namespace link tells (``pid:[N]``, N the initial
    namespace's fixed inode on the host); ``NSpid`` does not always: it lists the pid from
    the namespace that mounted ``/proc`` down, so a container with its own ``/proc`` (Docker,
    Kubernetes) shows one level, as the host does. Where the link cannot be read, ``NSpid``
    listing more than one pid is the sign; kernels without it (< 4.1) or non-Linux systems
    are assumed to be the host.
    """
    try:
        link = os.readlink(namespace_path)
    except (OSError, ValueError):
        link = ""
    if link.startswith("pid:["):
        return link != _INIT_PID_NAMESPACE
    try:
        with open(status_path, encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return len(line.split()) > 2
    except OSError:
        pass
    return False


class _Entry:
    """Cached facts of one live process (valid while its create time matches)."""

    __slots__ = (
        "command",
        "create_time",
        "first",
        "first_status",
        "last_cpu",
        "last_percent",
        "last_wall",
        "name",
        "owned",
        "parents",
        "parents_at",
        "ppid",
        "process",
        "reasons",
        "retry_command",
        "start_ticks",
        "uid",
        "user",
    )

    def __init__(
        self,
        process: psutil.Process | None,  # None: read from /proc (procstat); made when psutil must answer
        create_time: float | None,  # None: /proc/<pid> cannot be read (hidepid=1)
        *,
        user: str | None,
        uid: int | None,
        name: str | None,
        command: str | None,
        reasons: dict[str, Reason] | None = None,
        first: tuple[str, float, int, int] | None = None,
    ) -> None:
        self.process = process
        self.create_time = create_time
        self.user, self.uid, self.name, self.command = user, uid, name, command
        self.reasons: dict[str, Reason] = reasons if reasons is not None else {}
        self.first = first  # (status, CPU seconds, rss, ppid) read with the static facts, used once
        self.first_status: bytes | None = None  # /proc/<pid>/status as the first sight read it: the owner's, once
        self.last_cpu: float | None = None  # user+system seconds at the previous reading
        self.last_wall: float | None = None
        self.last_percent: float | None = None  # the CPU % last reported (a too-short window repeats it)
        # An empty argv is read in the instant between a process's exec and the kernel setting up
        # its arguments (a pid seen as it starts): read the command again instead of caching that.
        self.retry_command = False
        self.owned: ResolvedOwner | None = None  # owner, NSpid, CUDA_VISIBLE_DEVICES: read once, when opened
        self.ppid: int | None = None  # the parent pid at the last reading
        self.parents: tuple[ProcessRelative, ...] = ()  # the ancestors read for that parent
        self.parents_at: float | None = None  # when (an ancestor may be re-parented: read again after a while)
        # The kernel's start time (clock ticks after boot) where /proc/<pid>/stat agreed with psutil's
        # create time when the pid was opened: the refreshes then read /proc directly (None: psutil's path).
        self.start_ticks: int | None = None


# How long after its start a process with an empty argv is read again (kernel threads keep theirs empty).
_EXEC_WINDOW_S = 10.0
# A process's ancestors are read when it is first seen and when its parent changes; an ancestor can be
# re-parented too (its own parent exited): they are read again after this long.
_PARENTS_TTL_S = 10.0
# The longest ancestor chain read (a loop of reused pids, or an absurdly deep tree, stops here).
_MAX_DEPTH = 32
# The shortest span a CPU % is measured over: CPU time counts in 10 ms clock ticks, so 0.2 s is 5 % a tick.
# A reading sooner than that (``nvtopy --once`` looks its processes up ~0.1 s before it reads them) repeats
# the last figure, or the lifetime average at first sight, and keeps its baseline for the next reading.
_MIN_CPU_WINDOW_S = 0.2
# How close two readings of a process's start time must be to be the same process (clock ticks are 10 ms).
_SAME_START_S = 1e-3

_Ancestor = tuple[ProcessRelative, int | None] | None  # (the ancestor, its parent) or None: unreadable


def _join_cmdline(cmdline: list[str]) -> str:
    return " ".join(cmdline)


class PsutilInspector:
    """Resolve pids to :class:`HostProcess` with psutil, keeping per-process state between calls."""

    def __init__(self, clock: Callable[[], float] = time.time, resolver: OwnerResolver | None = None) -> None:
        self._clock = clock
        self._entries: dict[int, _Entry] = {}
        # Each refreshed process's stat and statm, kept open between refreshes (one pread each, no open/close).
        self._stats = StatFiles()
        # Who owns each process: read once per new entry (pid + create time), never per refresh.
        self._resolver = resolver

    @property
    def resolver(self) -> OwnerResolver:
        """Who owns each process (:mod:`.owners`), made at the first process looked up: ``nvtopy --once``
        imports it (and its JSON decoder) while its GPM pair matures, not before the pair's first sample."""
        if self._resolver is None:
            from .owners import OwnerResolver

            self._resolver = OwnerResolver()
        return self._resolver

    @resolver.setter
    def resolver(self, resolver: OwnerResolver) -> None:
        self._resolver = resolver

    def _resolve_owner(self, entry: _Entry, pid: int, *, again: bool = False) -> None:
        """Read ``entry``'s owner once (``again``: afresh, see :meth:`_reread_command`); a failure leaves ``None``
        fields, never an exception."""
        status, entry.first_status = entry.first_status, None
        try:
            entry.owned = self.resolver.resolve(pid, entry.create_time, status=status, again=again)
        except Exception:  # noqa: BLE001 -- the resolver never raises; a monitor keeps the row if it did
            from .owners import ResolvedOwner

            entry.owned = ResolvedOwner(owner=None)

    def _open(self, pid: int) -> _Entry | None:
        """Read the static facts of a new pid; ``None`` when it no longer exists.

        From /proc where it answers (:func:`~.procstat.read_first_sight`: psutil's figures without
        psutil), else from psutil, which tells a gone, denied or zombie process apart.
        """
        sight = read_first_sight(pid, stats=self._stats)  # its stat and statm kept open for the refreshes
        if sight is not None:
            stat = sight.stat
            entry = _Entry(
                None,
                sight.create_time,
                user=username_for_uid(sight.uid),
                uid=sight.uid,
                name=sight.name,
                command=_join_cmdline(sight.cmdline),
                first=(stat.status, stat.cpu_seconds, stat.rss_bytes, stat.ppid),
            )
            entry.start_ticks = stat.start_ticks
            entry.first_status = sight.status
            return entry
        self._stats.forget(pid)  # psutil answers for it: no files kept for a pid the refreshes do not read so
        if pid_absent(pid):
            return None  # gone: psutil would say so from the same /proc
        return self._open_psutil(pid)

    def _open_psutil(self, pid: int) -> _Entry | None:
        import psutil

        try:
            process = psutil.Process(pid)
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            return None
        except psutil.AccessDenied:
            return None if not psutil.pid_exists(pid) else self._denied_entry(pid)
        reasons: dict[str, Reason] = {}
        user = uid = name = command = None
        first = None
        retry = False
        try:
            with process.oneshot():
                create_time = process.create_time()
                try:
                    uid = process.uids().real
                    user = username_for_uid(uid)
                except psutil.AccessDenied:
                    reasons["user"] = Reason.NO_PERMISSION
                try:
                    name = process.name()
                    cmdline = process.cmdline()
                    command = _join_cmdline(cmdline) if cmdline else name
                    retry = not cmdline
                except psutil.ZombieProcess:
                    command = name or None
                    if command is None:
                        reasons["command"] = Reason.NOT_AVAILABLE
                except psutil.AccessDenied:
                    reasons["command"] = Reason.NO_PERMISSION
                try:  # the dynamic facts too, from the same /proc reads: a new pid costs one pass
                    times = process.cpu_times()
                    first = (process.status(), times.user + times.system, process.memory_info().rss, process.ppid())
                except psutil.Error:
                    first = None  # read again (and classified) by the regular path
        except psutil.ZombieProcess:
            # ZombieProcess is a NoSuchProcess: test it first. The pid exists but
            # its /proc entries are mostly gone; keep the row, say it is a zombie.
            try:
                create_time = process.create_time()
            except (psutil.Error, OSError):
                create_time = 0.0
            reasons["command"] = Reason.NOT_AVAILABLE
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            return None
        except psutil.AccessDenied:
            return self._denied_entry(pid, process)
        entry = _Entry(
            process, create_time, user=user, uid=uid, name=name, command=command, reasons=reasons, first=first
        )
        entry.retry_command = retry
        entry.start_ticks = _start_ticks(pid, create_time)
        return entry

    @staticmethod
    def _denied_entry(pid: int, process: psutil.Process | None = None) -> _Entry | None:
        import psutil

        reasons = dict.fromkeys(("user", "command"), Reason.NO_PERMISSION)
        try:
            process = process or psutil.Process(pid)
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError, psutil.AccessDenied):
            return None
        try:
            create_time: float | None = process.create_time()
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            return None
        except psutil.AccessDenied:
            # The pid exists but /proc/<pid> is unreadable (procfs mounted with
            # hidepid=1): keep the GPU row, with no start time to check against.
            create_time = None
        return _Entry(process, create_time, user=None, uid=None, name=None, command=None, reasons=reasons)

    def close(self) -> None:
        """Close the /proc files kept open between refreshes (a later :meth:`inspect` opens them again)."""
        self._stats.close()

    def inspect(self, pids: Collection[int]) -> dict[int, HostProcess | None]:
        """Return host facts per pid; ``None`` for a pid this PID namespace has no process for.

        The caller tells a process it saw exit (its row goes) from a pid never seen here (a row
        not visible from this PID namespace: NVML listed it).

        Entries of pids no longer asked about are forgotten, so memory stays
        bounded by the number of live GPU processes.
        """
        now = self._clock()
        result: dict[int, HostProcess | None] = {}
        wanted = set(pids)
        for pid in list(self._entries):
            if pid not in wanted:
                del self._entries[pid]
        ancestors: dict[int, _Ancestor] = {}  # read once per call, shared by the processes of one job
        for pid in wanted:
            result[pid] = self._inspect_one(pid, now, ancestors)
        if len(self._stats) > len(self._entries):
            self._stats.keep(self._entries)
        # The entries hold each owner; the resolver's own cache keeps only the live ones (pruned only when it
        # holds more than the entries: nothing to do on a steady refresh).
        if self._resolver is not None and len(self._resolver) > len(self._entries):
            self.resolver.forget((pid, entry.create_time) for pid, entry in self._entries.items())
        return result

    def _reread_command(self, entry: _Entry, pid: int, now: float) -> None:
        """The argv of a process first seen with none (see ``_Entry.retry_command``), and what came with it.

        Seen in the middle of its exec, a process had no argv and no environment yet: its name was the kernel's
        15 characters (psutil completes a longer one from the argv) and its owner's environment facts (the Slurm
        job, ``CUDA_VISIBLE_DEVICES``) were missing. The owner is read once per process, so without this both
        stayed wrong for the process's whole life; they are read again with the argv, once.
        """
        if entry.create_time is None or now - entry.create_time > _EXEC_WINDOW_S:
            entry.retry_command = False
            return
        import psutil

        if entry.process is None:
            return  # read from /proc, which gave a command line: no retry is ever set
        try:
            cmdline = entry.process.cmdline()
            name = entry.process.name() if cmdline else None
        except psutil.Error:
            return
        if cmdline:
            entry.command, entry.retry_command = _join_cmdline(cmdline), False
            entry.name = name
            self._resolve_owner(entry, pid, again=True)

    def _inspect_one(self, pid: int, now: float, ancestors: dict[int, _Ancestor]) -> HostProcess | None:
        entry = self._entries.get(pid)
        stat: Stat | None = None
        if entry is not None and entry.start_ticks is not None:
            stat = self._stats.read(pid)  # None: gone or unreadable -- psutil's path below tells which
            if stat is not None and stat.start_ticks != entry.start_ticks:
                # The pid now belongs to a new process: forget the cached facts and look again.
                del self._entries[pid]
                self._stats.forget(pid)
                entry, stat = None, None
        if entry is not None and stat is None and not _still_running(entry, pid):
            # Gone, or the pid now belongs to a new process (is_running compares
            # create times): forget the cached facts and look again.
            del self._entries[pid]
            entry = None
        if entry is None:
            entry = self._open(pid)
            if entry is None:
                return None
            self._resolve_owner(entry, pid)
            self._entries[pid] = entry
        elif entry.retry_command:
            self._reread_command(entry, pid, now)
        reasons = dict(entry.reasons)
        cpu_percent: float | None = None
        rss: int | None = None
        ppid = entry.ppid
        status = "running"
        busy: float | None = None
        if stat is not None:
            status, busy, rss, ppid = stat.status, stat.cpu_seconds, stat.rss_bytes, stat.ppid
        elif entry.first is not None:
            status, busy, rss, ppid = entry.first
            entry.first = None
        else:
            import psutil

            process = entry.process
            try:
                if process is None:  # read from /proc until now: _still_running made it, unless it is gone
                    raise psutil.NoSuchProcess(pid)
                with process.oneshot():
                    status = process.status()
                    times = process.cpu_times()
                    rss = process.memory_info().rss
                    ppid = process.ppid()  # from the stat line just read: free
                busy = times.user + times.system
            except psutil.ZombieProcess:
                status = psutil.STATUS_ZOMBIE
            except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
                self._entries.pop(pid, None)
                return None
            except psutil.AccessDenied:
                reasons["cpu_percent"] = reasons["host_memory_bytes"] = Reason.NO_PERMISSION
        if busy is not None:
            window = None if entry.last_wall is None else now - entry.last_wall
            if entry.last_cpu is not None and window is not None and window >= _MIN_CPU_WINDOW_S:
                cpu_percent = max(0.0, 100.0 * (busy - entry.last_cpu) / window)
            elif window is not None and 0 <= window < _MIN_CPU_WINDOW_S and entry.last_percent is not None:
                cpu_percent = entry.last_percent  # too soon to measure: the last figure, baseline kept
            elif entry.create_time is not None and now > entry.create_time:
                # First sight: the lifetime average, as ps(1) reports it.
                cpu_percent = max(0.0, 100.0 * busy / (now - entry.create_time))
            if window is None or not 0 <= window < _MIN_CPU_WINDOW_S:
                entry.last_cpu, entry.last_wall = busy, now
            entry.last_percent = cpu_percent
        for key, value in (("cpu_percent", cpu_percent), ("host_memory_bytes", rss)):
            if value is None:
                reasons.setdefault(key, Reason.NOT_AVAILABLE)
        if ppid != entry.ppid or entry.parents_at is None or now - entry.parents_at > _PARENTS_TTL_S:
            entry.ppid, entry.parents_at = ppid, now
            entry.parents = _chain(ppid, ancestors)
        owned = entry.owned
        # HostProcess(pid=..., ...) with every field, in its order, without the frozen dataclass __init__
        # (an object.__setattr__ a field): 1.5 -> 0.4 us a process, for every process every poll. Made at the
        # first process, not at import (nvtopy --once), then a dict look-up.
        return fast_constructor(HostProcess)(
            pid,
            entry.user,
            entry.uid,
            entry.name,
            entry.command,
            cpu_percent,
            rss,
            entry.create_time,
            status,
            freeze(reasons),
            owned.owner if owned else None,
            owned.ns_pid if owned else None,
            owned.cuda_visible_devices if owned else None,
            entry.ppid,
            entry.parents,
        )


def _start_ticks(pid: int, create_time: float | None) -> int | None:
    """The start time /proc/<pid>/stat gives, where it is the process psutil opened (else None: psutil's path).

    psutil's create time is boot time + start ticks / clock ticks per second: a
    reading that disagrees by more than a tick is another process (the pid was
    reused between the two reads), or a /proc that does not say what psutil saw.
    """
    if create_time is None:
        return None
    stat = read_stat(pid)
    if stat is None:
        return None
    import psutil

    try:
        started = psutil.boot_time() + stat.start_ticks / CLOCK_TICKS
    except (psutil.Error, OSError):
        return None
    return stat.start_ticks if abs(started - create_time) <= 1.5 / CLOCK_TICKS else None


def _still_running(entry: _Entry, pid: int) -> bool:
    """psutil's ``is_running()`` of the entry's process: it exists, with the create time first read.

    An entry read from /proc gets its psutil.Process here, the first time psutil must answer for it
    (the pid became unreadable): the create time it reads must be the entry's, else the pid now
    belongs to another process.
    """
    if pid_absent(pid):
        return False  # psutil's answer from the same /proc, without importing it
    import psutil

    if entry.process is not None:
        return entry.process.is_running()
    try:
        process = psutil.Process(pid)
        started = process.create_time()
    except psutil.Error:
        return False
    if entry.create_time is None or abs(started - entry.create_time) > 1.5 / CLOCK_TICKS:
        return False
    entry.process = process
    return True


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (Unix seconds); None: no such process, or it cannot be read."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def running_not_zombie(pid: int) -> bool:
    """Process ``pid`` exists and has not exited (a zombie, exited and not yet reaped, has)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def current_username() -> str | None:
    """The user nvtopy runs as (for highlighting their processes)."""
    try:
        return username_for_uid(os.getuid())
    except AttributeError:  # non-POSIX
        return None


# --------------------------------------------------------------------- parents, children, details


def _ancestor(pid: int, memo: dict[int, _Ancestor]) -> _Ancestor:
    """``pid`` as a relative (name and user) and its own parent; None when it cannot be read."""
    if pid in memo:
        return memo[pid]
    sight = read_first_sight(pid)
    if sight is not None:  # psutil's name, parent and user, read from /proc
        found: _Ancestor = (ProcessRelative(pid, sight.name or None, username_for_uid(sight.uid)), sight.stat.ppid)
        memo[pid] = found
        return found
    import psutil

    found = None
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            name = process.name()
            parent = process.ppid()
            try:
                user: str | None = username_for_uid(process.uids().real)
            except psutil.AccessDenied:
                user = None
        found = (ProcessRelative(pid, name or None, user), parent)
    except (psutil.Error, OSError):
        found = None
    memo[pid] = found
    return found


def _chain(ppid: int | None, memo: dict[int, _Ancestor], *, until: int = 1) -> tuple[ProcessRelative, ...]:
    """The ancestors from ``ppid`` up, nearest first; stops before pid ``until`` (and at an unreadable one).

    ``until=0``: up to pid 1 included.
    """
    chain: list[ProcessRelative] = []
    seen: set[int] = set()
    pid = ppid
    while pid is not None and pid > until and pid not in seen and len(chain) < _MAX_DEPTH:
        seen.add(pid)
        found = _ancestor(pid, memo)
        if found is None:
            break
        relative, pid = found
        chain.append(relative)
    return tuple(chain)


def _children(process: psutil.Process) -> tuple[tuple[ProcessRelative, ...], int]:
    """Its direct children (the first :data:`CHILDREN_SHOWN`, by pid) and how many there are."""
    import psutil

    try:
        found = sorted(process.children(), key=lambda child: child.pid)
    except (psutil.Error, OSError):
        return (), 0
    children: list[ProcessRelative] = []
    for child in found[:CHILDREN_SHOWN]:
        name = user = None
        try:
            with child.oneshot():
                name = child.name() or None
                user = username_for_uid(child.uids().real)
        except (psutil.Error, OSError):
            pass
        children.append(ProcessRelative(child.pid, name, user))
    return tuple(children), len(found)


def read_process_details(pid: int, create_time: float | None) -> ProcessDetails | None:
    """What the process screen shows of ``pid`` beyond the snapshot; None when it is no longer that process.

    ``create_time``: the start time the snapshot gave; a pid that now belongs to another
    process (or whose start time cannot be read to check) gives None, never another
    process's details. Each field that cannot be read (another user's cwd, executable
    or environment: no permission) is None with its reason. Reads ``/proc`` a dozen
    times and lists the children (a pass over every pid): on demand, off the UI thread.
    """
    if create_time is None or pid <= 0:
        return None
    import psutil

    try:
        process = psutil.Process(pid)
        started = process.create_time()
    except (psutil.Error, OSError):
        return None
    if abs(started - create_time) > _SAME_START_S:
        return None
    reasons: dict[str, Reason] = {}

    def read(name: str, function: Callable[[], Any]) -> Any:
        try:
            return function()
        except psutil.ZombieProcess:
            reasons[name] = Reason.NOT_AVAILABLE
        except psutil.AccessDenied:
            reasons[name] = Reason.NO_PERMISSION
        except (psutil.Error, OSError):
            reasons[name] = Reason.NOT_AVAILABLE
        return None

    with process.oneshot():
        cmdline = read("cmdline", process.cmdline)
        status = read("status", process.status)
        threads = read("threads", process.num_threads)
        uids = read("user", process.uids)
        ppid = read("parents", process.ppid)
    exe = read("exe", process.exe) or None
    cwd = read("cwd", process.cwd) or None
    environ = read("cuda_visible_devices", process.environ)
    if not process.is_running():  # it exited (or the pid was reused) while we read: nothing of it is current
        return None
    user = username_for_uid(uids.real) if uids is not None else None
    children, count = _children(process)
    return ProcessDetails(
        pid=pid,
        create_time=started,
        cmdline=tuple(cmdline) if cmdline is not None else None,
        exe=exe,
        cwd=cwd,
        user=user,
        uid=uids.real if uids is not None else None,
        status=status,
        threads=threads,
        parents=_chain(ppid, {}, until=0),
        children=children,
        children_count=count,
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES") if environ is not None else None,
        environ_readable=environ is not None,
        unavailable=freeze(reasons),
    )


# --------------------------------------------------------------------- the host's CPU, load, memory, swap


def _cpu_ticks() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of every CPU since boot; None when they cannot be read.

    Idle and I/O wait are not busy (as top and psutil.cpu_percent count them). psutil's
    ``cpu_times()`` read from /proc/stat (:func:`~.procstat.read_cpu_times`), else psutil's own.
    """
    fields = read_cpu_times()
    if fields is not None:
        total = sum(fields) - fields[8] - fields[9]  # guest and guest_nice: in user already
        idle = fields[3] + fields[4]  # idle and iowait
        return total - idle, total
    import psutil

    try:
        times = psutil.cpu_times()
    except (psutil.Error, OSError, AttributeError):
        return None
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)  # in user already
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


class HostUsageReader:
    """Reads :class:`~nvtopy.model.HostUsage` on the poller's thread (a few ``/proc`` reads: never the UI's).

    Why a reader with state and not ``psutil.cpu_percent()``: that keeps one module-wide
    baseline (anyone else calling it moves ours) and says 0.0 at its first call, a figure
    nobody measured. Here the CPU share is measured since this reader's previous reading
    (or its creation: ``--once`` reads a tenth of a second later); a window with no tick
    in it is N/A, never 0. Every figure fails on its own, with its reason.
    """

    def __init__(self) -> None:
        self._last = _cpu_ticks()

    def read(self) -> HostUsage:
        values: dict[str, Any] = {}
        reasons: dict[str, Reason] = {}

        def attempt(names: tuple[str, ...], function: Callable[[], tuple[Any, ...]]) -> None:
            try:
                found = function()
            except Exception as exc:  # what the figure's failure was: classified here (a bug is raised)
                reason = _usage_reason(exc)
                if reason is None:
                    raise
                reasons.update(dict.fromkeys(names, reason))
                return
            values.update(zip(names, found, strict=True))

        ticks = _cpu_ticks()
        last, self._last = self._last, ticks
        if ticks is None or last is None or ticks[1] - last[1] <= 0:
            reasons["cpu_busy_percent"] = Reason.NOT_AVAILABLE  # unreadable, or no tick went by yet
        else:
            values["cpu_busy_percent"] = 100.0 * (ticks[0] - last[0]) / (ticks[1] - last[1])
        memory = read_meminfo()  # one read for both figures; None: psutil reads them
        attempt(("cpu_count",), lambda: (_cpu_count(),))
        attempt(("load_1m", "load_5m", "load_15m"), os.getloadavg)
        attempt(("ram_total_bytes", "ram_used_bytes"), lambda: _ram(memory))
        attempt(("swap_total_bytes", "swap_used_bytes"), lambda: _swap(memory))
        for name in HostUsage.__dataclass_fields__:
            if name != "unavailable" and values.get(name) is None:
                values.pop(name, None)
                reasons.setdefault(name, Reason.NOT_AVAILABLE)
        return HostUsage(**values, unavailable=freeze(reasons))


def _usage_reason(exc: Exception) -> Reason | None:
    """The reason a host figure is N/A for ``exc``; None: a bug, raised. (psutil's errors only once it is imported.)"""
    psutil = sys.modules.get("psutil")
    if psutil is not None and isinstance(exc, psutil.AccessDenied):
        return Reason.NO_PERMISSION
    if isinstance(exc, (OSError, AttributeError, ValueError, TypeError)):
        return Reason.NOT_AVAILABLE
    if psutil is not None and isinstance(exc, psutil.Error):
        return Reason.NOT_AVAILABLE
    return None


def _cpu_count() -> int | None:
    """psutil's ``cpu_count()``: the CPUs online (sysconf), None when fewer than one is said."""
    try:
        count = os.sysconf("SC_NPROCESSORS_ONLN")
    except (ValueError, OSError, AttributeError):
        import psutil

        return psutil.cpu_count()
    return count if count >= 1 else None


def _ram(memory: dict[bytes, int] | None = None) -> tuple[int, int]:
    """(total, used) where used is total minus available: what the kernel cannot give without swapping.

    psutil's ``virtual_memory()`` figures; from ``memory`` (/proc/meminfo) where it has ``MemAvailable``
    (a kernel since 3.14), else psutil's own estimate.
    """
    total = memory.get(b"MemTotal:") if memory else None
    available = memory.get(b"MemAvailable:") if memory else None
    if memory is None or total is None or not available or b"MemFree:" not in memory:
        import psutil

        reading = psutil.virtual_memory()
        return reading.total, max(0, reading.total - reading.available)
    if available > total:  # as psutil (and procps' free) read a container's distorted figures
        available = memory[b"MemFree:"]
    return total, max(0, total - available)


def _swap(memory: dict[bytes, int] | None = None) -> tuple[int, int]:
    """psutil's ``swap_memory()`` total and used (total minus free), from ``memory`` where it has them."""
    if memory is not None and b"SwapTotal:" in memory and b"SwapFree:" in memory:
        total = memory[b"SwapTotal:"]
        return total, total - memory[b"SwapFree:"]
    import psutil

    swap = psutil.swap_memory()
    return swap.total, swap.used

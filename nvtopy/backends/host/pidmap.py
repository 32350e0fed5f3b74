"""Host pids to local pids, inside a container without the host's PID namespace.

NVML reports pids of the initial (host) namespace. Inside a container they do not
name local processes -- or, worse, name unrelated ones -- so the rows are marked
foreign and never signalled. This module maps a host pid to a local process only
where a rule PROVES it; every other row stays foreign (unmapped):

(a) device: the GPU lists exactly one NVML process, and exactly one local CUDA
    process (nvtopy itself excluded) holds that GPU's ``/dev/nvidia<minor>`` open.
    A CUDA process is one that also holds ``/dev/nvidia-uvm``: a process with only
    the device node (nvidia-smi, another monitor: no CUDA context, so no NVML
    compute row) neither counts as the holder nor spoils the rule. Needs a complete
    scan of ``<proc>/*/fd``: a process whose fds cannot be read, or a scan cut short
    by its time or count bound, proves nothing. If NVML accounting gives the host
    pid's start time, it must agree too.
(b) accounting: ``nvmlDeviceGetAccountingStats(pid).startTime`` lies within the
    tolerance of exactly one local process's start time, and that local process
    matches no other host pid (unique both ways; a complete scan again).

A host pid proven to be a local process stays mapped while that local pid lives
with the same start time (the same process, so the host pid cannot have been
reused). A local pid claimed by two host pids, or one host pid claimed by two
rules with different answers, maps nothing. Pure logic over an injectable proc
root, so tests run on fixture trees.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence

from ...model import GpuProcess
from ...records import dataclass

__all__ = ["GpuPids", "PidMapper", "PidMapping", "ProcView", "unmapped_hint"]

_DEVICE = re.compile(r"/dev/nvidia(\d+)\Z")
_UVM = "/dev/nvidia-uvm"  # every CUDA context opens it; nvidia-smi and NVML-only monitors do not


@dataclass(frozen=True, slots=True)
class GpuPids:
    """What NVML says of one GPU: its minor number and its processes' host pids.

    ``start_us``: accounting start times (Unix microseconds) per host pid, where known.
    """

    minor: int | None
    host_pids: tuple[int, ...]
    start_us: Mapping[int, int] | None = None


@dataclass(frozen=True, slots=True)
class PidMapping:
    """A proven mapping: ``host_pid`` is the local process ``local_pid`` started at ``local_start``."""

    host_pid: int
    local_pid: int
    local_start: float  # Unix seconds, from <proc>/<pid>/stat and btime
    rule: str  # "device" or "accounting"


class ProcView:
    """Reads one proc tree: start times and CUDA holders of ``/dev/nvidia<minor>``, bounded in time and count."""

    def __init__(
        self,
        root: str = "/proc",
        *,
        self_pid: int | None = None,
        clock_ticks: int | None = None,
        max_pids: int = 4096,
        budget_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.ticks = clock_ticks or _clock_ticks()
        self.max_pids = max_pids
        self.budget_s = budget_s
        self._clock = clock
        self._btime: float | None = None

    def boot_time(self) -> float | None:
        if self._btime is None:
            try:
                with open(os.path.join(self.root, "stat"), encoding="ascii", errors="replace") as stat:
                    for line in stat:
                        if line.startswith("btime "):
                            self._btime = float(line.split()[1])
                            break
            except (OSError, ValueError, IndexError):
                return None
        return self._btime

    def start_time(self, pid: int) -> float | None:
        """The Unix start time of ``pid`` (None: gone or unreadable)."""
        btime = self.boot_time()
        if btime is None:
            return None
        try:
            with open(os.path.join(self.root, str(pid), "stat"), encoding="ascii", errors="replace") as stat:
                text = stat.read()
            return btime + int(text[text.rindex(")") + 1 :].split()[19]) / self.ticks
        except (OSError, ValueError, IndexError):
            return None

    def _pids(self) -> list[int]:
        try:
            return [int(name) for name in os.listdir(self.root) if name.isdigit()]
        except OSError:
            return []

    def scan(self, minors: set[int], want_starts: bool) -> tuple[dict[int, set[int]], dict[int, float], bool]:
        """(minor -> local CUDA pids holding it open, pid -> start time, complete).

        A CUDA pid holds ``/dev/nvidia-uvm`` as well as ``/dev/nvidia<minor>``; a pid
        holding only the device node (nvidia-smi) is no holder.

        ``complete`` is False when a bound cut the scan short or a process's fds
        could not be read: then no "exactly one" or "unique" can be proven.
        """
        holders: dict[int, set[int]] = {m: set() for m in minors}
        starts: dict[int, float] = {}
        pids = self._pids()
        if not pids or len(pids) > self.max_pids:
            return holders, starts, False
        deadline = self._clock() + self.budget_s
        complete = True
        for pid in pids:
            if self._clock() > deadline:
                return holders, starts, False
            if pid == self.self_pid:
                continue
            if want_starts:
                start = self.start_time(pid)
                if start is None:
                    if os.path.exists(os.path.join(self.root, str(pid))):
                        complete = False  # alive and unreadable: cannot prove uniqueness
                    continue
                starts[pid] = start
            if not minors:
                continue
            fd_dir = os.path.join(self.root, str(pid), "fd")
            try:
                fds = os.listdir(fd_dir)
            except FileNotFoundError:
                starts.pop(pid, None)
                continue  # exited during the scan
            except OSError:
                complete = False  # another user's process: its fds are unknown
                continue
            held: set[int] = set()
            uvm = False
            for fd in fds:
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if target == _UVM:
                    uvm = True
                elif (match := _DEVICE.match(target)) and int(match.group(1)) in holders:
                    held.add(int(match.group(1)))
            if uvm:
                for minor in held:
                    holders[minor].add(pid)
        return holders, starts, complete


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (AttributeError, ValueError, OSError):
        return 100


class PidMapper:
    """Keeps the proven host -> local mappings; proves new ones at most every ``rescan_s``."""

    def __init__(
        self,
        view: ProcView | None = None,
        *,
        tolerance_s: float = 1.0,
        rescan_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view or ProcView()
        # btime is whole seconds and stat counts clock ticks: local start times are good to ~1 s.
        self.tolerance_s = tolerance_s
        self.rescan_s = rescan_s
        self._clock = clock
        self._proven: dict[int, PidMapping] = {}
        self._next_scan = 0.0

    def due(self) -> bool:
        """Whether the next :meth:`update` may scan (so its caller fetches accounting stats now)."""
        return self._clock() >= self._next_scan

    def mapped(self) -> dict[int, PidMapping]:
        """The current proven mappings, by host pid."""
        return dict(self._proven)

    def local(self, pid: int, create_time: float | None) -> PidMapping | None:
        """The proven mapping whose LOCAL process is ``pid`` started at ``create_time`` (else None)."""
        if create_time is None:
            return None
        for mapping in self._proven.values():
            if mapping.local_pid == pid and abs(mapping.local_start - create_time) <= 0.05:
                return mapping
        return None

    def update(self, gpus: Sequence[GpuPids]) -> dict[int, PidMapping]:
        """Map the host pids NVML lists now; returns the proven mappings by host pid."""
        listed = {pid for gpu in gpus for pid in gpu.host_pids}
        for host_pid, mapping in list(self._proven.items()):
            # Still the same local process (so still the same host process), and still listed.
            if host_pid not in listed or self.view.start_time(mapping.local_pid) != mapping.local_start:
                del self._proven[host_pid]
        unproven = listed - set(self._proven)
        now = self._clock()
        if unproven and now >= self._next_scan:
            self._next_scan = now + self.rescan_s
            self._prove(gpus, unproven)
        return dict(self._proven)

    def _prove(self, gpus: Sequence[GpuPids], unproven: set[int]) -> None:
        starts_us: dict[int, int] = {}
        for gpu in gpus:
            for pid, start_us in (gpu.start_us or {}).items():
                starts_us.setdefault(pid, start_us)
        # GPUs whose only NVML process is unproven: minor -> that host pid
        sole = {
            gpu.minor: gpu.host_pids[0]
            for gpu in gpus
            if gpu.minor is not None and len(set(gpu.host_pids)) == 1 and gpu.host_pids[0] in unproven
        }
        minors = set(sole)
        want_starts = any(pid in starts_us for pid in unproven)
        if not minors and not want_starts:
            return
        holders, starts, complete = self.view.scan(minors, want_starts)
        if not complete:
            return
        claims: dict[int, set[int]] = {}  # host pid -> local pids claimed by some rule (-1: contradicted)
        by_device: set[int] = set()

        # (a) the only NVML process of a GPU and the only local CUDA holder of its device node
        for minor, host_pid in sole.items():
            local = holders.get(minor, set())
            if len(local) != 1:
                continue
            (local_pid,) = local
            if host_pid in starts_us:
                start = starts.get(local_pid) or self.view.start_time(local_pid)
                if start is None or abs(start - starts_us[host_pid] / 1e6) > self.tolerance_s:
                    claims.setdefault(host_pid, set()).add(-1)  # accounting contradicts: no mapping
                    continue
            claims.setdefault(host_pid, set()).add(local_pid)
            by_device.add(host_pid)

        # (b) accounting start times, unique both ways
        if want_starts:
            candidates = {
                host_pid: {
                    pid for pid, start in starts.items() if abs(start - starts_us[host_pid] / 1e6) <= self.tolerance_s
                }
                for host_pid in unproven
                if host_pid in starts_us
            }
            for host_pid, local in candidates.items():
                if len(local) != 1:
                    continue
                (local_pid,) = local
                if any(local_pid in other for h, other in candidates.items() if h != host_pid):
                    continue
                claims.setdefault(host_pid, set()).add(local_pid)

        # A host pid claimed twice differently, or a local pid claimed by two host pids: nothing.
        taken = {m.local_pid for m in self._proven.values()}
        by_local: dict[int, list[int]] = {}
        for host_pid, local in claims.items():
            if len(local) == 1 and -1 not in local:
                by_local.setdefault(next(iter(local)), []).append(host_pid)
        for local_pid, hosts in by_local.items():
            if len(hosts) != 1 or local_pid in taken:
                continue
            start = starts.get(local_pid) or self.view.start_time(local_pid)
            if start is None:
                continue
            rule = "device" if hosts[0] in by_device else "accounting"
            self._proven[hosts[0]] = PidMapping(hosts[0], local_pid, start, rule)


def unmapped_hint(rows: Sequence[GpuProcess], *, host_pids: bool = True) -> str | None:
    """A sentence naming the rows of one GPU not visible here (``foreign``) and their GPU memory; None when none.

    ``host_pids``: nvtopy knows it runs in a nested PID namespace, so NVML's pids are the host's
    and the rows are those no rule mapped to a local process. Otherwise the pids are simply not
    in this PID namespace (a container it could not tell it was in, a captured machine).
    """
    foreign = [row for row in rows if row.foreign]
    if not foreign:
        return None
    known = [row.gpu_memory_bytes for row in foreign if row.gpu_memory_bytes is not None]
    memory = f"{sum(known) / 2**30:.1f} GiB of GPU memory" if known else "GPU memory unknown"
    if known and len(known) < len(foreign):
        memory += f" ({len(foreign) - len(known)} not reported)"
    pids = ", ".join(str(row.pid) for row in foreign[:8]) + (", ..." if len(foreign) > 8 else "")
    noun = "process" if len(foreign) == 1 else "processes"
    if host_pids:
        return (
            f"{len(foreign)} {noun} of another PID namespace not mapped to a local one ({memory}): "
            f"host pid {pids}; shown without user or command and never signalled"
        )
    verb = "is" if len(foreign) == 1 else "are"
    return (
        f"{len(foreign)} {noun} the driver lists {verb} not visible from this PID namespace ({memory}): "
        f"pid {pids}; shown without user or command and never signalled"
    )

"""The inspector's /proc fast path (``nvtopy.backends.host.procstat``): same facts as psutil, same PID-reuse guard."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from nvtopy.backends.host import processes as hostprocs
from nvtopy.backends.host.processes import PsutilInspector
from nvtopy.backends.host.procstat import CLOCK_TICKS, PAGE_SIZE, Stat, read_stat

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc/<pid>/stat is Linux's")

SLEEP_CODE = "import time; time.sleep(30)"


@pytest.fixture
def child():
    process = subprocess.Popen([sys.executable, "-c", SLEEP_CODE])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            settled = psutil.Process(process.pid)
            if settled.cmdline()[-1:] == [SLEEP_CODE] and settled.status() == psutil.STATUS_SLEEPING:
                break  # asleep: its memory and CPU time hold still while the two readings are compared
        except psutil.Error:
            pass
        time.sleep(0.01)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def test_read_stat_says_what_psutil_says(child):
    stat = read_stat(child.pid)
    assert stat is not None
    process = psutil.Process(child.pid)
    with process.oneshot():
        times = process.cpu_times()
        assert stat.ppid == process.ppid()
        assert stat.status == process.status()
        assert stat.rss_bytes == process.memory_info().rss
        assert stat.cpu_seconds == pytest.approx(times.user + times.system, abs=2 / CLOCK_TICKS)
    assert psutil.boot_time() + stat.start_ticks / CLOCK_TICKS == pytest.approx(process.create_time(), abs=0.02)


@pytest.mark.parametrize(
    ("comm", "state", "status"),
    [
        ("python", "S", "sleeping"),
        ("a) b (c", "R", "running"),  # a name holding ') ' must not shift the fields
        ("x", "Z", "zombie"),
        ("x", "?", "?"),  # a letter psutil does not know either
    ],
)
def test_read_stat_parses_names_with_parentheses(tmp_path, comm, state, status):
    (tmp_path / "42").mkdir()
    rest = f"{state} 7 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 123456 1000 300"
    (tmp_path / "42" / "stat").write_bytes(f"42 ({comm}) {rest}\n".encode())
    (tmp_path / "42" / "statm").write_bytes(b"1000 300 100 1 0 200 0\n")
    stat = read_stat(42, proc=str(tmp_path))
    assert stat == Stat(status, 7, 300 / CLOCK_TICKS, 123456, 300 * PAGE_SIZE)


def test_read_stat_of_nothing_is_none(tmp_path):
    assert read_stat(42, proc=str(tmp_path)) is None
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "stat").write_bytes(b"garbage")
    (tmp_path / "43" / "statm").write_bytes(b"1 2")
    assert read_stat(43, proc=str(tmp_path)) is None


def test_a_steady_refresh_reads_proc_not_psutil(child, monkeypatch):
    inspector = PsutilInspector()
    first = inspector.inspect([child.pid])[child.pid]
    assert first is not None

    def forbidden(self, *args):
        raise AssertionError("psutil's per-refresh path was taken")

    for method in ("is_running", "cpu_times", "memory_info", "status"):
        monkeypatch.setattr(psutil.Process, method, forbidden)
    again = inspector.inspect([child.pid])[child.pid]
    assert again is not None
    assert again.command == first.command
    assert again.host_memory_bytes and again.host_memory_bytes > 0
    assert again.cpu_percent is not None
    assert again.ppid == first.ppid


def test_a_reused_pid_is_read_again_on_the_fast_path(child, monkeypatch):
    """The PID-reuse guard: a different start time is another process (its own command, a fresh CPU baseline)."""
    inspector = PsutilInspector()
    first = inspector.inspect([child.pid])[child.pid]
    real = read_stat

    def reused(pid: int, proc: str = "/proc") -> Stat | None:
        stat = real(pid, proc)
        return None if stat is None else stat._replace(start_ticks=stat.start_ticks + 500)

    real_cmdline = psutil.Process.cmdline
    monkeypatch.setattr(
        psutil.Process, "cmdline", lambda self: ["new-process"] if self.pid == child.pid else real_cmdline(self)
    )
    monkeypatch.setattr(hostprocs, "read_stat", reused)
    info = inspector.inspect([child.pid])[child.pid]
    assert info is not None
    assert info.command == "new-process", "a reused pid kept the old process's facts"
    assert first.command != info.command


def test_a_process_that_exits_drops_its_row(child):
    inspector = PsutilInspector()
    assert inspector.inspect([child.pid])[child.pid] is not None
    child.kill()
    child.wait(timeout=10)
    assert inspector.inspect([child.pid]) == {child.pid: None}


def test_a_zombie_on_the_fast_path(child):
    inspector = PsutilInspector()
    assert inspector.inspect([child.pid])[child.pid] is not None
    child.kill()
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    info = inspector.inspect([child.pid])[child.pid]
    assert info is not None and info.status == "zombie"


def test_unreadable_proc_falls_back_to_psutil(child, monkeypatch):
    inspector = PsutilInspector()
    assert inspector.inspect([child.pid])[child.pid] is not None
    monkeypatch.setattr(hostprocs, "read_stat", lambda pid, proc="/proc": None)
    info = inspector.inspect([child.pid])[child.pid]
    assert info is not None and info.host_memory_bytes


def test_read_stat_refuses_a_cut_line(tmp_path):
    """A stat line that one read did not end (no newline) is not parsed: the caller asks psutil instead."""
    (tmp_path / "42").mkdir()
    rest = "S 7 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 123456 1000 300"
    (tmp_path / "42" / "stat").write_bytes(f"42 (x) {rest}".encode())
    (tmp_path / "42" / "statm").write_bytes(b"1000 300 100 1 0 200 0\n")
    assert read_stat(42, proc=str(tmp_path)) is None
    (tmp_path / "42" / "stat").write_bytes(f"42 (x) {rest}\n".encode())
    assert read_stat(42, proc=str(tmp_path)) is not None

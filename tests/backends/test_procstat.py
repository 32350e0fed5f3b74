"""The inspector's /proc fast path (``nvtopy.backends.host.procstat``): same facts as psutil, same PID-reuse guard."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from nvtopy.backends.host import processes as hostprocs
from nvtopy.backends.host.processes import PsutilInspector
from nvtopy.backends.host.procstat import (
    CLOCK_TICKS,
    PAGE_SIZE,
    Stat,
    StatFiles,
    pid_absent,
    read_cpu_times,
    read_first_sight,
    read_meminfo,
    read_stat,
)

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
    real = StatFiles.read

    def reused(self: StatFiles, pid: int) -> Stat | None:
        stat = real(self, pid)
        return None if stat is None else stat._replace(start_ticks=stat.start_ticks + 500)

    real_cmdline = psutil.Process.cmdline
    monkeypatch.setattr(
        psutil.Process, "cmdline", lambda self: ["new-process"] if self.pid == child.pid else real_cmdline(self)
    )
    monkeypatch.setattr(StatFiles, "read", reused)
    monkeypatch.setattr(hostprocs, "read_first_sight", lambda pid, proc="/proc", stats=None: None)  # psutil reopens it
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
    monkeypatch.setattr(StatFiles, "read", lambda self, pid: None)
    info = inspector.inspect([child.pid])[child.pid]
    assert info is not None and info.host_memory_bytes


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_kept_file_is_read_afresh_each_time():
    """The kept descriptors answer the process's figures now, not those of when they were opened."""
    files = StatFiles()
    first = files.read(os.getpid())
    assert first is not None and len(files) == 1
    before = time.process_time()
    while time.process_time() - before < 0.1:  # 10 clock ticks of CPU
        pass
    again = files.read(os.getpid())
    assert again is not None and len(files) == 1
    assert again.cpu_seconds >= first.cpu_seconds + 0.05
    assert again == read_stat(os.getpid())._replace(cpu_seconds=again.cpu_seconds)
    files.close()


def test_a_kept_file_of_an_ended_process_says_none_and_is_closed(child):
    files = StatFiles()
    opened = _open_files()
    assert files.read(child.pid) is not None
    assert _open_files() == opened + 2
    child.kill()
    child.wait(timeout=10)  # reaped: the kept descriptors answer ESRCH, as a reused pid's would
    assert files.read(child.pid) is None
    assert len(files) == 0 and _open_files() == opened


def test_a_reader_dropped_unclosed_closes_its_files(child):
    opened = _open_files()
    files = StatFiles()
    assert files.read(child.pid) is not None
    assert _open_files() == opened + 2
    del files  # no cycle holds it: its last reference goes now
    assert _open_files() == opened


def test_past_the_limit_pids_are_read_by_path(child):
    files = StatFiles(limit=1)
    assert files.read(os.getpid()) is not None
    assert files.read(child.pid) == read_stat(child.pid)
    assert len(files) == 1
    files.close()
    assert len(files) == 0


@pytest.mark.parametrize(("soft", "kept"), [(1024, 128), (40, 5), (1 << 20, 256), (-1, 256)])
def test_kept_files_take_at_most_a_quarter_of_the_descriptor_limit(monkeypatch, soft, kept):
    import resource

    from nvtopy.backends.host import procstat

    soft = resource.RLIM_INFINITY if soft == -1 else soft
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, resource.RLIM_INFINITY))
    assert procstat._keep_open() == kept


def test_the_inspector_closes_the_files_of_pids_it_no_longer_reads(child):
    opened = _open_files()
    inspector = PsutilInspector()
    for _ in range(2):  # the first sight reads by path; the first refresh keeps the files open
        assert inspector.inspect([child.pid])[child.pid] is not None
    assert _open_files() == opened + 2
    inspector.inspect([])
    assert _open_files() == opened
    inspector.inspect([child.pid])
    inspector.inspect([child.pid])
    inspector.close()
    assert _open_files() == opened


def test_a_kept_open_process_that_exits_drops_its_row(child):
    inspector = PsutilInspector()
    for _ in range(2):
        assert inspector.inspect([child.pid])[child.pid] is not None
    child.kill()
    child.wait(timeout=10)
    assert inspector.inspect([child.pid]) == {child.pid: None}


def test_read_stat_refuses_a_cut_line(tmp_path):
    """A stat line that one read did not end (no newline) is not parsed: the caller asks psutil instead."""
    (tmp_path / "42").mkdir()
    rest = "S 7 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 123456 1000 300"
    (tmp_path / "42" / "stat").write_bytes(f"42 (x) {rest}".encode())
    (tmp_path / "42" / "statm").write_bytes(b"1000 300 100 1 0 200 0\n")
    assert read_stat(42, proc=str(tmp_path)) is None
    (tmp_path / "42" / "stat").write_bytes(f"42 (x) {rest}\n".encode())
    assert read_stat(42, proc=str(tmp_path)) is not None


# --------------------------------------------------------------------------- the first sight, without psutil


def test_the_status_words_are_psutils():
    from nvtopy.backends.host.procstat import _STATUS

    words = {name: getattr(psutil, name) for name in dir(psutil) if name.startswith("STATUS_")}
    assert set(_STATUS.values()) - {"?"} <= set(words.values()) | {"wake-kill"}
    assert _STATUS["Z"] == psutil.STATUS_ZOMBIE and _STATUS["S"] == psutil.STATUS_SLEEPING


def _as_psutil_says(pid: int) -> tuple:
    process = psutil.Process(pid)
    with process.oneshot():
        return (process.name(), process.cmdline(), process.uids().real, process.create_time(), process.ppid())


def test_the_first_sight_says_what_psutil_says(child):
    sight = read_first_sight(child.pid)
    assert sight is not None
    assert (sight.name, sight.cmdline, sight.uid, sight.create_time, sight.stat.ppid) == _as_psutil_says(child.pid)
    assert sight.stat.start_ticks == read_stat(child.pid).start_ticks


def test_a_long_name_is_the_argv_word_it_was_cut_from_as_psutil_has_it(tmp_path):
    """The kernel keeps 15 characters of a name: psutil (and so nvtopy) shows the argv's word it starts."""
    long_name = tmp_path / "a-rather-long-sleeper-name"
    long_name.symlink_to("/bin/sleep")
    process = subprocess.Popen([str(long_name), "30"])
    try:
        deadline = time.monotonic() + 10
        while (sight := read_first_sight(process.pid)) is None or sight.cmdline[:1] != [str(long_name)]:
            assert time.monotonic() < deadline, "the child never showed its argv"
            time.sleep(0.01)
        assert sight.name == "a-rather-long-sleeper-name" == psutil.Process(process.pid).name()
        assert _as_psutil_says(process.pid)[:2] == (sight.name, sight.cmdline)
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("python\x00-c\x00pass\x00", ["python", "-c", "pass"]),
        ("python\x00", ["python"]),
        ("retitled worker 3\x00", ["retitled", "worker", "3"]),  # setproctitle: spaces inside one argument
        ("no terminator at all", ["no", "terminator", "at", "all"]),
        ("a\x00b c\x00", ["a", "b c"]),  # a space inside an argument of many stays
    ],
)
def test_a_command_line_is_split_as_psutil_splits_it(text, expected):
    from nvtopy.backends.host.procstat import _split_cmdline

    assert _split_cmdline(text) == expected


def test_what_psutil_must_classify_is_left_to_it(child, tmp_path):
    """Gone, zombie, unreadable, no /proc: None (psutil tells gone from denied from zombie)."""
    assert read_first_sight(2**22 + 1) is None  # no such pid
    assert read_first_sight(child.pid, proc=str(tmp_path)) is None  # no /proc there
    child.kill()
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert read_first_sight(child.pid) is None


def test_an_empty_command_line_is_left_to_psutil(tmp_path):
    """A kernel thread, or a process between fork and exec: the inspector reads such a pid again later."""
    fake = tmp_path / "7"
    fake.mkdir()
    (fake / "stat").write_bytes(b"7 (kworker) S 2 0 0 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 55 0 0\n")
    (fake / "statm").write_bytes(b"0 0 0 0 0 0 0\n")
    (fake / "status").write_bytes(b"Name:\tkworker\nUid:\t0\t0\t0\t0\n")
    (fake / "cmdline").write_bytes(b"")
    (tmp_path / "stat").write_bytes(b"cpu  1 2 3 4 5 6 7 8 9 10\nbtime 1700000000\n")
    assert read_first_sight(7, proc=str(tmp_path)) is None
    (fake / "cmdline").write_bytes(b"worker\x00--fast\x00")
    sight = read_first_sight(7, proc=str(tmp_path))
    assert sight is not None and sight.cmdline == ["worker", "--fast"] and sight.uid == 0
    assert sight.create_time == 55 / CLOCK_TICKS + 1700000000


def test_the_hosts_cpu_times_and_memory_are_psutils():
    fields = read_cpu_times()
    assert fields is not None and len(fields) == 10
    assert fields == pytest.approx(list(psutil.cpu_times()), abs=1.0)  # a second of ticks may pass between
    memory = read_meminfo()
    assert memory is not None and memory[b"MemTotal:"] == psutil.virtual_memory().total
    total, used = hostprocs._ram(memory)
    reading = psutil.virtual_memory()
    assert total == reading.total
    assert used == pytest.approx(reading.total - reading.available, abs=256 << 20)
    assert hostprocs._swap(memory) == pytest.approx(
        (psutil.swap_memory().total, psutil.swap_memory().used), abs=64 << 20
    )
    assert hostprocs._cpu_count() == psutil.cpu_count()


def test_a_first_sight_and_the_host_line_import_no_psutil(child):
    """The point of it: ``nvtopy --once`` on a normal host never imports psutil (~25 ms)."""
    code = (
        "import sys; from nvtopy.backends.host.processes import PsutilInspector, HostUsageReader; "
        f"reader = HostUsageReader(); info = PsutilInspector().inspect([{child.pid}])[{child.pid}]; "
        "usage = reader.read(); "
        "assert info.command and info.user and info.cpu_percent is not None, info; "
        "assert usage.ram_total_bytes and usage.cpu_count, usage; "
        "print('psutil' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_an_ended_pid_is_absent_as_psutil_says_and_a_live_or_unknown_one_is_not(tmp_path, monkeypatch):
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert pid_absent(ended.pid) is True
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(ended.pid)
    import os

    assert pid_absent(os.getpid()) is False
    assert pid_absent(ended.pid, proc=str(tmp_path)) is False, "no /proc here: psutil is asked"
    (tmp_path / "self").mkdir()
    assert pid_absent(ended.pid, proc=str(tmp_path)) is True


def test_an_ended_pid_is_not_looked_up_with_psutil(monkeypatch):
    """The inspector drops a pid that has ended from /proc alone; psutil is never asked for it."""
    ended = subprocess.Popen(["true"])
    ended.wait()

    def no_psutil(*_args, **_kwargs):
        raise AssertionError("psutil asked about a pid /proc says has ended")

    monkeypatch.setattr(psutil, "Process", no_psutil)
    inspector = PsutilInspector()
    assert inspector.inspect([ended.pid]) == {ended.pid: None}


def test_a_known_pid_that_ends_is_dropped_without_psutil(monkeypatch):
    process = subprocess.Popen([sys.executable, "-c", SLEEP_CODE])
    try:
        inspector = PsutilInspector()
        deadline = time.monotonic() + 20
        while inspector.inspect([process.pid])[process.pid] is None:  # until its first sight from /proc
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()

    def no_psutil(*_args, **_kwargs):
        raise AssertionError("psutil asked about a pid /proc says has ended")

    monkeypatch.setattr(psutil, "Process", no_psutil)
    assert inspector.inspect([process.pid]) == {process.pid: None}

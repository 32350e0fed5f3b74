"""PsutilInspector and in_foreign_pid_namespace against real processes (failures simulated with monkeypatch)."""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess
import sys
import time
from collections import namedtuple

import psutil
import pytest

from nvtopy.backends.host import processes as hostprocs
from nvtopy.backends.host import procstat
from nvtopy.backends.host.processes import PsutilInspector, in_foreign_pid_namespace, username_for_uid
from nvtopy.backends.host.signals import send_signal_checked
from nvtopy.model import HostProcess, Reason

from ..waiting import exec_shown

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SLEEP_CODE = "import time; time.sleep(30)"
FakeTimes = namedtuple("FakeTimes", "user system")


def _reap(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


@pytest.fixture
def spawn():
    """Start sleeping Python children; every one is killed and reaped afterwards."""
    children: list[subprocess.Popen] = []

    def start(code: str = SLEEP_CODE) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", code])
        children.append(child)
        # Wait until the child has exec'd Python (before that its cmdline is the forking parent's)
        # and reached its sleep, so that its status is settled.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                process = psutil.Process(child.pid)
                if process.cmdline()[-1:] == [code] and process.status() == psutil.STATUS_SLEEPING:
                    return child
            except psutil.Error:
                pass
            time.sleep(0.01)
        raise AssertionError("child did not start")

    yield start
    for child in children:
        _reap(child)


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not become a zombie")


def _psutil_path_only(monkeypatch) -> None:
    """The inspector reads every first sight and refresh through psutil (as where /proc cannot answer)."""
    monkeypatch.setattr(hostprocs.StatFiles, "read", lambda self, pid: None)
    monkeypatch.setattr(hostprocs, "read_first_sight", lambda pid, **kept: None)


def _unused_pid() -> int:
    pid = 2**22 + 1  # above PID_MAX_LIMIT (2**22), the highest pid_max: never assigned
    assert not psutil.pid_exists(pid)
    return pid


def _patch(monkeypatch, name: str, replacement) -> None:
    """Replace the psutil.Process method ``name``, keeping what oneshot() needs of memoized methods.

    The inspector's /proc fast path is switched off too (these tests drive psutil's path); the fast
    path has tests of its own below.
    """
    _psutil_path_only(monkeypatch)
    original = getattr(psutil.Process, name)
    for attr in ("cache_activate", "cache_deactivate"):
        if hasattr(original, attr):
            setattr(replacement, attr, getattr(original, attr))
    monkeypatch.setattr(psutil.Process, name, replacement)


def _fail_for(monkeypatch, name: str, pid: int, exc_factory) -> None:
    """Make the psutil.Process method ``name`` raise for ``pid``; other pids behave normally."""
    original = getattr(psutil.Process, name)

    def method(self, *args, **kwargs):
        if self.pid == pid:
            raise exc_factory(self.pid)
        return original(self, *args, **kwargs)

    _patch(monkeypatch, name, method)


def _hide_proc(monkeypatch, pid: int) -> None:
    """Make /proc/<pid>/* unreadable to psutil, like a /proc mounted with hidepid=1 for another user's process."""
    from psutil import _common, _pslinux

    prefix = f"{psutil.PROCFS_PATH}/{pid}/"

    def guard(opener):
        def wrapped(fname, *args, **kwargs):
            if str(fname).startswith(prefix):
                raise PermissionError(errno.EPERM, "Operation not permitted", fname)
            return opener(fname, *args, **kwargs)

        return wrapped

    for module in (_common, _pslinux):
        monkeypatch.setattr(module, "open_binary", guard(module.open_binary))
        monkeypatch.setattr(module, "open_text", guard(module.open_text))
    # nvtopy's own /proc reads (procstat) meet the same wall
    monkeypatch.setattr(procstat, "_read_line", guard(procstat._read_line))
    monkeypatch.setattr(procstat, "_read_all", guard(procstat._read_all))


# --------------------------------------------------------------------------- live processes


def test_own_pid_resolves():
    me = psutil.Process()
    info = PsutilInspector().inspect([os.getpid()])[os.getpid()]
    assert isinstance(info, HostProcess)
    assert info.pid == os.getpid()
    assert info.uid == os.getuid()
    assert info.user == username_for_uid(os.getuid())
    assert info.user
    assert info.name == me.name()
    assert info.command == " ".join(me.cmdline())
    assert info.host_memory_bytes is not None
    assert info.host_memory_bytes > 1024 * 1024  # a Python interpreter running pytest uses more than 1 MiB
    assert info.create_time == pytest.approx(me.create_time(), abs=1e-3)
    assert info.create_time <= time.time()
    assert info.status in (psutil.STATUS_RUNNING, psutil.STATUS_SLEEPING)
    assert isinstance(info.cpu_percent, float)
    assert info.cpu_percent >= 0.0
    assert dict(info.unavailable) == {}


def test_child_resolves_then_vanishes(spawn):
    child = spawn()
    inspector = PsutilInspector()
    info = inspector.inspect([child.pid])[child.pid]
    assert info is not None
    assert info.pid == child.pid
    assert info.command == f"{sys.executable} -c {SLEEP_CODE}"
    assert info.user == username_for_uid(os.getuid())
    assert info.create_time == pytest.approx(psutil.Process(child.pid).create_time(), abs=1e-3)
    assert isinstance(info.cpu_percent, float)
    assert 0.0 <= info.cpu_percent < 1000.0
    assert info.host_memory_bytes > 0
    assert info.status == psutil.STATUS_SLEEPING
    assert send_signal_checked(child.pid, info.create_time, 0).ok, "the reported create time passes the check"

    again = inspector.inspect([child.pid])[child.pid]
    assert isinstance(again.cpu_percent, float)
    assert again.create_time == info.create_time

    child.kill()
    child.wait(timeout=10)
    assert inspector.inspect([child.pid]) == {child.pid: None}
    assert child.pid not in inspector._entries  # forgotten, not kept as a stale entry


def test_pid_that_never_existed():
    pid = _unused_pid()
    assert PsutilInspector().inspect([pid]) == {pid: None}


def test_several_pids_at_once(spawn):
    child = spawn()
    missing = _unused_pid()
    result = PsutilInspector().inspect([os.getpid(), child.pid, missing])
    assert set(result) == {os.getpid(), child.pid, missing}
    assert result[missing] is None
    assert result[os.getpid()].pid == os.getpid()
    assert result[child.pid].pid == child.pid


def test_pids_no_longer_asked_about_are_forgotten(spawn):
    child = spawn()
    inspector = PsutilInspector()
    first = inspector.inspect([os.getpid(), child.pid])
    assert inspector._entries[child.pid].create_time == first[child.pid].create_time
    assert inspector.inspect([os.getpid()]).keys() == {os.getpid()}
    assert child.pid not in inspector._entries
    assert inspector._entries[os.getpid()].create_time == first[os.getpid()].create_time


def test_reported_create_time_is_what_the_signal_check_compares(spawn):
    """The create time the inspector reports identifies the process to the signal check (signal 0: none sent)."""
    child = spawn()
    inspector = PsutilInspector()
    info = inspector.inspect([child.pid])[child.pid]
    assert send_signal_checked(child.pid, info.create_time, 0).ok
    assert not send_signal_checked(child.pid, None, 0).ok  # unknown: never sent unchecked
    assert not send_signal_checked(child.pid, info.create_time + 1.0, 0).ok  # another process with this pid
    assert not send_signal_checked(_unused_pid(), info.create_time, 0).ok


def test_cpu_percent_first_sight_and_between_readings(spawn, monkeypatch):
    child = spawn()
    created = psutil.Process(child.pid).create_time()
    busy = {"user": 1.0, "system": 1.0}
    real_cpu_times = psutil.Process.cpu_times
    _patch(
        monkeypatch,
        "cpu_times",
        lambda self: FakeTimes(busy["user"], busy["system"]) if self.pid == child.pid else real_cpu_times(self),
    )
    now = [created + 4.0]
    inspector = PsutilInspector(clock=lambda: now[0])

    first = inspector.inspect([child.pid])[child.pid]
    assert first.cpu_percent == pytest.approx(50.0)  # 2 s of CPU over a 4 s life

    now[0] += 2.0
    busy["user"] += 0.5
    second = inspector.inspect([child.pid])[child.pid]
    assert second.cpu_percent == pytest.approx(25.0)  # 0.5 s of CPU in the last 2 s

    now[0] += 1.0
    third = inspector.inspect([child.pid])[child.pid]
    assert third.cpu_percent == pytest.approx(0.0)
    assert "cpu_percent" not in third.unavailable


def test_cpu_percent_is_not_measured_over_less_than_its_shortest_window(spawn, monkeypatch):
    """A reading 0.1 s after the last (``--once`` looks its processes up just before reading them) repeats the
    last figure and keeps the baseline: CPU time counts in 10 ms ticks, so 0.1 s would be 10 % a tick."""
    child = spawn()
    created = psutil.Process(child.pid).create_time()
    busy = {"user": 1.0, "system": 1.0}
    real_cpu_times = psutil.Process.cpu_times
    _patch(
        monkeypatch,
        "cpu_times",
        lambda self: FakeTimes(busy["user"], busy["system"]) if self.pid == child.pid else real_cpu_times(self),
    )
    now = [created + 4.0]
    inspector = PsutilInspector(clock=lambda: now[0])
    assert inspector.inspect([child.pid])[child.pid].cpu_percent == pytest.approx(50.0)  # the lifetime average
    now[0] += 0.1
    busy["user"] += 0.1  # a tick's worth of noise would read as 100 %
    assert inspector.inspect([child.pid])[child.pid].cpu_percent == pytest.approx(50.0), "too soon: the last figure"
    now[0] += 0.4
    busy["user"] += 0.15
    # Measured from the baseline kept at the first reading: 0.25 s of CPU over 0.5 s.
    assert inspector.inspect([child.pid])[child.pid].cpu_percent == pytest.approx(100.0 * 0.25 / 0.5)
    now[0] += 0.5
    busy["user"] += 0.1
    assert inspector.inspect([child.pid])[child.pid].cpu_percent == pytest.approx(20.0)


def test_cpu_percent_unknown_before_the_process_started(spawn, monkeypatch):
    child = spawn()
    created = psutil.Process(child.pid).create_time()
    inspector = PsutilInspector(clock=lambda: created - 5.0)  # a clock behind the process's start
    info = inspector.inspect([child.pid])[child.pid]
    assert info.cpu_percent is None
    assert info.unavailable["cpu_percent"] is Reason.NOT_AVAILABLE
    assert info.host_memory_bytes > 0


# --------------------------------------------------------------------------- zombies


@pytest.mark.parametrize("seen_alive", [False, True])
def test_zombie_keeps_a_row(spawn, seen_alive):
    child = spawn()
    inspector = PsutilInspector()
    if seen_alive:
        alive = inspector.inspect([child.pid])[child.pid]
        assert alive.status == psutil.STATUS_SLEEPING
    child.kill()
    _wait_zombie(child.pid)
    info = inspector.inspect([child.pid])[child.pid]
    assert info is not None
    assert info.pid == child.pid
    assert info.status == "zombie"
    assert info.user == username_for_uid(os.getuid())
    assert info.create_time == pytest.approx(psutil.Process(child.pid).create_time(), abs=1e-3)
    if seen_alive:
        assert info.command == f"{sys.executable} -c {SLEEP_CODE}"  # cached while it lived
    else:
        assert info.command  # a zombie has no cmdline any more: its name stands in
        assert info.command == psutil.Process(child.pid).name()
    child.wait(timeout=10)
    assert inspector.inspect([child.pid]) == {child.pid: None}


# --------------------------------------------------------------------------- simulated failures


@pytest.mark.parametrize("exc_factory", [psutil.NoSuchProcess, lambda pid: FileNotFoundError(errno.ENOENT, "gone")])
@pytest.mark.parametrize("method", ["cmdline", "create_time", "uids", "name"])
def test_vanishing_while_opened_drops_the_row(spawn, monkeypatch, method, exc_factory):
    child = spawn()
    _fail_for(monkeypatch, method, child.pid, exc_factory)
    inspector = PsutilInspector()
    result = inspector.inspect([child.pid, os.getpid()])
    assert result[child.pid] is None
    assert result[os.getpid()] is not None
    assert child.pid not in inspector._entries


@pytest.mark.parametrize(
    "exc_factory",
    [psutil.NoSuchProcess, lambda pid: FileNotFoundError(errno.ENOENT, "gone"), lambda pid: ProcessLookupError()],
)
@pytest.mark.parametrize("method", ["status", "cpu_times", "memory_info"])
def test_vanishing_between_readings_drops_the_row(spawn, monkeypatch, method, exc_factory):
    child = spawn()
    inspector = PsutilInspector()
    assert inspector.inspect([child.pid])[child.pid] is not None
    _fail_for(monkeypatch, method, child.pid, exc_factory)
    assert inspector.inspect([child.pid]) == {child.pid: None}
    assert child.pid not in inspector._entries


def test_constructor_no_such_process(monkeypatch):
    real = psutil.Process

    def fake(pid=None):
        if pid == os.getpid():
            raise psutil.NoSuchProcess(pid)
        return real(pid)

    monkeypatch.setattr(psutil, "Process", fake)
    _psutil_path_only(monkeypatch)
    assert PsutilInspector().inspect([os.getpid()]) == {os.getpid(): None}


def test_access_denied_on_cmdline_keeps_row(spawn, monkeypatch):
    child = spawn()
    _fail_for(monkeypatch, "cmdline", child.pid, psutil.AccessDenied)
    info = PsutilInspector().inspect([child.pid])[child.pid]
    assert info is not None
    assert info.command is None
    assert info.unavailable["command"] is Reason.NO_PERMISSION
    assert info.user == username_for_uid(os.getuid())
    assert "user" not in info.unavailable
    assert info.name == psutil.Process(child.pid).name()
    assert info.host_memory_bytes > 0
    assert isinstance(info.cpu_percent, float)


def test_access_denied_on_uids_keeps_row(spawn, monkeypatch):
    child = spawn()
    _fail_for(monkeypatch, "uids", child.pid, psutil.AccessDenied)
    info = PsutilInspector().inspect([child.pid])[child.pid]
    assert info is not None
    assert info.user is None
    assert info.uid is None
    assert info.unavailable["user"] is Reason.NO_PERMISSION
    assert info.command == f"{sys.executable} -c {SLEEP_CODE}"
    assert "command" not in info.unavailable


def test_access_denied_on_readings_keeps_row(spawn, monkeypatch):
    child = spawn()
    _fail_for(monkeypatch, "status", child.pid, psutil.AccessDenied)
    info = PsutilInspector().inspect([child.pid])[child.pid]
    assert info is not None
    assert info.command == f"{sys.executable} -c {SLEEP_CODE}"
    assert info.cpu_percent is None
    assert info.host_memory_bytes is None
    assert info.unavailable["cpu_percent"] is Reason.NO_PERMISSION
    assert info.unavailable["host_memory_bytes"] is Reason.NO_PERMISSION


def test_unreadable_proc_entry_keeps_row(spawn, monkeypatch):
    """hidepid=1: another user's /proc/<pid> exists but nothing in it can be read. The GPU row must stay."""
    child = spawn()
    created = psutil.Process(child.pid).create_time()
    _hide_proc(monkeypatch, child.pid)
    with pytest.raises(psutil.AccessDenied):
        psutil.Process(child.pid).create_time()  # the simulation works
    inspector = PsutilInspector()
    for _ in range(2):
        info = inspector.inspect([child.pid])[child.pid]
        assert info is not None
        assert info.pid == child.pid
        assert info.user is None
        assert info.command is None
        assert info.create_time is None
        assert info.cpu_percent is None
        assert info.host_memory_bytes is None
        for name in ("user", "command", "cpu_percent", "host_memory_bytes"):
            assert info.unavailable[name] is Reason.NO_PERMISSION, name
    assert not send_signal_checked(child.pid, created, 0).ok  # its identity cannot be checked


def test_access_denied_on_constructor_of_a_gone_pid(monkeypatch):
    pid = _unused_pid()

    def fake(pid=None):
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", fake)
    assert PsutilInspector().inspect([pid]) == {pid: None}


def test_pid_reuse_rereads_the_process(spawn, monkeypatch):
    child = spawn()
    inspector = PsutilInspector()
    first = inspector.inspect([child.pid])[child.pid]
    assert first.command == f"{sys.executable} -c {SLEEP_CODE}"

    real_cmdline = psutil.Process.cmdline
    _patch(
        monkeypatch,
        "cmdline",
        lambda self: ["new-process", "--reused"] if self.pid == child.pid else real_cmdline(self),
    )
    # While the process is the same one, the cached command is reused (no cmdline read).
    assert inspector.inspect([child.pid])[child.pid].command == first.command

    # is_running() is False once the create time differs (psutil's PID reuse check): look again.
    monkeypatch.setattr(psutil.Process, "is_running", lambda self: False)
    reused = inspector.inspect([child.pid])[child.pid]
    assert reused is not None
    assert reused.command == "new-process --reused"


def test_pid_reuse_resets_cpu_baseline(spawn, monkeypatch):
    child = spawn()
    created = psutil.Process(child.pid).create_time()
    busy = [10.0]
    _patch(monkeypatch, "cpu_times", lambda self: FakeTimes(busy[0], 0.0))
    now = [created + 20.0]
    inspector = PsutilInspector(clock=lambda: now[0])
    assert inspector.inspect([child.pid])[child.pid].cpu_percent == pytest.approx(50.0)
    monkeypatch.setattr(psutil.Process, "is_running", lambda self: False)
    now[0] += 10.0
    busy[0] = 3.0  # the new process has used less CPU than the old one: never a negative rate
    info = inspector.inspect([child.pid])[child.pid]
    assert info.cpu_percent == pytest.approx(10.0)  # lifetime average of the new process: 3 s over 30 s


# --------------------------------------------------------------------------- PID namespaces


HOST_NAMESPACE = "pid:[4026531836]"  # the initial PID namespace's fixed inode (PROC_PID_INIT_INO)
CONTAINER_NAMESPACE = "pid:[4026532190]"
ONE_LEVEL = "Name:\tpython\nNSpid:\t1234\nNSsid:\t1\n"
NESTED = "Name:\tpython\nNSpid:\t1234\t7\nNSsid:\t1\t1\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (ONE_LEVEL, False),
        (NESTED, True),
        ("Name:\tpython\nNSpid:\t1234\t56\t7\n", True),
        ("Name:\tpython\nPid:\t1234\nPPid:\t1\n", False),
        ("", False),
    ],
)
def test_in_foreign_pid_namespace_by_nspid_where_the_link_is_unreadable(tmp_path, content, expected):
    status = tmp_path / "status"
    status.write_text(content, encoding="ascii")
    assert in_foreign_pid_namespace(str(status), str(tmp_path / "no-link")) is expected


@pytest.mark.parametrize(
    ("link", "content", "expected"),
    [
        (HOST_NAMESPACE, ONE_LEVEL, False),
        (HOST_NAMESPACE, NESTED, False),  # the initial namespace whatever NSpid says
        (CONTAINER_NAMESPACE, NESTED, True),
        (CONTAINER_NAMESPACE, ONE_LEVEL, True),  # a container with its own /proc: NSpid shows one level
        ("not a namespace", NESTED, True),  # not a pid:[N] link: NSpid decides
    ],
)
def test_in_foreign_pid_namespace_by_the_namespace_link(tmp_path, link, content, expected):
    status, namespace = tmp_path / "status", tmp_path / "pid"
    status.write_text(content, encoding="ascii")
    namespace.symlink_to(link)
    assert in_foreign_pid_namespace(str(status), str(namespace)) is expected


def test_a_container_with_its_own_proc_is_a_foreign_pid_namespace(tmp_path, monkeypatch):
    """Docker and Kubernetes mount a /proc of the container's namespace: NSpid has one level there, as on the host.

    Only the namespace link tells; taken for the host, NVML's host pids were looked up as local ones.
    """
    status = tmp_path / "status"
    status.write_text(ONE_LEVEL, encoding="ascii")
    real_readlink = os.readlink
    monkeypatch.setattr(
        os,
        "readlink",
        lambda path, *a, **k: CONTAINER_NAMESPACE if str(path) == "/proc/self/ns/pid" else real_readlink(path, *a, **k),
    )
    assert in_foreign_pid_namespace(str(status)) is True


def test_in_foreign_pid_namespace_missing_files(tmp_path):
    assert in_foreign_pid_namespace(str(tmp_path / "absent"), str(tmp_path / "absent-link")) is False


def test_in_foreign_pid_namespace_of_this_process_matches_its_namespace_link():
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        pytest.skip("no /proc/self/ns/pid")
    assert in_foreign_pid_namespace() is (link != HOST_NAMESPACE)


def test_username_for_uid_unknown_uid_is_numeric():
    uid = 3_999_999_999
    hostprocs._USERNAMES.pop(uid, None)
    try:
        assert username_for_uid(uid) == str(uid)
    finally:
        hostprocs._USERNAMES.pop(uid, None)


def test_a_process_seen_during_its_exec_gets_its_name_and_environment_on_the_next_look(monkeypatch, tmp_path):
    """Seen mid-exec (no argv, no environment yet): the next look completes the long name and the owner's
    environment (``CUDA_VISIBLE_DEVICES``), not only the command (they were wrong for the process's life)."""
    program = tmp_path / "a-rather-long-sleeper-name"  # over the kernel's 15 characters
    program.symlink_to(shutil.which("sleep"))
    child = subprocess.Popen([str(program), "30"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"})
    try:
        exec_shown(child.pid, environ=True)
        mid_exec = [True]  # what /proc showed in that instant, replayed for the first look only
        original_cmdline, original_name = psutil.Process.cmdline, psutil.Process.name

        def cmdline(self):
            return [] if self.pid == child.pid and mid_exec[0] else original_cmdline(self)

        def name(self):
            return original_name(self)[:15] if self.pid == child.pid and mid_exec[0] else original_name(self)

        _patch(monkeypatch, "cmdline", cmdline)
        _patch(monkeypatch, "name", name)
        inspector = PsutilInspector()
        read_owner = inspector.resolver._resolve  # what reads /proc (its answer is then cached)

        def read_owner_mid_exec(pid, *args):
            found = read_owner(pid, *args)
            if pid == child.pid and mid_exec[0]:
                return dataclasses.replace(found, cuda_visible_devices=None)  # no environment yet
            return found

        monkeypatch.setattr(inspector.resolver, "_resolve", read_owner_mid_exec)
        first = inspector.inspect([child.pid])[child.pid]
        assert (first.name, first.command, first.cuda_visible_devices) == ("a-rather-long-s",) * 2 + (None,)
        mid_exec[0] = False
        again = inspector.inspect([child.pid])[child.pid]
        assert again.name == "a-rather-long-sleeper-name"
        assert again.command == f"{program} 30"
        assert again.cuda_visible_devices == "1"
    finally:
        _reap(child)


def test_a_process_seen_during_its_exec_gets_its_command_on_the_next_look(monkeypatch, spawn):
    """An empty argv (read between exec and the kernel setting up the arguments) is not cached."""
    child = spawn()
    original = psutil.Process.cmdline
    calls = {"n": 0}

    def cmdline(self):
        if self.pid == child.pid and calls["n"] == 0:
            calls["n"] += 1
            return []  # what /proc/<pid>/cmdline reads in that instant
        return original(self)

    _patch(monkeypatch, "cmdline", cmdline)
    inspector = PsutilInspector()
    first = inspector.inspect([child.pid])[child.pid]
    assert first.command == first.name  # the best there is at that moment
    again = inspector.inspect([child.pid])[child.pid]
    assert again.command == f"{sys.executable} -c {SLEEP_CODE}"

"""send_signal_checked on real child processes: never signal a process other than the one chosen."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from nvtopy.backends.base import SignalOutcome
from nvtopy.backends.host.signals import SIGNALS, send_signal_checked, signal_name

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SLEEP_CODE = "import time; time.sleep(30)"
HAS_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


@pytest.fixture
def child():
    """A sleeping Python child, killed and reaped whatever the test did."""
    process = subprocess.Popen([sys.executable, "-c", SLEEP_CODE])
    try:
        deadline = time.monotonic() + 10
        watched = psutil.Process(process.pid)
        # Wait for the exec and for the sleep: a SIGINT during Python's start-up may end it with status 1.
        while watched.cmdline()[-1:] != [SLEEP_CODE] or watched.status() != psutil.STATUS_SLEEPING:
            assert time.monotonic() < deadline, "child did not start"
            time.sleep(0.01)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _create_time(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _assert_alive(process: subprocess.Popen) -> None:
    time.sleep(0.05)  # a signal, had one been sent, would have been delivered by now
    assert process.poll() is None
    assert psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE


def _exit_signal(process: subprocess.Popen) -> int:
    return process.wait(timeout=10)


@pytest.fixture(params=["pidfd", "psutil"] if HAS_PIDFD else ["psutil"])
def mechanism(request, monkeypatch):
    """Run a test with pidfds and again with the psutil fallback (kernel or Python without pidfd)."""
    if request.param == "psutil" and hasattr(os, "pidfd_open"):
        monkeypatch.delattr(os, "pidfd_open")
    return request.param


# --------------------------------------------------------------------------- sending


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_sends_with_the_right_create_time(child, mechanism, name):
    signum = SIGNALS[name]
    outcome = send_signal_checked(child.pid, _create_time(child.pid), signum)
    assert isinstance(outcome, SignalOutcome)
    assert outcome.ok is True
    assert outcome.message.startswith(f"sent {name} to pid {child.pid}")
    assert "python" in outcome.message
    assert _exit_signal(child) == -signum


def test_create_time_within_tolerance_still_matches(child, mechanism):
    outcome = send_signal_checked(child.pid, _create_time(child.pid) + 0.0005, signal.SIGTERM)
    assert outcome.ok is True
    assert _exit_signal(child) == -signal.SIGTERM


@pytest.mark.parametrize("offset", [0.01, -0.01, 1.0, -3600.0])
def test_refuses_a_reused_pid(child, mechanism, offset):
    outcome = send_signal_checked(child.pid, _create_time(child.pid) + offset, signal.SIGTERM)
    assert outcome.ok is False
    assert "another process" in outcome.message
    assert "nothing sent" in outcome.message
    assert "python" in outcome.message  # names what the pid is now
    _assert_alive(child)


def test_refuses_without_create_time(child, mechanism):
    outcome = send_signal_checked(child.pid, None, signal.SIGKILL)
    assert outcome.ok is False
    assert "start time is unknown" in outcome.message
    assert "nothing sent" in outcome.message
    _assert_alive(child)


def test_exited_pid(child, mechanism):
    created = _create_time(child.pid)
    child.kill()
    child.wait(timeout=10)
    outcome = send_signal_checked(child.pid, created, signal.SIGTERM)
    assert outcome.ok is False
    assert "already exited" in outcome.message
    assert str(child.pid) in outcome.message


def test_pid_that_never_existed(mechanism):
    pid = 2**22 + 1  # above PID_MAX_LIMIT (2**22), the highest pid_max: never assigned
    assert not psutil.pid_exists(pid)
    outcome = send_signal_checked(pid, 1.0, signal.SIGTERM)
    assert outcome.ok is False
    assert "already exited" in outcome.message


@pytest.mark.parametrize("pid", [0, -1, -12345])
def test_refuses_pid_zero_and_negative(pid, monkeypatch):
    sent = []
    monkeypatch.setattr(os, "kill", lambda *args: sent.append(args))
    monkeypatch.setattr(psutil.Process, "send_signal", lambda *args: sent.append(args))
    if HAS_PIDFD:
        monkeypatch.setattr(signal, "pidfd_send_signal", lambda *args: sent.append(args))
    outcome = send_signal_checked(pid, 1.0, signal.SIGTERM)
    assert outcome.ok is False
    assert f"refusing to send SIGTERM to pid {pid}" in outcome.message
    assert sent == []


def test_refuses_its_own_pid(monkeypatch):
    sent = []
    monkeypatch.setattr(os, "kill", lambda *args: sent.append(args))
    monkeypatch.setattr(psutil.Process, "send_signal", lambda *args: sent.append(args))
    if HAS_PIDFD:
        monkeypatch.setattr(signal, "pidfd_send_signal", lambda *args: sent.append(args))
    outcome = send_signal_checked(os.getpid(), _create_time(os.getpid()), signal.SIGTERM)
    assert outcome.ok is False
    assert "nvtopy itself" in outcome.message
    assert sent == []


# --------------------------------------------------------------------------- permission


@pytest.mark.skipif(not HAS_PIDFD, reason="no pidfd_send_signal")
def test_permission_denied_with_pidfd(child, monkeypatch):
    def deny(pidfd, signum, *args):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(signal, "pidfd_send_signal", deny)
    outcome = send_signal_checked(child.pid, _create_time(child.pid), signal.SIGTERM)
    assert outcome.ok is False
    assert f"not permitted to send SIGTERM to pid {child.pid}" in outcome.message
    assert f"owned by {psutil.Process(child.pid).username()}" in outcome.message
    _assert_alive(child)


@pytest.mark.parametrize("error", [PermissionError(errno.EPERM, "denied"), psutil.AccessDenied()])
def test_permission_denied_with_psutil_fallback(child, monkeypatch, error):
    if hasattr(os, "pidfd_open"):
        monkeypatch.delattr(os, "pidfd_open")

    def deny(self, signum):
        raise error

    monkeypatch.setattr(psutil.Process, "send_signal", deny)
    outcome = send_signal_checked(child.pid, _create_time(child.pid), signal.SIGINT)
    assert outcome.ok is False
    assert f"not permitted to send SIGINT to pid {child.pid}" in outcome.message
    _assert_alive(child)


def test_permission_denied_owner_unknown(child, monkeypatch):
    if hasattr(os, "pidfd_open"):
        monkeypatch.delattr(os, "pidfd_open")

    def deny(self, *args):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "send_signal", deny)
    monkeypatch.setattr(psutil.Process, "username", deny)
    outcome = send_signal_checked(child.pid, _create_time(child.pid), signal.SIGTERM)
    assert outcome.ok is False
    assert "not permitted" in outcome.message
    assert "owned by another user" in outcome.message


def test_cannot_inspect_the_pid(child, monkeypatch):
    def deny(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "create_time", deny)
    outcome = send_signal_checked(child.pid, 1.0, signal.SIGTERM)
    assert outcome.ok is False
    assert "not permitted to inspect" in outcome.message
    _assert_alive(child)


@pytest.mark.skipif(not HAS_PIDFD, reason="no pidfd_open")
def test_falls_back_when_pidfd_open_fails(child, monkeypatch):
    def no_pidfd(pid, *args):
        raise OSError(errno.ENOSYS, "Function not implemented")

    called = []
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    monkeypatch.setattr(signal, "pidfd_send_signal", lambda *args: called.append(args))
    outcome = send_signal_checked(child.pid, _create_time(child.pid), signal.SIGTERM)
    assert outcome.ok is True
    assert called == []
    assert _exit_signal(child) == -signal.SIGTERM


@pytest.mark.skipif(not HAS_PIDFD, reason="no pidfd_open")
def test_pidfd_is_closed(child, monkeypatch):
    opened = []
    real_open = os.pidfd_open

    def tracking_open(pid, *args):
        fd = real_open(pid, *args)
        opened.append(fd)
        return fd

    monkeypatch.setattr(os, "pidfd_open", tracking_open)
    created = _create_time(child.pid)
    fds_before = sorted(os.listdir("/proc/self/fd"))
    assert send_signal_checked(child.pid, created + 5.0, signal.SIGTERM).ok is False
    assert send_signal_checked(child.pid, None, signal.SIGTERM).ok is False  # refused before any pidfd
    assert send_signal_checked(child.pid, created, signal.SIGTERM).ok is True
    assert sorted(os.listdir("/proc/self/fd")) == fds_before
    assert len(opened) == 2
    assert _exit_signal(child) == -signal.SIGTERM


def test_exits_between_check_and_signal(child, monkeypatch):
    if hasattr(os, "pidfd_open"):
        monkeypatch.delattr(os, "pidfd_open")

    def gone(self, signum):
        raise psutil.NoSuchProcess(self.pid)

    monkeypatch.setattr(psutil.Process, "send_signal", gone)
    outcome = send_signal_checked(child.pid, _create_time(child.pid), signal.SIGTERM)
    assert outcome.ok is False
    assert "exited before the signal was sent" in outcome.message


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("signum", "name"),
    [(signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL"), (signal.SIGINT, "SIGINT"), (0, "signal 0")],
)
def test_signal_name(signum, name):
    assert signal_name(signum) == name


def test_signals_offered():
    assert SIGNALS == {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT}

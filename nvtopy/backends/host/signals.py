"""Sending a signal to a GPU process without ever hitting the wrong process.

Why not ``os.kill(pid)``: between the moment a user sees a row and the moment
they confirm, the process may exit and its pid may be handed to an unrelated
process. We therefore identify a process by (pid, create time) and, on Linux,
pin it with a pidfd before checking the create time: once the pidfd is open it
refers to that exact process, so the check and the signal cannot race.
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

from ..base import SignalOutcome

__all__ = ["SIGNALS", "send_signal_checked", "signal_name"]

# The signals the UI offers, in the order of its keys.
SIGNALS: dict[str, int] = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT}

_CREATE_TIME_TOLERANCE = 1e-3  # create times come from clock ticks (10 ms); equal processes match exactly


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _describe(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return "?"


def send_signal_checked(pid: int, create_time: float | None, signum: int) -> SignalOutcome:
    """Send ``signum`` to ``pid`` if it is still the process created at ``create_time``.

    Returns an outcome with a one-line message in every case; never raises for
    the expected failures (gone, reused, not permitted).
    """
    name = signal_name(signum)
    if pid <= 0:
        return SignalOutcome(False, f"refusing to send {name} to pid {pid}")
    if pid == os.getpid():
        return SignalOutcome(False, f"pid {pid} is nvtopy itself; nothing sent")
    if create_time is None:
        return SignalOutcome(False, f"pid {pid}: its start time is unknown, so it cannot be checked; nothing sent")
    pidfd: int | None = None
    try:
        if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                return SignalOutcome(False, f"pid {pid} has already exited; nothing sent")
            except OSError:
                pidfd = None  # kernel without pidfd (< 5.3) or seccomp: fall back below
        try:
            process = psutil.Process(pid)
            current = process.create_time()
        except psutil.ZombieProcess:
            return SignalOutcome(False, f"pid {pid} has already exited (zombie); nothing sent")
        except psutil.NoSuchProcess:
            return SignalOutcome(False, f"pid {pid} has already exited; nothing sent")
        except psutil.AccessDenied:
            return SignalOutcome(False, f"not permitted to inspect pid {pid}; nothing sent")
        if abs(current - create_time) > _CREATE_TIME_TOLERANCE:
            return SignalOutcome(
                False,
                f"pid {pid} now belongs to another process ({_describe(process)}); the one you chose "
                "has exited; nothing sent",
            )
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                process.send_signal(signum)  # psutil re-checks the create time itself
        except (ProcessLookupError, psutil.NoSuchProcess):
            return SignalOutcome(False, f"pid {pid} exited before the signal was sent")
        except (PermissionError, psutil.AccessDenied):
            owner = "another user"
            with contextlib.suppress(psutil.Error):
                owner = process.username()
            return SignalOutcome(False, f"not permitted to send {name} to pid {pid} (owned by {owner})")
        return SignalOutcome(True, f"sent {name} to pid {pid} ({_describe(process)})")
    finally:
        if pidfd is not None:
            os.close(pidfd)

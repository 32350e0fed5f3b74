"""A command's end closes the driver only once none of its threads is inside it (``options.release_backend``).

``nvtopy log`` (and ``watch``, the exporter, ``serve-stdio``) watch Xid events on a thread that
waits in ``nvmlEventSetWait`` up to 0.45 s at a time. ``nvmlShutdown`` while that wait is in the
driver is undefined (the event set is freed under it), so at the end the command gives the event
thread one wait's time to end, and leaves the backend open (the driver cleans up after an exiting
process) when it has not. On ../shared/fake-nvml: a wait that hangs 30 s must not be shut down
under, and must not hold the exit; a wait that answers lets the command shut the driver down.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..builders import fake_nvml_calls, fake_nvml_env
from ..conftest import needs_fake_nvml

pytestmark = [needs_fake_nvml, pytest.mark.timeout(90)]


def _waits(counts: dict[str, int]) -> int:
    return counts.get("nvmlEventSetWait_v2", 0) + counts.get("nvmlEventSetWait", 0)


def _log_until_sigterm(fake_lib: str, stats: Path, **knobs: str) -> tuple[int, float, dict[str, int]]:
    """``nvtopy log`` until its event thread has called the wait, then SIGTERM: (exit code, seconds to exit, calls)."""
    env = fake_nvml_env(
        fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_STATS=str(stats), FAKE_NVML_STATS_EVERY_S="0.05", **knobs
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "log", "--interval", "0.2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while _waits(fake_nvml_calls(stats)) == 0:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the event thread never waited"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = process.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, took, fake_nvml_calls(stats)


def test_a_wait_stuck_in_the_driver_is_not_shut_down_under_and_does_not_hold_the_exit(fake_lib, tmp_path):
    stats = tmp_path / "calls.txt"
    code, took, counts = _log_until_sigterm(fake_lib, stats, FAKE_NVML_HANG="nvmlEventSetWait_v2+nvmlEventSetWait:30")
    assert code == 0
    assert took < 20, f"the exit waited {took:.1f} s for a wait stuck in the driver"
    assert counts.get("nvmlShutdown", 0) == 0, counts


def test_a_wait_that_answers_lets_the_command_shut_the_driver_down(fake_lib, tmp_path):
    stats = tmp_path / "calls.txt"
    code, _took, counts = _log_until_sigterm(fake_lib, stats)
    assert code == 0
    assert counts.get("nvmlShutdown", 0) == 1, counts

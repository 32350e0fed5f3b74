"""The one polling loop of the tests (:func:`tests.waiting.until`): it fails at its deadline, naming what for; and
:func:`tests.waiting.exec_shown`, which waits with it for a spawned child's argv."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from .waiting import exec_shown, until


def test_a_condition_never_true_fails_at_its_deadline_naming_it() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"not within 0.2 s: the thing \(last: None\)"):
        until(lambda: None, 0.2, "the thing")
    assert 0.2 <= time.monotonic() - started < 2


def test_the_value_is_returned_and_a_late_one_counts() -> None:
    calls: list[int] = []

    def late() -> str | None:
        calls.append(1)
        return "yes" if len(calls) >= 3 else None

    assert until(late, 5, "late") == "yes"
    assert until(lambda: [1], 0.0) == [1]


def test_a_callable_what_is_called_only_on_failure() -> None:
    said: list[int] = []

    def what() -> str:
        said.append(1)
        return "now 3"

    with pytest.raises(AssertionError, match="now 3"):
        until(lambda: 0, 0.05, what)
    assert said == [1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_exec_shown_returns_once_the_childs_argv_and_environment_are_in_proc() -> None:
    """Twenty spawns, each read at once after the wait: never an empty argv or environment (without the wait most
    reads right after ``Popen`` are empty)."""
    empty: list[tuple[str, int]] = []
    for _ in range(20):
        child = subprocess.Popen(["sleep", "30"])
        try:
            assert exec_shown(child.pid, environ=True) == child.pid
            for name in ("cmdline", "environ"):
                with open(f"/proc/{child.pid}/{name}", "rb") as file:
                    if not file.read():
                        empty.append((name, child.pid))
        finally:
            child.kill()
            child.wait(timeout=10)
    assert empty == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_exec_shown_fails_at_its_deadline_for_a_pid_with_no_process() -> None:
    with open("/proc/sys/kernel/pid_max") as file:
        nobody = int(file.read()) + 1000  # above pid_max: never a process
    with pytest.raises(AssertionError, match=rf"not within 0.1 s: pid {nobody}'s exec'd cmdline in /proc"):
        exec_shown(nobody, 0.1)

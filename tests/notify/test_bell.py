"""The bell on real terminals: a pty as the controlling terminal, a pty by path, no terminal at all."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvtopy.alerts.events import Transition
from nvtopy.notify import Dispatcher
from nvtopy.notify.bell import BellChannel
from nvtopy.notify.channel import ChannelUnavailable

from .helpers import DEADLINE_S, Problems, make_event, wait_for

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[2]


def read_until(fd: int, marker: bytes, deadline_s: float = DEADLINE_S) -> bytes:
    """Read a pty's master side until ``marker`` has been seen (or the child closed it)."""
    data = b""
    end = time.monotonic() + deadline_s
    while marker not in data:
        left = end - time.monotonic()
        assert left > 0, f"timed out waiting for {marker!r}; read {data!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child side is closed
                break
            if not chunk:
                break
            data += chunk
    return data


def test_the_bell_rings_a_terminal_given_by_path_and_not_for_a_cleared_alert():
    master, slave = os.openpty()
    try:
        bell = BellChannel(os.ttyname(slave))
        bell.send(make_event(0, transition=Transition.CLEARED), time.monotonic() + DEADLINE_S)  # silent
        bell.send(make_event(1), time.monotonic() + DEADLINE_S)
        os.write(slave, b"END")
        assert read_until(master, b"END") == b"\aEND"  # one bell: the cleared alert wrote nothing
        BellChannel(os.ttyname(slave), on_clear=True).send(
            make_event(2, transition=Transition.CLEARED), time.monotonic() + DEADLINE_S
        )
        os.write(slave, b"END")
        assert read_until(master, b"END") == b"\aEND"
    finally:
        os.close(master)
        os.close(slave)


CHILD = """
import time
from nvtopy.notify.bell import BellChannel
from tests.notify.helpers import make_event
try:
    BellChannel().send(make_event(0), time.monotonic() + 10)
    print("SENT")
except Exception as exc:
    print(type(exc).__name__, exc)
print("DONE", flush=True)
"""


def test_the_bell_rings_the_controlling_terminal():
    pid, master = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty
        try:
            os.chdir(REPO)  # where "tests.notify.helpers" imports from
            os.execv(sys.executable, [sys.executable, "-c", CHILD])
        finally:
            os._exit(127)
    try:
        output = read_until(master, b"DONE")
        assert b"\aSENT" in output, output
    finally:
        os.close(master)
        os.waitpid(pid, 0)


def test_without_a_terminal_the_bell_is_unavailable():
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=REPO,
        start_new_session=True,  # no controlling terminal, as under systemd
        timeout=60,
    )
    assert done.stdout.decode().splitlines()[0] == (
        "ChannelUnavailable no terminal to ring (/dev/tty: No such device or address)"
    )


def test_a_path_that_is_no_terminal_is_unavailable_and_said_once(tmp_path):
    path = tmp_path / "not-a-tty"
    path.write_bytes(b"")
    with pytest.raises(ChannelUnavailable, match="is not a terminal"):
        BellChannel(str(path)).send(make_event(0), time.monotonic() + DEADLINE_S)
    assert path.read_bytes() == b""
    problems = Problems()
    dispatcher = Dispatcher([BellChannel(str(path))], problems)
    try:
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: dispatcher.stats()[0].skipped == 3, "all three to be skipped")
        wait_for(lambda: problems.items, "the report")
        assert problems.about("bell") == [f"unavailable: {path} is not a terminal (no more alerts are sent to it)"]
    finally:
        assert dispatcher.close(DEADLINE_S)

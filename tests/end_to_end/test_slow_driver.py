"""A slow or stuck driver never holds the monitor: it draws at once, says what it waits for, and quits at once.

Three ways in: the real CLI in a pseudo-terminal on simulated GPUs whose every
call is slow (``--demo-fault slow=SECONDS``), Textual's pilot on the app, and
the real CLI on ../shared/fake-nvml with ``FAKE_NVML_LATENCY_US`` (skipped where
that is absent). "Prompt" is measured from the ``q`` key to the process's exit.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import threading
import time

import pytest

from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.errors import BackendUnavailableError, UsageError
from nvtopy.tui.app import STALL_AFTER, NvtopyApp

from ..conftest import needs_fake_nvml, without_nvml_driver
from ..tui_helpers import header_line, started, wait_until, widget_lines
from ..waiting import until

PROMPT = 1.0  # seconds from q to the end of the process (measured: about 0.35 s, most of it Textual's own exit)
ALT_SCREEN_OFF = b"\x1b[?1049l"
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

pytestmark = pytest.mark.timing  # a driver that answers slowly, and quits measured against the clock


@pytest.fixture(autouse=True)
def threads_end_before_the_next_test():
    """A test here may quit while a driver call is stuck (what it proves): the stuck poller's threads end
    seconds later. They end before the next test, which may count the process's threads: the timing pass
    runs its quick tests one after another on one worker, and the 256 ssh hosts' test, next, counted one
    that ended during it (tests/sources/remote/ssh/test_ssh_hosts.py)."""
    before = set(threading.enumerate())
    yield
    until(
        lambda: not [thread for thread in threading.enumerate() if thread not in before],
        30,
        lambda: f"this test's threads to end: {[t.name for t in threading.enumerate() if t not in before]}",
    )


def lines_after_the_tui(out: bytes) -> list[str]:
    """What the terminal shows once the monitor has restored it (its mode resets removed)."""
    end = out.rfind(ALT_SCREEN_OFF)
    after = out[end + len(ALT_SCREEN_OFF) :] if end >= 0 else out
    text = CSI.sub("", after.decode(errors="replace")).replace("\r", "")
    return [line for line in text.splitlines() if line.strip()]


class Terminal:
    """The real CLI in a pseudo-terminal, its output drained on a thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, cols: int = 140, rows: int = 40) -> None:
        environ = {**os.environ, "TERM": "xterm-256color", **(env or {})}  # a test may name another terminal
        environ.pop("NVTOPY_DEBUG", None)
        argv = [sys.executable, "-m", "nvtopy", *args]
        pid, fd = pty.fork()
        if pid == 0:  # the child: become the program
            try:
                os.execve(argv[0], argv, environ)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.kill(pid, signal.SIGWINCH)
        self.output = bytearray()
        self.lock = threading.Lock()
        self.status: int | None = None
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if not ready:
                    continue
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.output += chunk

    def wait_for(self, needle: bytes, timeout: float, start: int = 0) -> int:
        """Where ``needle`` first appears at or after ``start`` (waits up to ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = self.output.find(needle, start)
            if found >= 0:
                return found
            if self.exited():
                break
            time.sleep(0.01)
        with self.lock:
            tail = bytes(self.output[-600:])
        raise AssertionError(f"{needle!r} never appeared; the terminal's last bytes: {tail!r}")

    def exited(self) -> bool:
        if self.status is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None

    def wait_exit(self, timeout: float) -> float:
        """Seconds until the process ended (raises if it is still alive after ``timeout``)."""
        started = time.perf_counter()
        while time.perf_counter() - started < timeout:
            if self.exited():
                return time.perf_counter() - started
            time.sleep(0.005)
        raise AssertionError(f"still running {timeout} s later")

    def quit_time(self, key: bytes = b"q") -> float:
        """Press ``key``; seconds until the process ended (at most 10: a stuck one is killed by close())."""
        os.write(self.fd, key)
        return self.wait_exit(10.0)

    def text(self) -> bytes:
        self._reader.join(2)
        with self.lock:
            return bytes(self.output)

    def close(self) -> None:
        if not self.exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def terminal():
    opened: list[Terminal] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Terminal:
        term = Terminal(list(args), env)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


# --------------------------------------------------------------------------- the real CLI, simulated driver


def test_quit_while_the_simulated_driver_opens(terminal):
    """Every call takes 2 s: the monitor draws at once, says what it waits for and for how long, q ends it."""
    term = terminal("--demo", "--demo-fault", "slow=2")
    term.wait_for(b"waiting for the simulated driver: 1 s", timeout=15)
    elapsed = term.quit_time()
    assert elapsed < PROMPT, f"q took {elapsed:.2f} s"
    assert term.status == 0


@pytest.mark.slow
def test_quit_while_a_poll_is_stuck_in_the_driver(terminal):
    """After the first frame: a poll that takes longer than STALL_AFTER is shown, and q does not wait for it."""
    term = terminal("--demo", "--demo-gpus", "2", "--demo-fault", "slow=0.5")  # one poll: 5 calls, 2.5 s
    first_frame = term.wait_for(b"CUDA 12.4", timeout=20)
    term.wait_for(b"waiting for the simulated driver: 2 s", timeout=15, start=first_frame)
    elapsed = term.quit_time()
    assert elapsed < PROMPT, f"q took {elapsed:.2f} s"
    assert term.status == 0


def test_a_selection_error_found_after_the_start_is_the_usual_line(terminal):
    """--gpus 7 on 4 GPUs, found on the poller thread once the slow driver answered: exit 2, one line, after the TUI."""
    term = terminal("--demo", "--demo-fault", "slow=0.4", "--gpus", "7")
    term.wait_for(b"waiting for the simulated driver", timeout=15)
    term.wait_exit(20)
    assert term.status == 2
    out = term.text()
    assert ALT_SCREEN_OFF in out, "the monitor was drawing while the driver was read"
    lines = lines_after_the_tui(out)
    assert len(lines) == 1 and lines[0].startswith("nvtopy: error: --gpus: no GPU matches '7'"), lines
    assert b"Traceback" not in out


@without_nvml_driver
def test_no_driver_in_the_monitor_is_the_usual_line(terminal):
    term = terminal()
    term.wait_exit(20)
    assert term.status == 1
    out = term.text()
    lines = lines_after_the_tui(out)
    assert len(lines) == 1 and lines[0].startswith("nvtopy: error: ") and "libnvidia-ml.so.1 not found" in lines[0]
    assert b"Traceback" not in out


# --------------------------------------------------------------------------- the app, through the pilot

SIZE = (120, 30)


async def test_the_app_draws_and_quits_while_the_backend_opens():
    """The backend is opened on the poller thread: the app says so and q does not wait for it."""

    def opener() -> SimulatedBackend:
        return SimulatedBackend(gpus=2, seed=1, viewer="alice", faults=parse_fault_specs(["slow=3"], 2))

    app = NvtopyApp.for_backend(None, opener=opener, waiting_for="the simulated driver", interval=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "waiting for the simulated driver: 1 s" in header_line(app), timeout=5)
        assert any("waiting for the simulated driver" in line for line in widget_lines(app.query_one("#gpus")))
        assert app.snapshot is None and app.source.backend is None
        quit_at = time.monotonic()
        await pilot.press("q")
    assert time.monotonic() - quit_at < PROMPT
    assert app.return_code == 0 and app.open_error is None
    assert app.source.running, "the thread still waits for the driver: it was not waited for"


async def test_q_does_not_wait_for_a_poll_stuck_in_the_driver(sim):
    backend = sim(gpus=2, seed=1)
    app = NvtopyApp.for_backend(backend, interval=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert "waiting for" not in header_line(app)
        backend.faults.slow[None] = STALL_AFTER + 3.0  # the driver gets stuck mid-run
        app.source.refresh()
        await wait_until(pilot, lambda: "waiting for the simulated driver: 2 s" in header_line(app), timeout=10)
        quit_at = time.monotonic()
        await pilot.press("q")
    assert time.monotonic() - quit_at < PROMPT
    assert app.source.collector.busy(), "the driver calls in progress were not waited for"


@pytest.mark.parametrize("error", [UsageError("--gpus: no GPU matches '7'"), BackendUnavailableError("no driver")])
async def test_an_error_while_opening_ends_the_app_with_it(error):
    def opener() -> SimulatedBackend:
        raise error

    app = NvtopyApp.for_backend(None, opener=opener)
    await asyncio.wait_for(app.run_async(headless=True, size=SIZE), timeout=10)
    assert app.open_error is error


def test_the_poller_owns_and_closes_a_backend_it_opened():
    closed = threading.Event()

    class Closing(SimulatedBackend):
        def close(self) -> None:
            closed.set()

    from nvtopy.sources.poller import Poller

    poller = Poller(None, opener=lambda: Closing(gpus=1, viewer="alice"), select=lambda c: [0], interval=0.1).start()
    deadline = time.monotonic() + 5
    while poller.latest is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert poller.latest is not None and [g.index for g in poller.latest.gpus] == [0]
    poller.stop()
    assert closed.wait(2), "the poller's thread closes what it opened"


# --------------------------------------------------------------------------- the real CLI, fake libnvidia-ml


def _fake_env(fake_lib: str, **knobs: str) -> dict[str, str]:
    for name in [k for k in os.environ if k.startswith("FAKE_NVML_")]:
        knobs.setdefault(name, "")  # none of the caller's knobs leak in
    return {"LD_LIBRARY_PATH": fake_lib, "FAKE_NVML_LATENCY_MODE": "sleep", **knobs}


@needs_fake_nvml
def test_fake_driver_3_s_per_call_quit_is_prompt(fake_lib, terminal):
    """The issue's case: with 3 s per call, q used to leave the process alive for minutes."""
    term = terminal(env=_fake_env(fake_lib, FAKE_NVML_GPUS="4", FAKE_NVML_LATENCY_US="3000000"))
    term.wait_for(b"waiting for the NVIDIA driver: 1 s", timeout=15)
    elapsed = term.quit_time()
    assert elapsed < PROMPT, f"q took {elapsed:.2f} s"
    assert term.status == 0


@needs_fake_nvml
@pytest.mark.slow
def test_fake_driver_0_2_s_per_call_quit_is_prompt_after_the_first_frame(fake_lib, terminal):
    """The issue's other case: 0.2 s per call, q during a poll took 6.8 s (the join, then nvmlShutdown)."""
    term = terminal(env=_fake_env(fake_lib, FAKE_NVML_GPUS="1", FAKE_NVML_LATENCY_US="200000"))
    term.wait_for(b"CUDA 12.4", timeout=40)  # the first frame: about 40 calls
    time.sleep(0.3)  # the next poll is in the driver (a poll takes longer than the interval)
    elapsed = term.quit_time()
    assert elapsed < PROMPT, f"q took {elapsed:.2f} s"
    assert term.status == 0

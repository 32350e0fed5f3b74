"""``nvtopy serve-stdio``, the real CLI in a process of its own, read as ``nvtopy --ssh`` reads it: line by line,
each wait with a deadline. It streams (the hello, then a snapshot at once and one an interval), and it never
outlives its reader: its stdin closed, a signal, its stdout closed each end it with exit 0 and a quiet stderr."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import glob
import itertools
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nvtopy.formats.contract_decoder import snapshot_from_dict
from nvtopy.formats.stream import StreamFailure, StreamHello, StreamReader

from ..builders import NVTOPY, run_nvtopy

LINE_DEADLINE_S = 20.0  # a loaded 2-core machine; a healthy line comes in well under a second
EXIT_DEADLINE_S = 15.0  # the command's own bound is a poll plus GRACE_S (5 s)


class FarSide:
    """``nvtopy serve-stdio ARGS`` with its stdin, stdout and stderr piped; its lines read on a thread."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [*NVTOPY, "serve-stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines: queue.Queue[tuple[float, bytes]] = queue.Queue()
        self.reader = StreamReader()  # patches applied: each snapshot whole, as the monitor reads it
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), line))
        self.lines.put((time.monotonic(), b""))  # end of file

    def next(self, deadline: float = LINE_DEADLINE_S) -> tuple[float, Any]:
        """(when it came, what :class:`StreamReader` made of it: a patch as the whole snapshot it makes) of the
        next line; fails at end of file or after ``deadline`` seconds."""
        try:
            when, raw = self.lines.get(timeout=deadline)
        except queue.Empty:
            raise AssertionError(f"no line within {deadline} s") from None
        assert raw, f"end of stream; stderr: {self.stderr()!r}"
        return when, self.reader.read(raw)

    def snapshot(self) -> dict[str, Any]:
        _, data = self.next()
        assert isinstance(data, dict), data
        return data

    def exited(self, deadline: float = EXIT_DEADLINE_S) -> int:
        return self.process.wait(deadline)

    def stderr(self) -> bytes:
        if self.process.poll() is None:
            return b"(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


@contextlib.contextmanager
def far_side(*args: str, env: dict[str, str] | None = None) -> Iterator[FarSide]:
    far = FarSide(*args, env=env)
    try:
        yield far
    finally:
        far.close()


def _seconds(data: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(data["timestamp"]).timestamp()


@pytest.mark.timing
def test_hello_then_a_snapshot_at_once_then_one_an_interval():
    with far_side("--demo", "--demo-gpus", "2", "--interval", "0.5", "--demo-hostname", "node-a") as far:
        _, hello = far.next()
        assert isinstance(hello, StreamHello)
        assert (hello.hostname, hello.interval_s, hello.stream) == ("node-a", 0.5, 1)
        snapshots = [far.snapshot() for _ in range(5)]
        for data in snapshots:
            snapshot = snapshot_from_dict(data)
            assert snapshot.host.hostname == "node-a" and len(snapshot.gpus) == 2
            assert all(gpu.processes for gpu in snapshot.gpus), "processes included, as record writes them"
        assert [data["sequence"] for data in snapshots] == sorted({data["sequence"] for data in snapshots})
        gaps = [_seconds(b) - _seconds(a) for a, b in itertools.pairwise(snapshots)]
        assert all(gap >= 0.4 for gap in gaps), f"never faster than the interval: {gaps}"
        assert sum(gaps) < 4 * 0.5 + 2.0, f"drift compensated: {gaps}"


def test_the_first_snapshot_does_not_wait_an_interval():
    with far_side("--demo", "--interval", "60") as far:
        far.next()
        came, data = far.next()
        assert isinstance(data, dict)
        took = came - far.started  # the interpreter's start included, on a loaded machine
        assert took < 10.0, f"the first snapshot after {took:.1f} s: it waited for the interval"


def test_ends_with_exit_0_when_its_stdin_is_closed():
    with far_side("--demo", "--interval", "0.5") as far:
        far.next()
        far.snapshot()
        assert far.process.stdin is not None
        far.process.stdin.close()  # the near side closed the ssh session
        assert far.exited() == 0
        assert far.stderr() == b""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_ends_with_exit_0_on_a_signal(signum):
    with far_side("--demo", "--interval", "0.5") as far:
        far.next()
        far.snapshot()
        far.process.send_signal(signum)
        assert far.exited() == 0
        assert far.stderr() == b""


def test_ends_with_exit_0_when_its_reader_goes_away():
    """EPIPE: the reader closes its end of stdout (stdin stays open: it is the write that must end it)."""
    process = subprocess.Popen(
        [*NVTOPY, "serve-stdio", "--demo", "--interval", "0.2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        ready = threading.Event()
        threading.Thread(target=lambda: (process.stdout.readline(), ready.set()), daemon=True).start()
        assert ready.wait(LINE_DEADLINE_S), "no hello"
        process.stdout.close()
        assert process.wait(EXIT_DEADLINE_S) == 0
        assert process.stderr.read() == b""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stderr):
            assert stream is not None
            stream.close()


def _in_a_pipe_write(pid: int) -> bool:
    """A thread of ``pid`` sleeps in a write to a full pipe (the kernel's wait channel says so)."""
    return any("pipe_write" in _read_text(path) for path in glob.glob(f"/proc/{pid}/task/*/wchan"))


def _read_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


@pytest.mark.slow
def test_a_reader_that_stops_reading_does_not_keep_it_alive_once_its_stdin_is_closed():
    """The main thread stuck in a write to a full pipe: the stdin's end still ends it, GRACE_S later."""
    from nvtopy.commands.serve_stdio import GRACE_S

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # a snapshot line (tens of KiB) can never fit
    process = subprocess.Popen(
        [*NVTOPY, "serve-stdio", "--demo", "--demo-gpus", "8", "--interval", "0.2"],
        stdin=subprocess.PIPE,
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    try:
        assert process.stdin is not None and process.stderr is not None
        deadline = time.monotonic() + LINE_DEADLINE_S
        while not _in_a_pipe_write(process.pid):
            if time.monotonic() > deadline:
                pytest.skip("this kernel does not say where a thread waits (/proc/PID/task/TID/wchan)")
            time.sleep(0.05)
        closed = time.monotonic()
        process.stdin.close()
        assert process.wait(EXIT_DEADLINE_S) == 0
        assert GRACE_S <= time.monotonic() - closed < GRACE_S + 5
        assert process.stderr.read() == b""
    finally:
        os.close(read_end)
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


def test_a_faulty_node_streams_its_faults():
    faults = ("--demo-fault", "lost@1", "--demo-fault", "unsupported=fan@0", "--demo-fault", "remapped=0/3/1/0@2")
    with far_side("--demo", "--demo-gpus", "3", "--interval", "0.3", *faults) as far:
        far.next()
        far.snapshot()
        gpus = snapshot_from_dict(far.snapshot()).gpus
        assert gpus[1].static.unavailable and gpus[1].health.verdict.name == "FAIL"
        assert gpus[0].sample.fan_percent is None and "fan_percent" in gpus[0].sample.unavailable
        assert any(finding.code == "remap-pending" for finding in gpus[2].health.findings)


def test_no_gpu_is_the_error_line_and_exit_1():
    with far_side("--demo", "--demo-gpus", "0", "--demo-hostname", "empty") as far:
        assert isinstance(far.next()[1], StreamHello)
        _, failure = far.next()
        assert failure == StreamFailure("no GPU found on empty: the driver reports none")
        assert far.exited() == 1
        assert far.stderr().decode().splitlines() == ["nvtopy: error: no GPU found on empty: the driver reports none"]


def test_a_gpu_the_host_lacks_is_the_error_line_and_exit_2():
    with far_side("--demo", "--demo-gpus", "2", "--gpus", "7") as far:
        far.next()
        _, failure = far.next()
        assert isinstance(failure, StreamFailure) and "--gpus" in failure.message
        assert far.exited() == 2


def test_a_bad_flag_is_one_line_and_exit_2():
    result = run_nvtopy("serve-stdio", "--interval", "fast", timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "--interval" in result.stderr


def test_a_command_for_programs_not_listed_for_people():
    """In COMMANDS (dispatched, its own --help), but not in ``nvtopy --help``'s list nor a mistyped word's."""
    from nvtopy.commands.options import COMMANDS, INTERNAL_COMMANDS, user_commands

    assert "serve-stdio" in COMMANDS and "serve-stdio" in INTERNAL_COMMANDS and "serve-stdio" not in user_commands()
    assert "serve-stdio" not in run_nvtopy("--help", timeout=60).stdout
    assert "serve-stdio" not in run_nvtopy("serve", timeout=60).stderr
    own = run_nvtopy("serve-stdio", "--help", timeout=60)
    assert own.returncode == 0 and "the far end of 'nvtopy --ssh'" in " ".join(own.stdout.split())

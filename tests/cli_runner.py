"""``nvtopy ARGS`` as its own process: forked from a server that has imported nvtopy once (tests/cli_zygote.py),
or spawned; the one home of both (:mod:`tests.builders` hands them out with the other builders).

Why: the main pass started the program about 500 times, about 80 ms of CPU each to start Python and import
nvtopy before a 6-10 ms command. :func:`run_nvtopy` hands back what ``subprocess.run([python, -m, nvtopy,
ARGS], capture_output=True, text=True)`` would: the exit code (a signal's as -N), stdout and stderr decoded
and newline-translated as ``text=True`` does, the environment (os.environ at the call when ``env`` is None),
the working directory, stdin (``input`` or this process's own), and ``TimeoutExpired`` after killing a run
that outlives ``timeout``.

What it cannot give, and the tests that need it keep a real spawn (``builders.spawn_nvtopy``): the modules a
command imports (the server has nvtopy's core imported), the ``--once`` head start's order (it opens the
driver before nvtopy is imported), a fresh hash seed per run, ``pass_fds``, a tty or a signal sent to a
process started by the test. Variables read when the interpreter or the dynamic loader start (``PYTHON*``,
``LD_*``, the locale's) get a server of their own, started with them; ``NVTOPY_TEST_SPAWN=1`` makes every run
a real spawn (:func:`spawn_nvtopy`: to tell the two apart when a test fails).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "NVTOPY",
    "ZYGOTE_MODULES",
    "run_command",
    "run_module",
    "run_nvtopy",
    "shutdown",
    "spawn_nvtopy",
    "startup_key",
]

# The command that runs this checkout's CLI (the ``nvtopy_cmd`` fixture hands out a copy).
NVTOPY: tuple[str, ...] = (sys.executable, "-m", "nvtopy")

_SCRIPT = Path(__file__).with_name("cli_zygote.py")
_MAX_MESSAGE = 1 << 20

# Imported once by each server: what nearly every run imports (the dispatcher, the options, the simulated
# GPUs, psutil, the text renderer), nothing that reads the environment when imported, no driver (pynvml
# loads it at nvmlInit, in the run), no Textual.
ZYGOTE_MODULES = (
    "nvtopy.commands.dispatch",
    "nvtopy.commands.options",
    "nvtopy.commands.monitor",
    "nvtopy.backends.simulated.backend",
    "nvtopy.render.text",
    "nvtopy.formats.contract",
    "nvtopy.sources.collector",
    "nvtopy.commands.log",
    "nvtopy.commands.watch",
    "nvtopy.commands.doctor",
)

# Read by the interpreter or ld.so before any of nvtopy runs: a run with other values needs a server started so.
_STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_", "MALLOC_")
_STARTUP_NAMES = ("LANG", "LANGUAGE", "GLIBC_TUNABLES")


def startup_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` fixed when a process starts: runs that differ in it cannot share a server."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES))


class _Zygote:
    """One fork server and the socket to it; one run at a time (a lock: a test may run nvtopy from threads)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = ours
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, str(_SCRIPT), str(theirs.fileno()), *ZYGOTE_MODULES],
            pass_fds=[theirs.fileno()],
            env=dict(env),
            cwd=_SCRIPT.parent.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()

    def close(self) -> None:
        """End the server and reap it (so its CPU, and its runs', count in this process's children)."""
        with contextlib.suppress(OSError):
            self.control.send(b"")
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def receive(self, deadline: float | None) -> dict[str, Any]:
        """The server's next message; an empty one (it died) is an error, not a hang."""
        self.control.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
        data = self.control.recv(_MAX_MESSAGE)
        if not data:
            raise RuntimeError(f"the nvtopy fork server ended (exit {self.process.poll()})")
        message: dict[str, Any] = json.loads(data)
        return message


_zygotes: dict[tuple[tuple[str, str], ...], _Zygote] = {}
_zygotes_lock = threading.Lock()


def _zygote_for(env: Mapping[str, str]) -> _Zygote:
    key = startup_key(env)
    with _zygotes_lock:
        zygote = _zygotes.get(key)
        if zygote is None or zygote.process.poll() is not None:
            zygote = _zygotes[key] = _Zygote(env)
        return zygote


def shutdown() -> None:
    """End every server this process started (conftest's pytest_unconfigure, and at exit)."""
    with _zygotes_lock:
        for zygote in _zygotes.values():
            zygote.close()
        _zygotes.clear()


atexit.register(shutdown)


def run_command(
    cmd: Sequence[str],
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``cmd args...`` spawned and run to its end, its output captured as text; ``timeout`` only bounds a hang.

    Every spawn-and-capture of the tests' helpers is this one call: what a forked run must match.
    """
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, input=input, check=False
    )


def spawn_nvtopy(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m nvtopy args...`` of this checkout started as a user starts it (a new interpreter), captured."""
    return run_command(NVTOPY, *args, env=env, timeout=timeout, cwd=cwd, input=input)


def run_nvtopy(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``nvtopy args...`` of this checkout in a process of its own, its output captured: what a spawn gives.

    Forked from a server that has imported nvtopy once (about 65 ms of CPU less a run); a test about the
    program's own start (its imports, the head start, a fresh interpreter) uses :func:`spawn_nvtopy`, as
    every run does under ``NVTOPY_TEST_SPAWN=1`` (the runs as they were: to compare, or to tell the two apart).
    """
    if os.environ.get("NVTOPY_TEST_SPAWN") == "1":
        return spawn_nvtopy(*args, env=env, timeout=timeout, cwd=cwd, input=input)
    return run_module("nvtopy", *args, env=env, timeout=timeout, cwd=cwd, input=input)


def run_module(
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m module args...`` forked from a server (its own tests run a probe module, not nvtopy)."""
    full_env = dict(os.environ if env is None else env)
    argv = [sys.executable, "-m", module, *args]
    zygote = _zygote_for(full_env)
    if not zygote.lock.acquire(blocking=False):  # a run is under way (a test's other thread): two at once, as spawned
        return run_command(argv, env=full_env, timeout=timeout, cwd=cwd, input=input)
    try:
        return _run(zygote, argv, full_env, os.path.abspath(cwd if cwd is not None else os.getcwd()), timeout, input)
    finally:
        zygote.lock.release()


def _run(
    zygote: _Zygote, argv: list[str], env: dict[str, str], cwd: str, timeout: float, input: str | None
) -> subprocess.CompletedProcess[str]:
    deadline = time.monotonic() + timeout
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (_own_stdin(), -1)
    request = json.dumps({"module": argv[2], "argv": argv[3:], "env": env, "cwd": cwd}).encode()
    pid = None
    writer = None
    try:
        # The request is sent inside the try: an interrupt landing as it returns (the server already forking the
        # run) is discarded like any other, not raised past a run left hanging under the server.
        try:
            socket.send_fds(zygote.control, [request], [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        pid = zygote.receive(deadline)["pid"]
        if input is not None:
            writer = threading.Thread(target=_feed, args=(in_w, input.encode(locale.getpreferredencoding(False))))
            writer.start()
            in_w = -1  # the writer's now
        out, err, timed_out = _collect(out_r, err_r, deadline)
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        code = zygote.receive(None)["status"]
        if writer is not None:
            writer.join()
    except BaseException:  # interrupted mid-run (pytest-timeout's alarm, Ctrl-C): the server may still owe a reply
        _discard(zygote, pid)
        raise
    finally:
        for fd in (out_r, err_r, in_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
    stdout, stderr = _text(out), _text(err)
    if timed_out:
        raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def _discard(zygote: _Zygote, pid: int | None) -> None:
    """End a run left half-way and its server (the next run starts a fresh one): no reply can then come late."""
    with _zygotes_lock:
        for key, known in list(_zygotes.items()):
            if known is zygote:
                del _zygotes[key]
    if pid is None:  # interrupted before the server said which: it says so right after the fork
        with contextlib.suppress(OSError, RuntimeError, KeyError, ValueError):
            pid = zygote.receive(time.monotonic() + 5)["pid"]
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # The pid can be lost: an interrupt between the reply's recv and its return took it with it. The server runs
    # one run at a time, so every process under it is this run's: ended before the server, never left running.
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(zygote.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    zygote.control.close()
    zygote.process.kill()
    zygote.process.wait()


def _own_stdin() -> int:
    """A copy of this process's stdin, which a spawned run inherits (/dev/null where it is closed)."""
    try:
        return os.dup(0)
    except OSError:
        return os.open(os.devnull, os.O_RDONLY)


def _feed(fd: int, data: bytes) -> None:
    """Write ``input`` to the run's stdin and close it; a run that stops reading ends the writing."""
    with contextlib.suppress(BrokenPipeError), open(fd, "wb") as pipe:
        pipe.write(data)


def _collect(out_r: int, err_r: int, deadline: float) -> tuple[bytes, bytes, bool]:
    """Read stdout and stderr to their ends (as ``communicate`` does), or until ``deadline``: (out, err, late)."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        late = False
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                late = True
                break
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), late


def _text(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True)`` decodes them: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")

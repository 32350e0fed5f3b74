"""The fork server behind :mod:`tests.cli_runner`: one per pytest worker, nvtopy imported once, one fork per run.

Why: a test that ran ``python -m nvtopy --demo --once`` paid about 80 ms of CPU to start Python and import
nvtopy before the 6-10 ms the command itself takes; the main pass did it about 500 times. This process pays
the start-up once; each run is a fork of it that becomes ``python -m nvtopy ARGS`` (its own process: its
exit code, environment, working directory, descriptors and signals are its own, as a spawned one's).

Run as a script (``python tests/cli_zygote.py FD MODULE...``), not imported: it imports no test code, so a
run sees nvtopy's modules and the standard library only. Only the variables the interpreter or the dynamic
loader read at start-up (``PYTHON*``, ``LD_*``, locale) cannot be changed after the fact: the runner starts
one server per set of them. Protocol, over the SOCK_SEQPACKET socket FD, one run at a time:
``{"module", "argv", "env", "cwd"}`` with stdin, stdout, stderr as descriptors -> ``{"pid"}`` once forked ->
``{"status"}`` (``os.waitstatus_to_exitcode``) once it has ended. An empty message ends the server.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import socket
import sys
import threading
import time
from typing import Any, TextIO

_MAX_MESSAGE = 1 << 20


def _serve(control: socket.socket) -> dict[str, Any]:
    """Fork a child per request and report it; return the request in the child, never in the server."""
    while True:
        data, fds, _flags, _addr = socket.recv_fds(control, _MAX_MESSAGE, 3)
        if not data:
            os._exit(0)
        request: dict[str, Any] = json.loads(data)
        if threading.active_count() != 1:  # a fork of a threaded process may inherit a held lock
            raise RuntimeError(f"the fork server has threads: {threading.enumerate()}")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            control.close()
            _become(request, fds)
            return request
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        control.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """Make this fresh child what ``python -m nvtopy ARGV`` started in ``cwd`` with ``env`` would be."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
                os.close(int(name))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # the C library read TZ when this server started
    sys.path[0] = os.getcwd()  # -m puts the working directory first, as a spawned run has it
    sys.argv = ["-m", *request["argv"]]
    sys.stdin, sys.stdout, sys.stderr = (_stdio(0, sys.stdin), _stdio(1, sys.stdout), _stdio(2, sys.stderr))
    for name in ("stdin", "stdout", "stderr"):  # what a fresh interpreter started with, as a run's own
        setattr(sys, f"__{name}__", getattr(sys, name))


def _stdio(fd: int, old: TextIO) -> TextIO:
    """A standard stream over ``fd`` as the interpreter's start-up builds it (Python/pylifecycle.c, create_stdio).

    The server's own streams were built for its descriptors (not a tty, /dev/null): line buffering and
    seekability are judged again for the ones this run was given. Encoding, errors and -u (PYTHONUNBUFFERED:
    write-through) are the server's, which started with the same locale and PYTHON* variables.
    """
    raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
    buffered = not getattr(sys.__stdout__, "write_through", False)
    buffer: Any = raw
    if fd == 0:  # stdin is buffered even under -u
        buffer = io.BufferedReader(raw)
    elif buffered:
        buffer = io.BufferedWriter(raw)
    stream = io.TextIOWrapper(
        buffer,
        encoding=old.encoding,
        errors=old.errors,
        newline="\n",
        line_buffering=buffered and (raw.isatty() or fd == 2),
        write_through=not buffered,
    )
    stream.mode = "r" if fd == 0 else "w"  # type: ignore[misc]
    return stream


def main() -> None:
    """Import what every run needs, then serve; in a child, run the module as ``python -m MODULE`` does."""
    control = socket.socket(fileno=int(sys.argv[1]))
    sys.path[0] = os.getcwd()  # not tests/, this script's folder: the checkout's root, as a run from there has it
    for name in sys.argv[2:]:
        importlib.import_module(name)
    import gc

    gc.freeze()
    request = _serve(control)
    import runpy

    runpy._run_module_as_main(request["module"], alter_argv=True)  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()

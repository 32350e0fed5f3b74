"""A real ``nvtopy web`` for tests: a subprocess on a loopback port of its own, its URL read from its first line."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from .builders import NVTOPY
from .waiting import until

START_DEADLINE = 30.0  # seconds for the server to print its URL (a loaded 2-core machine: a few seconds)
_URL = re.compile(r"on (https?://\S+)/\?token=(\S+) ")


@dataclass
class WebServer:
    process: subprocess.Popen[bytes]
    base: str  # http://127.0.0.1:PORT
    token: str
    log: Path  # the server's stdout and stderr

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.token}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def sessions(self) -> list[psutil.Process]:
        """The monitor processes of the sessions: the server's children."""
        try:
            return psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return []


@contextlib.contextmanager
def web_server(*args: str) -> Iterator[WebServer]:
    """``nvtopy web --listen 127.0.0.1:0 ARGS`` until the block ends; then SIGTERM, and a kill past a deadline."""
    with tempfile.TemporaryDirectory(prefix="nvtopy-web-") as folder:
        log = Path(folder) / "server.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*NVTOPY, "web", "--listen", "127.0.0.1:0", *args],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        try:

            def started() -> re.Match[str] | None:
                if process.poll() is not None:
                    raise AssertionError(f"nvtopy web exited {process.returncode}: {log.read_text(errors='replace')}")
                return _URL.search(log.read_text(errors="replace"))

            found = until(started, START_DEADLINE, "nvtopy web prints its URL")
            assert isinstance(found, re.Match)
            yield WebServer(process, found.group(1), found.group(2), log)
        finally:
            children = []
            with contextlib.suppress(psutil.NoSuchProcess):
                children = psutil.Process(process.pid).children(recursive=True)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
            for child in children:  # none should be left; never leave one to the next test
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()

"""Running a program in a pseudo-terminal of a given size, as a user's terminal would.

Shared by the benchmarks: the program's output is drained on a thread (a full
pty would block it), and :meth:`PtyRun.wait_for` reports when given bytes first
appeared -- how "time to first frame" is measured.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import threading
import time

__all__ = ["PtyRun"]


class PtyRun:
    """Run a command in a pseudo-terminal of a given size, draining its output on a thread."""

    def __init__(
        self,
        argv: list[str],
        cols: int = 200,
        rows: int = 50,
        env: dict[str, str] | None = None,
        quit_keys: bytes = b"q",
    ) -> None:
        self.quit_keys = quit_keys
        self.started = time.perf_counter()
        pid, fd = pty.fork()
        if pid == 0:  # child
            os.environ.update(env or {})
            os.environ["TERM"] = "xterm-256color"
            os.execvp(argv[0], argv)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.kill(pid, signal.SIGWINCH)
        self.output = bytearray()
        self.lock = threading.Lock()
        self.marks: dict[bytes, float] = {}
        self.alive = True
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while self.alive:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            with self.lock:
                self.output += chunk
                if len(self.output) > 1 << 20:
                    del self.output[: -(1 << 16)]

    def wait_for(self, needles: list[bytes], timeout: float = 20.0) -> float:
        """Seconds from start until every needle has appeared in the output."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(n in self.output for n in needles):
                    return time.perf_counter() - self.started
            time.sleep(0.002)
        raise TimeoutError(f"never saw {needles}")

    def stop(self) -> None:
        try:
            os.write(self.fd, self.quit_keys)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.02)
            else:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        finally:
            self.alive = False
            os.close(self.fd)

"""The terminal bell: one BEL to the controlling terminal per alert that fires.

Why the controlling terminal (``/dev/tty``) and not stdout: ``nvtopy watch`` may write its log
to a pipe or a file, where a BEL is a stray byte; the terminal the user sits at is the one that
should ring. No terminal (a systemd service) -> the channel is unavailable, said once.
The write is non-blocking: a terminal stopped by ^S cannot hold the worker.
"""

from __future__ import annotations

import os

from ..alerts.events import AlertEvent, Transition
from .channel import ChannelError, ChannelUnavailable

__all__ = ["BellChannel"]

BEL = b"\a"


class BellChannel:
    """Rings the terminal at ``tty_path`` (the controlling terminal by default) when an alert fires.

    ``on_clear``: ring for a cleared alert too (off by default: "it's fine again" needs no bell).
    """

    def __init__(self, tty_path: str = "/dev/tty", *, on_clear: bool = False) -> None:
        self._path = tty_path
        self._on_clear = on_clear

    @property
    def name(self) -> str:
        return "bell"

    @property
    def description(self) -> str:
        return f"terminal bell ({self._path})"

    def __repr__(self) -> str:
        return f"BellChannel({self._path!r})"

    def send(self, event: AlertEvent, deadline: float) -> None:
        if event.transition is Transition.CLEARED and not self._on_clear:
            return
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as exc:
            raise ChannelUnavailable(f"no terminal to ring ({self._path}: {exc.strerror})") from None
        try:
            if not os.isatty(fd):
                raise ChannelUnavailable(f"{self._path} is not a terminal")
            os.write(fd, BEL)
        except BlockingIOError:
            raise ChannelError("the terminal is not accepting output (stopped with ^S?)") from None
        except OSError as exc:
            raise ChannelError(f"writing to {self._path}: {exc.strerror}") from None
        finally:
            os.close(fd)

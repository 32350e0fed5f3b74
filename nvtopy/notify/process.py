"""Running a helper process with a hard deadline: its whole process group killed when time is up.

Why a group: a command channel's script may start children (``curl`` in a shell script); killing
only the script would leave them running, holding the alert's pipe and the user's network.
The process starts in a new session (its own group), its output goes to a temporary file (a
pipe nobody reads could fill and block it; a file cannot), and only the end of it is kept
for an error message.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..textsafe import safe_text
from .channel import ChannelError, remaining

__all__ = ["Finished", "run_with_deadline"]

_TAIL = 160  # bytes of a failed process's output kept for its error message
_REAP = 2.0  # seconds to wait for a killed process to be reaped (SIGKILL cannot be ignored)


@dataclass(frozen=True, slots=True)
class Finished:
    """A process that exited by itself before its deadline."""

    returncode: int
    output_tail: str  # the last bytes of its stdout and stderr, decoded for a message


def run_with_deadline(
    argv: Sequence[str],
    deadline: float,
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    what: str = "the command",
) -> Finished:
    """Run ``argv`` (no shell) until it exits or ``deadline`` (monotonic) passes; then kill its group.

    Raises :class:`ChannelError` when it cannot start, or runs past the deadline (after killing it).
    """
    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise ChannelError(f"{what} could not start: {exc.strerror or exc}") from None
        try:
            proc.communicate(stdin, timeout=remaining(deadline))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ChannelError(f"{what} ran past its deadline and was killed") from None
        except BaseException:
            _kill_group(proc)
            raise
        size = output.seek(0, os.SEEK_END)
        output.seek(max(0, size - _TAIL))
        tail = " ".join(output.read(_TAIL).decode("utf-8", "replace").split())
    return Finished(proc.returncode, ("…" if size > _TAIL else "") + safe_text(tail))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's group (it leads its own session, so the group is its pid), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(_REAP)

"""One host's ssh session as the monitor sees it: its state, why, and the newest thing it said.

A :class:`Session` is written by one thread only -- the I/O thread of
:mod:`.streams`, which owns the ssh process and reads its output -- and read by
the source's thread. What the reader takes is always one whole value (a
:class:`Status`, a :class:`Latest`), replaced, never changed in place, so no lock
is needed and a reader never sees half of an update.

**What a host says is untrusted.** Its bytes are cut into lines of at most
:data:`MAX_LINE` bytes (a longer one is garbage: the host is dropped and asked
again later); before the stream's first line (the hello, or nvidia-smi's
first marker) at most :data:`MAX_PREAMBLE_LINES` lines are kept, each as a short
safe excerpt (ssh's own complaints come this way: "Permission denied
(publickey)."), and the last few of them are the reason a failed host shows.
Nothing a host sends is ever echoed raw.
"""

from __future__ import annotations

import collections
import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....textsafe import excerpt
from .targets import SshTarget

if TYPE_CHECKING:
    import subprocess

__all__ = ["Latest", "Mode", "Session", "State", "Status"]

MAX_LINE = 16 << 20  # a snapshot line of a host with 64 GPUs and thousands of processes is a few MiB
MAX_PREAMBLE_LINES = 200  # lines before the stream begins (a login banner, a motd from a shell rc file)
SAID_KEPT = 4  # of those, the last few, for the reason a failed host shows
SAID_CHARS = 160


class State(enum.Enum):
    """Where a host's session is; the monitor's words for each are :meth:`Status.words`."""

    WAITING = "waiting"  # not started yet (more hosts than may connect at once)
    CONNECTING = "connecting"
    LIVE = "live"
    LOST = "lost"  # ended or dropped; asked again at ``retry_at``


class Mode(enum.Enum):
    """What the far side runs: nvtopy's stream, or nvidia-smi's query loop (fewer columns)."""

    NVTOPY = "nvtopy"
    NVIDIA_SMI = "nvidia-smi"


@dataclass(frozen=True)
class Status:
    """A host's state at one moment (monotonic times)."""

    state: State
    since: float
    reason: str | None = None  # why it is lost (one safe line)
    retry_at: float | None = None  # when a lost host is asked again
    mode: Mode | None = None
    attempts: int = 0  # connections tried since it last was live

    def words(self, now: float, *, retrying: bool = True) -> str:
        """``connecting (3 s)``, ``lost: Permission denied (publickey). Reconnecting in 8 s``.

        ``retrying``: say when the host is asked again (False: a one-shot read, which asks no host again).
        """
        if self.state is State.WAITING:
            return "waiting to connect"
        if self.state is State.CONNECTING:
            waited = now - self.since
            return "connecting" + (f" ({waited:.0f} s)" if waited >= 1 else "")
        if self.state is State.LIVE:
            return "live"
        retry = (
            "" if self.retry_at is None or not retrying else f"; reconnecting in {max(0.0, self.retry_at - now):.0f} s"
        )
        return f"lost: {self.reason or 'the session ended'}{retry}"


@dataclass(frozen=True)
class Latest:
    """The newest whole thing the host sent: a snapshot line (bytes) or nvidia-smi's last cycle, when it came."""

    sequence: int  # counts up with every new value of this session's host
    received: float  # time.monotonic()
    payload: Any  # a whole snapshot object (the stream's, patches applied) or an nvidia_smi_csv.SmiCycle
    mode: Mode
    patch: Any = None  # the stream's patch that made payload of the value before it (sequence - 1); None: whole


class Session:
    """One host: its target, the ssh process while there is one, its status and its newest value."""

    def __init__(self, target: SshTarget, position: int) -> None:
        self.target = target
        self.position = position  # in the host list: the order hosts are shown in
        self.status = Status(State.WAITING, time.monotonic())
        self.latest: Latest | None = None
        self.hostname: str | None = None  # what the far side calls itself (its hello)
        self.far_version: str | None = None
        # The I/O thread's own (never read elsewhere):
        self.process: subprocess.Popen[bytes] | None = None
        self.buffer = bytearray()
        self.pending: list[tuple[bytes, float]] = []  # stream lines read, not yet parsed, and when each was read
        self.pending_bytes = 0
        self.said: collections.deque[str] = collections.deque(maxlen=SAID_KEPT)
        self.preamble_lines = 0
        self.smi_reader: Any = None  # nvidia_smi_csv.SmiCycleReader, in nvidia-smi's mode
        self.stream: Any = None  # formats.stream.StreamReader, in nvtopy's mode (patches applied in order)
        self.mode: Mode | None = None
        self.window_start = 0.0
        self.window_bytes = 0
        self.window_lines = 0
        self.live_since: float | None = None
        self.last_data: float = 0.0
        self.failure: str | None = None  # set by the source's thread: the stream said something wrong; drop it
        self._sequence = 0

    @property
    def label(self) -> str:
        return self.hostname or self.target.label

    def set_status(self, state: State, **fields: Any) -> None:
        current = self.status
        if state is current.state and not fields:
            return
        merged = {"mode": self.mode, "attempts": current.attempts, **fields}
        self.status = Status(state, time.monotonic(), **merged)

    def publish(self, payload: Any, now: float, patch: Any = None) -> None:
        self._sequence += 1
        assert self.mode is not None
        self.latest = Latest(self._sequence, now, payload, self.mode, patch)

    def remember(self, raw: bytes) -> None:
        """A line that is not the stream's (ssh's complaint, a banner): kept as a short safe excerpt."""
        head = raw[: 4 * SAID_CHARS]
        text = head.decode("utf-8", errors="replace").strip()
        unprintable = sum(1 for char in text if char == "\ufffd" or (not char.isprintable() and char != "\t"))
        if unprintable > len(text) // 10:  # binary: quoting it would show nothing anyone can read
            self.said.append(f"{len(raw)} bytes of binary data")
        elif text:
            self.said.append(excerpt(text, SAID_CHARS))

    def said_reason(self) -> str | None:
        """What the host (or ssh) said last, the likeliest reason it failed; None when it said nothing."""
        return self.said[-1] if self.said else None

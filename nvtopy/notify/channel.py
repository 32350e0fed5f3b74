"""What a channel is, to the dispatcher: a name, a description safe to show, and a blocking ``send``.

Why a protocol this small: the dispatcher owns everything that makes sending safe for the caller
(a worker thread per channel, the bounded queue, the deadline, reporting a failure once), so a
channel is only "deliver this event, or raise, before this moment". A channel says *how* it
failed by the exception it raises: :class:`ChannelError` for one send that did not get through
(the next may), :class:`ChannelUnavailable` for a channel that cannot work here at all (no
session bus, no terminal): the dispatcher says so once and stops sending to it.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from ..alerts.events import AlertEvent, Transition
from ..textsafe import escape_text

__all__ = [
    "Channel",
    "ChannelError",
    "ChannelUnavailable",
    "event_body",
    "remaining",
    "wire_text",
]


class ChannelError(Exception):
    """One send did not get through (refused, rejected, timed out, exited non-zero).

    ``str(error)`` is one line for a person, with no secret in it: the channel builds it from
    redacted parts only.
    """


class ChannelUnavailable(ChannelError):  # noqa: N818 - a kind of ChannelError, read as a state
    """The channel cannot work on this machine or in this session (no session bus, no terminal)."""


@runtime_checkable
class Channel(Protocol):
    """Where alerts go: the terminal bell, the desktop, a command, an apprise URL."""

    @property
    def name(self) -> str:
        """Short and unique among the configured channels, secret-free: what problem reports start with."""
        ...

    @property
    def description(self) -> str:
        """A longer line for display (``--print-config``, an alerts screen), secrets redacted."""
        ...

    def send(self, event: AlertEvent, deadline: float) -> None:
        """Deliver ``event``, returning by ``deadline`` (a :func:`time.monotonic` value) or raising.

        Raises :class:`ChannelError` (or :class:`ChannelUnavailable`) when it did not get through.
        Called from the channel's own worker thread, never from the caller's.
        """
        ...


def remaining(deadline: float, floor: float = 0.05) -> float:
    """Seconds left until ``deadline``, at least ``floor`` (a call given 0 s would not even start)."""
    return max(floor, deadline - time.monotonic())


def wire_text(text: str | None) -> str:
    """Text from outside (command lines, host names) made safe to send: valid UTF-8, no control characters."""
    return escape_text(text) or ""


def event_body(event: AlertEvent) -> str:
    """The plain-text body every notification shares: what happened, what it means, what to do, where and when.

    The headline (:attr:`AlertEvent.headline`) is the title and is not repeated here.
    """
    lines = [wire_text(event.summary)]
    if event.transition is Transition.FIRING and event.description:
        lines.append(wire_text(event.description))
    if event.transition is Transition.FIRING and event.action:
        lines.append("What to do: " + wire_text(event.action))
    where = [wire_text(event.host)] if event.host else []
    if event.gpu_index is not None:
        where.append(f"GPU {event.gpu_index}")
    where.append(event.to_json()["time"])
    lines.append(" · ".join(where))
    return "\n".join(lines)

"""Where alerts go: the channels that carry an :class:`~nvtopy.alerts.events.AlertEvent` to people.

The terminal bell, the desktop (freedesktop notifications), a command, and apprise's URLs
(Slack, ntfy, Telegram, e-mail, generic JSON webhooks, ...). A channel that is slow, down or
rejecting never delays the caller or the other channels: each send has a deadline, the queue is
bounded, and a channel's failure is reported once, not once per alert. Secrets in URLs never
appear in what is shown.
"""

from .channel import Channel, ChannelError, ChannelUnavailable
from .dispatcher import ChannelStats, Dispatcher, Overflow, ProblemCallback
from .entries import open_dispatcher, parse_channels, redacted_entry

__all__ = [
    "Channel",
    "ChannelError",
    "ChannelStats",
    "ChannelUnavailable",
    "Dispatcher",
    "Overflow",
    "ProblemCallback",
    "open_dispatcher",
    "parse_channels",
    "redacted_entry",
]

"""Where alerts go: the channels that carry an :class:`~nvtopy.alerts.events.AlertEvent` to people.

The terminal bell, the desktop (freedesktop notifications), a command, and apprise's URLs
(Slack, ntfy, Telegram, e-mail, generic JSON webhooks, ...). A channel that is slow, down or
rejecting never delays the caller or the other channels: each send has a deadline, the queue is
bounded, and a channel's failure is reported once, not once per alert. Secrets in URLs never
appear in what is shown.

How a caller uses it (``nvtopy watch``, the TUI)::

    from nvtopy.notify import open_dispatcher

    dispatcher = open_dispatcher(config_entries, on_problem)  # UsageError for a bad entry, before any thread
    dispatcher.send(event)  # an AlertEvent; returns at once, whatever the channels do
    ...
    dispatcher.close(timeout=3.0)  # lets the queues drain until then; never waits longer

``on_problem(channel_name, text)`` is called from the dispatcher's own thread, once per episode
(a channel failing, working again, dropping alerts, unavailable): a TUI hands it to its event loop
(Textual's ``call_from_thread``), a command prints it. :func:`redacted_entry` is what
``--print-config`` shows of an entry. The syntax of an entry: :mod:`nvtopy.notify.entries`.
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

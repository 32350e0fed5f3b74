"""The ``[alerts] channels`` list: one string per channel, turned into :class:`Channel` objects.

The syntax (README, "Alert channels"):

- ``"bell"``: the terminal bell, when an alert fires;
- ``"desktop"``: a desktop notification (freedesktop, on the session bus);
- ``"command:PROGRAM ARG..."``: run a program per event (split like a shell would, but no shell
  runs it), the event in ``NVTOPY_ALERT_*`` variables and as JSON on stdin;
- anything with ``://``: an apprise URL (``ntfy://topic``, ``slack://...``, ``tgram://...``,
  ``mailto://...``, and ``json://host:port/path`` / ``jsons://...`` for a generic JSON webhook).

Why strings: one TOML list covers every kind, and an apprise URL is already the one string
people copy from apprise's documentation. A bad entry is a :class:`~nvtopy.errors.UsageError`
naming its place (``[alerts] channels entry 3``) and never its secret.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..errors import UsageError
from ..textsafe import quoted
from .bell import BellChannel
from .channel import Channel
from .command import CommandChannel
from .desktop import DesktopChannel
from .dispatcher import DEFAULT_CAPACITY, DEFAULT_SEND_TIMEOUT, Dispatcher, Overflow, ProblemCallback
from .redact import scheme_only
from .urls import looks_like_url

__all__ = ["CHANNEL_SYNTAX", "SETTING", "open_dispatcher", "parse_channels", "redacted_entry"]

SETTING = "[alerts] channels"
CHANNEL_SYNTAX = (
    "'bell', 'desktop', 'command:PROGRAM ARG...', or an apprise URL such as 'ntfy://topic' or 'json://host/path'"
)
_COMMAND = "command:"


def parse_channels(entries: Sequence[str], *, setting: str = SETTING) -> list[Channel]:
    """One channel per entry, in order; :class:`UsageError` (one line, no secret) for the first bad one.

    Apprise URLs are checked here, so a mistyped one stops ``nvtopy watch`` at its start rather than at
    the first alert. Two identical entries are one channel; two channels that would show the same name
    (URLs that differ only in their query, which is not shown) get their places in their names.
    """
    channels: list[Channel] = []
    names: set[str] = set()
    seen: set[str] = set()
    commands = sum(1 for entry in entries if isinstance(entry, str) and entry.strip().startswith(_COMMAND))
    for position, entry in enumerate(entries, start=1):
        where = f"{setting} entry {position}"
        if not isinstance(entry, str):
            raise UsageError(f"{where}: expected a string ({CHANNEL_SYNTAX}), not {type(entry).__name__}")
        text = entry.strip()
        if text in seen:
            continue
        seen.add(text)
        numbered = commands > 1 and text.startswith(_COMMAND)  # two commands may share a program's name
        channel = _parse_one(text, where, index=position if numbered else None)
        if channel.name in names:  # two URLs differing in their query only (not shown): named by place
            channel = _parse_one(text, where, index=position)
        names.add(channel.name)
        channels.append(channel)
    return channels


def _parse_one(text: str, where: str, index: int | None) -> Channel:
    if text == "bell":
        return BellChannel()
    if text == "desktop":
        return DesktopChannel()
    if text.startswith(_COMMAND):
        try:
            argv = shlex.split(text[len(_COMMAND) :])
        except ValueError as exc:  # an unclosed quote: the text itself may hold a token, so it is not quoted
            raise UsageError(f"{where}: the command's words cannot be split ({exc})") from None
        if not argv:
            raise UsageError(f"{where}: 'command:' needs a program to run, as in 'command:/path/to/script arg'")
        return CommandChannel(argv, index=index)
    if looks_like_url(text):
        from .urls import AppriseChannel  # apprise is imported only when a URL is configured

        try:
            return AppriseChannel(text, index=index)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
    shown = quoted(text, 40) if len(text) <= 40 and ":" not in text and "@" not in text else "this entry"
    raise UsageError(f"{where}: unknown channel {shown}; expected {CHANNEL_SYNTAX}")


def redacted_entry(entry: str) -> str:
    """An entry as it may be shown (``--print-config``): an apprise URL in its privacy form, a command's program.

    Never raises: an entry that does not parse is shown by its kind only.
    """
    text = entry.strip() if isinstance(entry, str) else ""
    if text in ("bell", "desktop"):
        return text
    if text.startswith(_COMMAND):
        try:
            argv = shlex.split(text[len(_COMMAND) :])
        except ValueError:
            return "command:…"
        return f"command:{argv[0]}{' …' if len(argv) > 1 else ''}" if argv else "command:"
    if looks_like_url(text):
        from .urls import AppriseChannel

        try:
            return AppriseChannel(text).name
        except ValueError:
            return scheme_only(text).strip("'")
    return "…"


def open_dispatcher(
    entries: Sequence[str],
    on_problem: ProblemCallback | None = None,
    *,
    capacity: int = DEFAULT_CAPACITY,
    overflow: Overflow | str = Overflow.DROP_OLDEST,
    send_timeout: float = DEFAULT_SEND_TIMEOUT,
    setting: str = SETTING,
    extra: Sequence[Channel] = (),
) -> Dispatcher:
    """A started :class:`Dispatcher` for the configured ``entries`` (plus ``extra`` channels, such as a TUI's own).

    Raises :class:`UsageError` for a bad entry, before any thread starts.
    """
    channels = parse_channels(entries, setting=setting)
    return Dispatcher([*channels, *extra], on_problem, capacity=capacity, overflow=overflow, send_timeout=send_timeout)

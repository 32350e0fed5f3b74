"""Alerts to a command of the user's: one run per event, the event in its environment and on stdin.

Why both: a shell one-liner wants ``$NVTOPY_ALERT_SUMMARY``; a real program wants the whole event
as JSON (:meth:`AlertEvent.to_json`, on stdin, one line). The command is an argv, never a shell
line: the event's words come from outside (process command lines, user names) and must not be
able to run anything. A run that exits non-zero is a failure (reported once, with the end of
its output); one that runs past the deadline is killed with its whole process group.

Environment variables (a missing value is an empty string): ``NVTOPY_ALERT_RULE`` (gpu-free,
gpu-xid, ...), ``_NAME`` (the CamelCase alert name), ``_TITLE``, ``_HEADLINE``, ``_SEVERITY``
(warning/critical), ``_TRANSITION`` (firing/cleared), ``_KEY``, ``_TIME`` (ISO 8601), ``_EPOCH``,
``_HOST``, ``_GPU`` (index), ``_UUID``, ``_PID``, ``_USER``, ``_XID``, ``_VALUE``, ``_SUMMARY``,
``_DESCRIPTION``, ``_ACTION``; each prefixed ``NVTOPY_ALERT`` (``NVTOPY_ALERT_SUMMARY``). A value
longer than :data:`ENV_VALUE_LIMIT` characters is cut (Linux refuses to start a program with an
environment string over 128 kB); stdin always has it whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from ..alerts.events import AlertEvent
from ..textsafe import escape_text
from .channel import ChannelError
from .process import run_with_deadline

__all__ = ["ENV_PREFIX", "ENV_VALUE_LIMIT", "CommandChannel", "event_environment"]

ENV_PREFIX = "NVTOPY_ALERT"
ENV_VALUE_LIMIT = 16_384
"""Characters of one variable's value: far past any real summary, far below the kernel's 128 kB per string."""


def event_environment(event: AlertEvent) -> dict[str, str]:
    """The event as ``NVTOPY_ALERT_*`` variables (NUL, which no environment can hold, removed)."""
    fields = event.to_json()
    values: dict[str, object] = {
        "RULE": event.rule_id,
        "NAME": event.alert,
        "TITLE": event.title,
        "HEADLINE": event.headline,
        "SEVERITY": event.severity.value,
        "TRANSITION": event.transition.value,
        "KEY": event.key,
        "TIME": fields["time"],
        "EPOCH": f"{event.at:.3f}",
        "HOST": event.host,
        "GPU": event.gpu_index,
        "UUID": event.gpu_uuid,
        "PID": event.pid,
        "USER": event.user,
        "XID": event.xid,
        "VALUE": event.value,
        "SUMMARY": event.summary,
        "DESCRIPTION": event.description,
        "ACTION": event.action,
    }
    return {f"{ENV_PREFIX}_{key}": _env_value(value) for key, value in values.items()}


def _env_value(value: object) -> str:
    text = "" if value is None else str(value).replace("\0", "")
    try:
        os.fsencode(text)  # undecodable bytes from the OS (surrogateescape) go back out as those bytes
    except UnicodeEncodeError:  # a lone surrogate from elsewhere (a JSON "\\ud800") cannot: written visibly
        text = escape_text(text) or ""
    return text if len(text) <= ENV_VALUE_LIMIT else text[: ENV_VALUE_LIMIT - 1] + "…"


class CommandChannel:
    """Runs ``argv`` once per event. ``index`` (its place in the config) keeps two commands' names apart."""

    def __init__(self, argv: Sequence[str], *, index: int | None = None) -> None:
        if not argv or not argv[0]:
            raise ValueError("a command channel needs a program to run")
        self._argv = list(argv)
        self._index = index

    @property
    def argv(self) -> list[str]:
        return list(self._argv)

    @property
    def name(self) -> str:
        # The program only: an argument may be a token (curl -H "Authorization: ...").
        suffix = f"#{self._index}" if self._index is not None else ""
        return f"command{suffix}:{os.path.basename(self._argv[0])}"

    @property
    def description(self) -> str:
        extra = len(self._argv) - 1
        arguments = f" with {extra} argument{'s' * (extra != 1)} (not shown)" if extra else ""
        return f"command {self._argv[0]}{arguments}"

    def __repr__(self) -> str:
        return f"CommandChannel({self.name!r})"

    def send(self, event: AlertEvent, deadline: float) -> None:
        what = os.path.basename(self._argv[0])
        stdin = (json.dumps(event.to_json(), ensure_ascii=True) + "\n").encode("ascii")
        env = {**os.environ, **event_environment(event)}
        finished = run_with_deadline(self._argv, deadline, stdin=stdin, env=env, what=what)
        if finished.returncode != 0:
            status = (
                f"was killed by signal {-finished.returncode}"
                if finished.returncode < 0
                else f"exited {finished.returncode}"
            )
            tail = f": {finished.output_tail}" if finished.output_tail else ""
            raise ChannelError(f"{what} {status}{tail}")

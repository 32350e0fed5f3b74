"""Desktop notifications: freedesktop's ``org.freedesktop.Notifications.Notify`` on the session bus.

Why a helper program (``gdbus``, else ``notify-send``) and not a D-Bus library: neither needs a
dependency (``gdbus`` ships with GLib, on every desktop), and a subprocess can be killed at its
deadline when a notification daemon hangs. No session bus (a server, a systemd system service)
-> the channel is unavailable, said once. Urgency follows severity: critical alerts are
``critical`` (they stay until dismissed on most desktops), warnings ``normal``, cleared ``low``.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping

from ..alerts.catalog import AlertSeverity
from ..alerts.events import AlertEvent, Transition
from .channel import ChannelError, ChannelUnavailable, event_body, remaining, wire_text
from .process import run_with_deadline

__all__ = ["DesktopChannel", "gvariant_string", "urgency"]

APP_NAME = "nvtopy"
BUS_NAME = "org.freedesktop.Notifications"
OBJECT_PATH = "/org/freedesktop/Notifications"
URGENCY_LOW, URGENCY_NORMAL, URGENCY_CRITICAL = 0, 1, 2
_URGENCY_WORDS = {URGENCY_LOW: "low", URGENCY_NORMAL: "normal", URGENCY_CRITICAL: "critical"}


def urgency(event: AlertEvent) -> int:
    """The freedesktop urgency byte for ``event``."""
    if event.transition is Transition.CLEARED:
        return URGENCY_LOW
    return URGENCY_CRITICAL if event.severity is AlertSeverity.CRITICAL else URGENCY_NORMAL


def gvariant_string(text: str) -> str:
    """``text`` as a GVariant text-format string literal, which ``gdbus call`` parses each argument as.

    Quoted and escaped, so a summary that reads like a number or holds a quote stays a string.
    """
    out = ["'"]
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
    out.append("'")
    return "".join(out)


class DesktopChannel:
    """A freedesktop notification per event, through ``gdbus`` (or ``notify-send``).

    ``environ`` (default: this process's) says where the session bus is and where the helpers are.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = dict(os.environ if environ is None else environ)
        path = self._environ.get("PATH", os.defpath)
        self._gdbus = shutil.which("gdbus", path=path)
        self._notify_send = None if self._gdbus else shutil.which("notify-send", path=path)

    @property
    def name(self) -> str:
        return "desktop"

    @property
    def description(self) -> str:
        helper = self._gdbus or self._notify_send or "no gdbus or notify-send found"
        return f"desktop notifications ({helper})"

    def __repr__(self) -> str:
        return "DesktopChannel()"

    def unavailable_reason(self) -> str | None:
        """Why no notification can be shown in this session, or None when one can be tried."""
        if not self._session_bus():
            return "no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
        if not (self._gdbus or self._notify_send):
            return "neither gdbus nor notify-send is installed"
        return None

    def _session_bus(self) -> bool:
        if self._environ.get("DBUS_SESSION_BUS_ADDRESS"):
            return True
        runtime = self._environ.get("XDG_RUNTIME_DIR")  # systemd's user bus, found there without the variable
        return bool(runtime) and os.path.exists(os.path.join(runtime or "", "bus"))

    def send(self, event: AlertEvent, deadline: float) -> None:
        reason = self.unavailable_reason()
        if reason is not None:
            raise ChannelUnavailable(reason)
        title, body, level = wire_text(event.headline), event_body(event), urgency(event)
        seconds = max(1, math.floor(remaining(deadline)))
        if self._gdbus:
            argv = [
                self._gdbus,
                "call",
                "--session",
                "--timeout",
                str(seconds),
                "--dest",
                BUS_NAME,
                "--object-path",
                OBJECT_PATH,
                "--method",
                f"{BUS_NAME}.Notify",
                gvariant_string(APP_NAME),  # app_name
                "uint32 0",  # replaces_id: a new notification
                gvariant_string(""),  # app_icon
                gvariant_string(title),
                gvariant_string(body),
                "@as []",  # actions
                f"{{'urgency': <byte {level}>, 'category': <'device'>}}",
                "int32 -1",  # expire_timeout: the server's default
            ]
            what = "gdbus"
        else:
            assert self._notify_send is not None
            argv = [self._notify_send, f"--urgency={_URGENCY_WORDS[level]}", f"--app-name={APP_NAME}", title, body]
            what = "notify-send"
        finished = run_with_deadline(argv, deadline, env=self._environ, what=what)
        if finished.returncode != 0:
            raise ChannelError(f"{what} exited {finished.returncode}: {finished.output_tail or 'no message'}")

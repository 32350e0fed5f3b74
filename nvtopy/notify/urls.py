"""Alerts through apprise: Slack, ntfy, Telegram, e-mail, generic JSON webhooks and dozens more, by URL.

Why apprise rather than our own senders: each service's API, authentication and quirks are
apprise's to keep up to date; nvtopy only chooses the words. A generic webhook is apprise's
``json://host:port/path`` (``jsons://`` for HTTPS), which POSTs ``{"version": "1.0", "title":
..., "message": ..., "type": ...}``; see the README's "Alert channels".

Deadlines: apprise's ``notify(timeout=...)`` returns when the call's time is up, and the service's
own socket timeouts (``cto``/``rto`` in the URL, 4 s each by default) are lowered to what is left
of the send's deadline (plus :data:`SOCKET_SLACK`, so the call's timeout speaks first and a hang
reads "no answer within"), so the thread apprise sends on does not linger past it either.

Apprise's own log lines may quote a URL as the user wrote it (an unparseable one in full), so its
logger is kept to itself (a ``NullHandler``, not propagated): nvtopy says what went wrong through
the dispatcher's ``on_problem``, scrubbed.

Only this module imports apprise, and only when a URL channel is configured: importing it costs
about 0.2 s, which no user without one should pay.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..alerts.catalog import AlertSeverity
from ..alerts.events import AlertEvent, Transition
from .channel import ChannelError, event_body, remaining, wire_text
from .redact import scheme_only, scrub, secret_parts, without_query

if TYPE_CHECKING:
    import apprise

__all__ = ["AppriseChannel", "looks_like_url"]

_MESSAGE_LIMIT = 200  # characters of apprise's reason kept in a problem report
SOCKET_SLACK = 0.5
"""Seconds the socket timeouts exceed the call's: a hang ends the call, not the socket, first."""


def _quiet_apprise_log() -> None:
    log = logging.getLogger("apprise")
    if not any(isinstance(handler, logging.NullHandler) for handler in log.handlers):
        log.addHandler(logging.NullHandler())  # and so Python's last-resort handler never prints it to stderr
    log.propagate = False


def looks_like_url(entry: str) -> bool:
    """Whether a channel entry is meant as an apprise URL (``scheme://...``)."""
    return "://" in entry


class AppriseChannel:
    """One apprise URL. Raises ``ValueError`` (one line, no secret) for a URL apprise cannot use.

    ``index`` (its place in the config) tells apart two URLs that show the same (they differ in the query).
    """

    def __init__(self, url: str, *, index: int | None = None) -> None:
        _quiet_apprise_log()  # before the import: apprise logs while it loads, too
        import apprise

        self._apprise_module = apprise
        scheme = url.split("://", 1)[0].strip().lower()
        asset = apprise.AppriseAsset(app_id="nvtopy", app_desc="nvtopy GPU alerts", secure_logging=True)
        plugin = apprise.Apprise.instantiate(url.strip(), asset=asset)
        if plugin is None:
            if scheme not in apprise.manager_plugins.NotificationManager():  # type: ignore[no-untyped-call]
                raise ValueError(f"{scheme_only(url)}: apprise knows no service {scheme!r}")
            raise ValueError(
                f"{scheme_only(url)}: not a {scheme}:// URL apprise accepts "
                "(its form: https://github.com/caronc/apprise/wiki)"
            )
        self._plugin: Any = plugin
        shown = str(plugin.url(privacy=True))  # type: ignore[no-untyped-call]  # apprise's, untyped
        self._secrets = secret_parts(url, shown)
        self._name = scrub(without_query(shown), self._secrets) + (f" #{index}" if index is not None else "")
        self._service = str(getattr(plugin, "service_name", scheme))
        self._connect_timeout = float(plugin.socket_connect_timeout)
        self._read_timeout = float(plugin.socket_read_timeout)
        self._apprise: apprise.Apprise = apprise.Apprise(asset=asset)
        self._apprise.add(plugin)

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return f"{self._service} via apprise: {self._name}"

    def __repr__(self) -> str:
        return f"AppriseChannel({self._name!r})"

    def scrub(self, text: str) -> str:
        """``text`` with this URL's secrets masked (for any text that might quote the URL)."""
        return scrub(text, self._secrets)

    def send(self, event: AlertEvent, deadline: float) -> None:
        left = remaining(deadline)
        # The socket timeouts bound apprise's own sending thread; the call's timeout bounds this one.
        self._plugin.socket_connect_timeout = min(self._connect_timeout, left + SOCKET_SLACK)
        self._plugin.socket_read_timeout = min(self._read_timeout, left + SOCKET_SLACK)
        common = self._apprise_module.common
        try:
            result = self._apprise.notify(
                body=event_body(event),
                title=wire_text(event.headline),
                notify_type=_notify_type(event, common.NotifyType),
                body_format=common.NotifyFormat.TEXT,
                timeout=left,
            )
        except Exception as exc:  # noqa: BLE001 - apprise reports failures in its result; this is a surprise
            raise ChannelError(self.scrub(f"apprise raised {type(exc).__name__}: {exc}")[:_MESSAGE_LIMIT]) from None
        if result:
            return
        reasons = [str(entry.message) for entry in result.logs() if str(entry.message).strip()]
        if getattr(result, "timeout_count", 0):
            reason = f"no answer within {left:.1f} s"
        else:
            reason = reasons[-1] if reasons else f"apprise status {result.status}"
        raise ChannelError(self.scrub(" ".join(reason.split()))[:_MESSAGE_LIMIT])


def _notify_type(event: AlertEvent, types: Any) -> Any:
    """apprise's message type (its colour or icon): cleared is success, critical is failure."""
    if event.transition is Transition.CLEARED:
        return types.SUCCESS
    return types.FAILURE if event.severity is AlertSeverity.CRITICAL else types.WARNING

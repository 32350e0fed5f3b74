"""The monitor's alerts: the local engine on every snapshot the app takes, what it said, and the toasts.

Why in the monitor and not only in ``nvtopy watch``: someone at the monitor wants to learn
that a GPU went free or an Xid came without reading every panel. The rules, their
hysteresis and their words are :mod:`nvtopy.alerts`' (the same engine as ``nvtopy watch``,
so both say the same thing at the same time); this module keeps what the monitor needs
around it, with no Textual in it (the app draws, :mod:`.alerts_screen` lists):

- :class:`AlertFeed`: the engine, fed on the UI thread from the snapshots the app applies
  (the engine is pure and takes well under a millisecond for a few GPUs; the app never waits
  on the source for it). Only while the UI lags does it skip one (a newer snapshot replaces a waiting
  one): hysteresis runs on the snapshots' own times and ``process-ended`` compares with the last
  list it saw, so nothing is missed but a condition that came and went between two drawn
  snapshots. A snapshot older than the last one -- a replay stepped back --
  starts a new engine: the recording is watched again from there. The transitions go into a
  bounded history (:data:`HISTORY`, newest first) and, for a live source only, to ``notify``
  -- the seam where :mod:`nvtopy.notify`'s channels plug in. A recording's alerts happened
  long ago: they are listed and toasted, never sent out. A ``notify`` that raises is said
  once (:attr:`AlertFeed.notify_failure`) and never stops the monitor.
- :class:`ToastLimiter`: a burst (eight GPUs going free at once, an Xid storm) becomes one
  summarising toast, not forty: at most :data:`TOASTS_PER_WINDOW` toasts in
  :data:`TOAST_WINDOW_S`; what comes past that waits and is summed up in one toast as soon
  as the window allows, and the transitions of one snapshot are one toast when there are
  more than one.

Fleets (``--remote``, ``--prometheus``, ``--ssh``): the engine keys its alerts by host, so
the same rules run over a fleet's snapshots. A fleet's own alerting belongs to its
Prometheus (``nvtopy rules``); evaluating here is harmless and shows the viewer what the
rules say about the hosts on screen. The CLI gives a fleet's monitor no ``notify``
(:mod:`nvtopy.commands.monitor` says why).

The events keep outside text (command lines, user and host names) as it was; every word of
a toast is made safe here (:func:`~nvtopy.textsafe.safe_text`) and shown without markup.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..alerts.catalog import AlertSeverity
from ..alerts.engine import AlertEngine
from ..alerts.events import AlertEvent, Transition
from ..alerts.settings import AlertSettings
from ..model import Snapshot
from ..textsafe import safe_text

__all__ = [
    "HISTORY",
    "TOASTS_PER_WINDOW",
    "TOAST_WINDOW_S",
    "AlertFeed",
    "Notify",
    "Toast",
    "ToastLimiter",
    "event_toast",
    "subject",
    "summary_toast",
]

Notify = Callable[[AlertEvent], None]
"""Given every transition of a live source (the notify layer's dispatcher; it must not block)."""
ToastSeverity = Literal["information", "warning", "error"]

HISTORY = 500
"""Transitions the alerts screen keeps (newest first); older ones go."""
TOAST_WINDOW_S = 10.0
TOASTS_PER_WINDOW = 3
"""At most this many alert toasts in :data:`TOAST_WINDOW_S` seconds; more are summed up in one."""
TOAST_TIMEOUT = 8.0
"""Seconds an alert toast stays (a critical one: twice as long)."""
SUMMARY_TITLES = 4
"""Rule titles a summarising toast names before "and N more"."""


@dataclass(frozen=True, slots=True)
class Toast:
    """One notification for :meth:`textual.app.App.notify`: words already made safe, no markup."""

    title: str
    message: str
    severity: ToastSeverity
    timeout: float = TOAST_TIMEOUT


def toast_severity(event: AlertEvent) -> ToastSeverity:
    """A FIRING critical alert: error; a FIRING warning: warning; a CLEARED one: information."""
    if event.transition is not Transition.FIRING:
        return "information"
    return "error" if event.severity is AlertSeverity.CRITICAL else "warning"


_RANK: dict[ToastSeverity, int] = {"information": 0, "warning": 1, "error": 2}


def subject(event: AlertEvent) -> str:
    """What an alert is about, in a few words: ``node1 GPU 2 Xid 79``, ``node1 GPU 0 pid 4242 (alice)``."""
    words = [event.host] if event.host else []
    if event.gpu_index is not None:
        words.append(f"GPU {event.gpu_index}")
    if event.pid is not None:
        words.append(f"pid {event.pid}" + (f" ({event.user})" if event.user else ""))
    if event.xid is not None:
        words.append(f"Xid {event.xid}")
    return safe_text(" ".join(words))


def event_toast(event: AlertEvent) -> Toast:
    """One transition's toast: its headline, its summary and (firing) what to do."""
    lines = [safe_text(event.summary)]  # each line made safe on its own: safe_text shows a newline as \n
    if event.transition is Transition.FIRING and event.action:
        lines.append(safe_text(event.action))
    lines.append("(a: alerts)")
    severity = toast_severity(event)
    timeout = TOAST_TIMEOUT * (2 if severity == "error" else 1)
    return Toast(safe_text(event.headline), "\n".join(lines), severity, timeout)


def summary_toast(events: Sequence[AlertEvent]) -> Toast:
    """Many transitions as one toast: how many fired and cleared, of which rules, at the worst one's severity.

    ``5 alerts: 4 fired, 1 cleared`` / ``GPU free x4 · Xid x1`` / ``a: the alerts screen``.
    """
    fired = sum(1 for e in events if e.transition is Transition.FIRING)
    cleared = len(events) - fired
    counts: dict[str, int] = {}
    for event in events:
        counts[event.title] = counts.get(event.title, 0) + 1
    named = [f"{title} x{n}" if n > 1 else title for title, n in counts.items()]
    if len(named) > SUMMARY_TITLES:
        named = [*named[:SUMMARY_TITLES], f"and {len(named) - SUMMARY_TITLES} more"]
    how = ", ".join(words for n, words in ((fired, f"{fired} fired"), (cleared, f"{cleared} cleared")) if n)
    severity: ToastSeverity = "information"
    for event in events:
        if _RANK[toast_severity(event)] > _RANK[severity]:
            severity = toast_severity(event)
    title = f"{len(events)} alerts: {how}"
    timeout = TOAST_TIMEOUT * (2 if severity == "error" else 1)
    return Toast(safe_text(title), safe_text(" · ".join(named)) + "\n(a: the alerts screen)", severity, timeout)


class ToastLimiter:
    """Turns transitions into toasts, at most ``most`` toasts in ``window`` seconds (see the module docstring).

    Pure but for ``clock``: :meth:`add` returns the toasts to show now; events past the limit are
    held, and :meth:`due` says in how many seconds :meth:`flush` can show them (as one toast).
    """

    def __init__(
        self,
        *,
        window: float = TOAST_WINDOW_S,
        most: int = TOASTS_PER_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._most = max(1, most)
        self._clock = clock
        self._shown: deque[float] = deque()  # when the toasts of the last window were shown
        self._held: list[AlertEvent] = []

    @property
    def held(self) -> int:
        """Transitions waiting for the window to allow a toast."""
        return len(self._held)

    def add(self, events: Iterable[AlertEvent]) -> list[Toast]:
        """The toasts for ``events`` (one snapshot's transitions): one per event if alone, else one for all."""
        self._held.extend(events)
        return self.flush()

    def due(self) -> float | None:
        """Seconds until held transitions can be shown; None when nothing is held."""
        if not self._held:
            return None
        self._expire()
        if len(self._shown) < self._most:
            return 0.0
        return max(0.0, self._shown[0] + self._window - self._clock())

    def flush(self) -> list[Toast]:
        """Whatever is held, as one toast, if the window allows one now (else nothing: :meth:`due` says when)."""
        if not self._held:
            return []
        self._expire()
        if len(self._shown) >= self._most:
            return []
        held, self._held = self._held, []
        self._shown.append(self._clock())
        return [event_toast(held[0]) if len(held) == 1 else summary_toast(held)]

    def _expire(self) -> None:
        now = self._clock()
        while self._shown and now - self._shown[0] >= self._window:
            self._shown.popleft()


class AlertFeed:
    """The engine over the app's snapshots, the history of what it said, and the toasts (module docstring).

    ``live``: whether the snapshots are happening now (False for a replay: ``notify`` is never called).
    Not thread-safe, as the engine: the app calls it on its UI thread.
    """

    def __init__(
        self,
        settings: AlertSettings | None = None,
        notify: Notify | None = None,
        *,
        live: bool = True,
        limiter: ToastLimiter | None = None,
    ) -> None:
        self.settings = settings if settings is not None else AlertSettings()
        self.engine = AlertEngine(self.settings)
        self.notify = notify
        self.live = live
        self.toasts = limiter if limiter is not None else ToastLimiter()
        self.history: deque[AlertEvent] = deque(maxlen=HISTORY)  # newest first
        self.notify_failure: str | None = None  # said once: the first exception of notify
        self.notified = 0
        self._failure_said = False
        self._last_time: float | None = None

    def observe(self, snapshot: Snapshot) -> list[AlertEvent]:
        """Fold in ``snapshot``: its transitions, recorded in the history and handed to ``notify`` (live only)."""
        stamp = snapshot.timestamp
        if self._last_time is not None and stamp < self._last_time:  # a replay stepped back: watch it again
            self.engine = AlertEngine(self.settings)
        if isinstance(stamp, int | float) and math.isfinite(stamp):  # the engine ignores one without a time
            self._last_time = stamp
        events = self.engine.observe(snapshot)
        for event in events:
            self.history.appendleft(event)
            if self.live and self.notify is not None:
                self._send(event)
        return events

    def firing(self) -> tuple[AlertEvent, ...]:
        """What fires now, in the catalog's order."""
        return self.engine.firing()

    def failure_to_say(self) -> str | None:
        """:attr:`notify_failure` the first time it is asked for after it happened, else None."""
        if self.notify_failure is None or self._failure_said:
            return None
        self._failure_said = True
        return safe_text(self.notify_failure)

    def _send(self, event: AlertEvent) -> None:
        assert self.notify is not None
        try:
            self.notify(event)
            self.notified += 1
        except Exception as exc:  # noqa: BLE001 - a channel's bug must not end the monitor
            if self.notify_failure is None:
                self.notify_failure = f"alert notifications failed: {type(exc).__name__}: {exc} (said once)"

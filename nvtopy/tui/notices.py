"""Warnings from another thread that may come before the app shows anything: held until it does.

Why: the CLI starts the local monitor's poller before Textual is imported (the driver opened and
the first poll taken while the UI loads), so the GPU selection's warnings (``--gpus`` naming a
MIG device, CUDA's ordering rule) can be said on the poller's thread before the app exists or has
mounted. Posted to an app that is not running they would be lost; held here, they are shown as
toasts once the app has mounted (:meth:`LateNotices.show_with`), and at once after that.

No Textual here: the CLI makes one before it imports the app.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["MAX_HELD", "LateNotices"]

MAX_HELD = 32  # texts held before the app shows them; past it one line says how many more (they go to stderr after)


class LateNotices:
    """Texts said from any thread, handed to ``show`` once it is given, in the order they were said."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[str] = []
        self._dropped = 0
        self._show: Callable[[str], object] | None = None

    def say(self, text: str) -> None:
        """Show ``text`` now if the app shows notices already, else hold it for :meth:`show_with`."""
        with self._lock:
            show = self._show
            if show is None:
                if len(self._held) < MAX_HELD:
                    self._held.append(text)
                else:
                    self._dropped += 1
                return
        show(text)

    def show_with(self, show: Callable[[str], object]) -> None:
        """From now on ``show`` shows each text; the held ones first (under the lock: none overtakes them)."""
        with self._lock:
            held, self._held = self._held, []
            if self._dropped:
                held.append(f"and {self._dropped} more warnings (listed after the monitor ends)")
                self._dropped = 0
            for text in held:
                show(text)
            self._show = show

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

__all__ = ["LateNotices"]


class LateNotices:
    """Texts said from any thread, handed to ``show`` once it is given, in the order they were said."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[str] = []
        self._show: Callable[[str], object] | None = None

    def say(self, text: str) -> None:
        """Show ``text`` now if the app shows notices already, else hold it for :meth:`show_with`."""
        with self._lock:
            show = self._show
            if show is None:
                self._held.append(text)
                return
        show(text)

    def show_with(self, show: Callable[[str], object]) -> None:
        """From now on ``show`` shows each text; the held ones first (under the lock: none overtakes them)."""
        with self._lock:
            held, self._held = self._held, []
            for text in held:
                show(text)
            self._show = show

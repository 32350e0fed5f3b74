"""Messages a snapshot source's thread sends to the UI."""

from __future__ import annotations

from textual.message import Message

from ..model import Snapshot


class SnapshotReady(Message):
    """A new snapshot. A newer one waiting in the queue replaces an older one (the UI never lags)."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


class SourceFailed(Message):
    """The source could not start (the backend did not open, no GPU matched): the app ends with ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

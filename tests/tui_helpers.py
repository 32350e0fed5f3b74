"""Helpers for driving the Textual app in tests (run_test pilot)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_until(pilot, predicate: Callable[[], bool], timeout: float = 10.0, message: str = "") -> None:
    """Let the app run until ``predicate()`` holds (the poller thread feeds it asynchronously)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {message or predicate}")
        await pilot.pause(0.02)
        await asyncio.sleep(0)


def screen_text(app) -> str:
    """What the terminal shows, as plain text (for assertions on visible content)."""
    from rich.console import Console

    console = Console(width=app.size.width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()

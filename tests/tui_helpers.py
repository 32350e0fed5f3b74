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


async def started(pilot, app, snapshots: int = 1) -> None:
    """Wait for the first ``snapshots`` snapshots to be applied (and drawn)."""
    await wait_until(pilot, lambda: app.snapshots_applied >= snapshots, message=f"{snapshots} snapshot(s)")
    await pilot.pause()


async def more_snapshots(pilot, app, count: int = 1) -> None:
    """Have the poller collect ``count`` more snapshots now (not at its next tick) and wait until they are applied."""
    for _ in range(count):
        target = app.snapshots_applied + 1
        app.source.refresh()
        await wait_until(pilot, lambda target=target: app.snapshots_applied >= target, message="one more snapshot")
    await pilot.pause()


def widget_strips(widget) -> list:
    """The strips ``widget`` draws now, one per line of its region (what reaches the terminal)."""
    from textual.geometry import Region

    return widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))


def widget_lines(widget) -> list[str]:
    """The text of each line ``widget`` draws now."""
    return [strip.text for strip in widget_strips(widget)]


def header_line(app) -> str:
    """The app's one-line header as plain text."""
    return "".join(widget_lines(app.query_one("#header")))


def assert_in_order(values: list, *, reverse: bool) -> None:
    """``values`` sorted (ascending, or descending if ``reverse``), with None values last."""
    present = [v for v in values if v is not None]
    assert values == present + [None] * (len(values) - len(present)), f"None values not last: {values}"
    assert present == sorted(present, reverse=reverse), f"not sorted (reverse={reverse}): {present}"


# ---- acting on processes from the table (kill tests)


class SendSpy:
    """Records every call of ``backend.send_signal`` (and still sends)."""

    def __init__(self, backend) -> None:
        self.calls: list[tuple[int, float | None, int]] = []
        self._send = backend.send_signal
        backend.send_signal = self

    def __call__(self, pid, create_time, signum):
        self.calls.append((pid, create_time, signum))
        return self._send(pid, create_time, signum)


def table_of(app):
    return app.query_one("#processes")


def pids(app) -> set[int]:
    return {p.pid for p in table_of(app).rows}


async def select(pilot, app, wanted) -> None:
    """Move the cursor with the arrow keys to the first row for which ``wanted(process)`` holds."""
    table = table_of(app)
    index = next(i for i, p in enumerate(table.rows) if wanted(p))
    await pilot.press("home", *["down"] * index)
    assert wanted(table.selected)

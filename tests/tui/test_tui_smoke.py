"""First pilot test: the app starts on simulated GPUs, shows them and quits at once."""

from __future__ import annotations

import time

from nvtopy.tui.app import NvtopyApp

from ..tui_helpers import wait_until


async def test_app_shows_gpus_and_processes_and_quits(sim):
    backend = sim(gpus=4, seed=1)
    app = NvtopyApp.for_backend(backend, interval=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.snapshots_applied >= 2, message="two snapshots")
        table = app.query_one("#processes")
        assert table.rows, "processes are listed"
        assert {g.index for g in app.visible_gpus()} == {0, 1, 2, 3}
        started = time.monotonic()
        await pilot.press("q")
        await pilot.pause()
    assert time.monotonic() - started < 1.0
    assert not app.source.running

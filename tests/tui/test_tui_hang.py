"""The monitor while one GPU's driver call hangs: keys answer at once, q quits at once, the others keep updating.

Issue 12 measured the peers under ``FAKE_NVML_HANG='nvmlDeviceGetPowerUsage@1:30@5'``:
nvtop freezes, nvitop's rows freeze and its quit waits for the call. Here a
simulated GPU blocks every read until released, through the real poller and app.
"""

from __future__ import annotations

import time

import pytest

from nvtopy.tui.app import NvtopyApp

from ..sources.test_hang_isolation import Stuck
from ..tui_helpers import screen_text, started, wait_until

SIZE = (160, 50)

pytestmark = pytest.mark.timing  # keys and quit measured against the clock while a GPU hangs


async def test_keys_answer_and_quit_is_prompt_while_one_gpu_hangs(clock):
    backend = Stuck(stuck=set(), gpus=3, seed=3, clock=clock)
    app = NvtopyApp.for_backend(backend, interval=0.25)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            backend.stuck = {1}  # GPU 1's next call blocks until released
            await wait_until(
                pilot,
                lambda: app.source.latest is not None and not app.source.latest.gpu(1).health.responding,
                timeout=10,
                message="GPU 1 marked not responding",
            )
            before = app.snapshots_applied
            seen = set()
            deadline = time.monotonic() + 10
            while len(seen) < 4 and time.monotonic() < deadline:
                clock.advance(1.0)  # simulated values move with the clock
                await pilot.pause(0.1)
                latest = app.source.latest
                seen.add(latest.gpu(0).sample.timestamp)
            assert len(seen) >= 4, "GPU 0's values kept changing"
            assert app.snapshots_applied > before
            assert "not responding" in screen_text(app)
            latencies = []
            for key in ("s", "r", "v", "v", "v"):
                pressed = time.monotonic()
                await pilot.press(key)
                latencies.append(time.monotonic() - pressed)
            assert max(latencies) < 0.5, f"key latencies {latencies}"
            quit_at = time.monotonic()
            await pilot.press("q")
        quit_s = time.monotonic() - quit_at
        assert quit_s < 0.5, f"quit took {quit_s:.2f} s"
    finally:
        backend.release.set()

"""Waits for ``nvtopy.track``'s background samples: a test that needs the sampler to have seen a value waits for the
samples it needs (bounded), never sleeps and hopes a loaded machine took them in time."""

from __future__ import annotations

import time
from typing import Any


def sampled_more(track: Any, count: int = 2, timeout: float = 5.0) -> None:
    """Until ``track``'s sampler has taken ``count`` samples more than now: with 2, at least one sample was taken
    wholly after this call (one under way now may have read the values before it)."""
    accumulator = track._accumulator
    wanted = accumulator.samples + count
    deadline = time.monotonic() + timeout
    while accumulator.samples < wanted:
        assert time.monotonic() < deadline, f"the track took {accumulator.samples} samples, waited for {wanted}"
        time.sleep(0.005)

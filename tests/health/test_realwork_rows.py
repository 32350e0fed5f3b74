"""The real-work watch's flagged rows (``GpuWatch.observe``) made with the model's fast replacer, not
``dataclasses.replace``: the same rows, range rule included, on random and hostile values.

Why: every idle or hung process's row is re-made each poll with its flags and idle time; the fast
replacer range-checks only those two values (the row's own are in range already). What must hold:
an idle time that is NaN, infinite, negative or huge (a clock gone wrong) is ``None`` with the
reason ``out_of_range``, exactly as through ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from nvtopy.health.realwork import GpuWatch
from nvtopy.model import GpuProcess, Reason, fast_replacer
from nvtopy.ranges import FIELD_RANGES

from ..builders import gpu_process, gpu_sample

HOSTILE = (float("nan"), float("inf"), float("-inf"), -1, -1e-9, 2**70, 1e308, True, "12", b"1", [1], 0j)


def _random_row(rng: random.Random) -> GpuProcess:
    return gpu_process(
        rng.randrange(8),
        rng.randrange(1, 2**22),
        gpu_memory_bytes=rng.choice((None, 0, 1 << 30, 80 << 30)),
        sm_percent=rng.choice((None, 0, 1, 50, 100)),
        cpu_percent=rng.choice((None, 0.0, 150.5)),
        create_time=rng.choice((None, 1_700_000_000.0)),
    )


@pytest.mark.timeout(60)
def test_the_fast_replacer_makes_the_row_dataclasses_replace_makes():
    rng = random.Random(27)
    low, high = FIELD_RANGES["idle_seconds"]
    pool = (*HOSTILE, None, 0, 0.0, 12.5, low, high, high + 1, high + 0.5, rng.uniform(low, high))
    replace = fast_replacer(GpuProcess)
    for _ in range(2000):
        row = _random_row(rng)
        flags = rng.choice(((), ("idle-held",), ("suspected-hang",), ("idle-held", "suspected-hang")))
        idle = rng.choice(pool)
        made = replace(row, {"flags": flags, "idle_seconds": idle})
        expected = dataclasses.replace(row, flags=flags, idle_seconds=idle)
        assert type(made) is GpuProcess
        assert made == expected and repr(made) == repr(expected), idle
        assert made.unavailable == expected.unavailable


@pytest.mark.timeout(30)
@pytest.mark.parametrize("later", [float("nan"), float("inf"), 2.0**70, 1e308, 5.0])
def test_an_idle_time_out_of_range_is_none_with_its_reason(later):
    """Seen idle at 0, then at ``later``: its idle time ``later`` s as the checked constructor has it."""
    watch = GpuWatch()
    row = gpu_process(0, 4242, gpu_memory_bytes=8 << 30, sm_percent=0)
    sample = gpu_sample(utilization_gpu_percent=0)
    first = watch.observe(sample, [row], 0.0).rows[0]
    assert first.idle_seconds == 0
    second = watch.observe(sample, [row], later).rows[0]
    expected = dataclasses.replace(row, flags=second.flags, idle_seconds=later)
    assert second == expected and repr(second) == repr(expected)
    if later > FIELD_RANGES["idle_seconds"][1] or later != later:
        assert second.idle_seconds is None
        assert second.unavailable["idle_seconds"] is Reason.OUT_OF_RANGE
    else:
        assert second.idle_seconds == later

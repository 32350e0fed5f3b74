"""ProcessHistory.add: a process on one GPU takes its figures as they are (no lists): the very figures the sums over
its GPUs give (tui/process_screen.py)."""

from __future__ import annotations

import math
import random
from array import array

from nvtopy.tui.process_screen import ProcessHistory
from tests.builders import gpu_process, gpu_sample, gpu_state, gpu_static, snapshot_of


def _as_stored(value: float) -> float:
    return array("f", [value])[0]  # the history keeps float32


def _summed(members: list[tuple[int | None, float | None, int | None]]) -> tuple[float, float, float]:
    """(GPU memory, memory size, SM %) as the many-GPU way works them out (sums over the process's rows)."""
    memory = [m for m, _, _ in members if m is not None]
    sm = [s for _, s, _ in members if s is not None]
    total = [t for _, _, t in members]
    return (
        float(sum(memory)) if memory else math.nan,
        float(sum(t for t in total if t)) if all(total) else math.nan,
        float(sum(sm)) if sm else math.nan,
    )


def test_a_process_on_one_gpu_keeps_the_figures_the_sums_give() -> None:
    rng = random.Random(7)
    history = ProcessHistory(points=4, tracked=200)
    for step in range(30):
        gpus = []
        expected = {}
        for g in range(3):
            size = rng.choice([80 * 2**30, 0, None])
            rows = []
            for k in range(rng.randint(0, 5)):
                pid = 1000 * g + k + 1
                used = rng.choice([None, 0, 3 * 2**30 + rng.randint(0, 2**20)])
                sm = rng.choice([None, 0, -0.0, 37, 12.5])
                cpu = rng.choice([None, 3.25])
                rows.append(gpu_process(g, pid, gpu_memory_bytes=used, sm_percent=sm, cpu_percent=cpu))
                expected[(pid, float(pid))] = (*_summed([(used, sm, size)]), math.nan if cpu is None else cpu)
            static = gpu_static(g, memory_total_bytes=size)
            gpus.append(gpu_state(g, *rows, static=static, sample=gpu_sample(float(step))))
        history.add(snapshot_of(*gpus, timestamp=float(step), sequence=step))
        for key, (memory, total, sm, cpu) in expected.items():
            series = history.series(key)
            assert series is not None
            got = (series.gpu_memory[-1], series.gpu_total[-1], series.sm[-1], series.cpu[-1])
            want = tuple(_as_stored(v) for v in (memory, total, sm, cpu))
            assert [str(v) for v in got] == [str(v) for v in want], (step, key)  # str: NaN and -0.0 compare

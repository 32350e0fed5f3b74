"""The collector's process rows (``collector._row``): built positionally by the model's fast constructor, the very
objects the keyword ``GpuProcess(...)`` built, on random and hostile values.

Why: every poll of the monitor and every ``--once`` makes a row per GPU process (73 on the fake driver's 8 GPUs x
64 processes); the frozen dataclass's ``__init__`` cost 3.8 us a row, the fast constructor about 1 us. What must
hold: every field where the keyword call put it (a field order changed in the model would shift them), and every
range check kept -- a value out of range ``None`` with the reason ``out_of_range``, as the dataclass makes it.
"""

from __future__ import annotations

import math
import random

import pytest

from nvtopy.model import EMPTY_REASONS, GpuProcess, HostProcess, ProcessType, RawGpuProcess, Reason, freeze
from nvtopy.sources import collector

from ..builders import gpu_static

HOSTILE = (float("nan"), float("inf"), float("-inf"), -1, -0.5, 2**70, 1e308, True, False, "12", None, 0, 7, 12.5)


def _pick(rng: random.Random) -> object:
    return rng.choice(HOSTILE) if rng.random() < 0.5 else rng.randint(0, 100)


def _raw(rng: random.Random) -> RawGpuProcess:
    return RawGpuProcess(
        rng.randint(1, 2**22),
        rng.choice(list(ProcessType)),
        *(_pick(rng) for _ in range(7)),  # type: ignore[arg-type]
    )


def _host(rng: random.Random, pid: int) -> HostProcess:
    return HostProcess(
        pid,
        rng.choice((None, "alice", "x" * 300)),
        _pick(rng),  # type: ignore[arg-type]
        rng.choice((None, "python")),
        rng.choice((None, "python train.py")),
        _pick(rng),  # type: ignore[arg-type]
        _pick(rng),  # type: ignore[arg-type]
        rng.choice((None, 0.0, 1_700_000_000.5, -5.0, float("nan"), 2e9)),
        rng.choice(("running", "zombie")),
        rng.choice((EMPTY_REASONS, freeze({"user": Reason.NO_PERMISSION}))),
        None,
        rng.choice((None, 12)),
        rng.choice((None, "0,1")),
        rng.choice((None, 1, -3)),
        rng.choice(((), ("not-a-relative",))),
    )


@pytest.mark.timeout(60)
def test_a_row_is_the_object_the_keyword_constructor_builds():
    def former_row(static, raw, info, now, reasons, *, foreign):  # the collector's _row before, verbatim
        create_time = info.create_time if info else None
        running = max(0.0, now - create_time) if create_time else None
        return GpuProcess(
            gpu_index=static.index,
            gpu_uuid=static.uuid,
            pid=raw.pid,
            type=raw.type,
            gpu_memory_bytes=raw.gpu_memory_bytes,
            sm_percent=raw.sm_percent,
            memory_percent=raw.memory_percent,
            encoder_percent=raw.encoder_percent,
            decoder_percent=raw.decoder_percent,
            user=info.user if info else None,
            uid=info.uid if info else None,
            name=info.name if info else None,
            command=info.command if info else None,
            cpu_percent=info.cpu_percent if info else None,
            host_memory_bytes=info.host_memory_bytes if info else None,
            create_time=create_time,
            running_seconds=running,
            status=info.status if info else "unknown",
            foreign=foreign,
            unavailable=freeze(reasons),
            owner=info.owner if info else None,
            ns_pid=info.ns_pid if info else None,
            cuda_visible_devices=info.cuda_visible_devices if info else None,
            ppid=info.ppid if info else None,
            parents=info.parents if info else (),
            gpu_instance_id=raw.gpu_instance_id,
            compute_instance_id=raw.compute_instance_id,
        )

    rng = random.Random(27)
    statics = [gpu_static(0), gpu_static(3, uuid=None)]
    out_of_range = 0
    for _ in range(3000):
        static = rng.choice(statics)
        raw = _raw(rng)
        info = _host(rng, raw.pid) if rng.random() < 0.8 else None
        now = rng.choice((1_700_000_100.0, 0.0, float("nan")))
        reasons = rng.choice(({}, {"sm_percent": Reason.NOT_SUPPORTED}))
        foreign = rng.random() < 0.2
        made = collector._row(static, raw, info, now, dict(reasons), foreign=foreign)
        expected = former_row(static, raw, info, now, dict(reasons), foreign=foreign)
        assert type(made) is GpuProcess
        assert repr(made) == repr(expected)
        for name in GpuProcess.__dataclass_fields__:
            got, want = getattr(made, name), getattr(expected, name)
            assert got is want or got == want or (math.isnan(got) and math.isnan(want)), name
        out_of_range += Reason.OUT_OF_RANGE in made.unavailable.values()
    assert out_of_range > 1000, "the hostile values reached the range check"

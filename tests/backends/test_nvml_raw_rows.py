"""The NVML backend's process rows (``_raw_process``) built by the model's fast constructor: the very
``RawGpuProcess`` the dataclass builds, whatever the driver's lists and utilisation samples hold.

Why: one row a listed process a poll; the fast constructor fills the fields by position, so a value
put in the wrong place (or dropped) would show one process's figures under another's column.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from nvtopy.backends.nvml.backend import _Listed, _raw_process
from nvtopy.model import ProcessType, RawGpuProcess

HOSTILE_INTS = (0, 1, -1, 2**32 - 1, 2**64 - 1, 2**70, -(2**63), True, False)


@pytest.mark.timeout(60)
def test_a_row_is_the_one_the_dataclass_builds():
    rng = random.Random(27)
    for _ in range(3000):
        pid = rng.choice((1, 4242, 2**22, 2**31 - 1, *HOSTILE_INTS))
        listed = _Listed(
            rng.choice(list(ProcessType)),
            rng.choice((None, *HOSTILE_INTS, rng.randrange(2**40))),
            rng.choice((None, 0, 7, 2**32 - 2)),
            rng.choice((None, 0, 3)),
        )
        figures = [rng.choice((*HOSTILE_INTS, rng.randrange(101))) for _ in range(4)]
        sample = SimpleNamespace(smUtil=figures[0], memUtil=figures[1], encUtil=figures[2], decUtil=figures[3])
        utilization = rng.choice((None, {}, {pid: sample}, {pid + 1: sample}))
        made = _raw_process(pid, listed, utilization)
        if utilization is None:
            shares = [None] * 4
        elif pid in utilization:
            shares = [int(f) for f in figures]  # the backend reads each as an int
        else:
            shares = [0] * 4
        expected = RawGpuProcess(
            pid=pid,
            type=listed.type,
            gpu_memory_bytes=listed.memory,
            sm_percent=shares[0],
            memory_percent=shares[1],
            encoder_percent=shares[2],
            decoder_percent=shares[3],
            gpu_instance_id=listed.gpu_instance_id,
            compute_instance_id=listed.compute_instance_id,
        )
        assert type(made) is RawGpuProcess
        assert made == expected and repr(made) == repr(expected)

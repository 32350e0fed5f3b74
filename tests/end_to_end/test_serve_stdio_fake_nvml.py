"""``nvtopy serve-stdio`` on the fake NVML driver: real GPUs' snapshots stream, and a GPU whose every driver call
hangs (``FAKE_NVML_HANG``) is marked not responding while the stream goes on; closing stdin still ends it at once.

Skipped where ../shared/fake-nvml (or a C compiler) is absent.
"""

from __future__ import annotations

import time

import pytest

from nvtopy.formats.contract_decoder import snapshot_from_dict
from nvtopy.formats.stream import StreamHello

from ..builders import fake_nvml_env
from ..commands.test_serve_stdio import far_side
from ..conftest import needs_fake_nvml

pytestmark = [needs_fake_nvml, pytest.mark.slow]


def test_a_hung_gpu_never_stops_the_stream(fake_lib):
    # From 3 s after load, every call on GPU 1 blocks for a minute; GPUs 0 and 2 answer as ever.
    env = fake_nvml_env(fake_lib, FAKE_NVML_GPUS="3", FAKE_NVML_HANG="*@1:60@3")
    with far_side("--interval", "0.5", "--timeout", "2", env=env) as far:
        _, hello = far.next()
        assert isinstance(hello, StreamHello) and hello.interval_s == 0.5
        first = snapshot_from_dict(far.snapshot())
        assert first.host.backend == "replay of nvml" and len(first.gpus) == 3
        assert all(gpu.health.responding for gpu in first.gpus)
        deadline = time.monotonic() + 30
        while True:  # a snapshot an interval all along; GPU 1 is marked once its calls hang
            snapshot = snapshot_from_dict(far.snapshot())
            if not snapshot.gpus[1].health.responding:
                break
            assert time.monotonic() < deadline, "GPU 1 never marked not responding"
        assert snapshot.gpus[0].health.responding and snapshot.gpus[2].health.responding
        later = snapshot_from_dict(far.snapshot())
        assert later.sequence > snapshot.sequence and later.gpus[0].health.responding, "the stream goes on"
        assert far.process.stdin is not None
        closed = time.monotonic()
        far.process.stdin.close()
        assert far.exited() == 0, far.stderr()
        assert time.monotonic() - closed < 10, "a GPU stuck in the driver does not keep it alive"
        assert far.stderr() == b""

"""TensorBoard scalars: the logger against a recording writer, and the README's example end to end."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nvtopy
from nvtopy.api import state as runtime
from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.integrations.tensorboard import TensorBoardLogger

from ..fake_torch import FakeDevice, fake_torch

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


class RecordingWriter:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int | None, float | None]] = []
        self.closed = False

    def add_scalar(self, tag: str, value: float, step: int | None = None, walltime: float | None = None) -> None:
        self.scalars.append((tag, value, step, walltime))

    def close(self) -> None:
        self.closed = True

    def tags(self, step: int | None = None) -> set[str]:
        return {tag for tag, _, s, _ in self.scalars if step is None or s == step}


@pytest.fixture
def api_sim():
    backend = SimulatedBackend(
        gpus=2, seed=3, real_pids=[os.getpid()], viewer="alice", faults=parse_fault_specs(["unsupported=power@1"])
    )
    runtime.configure(backend)
    yield backend
    runtime.reset()


def test_scalars_per_gpu_and_unavailable_values_omitted(api_sim):
    writer = RecordingWriter()
    logger = TensorBoardLogger(writer=writer)
    snapshot = nvtopy.snapshot()
    written = logger.log(snapshot, step=7)
    gpu0 = {"memory_used_percent", "utilization_percent", "memory_bandwidth_percent", "temperature_c", "power_w"}
    assert {f"gpu/0/{name}" for name in gpu0} | {"gpu/0/process_memory_gib"} <= writer.tags(7)
    assert "gpu/1/power_w" not in writer.tags(), "power is not supported on GPU 1: omitted, never 0"
    assert "gpu/1/temperature_c" in writer.tags()
    assert written == len(writer.scalars)
    values = {tag: value for tag, value, _, _ in writer.scalars}
    assert values["gpu/0/utilization_percent"] == snapshot.gpus[0].sample.utilization_gpu_percent
    assert all(walltime == snapshot.timestamp for _, _, _, walltime in writer.scalars)


def test_torch_scalars(api_sim, monkeypatch):
    uuid0 = nvtopy.snapshot().gpus[0].static.uuid
    monkeypatch.setitem(
        sys.modules, "torch", fake_torch([FakeDevice(uuid0, allocated=GIB, reserved=3 * GIB, peak=2 * GIB)])
    )
    writer = RecordingWriter()
    TensorBoardLogger(writer=writer).log(step=1)
    values = {tag: value for tag, value, _, _ in writer.scalars}
    assert values["gpu/0/torch_allocated_gib"] == 1.0
    assert values["gpu/0/torch_reserved_gib"] == 3.0
    assert values["gpu/0/torch_peak_allocated_gib"] == 2.0


def test_as_sampler_callback_steps_increase(api_sim):
    writer = RecordingWriter()
    logger = TensorBoardLogger(writer=writer, prefix="nodeA")
    with nvtopy.Sampler(interval=0.02, callbacks=[logger], only_visible=False) as sampler:
        deadline = time.monotonic() + 5
        while len(sampler.history) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    steps = sorted({step for _, _, step, _ in writer.scalars})
    assert steps[:3] == [0, 1, 2]
    assert all(tag.startswith("nodeA/") for tag in writer.tags())


def _read_events(path: Path) -> list[object]:
    """TFRecord framing (length, crc, data, crc) around Event protos, read with tensorboardX's proto."""
    from tensorboardX.proto import event_pb2

    events = []
    data = path.read_bytes()
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 12
        event = event_pb2.Event()
        event.ParseFromString(data[offset : offset + length])
        events.append(event)
        offset += length + 4
    return events


def test_readme_example_runs_as_written(tmp_path):
    pytest.importorskip("tensorboardX")
    # One BLAS thread for the example's NumPy steps: OpenBLAS's threads spun on the 2-core CI machine (14 s of CPU for
    # the run, 2 s with one thread); the example itself runs as written.
    env = dict(os.environ, NVTOPY_BACKEND="simulated", OPENBLAS_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "training_loop.py"), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("GPU 0 (H100 80GB HBM3, 18:00.0): ")
    for epoch in range(3):
        assert f"nvtopy.track epoch {epoch}: " in result.stderr
    assert "this process" in result.stderr
    (event_file,) = (tmp_path / "runs").glob("events.out.tfevents.*")
    tags = {value.tag for event in _read_events(event_file) for value in event.summary.value}
    assert {"gpu/0/utilization_percent", "gpu/0/memory_used_percent", "gpu/0/process_memory_gib"} <= tags
    assert "gpu/3/temperature_c" in tags

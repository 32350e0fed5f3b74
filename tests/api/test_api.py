"""The Python API on the simulated backend: snapshot, job GPUs, track, Sampler, usage lines."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import warnings

import pytest

import nvtopy
from nvtopy.api import state as runtime
from nvtopy.api.jobgpus import find_job_gpus, map_torch_devices
from nvtopy.api.state import SAMPLING_THREAD
from nvtopy.backends.base import Reading
from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.model import GpuStatic
from nvtopy.selection import SelectionWarning

from ..builders import gpu_static, mig_instances
from ..fake_torch import FakeDevice, fake_torch
from ..import_probe import modules_loaded
from .sampling import sampled_more

GIB = 1 << 30


@pytest.fixture
def api_sim():
    """The API's shared backend: simulated, this process on GPU 0, real time."""
    backend = SimulatedBackend(gpus=4, seed=3, real_pids=[os.getpid()], viewer="alice")
    runtime.configure(backend)
    yield backend
    runtime.reset()


@pytest.fixture
def frozen_api_sim(clock):
    backend = SimulatedBackend(gpus=2, seed=3, clock=clock, real_pids=[os.getpid()], viewer="alice")
    runtime.configure(backend)
    yield backend
    runtime.reset()


def nvtopy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("nvtopy")]


def track_threads() -> list[str]:
    """The API's own sampling thread (other tests in this worker may leave their own daemon threads)."""
    return [t.name for t in threading.enumerate() if t.name == SAMPLING_THREAD]


# --------------------------------------------------------------------------- snapshot and job GPUs


def test_snapshot_selects_like_the_cli(api_sim):
    full = nvtopy.snapshot()
    assert [g.index for g in full.gpus] == [0, 1, 2, 3]
    assert full.host.backend == "simulated"
    assert any(p.pid == os.getpid() for p in full.processes), "this process is a simulated GPU process"
    bus = full.gpus[2].static.short_bus_id
    assert [g.index for g in nvtopy.snapshot(gpus=[3, bus]).gpus] == [3, 2]
    assert [g.index for g in nvtopy.snapshot(gpus="1").gpus] == [1]


def test_snapshot_only_visible(api_sim, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert sorted(g.index for g in nvtopy.snapshot(only_visible=True).gpus) == [0, 2]


class MixedModels(SimulatedBackend):
    """GPU 1 is another model: CUDA's default FASTEST_FIRST order may then differ from PCI order."""

    def read_static(self, index: int) -> GpuStatic:
        static = super().read_static(index)
        return dataclasses.replace(static, name="NVIDIA GeForce RTX 4090") if index == 1 else static


@pytest.fixture
def mixed_api(monkeypatch):
    runtime.configure(MixedModels(gpus=3, seed=3, real_pids=[os.getpid()], viewer="alice"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    yield
    runtime.reset()


def test_selection_warnings_are_python_warnings_at_the_caller(mixed_api):
    with pytest.warns(SelectionWarning, match="CUDA_DEVICE_ORDER") as caught:
        snap = nvtopy.snapshot(only_visible=True)
    assert [g.index for g in snap.gpus] == [1, 0], "CUDA order, as the CLI's --only-visible"
    assert [w.filename for w in caught] == [__file__]
    with pytest.warns(SelectionWarning) as caught, nvtopy.Sampler(interval=0.05, only_visible=True):
        pass
    assert [w.filename for w in caught] == [__file__]
    sampler = nvtopy.Sampler(interval=0.05, only_visible=True)
    with pytest.warns(SelectionWarning) as caught:
        sampler.start()
    sampler.stop()
    assert [w.filename for w in caught] == [__file__]


def test_no_selection_warning_without_a_reason(mixed_api, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [g.index for g in nvtopy.snapshot(only_visible=True).gpus] == [1, 0]
        assert [g.index for g in nvtopy.snapshot(gpus=[2]).gpus] == [2]


def test_job_gpus_from_nvml_process_lists(api_sim):
    job = nvtopy.job_gpus()
    assert job.indices == (0,) and job.source == "nvml"


def test_usage_lines(api_sim):
    api_sim.set_process_memory(os.getpid(), 3 * GIB)
    (line,) = nvtopy.usage_lines()
    assert line.startswith("GPU 0 (H100 80GB HBM3, 18:00.0): ")
    assert "this process 3.0GiB" in line and "used (" in line and "util " in line


def test_print_usage_with_torch(api_sim, monkeypatch, capsys):
    uuid0 = nvtopy.snapshot().gpus[0].static.uuid
    torch = fake_torch([FakeDevice(uuid0, allocated=2 * GIB, reserved=3 * GIB, peak=5 * GIB)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    nvtopy.print_usage()
    out = capsys.readouterr().out
    assert "torch cuda:0: allocated 2.0GiB, reserved 3.0GiB, peak 5.0GiB" in out


# --------------------------------------------------------------------------- identity mapping


def statics_with_mig() -> list[GpuStatic]:
    return [
        gpu_static(0, bare=True, uuid="GPU-11111111-1111-1111-1111-111111111111", bus_id="00000000:1B:00.0"),
        gpu_static(1, bare=True, uuid="GPU-22222222-2222-2222-2222-222222222222", bus_id="00000000:2B:00.0"),
        gpu_static(
            2,
            bare=True,
            uuid="GPU-33333333-3333-3333-3333-333333333333",
            bus_id="00000000:3B:00.0",
            mig_mode=True,
            mig_instances=mig_instances(
                "MIG-44444444-4444-4444-4444-444444444444",
            ),
        ),
    ]


def test_torch_devices_map_by_uuid_not_position():
    statics = statics_with_mig()
    # CUDA_VISIBLE_DEVICES=2,0: torch's cuda:0 is NVML GPU 2, cuda:1 is NVML GPU 0.
    torch = fake_torch([FakeDevice(statics[2].uuid), FakeDevice(statics[0].uuid)])
    devices = __import__("nvtopy.api.torchmem", fromlist=["x"]).torch_devices(torch)
    assert map_torch_devices(devices, statics) == {0: 2, 1: 0}


def test_torch_devices_map_mig_to_parent_and_bus_id_fallback():
    statics = statics_with_mig()
    torch = fake_torch(
        [
            FakeDevice("MIG-44444444-4444-4444-4444-444444444444"),
            FakeDevice(None, bus=(0, 0x2B, 0)),  # no UUID from this torch: PCI location decides
            FakeDevice("GPU-99999999-9999-9999-9999-999999999999"),  # not an NVML GPU: left out
        ]
    )
    devices = __import__("nvtopy.api.torchmem", fromlist=["x"]).torch_devices(torch)
    assert map_torch_devices(devices, statics) == {0: 2, 1: 1}


def test_job_gpus_with_torch_ignores_cuda_visible_devices_order():
    statics = statics_with_mig()
    torch = fake_torch(
        [FakeDevice(statics[2].uuid, reserved=GIB), FakeDevice(statics[0].uuid), FakeDevice(statics[1].uuid)],
        current=1,
    )
    job = find_job_gpus(statics, None, torch=torch, environ={"CUDA_VISIBLE_DEVICES": "2,0,1"})
    assert job.source == "torch"
    assert job.indices == (0, 2), "holding memory (cuda:0 = GPU 2) or current (cuda:1 = GPU 0)"
    assert dict(job.torch_ordinals) == {2: 0, 0: 1}


def test_torch_without_cuda_is_ignored():
    statics = statics_with_mig()
    torch = fake_torch([FakeDevice(statics[2].uuid, reserved=GIB)], initialized=False)
    job = find_job_gpus(statics, {1: [123]}, torch=torch, pid=123, environ={})
    assert job == find_job_gpus(statics, {1: [123]}, pid=123, environ={})
    assert job.indices == (1,) and job.source == "nvml"


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [
        (None, (0, 1, 2)),
        ("2,0", (2, 0)),
        ("GPU-33333333,GPU-1111", (2, 0)),
        ("MIG-44444444-4444-4444-4444-444444444444", (2,)),
        ("0,0", ()),
    ],
)
def test_job_gpus_fall_back_to_cuda_visible_devices(cvd, expected):
    environ = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    job = find_job_gpus(statics_with_mig(), {0: [1], 1: [2]}, pid=999, environ=environ)
    assert job.source == "cuda_visible_devices" and job.indices == expected


# --------------------------------------------------------------------------- track


def test_track_context_manager_report_structure(api_sim):
    with nvtopy.track("block", interval=0.02, callback=lambda r: None) as t:
        time.sleep(0.15)  # the block's own length: its report's wall time is held to it below
        sampled_more(t, 2 - t._accumulator.samples)  # two background samples at least (a loaded machine is late)
    report = t.report
    assert report is not None and report.name == "block" and report.error is None
    assert 0.14 < report.wall_seconds < 6
    (gpu,) = report.gpus
    assert gpu.index == 0 and gpu.name == "NVIDIA H100 80GB HBM3" and gpu.memory_total_bytes
    assert gpu.samples >= 2
    assert gpu.memory_used_start_bytes and gpu.memory_used_end_bytes
    assert gpu.memory_used_peak_bytes >= max(gpu.memory_used_start_bytes, gpu.memory_used_end_bytes)
    assert gpu.utilization_mean_percent is not None and 0 <= gpu.utilization_mean_percent <= 100
    assert gpu.process_memory_start_bytes is not None and gpu.torch is None
    data = report.as_dict()
    assert data["gpus"][0]["memory_used_peak_bytes"] == gpu.memory_used_peak_bytes
    assert "nvtopy.track block:" in report.format() and "this process" in report.format()


def test_track_sees_a_peak_that_was_raised_then_lowered(api_sim):
    me = os.getpid()
    api_sim.set_process_memory(me, 1 * GIB)
    with nvtopy.track("spike", interval=0.02, callback=lambda r: None) as t:
        api_sim.set_process_memory(me, 20 * GIB)
        sampled_more(t)  # the peak seen by a background sample
        api_sim.set_process_memory(me, 2 * GIB)
        sampled_more(t)
    (gpu,) = t.report.gpus
    assert gpu.process_memory_start_bytes == 1 * GIB
    assert gpu.process_memory_end_bytes == 2 * GIB
    assert gpu.process_memory_peak_bytes == 20 * GIB, "the background samples caught the peak"
    assert gpu.memory_used_peak_bytes >= gpu.process_memory_peak_bytes, "the GPU total includes this process"
    assert gpu.memory_used_peak_bytes > gpu.memory_used_end_bytes


def test_track_exception_propagates_and_still_reports(api_sim):
    reports = []
    with pytest.raises(ZeroDivisionError), nvtopy.track("boom", callback=reports.append):
        1 / 0  # noqa: B018
    (report,) = reports
    assert report.error == "ZeroDivisionError" and report.gpus
    assert not track_threads() or _eventually_no_track_thread()


def _until(condition, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _eventually_no_track_thread() -> bool:
    deadline = time.monotonic() + 5
    while track_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not track_threads()


def test_nested_tracks(api_sim):
    me = os.getpid()
    api_sim.set_process_memory(me, GIB)
    reports = []
    with nvtopy.track("outer", interval=0.02, callback=reports.append):
        time.sleep(0.05)
        with nvtopy.track("inner", interval=0.02, callback=reports.append) as inner_track:
            api_sim.set_process_memory(me, 9 * GIB)
            sampled_more(inner_track)  # the peak seen by the one sampler both tracks share
            api_sim.set_process_memory(me, 3 * GIB)
        time.sleep(0.05)
    inner, outer = reports
    assert (inner.name, outer.name) == ("inner", "outer")
    assert inner.gpus[0].process_memory_peak_bytes == outer.gpus[0].process_memory_peak_bytes == 9 * GIB
    assert outer.wall_seconds > inner.wall_seconds
    assert _eventually_no_track_thread(), "the sampling thread ends with the last track"


def test_track_decorator_logs_and_keeps_last_report(api_sim, caplog):
    @nvtopy.track(interval=0.02)
    def step(x: int) -> int:
        time.sleep(0.05)
        return x * 2

    with caplog.at_level(logging.INFO, logger="nvtopy.track"):
        assert step(21) == 42
    assert step.__name__ == "step"
    assert step.last_report is not None and step.last_report.name.endswith("step")
    assert any("nvtopy.track" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)

    @nvtopy.track("failing", callback=lambda r: None)
    def failing() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError):
        failing()
    assert failing.last_report.error == "ValueError"


def test_track_with_torch_reports_allocator_figures(api_sim, monkeypatch):
    uuid0 = nvtopy.snapshot().gpus[0].static.uuid
    torch = fake_torch([FakeDevice(uuid0, allocated=GIB, reserved=2 * GIB, peak=GIB)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    with nvtopy.track("torch", interval=0.02, callback=lambda r: None) as t:
        torch.cuda.allocate(0, 6 * GIB)  # a new high-water mark: 7 GiB
        time.sleep(0.05)
        torch.cuda.allocate(0, -5 * GIB)
    usage = t.report.gpus[0].torch
    assert usage is not None and usage.ordinal == 0
    assert (usage.allocated_start_bytes, usage.allocated_end_bytes) == (GIB, 2 * GIB)
    assert usage.allocated_peak_bytes == 7 * GIB
    assert usage.reserved_start_bytes == 2 * GIB and usage.reserved_end_bytes == 7 * GIB
    assert "torch cuda:0 allocated" in t.report.format()


def test_track_explicit_gpus(api_sim):
    with nvtopy.track("two", gpus=[1, 3], callback=lambda r: None) as t:
        pass
    assert [g.index for g in t.report.gpus] == [1, 3]


# --------------------------------------------------------------------------- Sampler


def test_sampler_summary_matches_known_values(frozen_api_sim):
    expected = nvtopy.snapshot()
    with nvtopy.Sampler(interval=0.05, only_visible=False) as sampler:
        deadline = time.monotonic() + 5
        while len(sampler.history) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    summary = sampler.summary()
    assert set(summary) == {0, 1}
    for gpu in expected.gpus:
        stats = summary[gpu.index]["utilization_gpu_percent"]
        value = gpu.sample.utilization_gpu_percent
        assert (stats.min, stats.mean, stats.max) == (value, value, value)
        assert stats.samples == len(sampler.history)
        assert summary[gpu.index]["memory_used_bytes"].max == gpu.sample.memory_used_bytes
    assert summary[0]["process_memory_bytes"].samples == len(sampler.history), "this process is on GPU 0"
    assert "process_memory_bytes" not in summary[1]


def test_sampler_min_mean_max_over_a_series(api_sim, monkeypatch):
    series = iter([10, 20, 60, 30, 30, 30, 30, 30, 30, 30, 30, 30])
    original = api_sim.read_sample

    def scripted(index: int, groups) -> Reading:
        reading = original(index, groups)
        if "utilization" in groups and index == 0:
            reading.values["utilization_gpu_percent"] = next(series)
        return reading

    monkeypatch.setattr(api_sim, "read_sample", scripted)
    sampler = nvtopy.Sampler(interval=0.02, gpus=[0], history=3)
    sampler.start()
    deadline = time.monotonic() + 5
    while sampler.latest() is None or sampler.latest().sequence < 3:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    sampler.stop()
    kept = [s.gpus[0].sample.utilization_gpu_percent for s in sampler.history]
    assert len(kept) == 3, "history is bounded"
    stats = sampler.summary()[0]["utilization_gpu_percent"]
    assert (stats.min, stats.max) == (min(kept), max(kept))
    assert stats.mean == pytest.approx(sum(kept) / 3)


def test_sampler_start_stop_idempotent_no_thread_left(api_sim):
    received = []
    sampler = nvtopy.Sampler(interval=0.02, callbacks=[received.append])
    assert sampler.start() is sampler.start()
    thread = sampler.thread
    assert thread is not None and thread.is_alive()
    _until(lambda: received, "a first sample")
    sampler.stop()
    sampler.stop()
    assert not thread.is_alive() and not sampler.running
    assert "nvtopy-poller" not in nvtopy_threads()
    assert received and received[-1] is sampler.latest()
    count = len(received)
    time.sleep(0.1)
    assert len(received) == count, "no samples after stop"
    with sampler:  # restartable
        _until(lambda: len(received) > count, "a sample after the restart")
    assert not sampler.running


# --------------------------------------------------------------------------- imports


def test_import_nvtopy_imports_nothing_heavy():
    heavy = ("textual", "rich", "pynvml", "torch", "tensorboard", "tensorboardX", "psutil")
    assert modules_loaded("import nvtopy", heavy) == []


def test_using_the_api_never_imports_torch_or_tensorboard():
    code = (
        "import nvtopy\n"
        "nvtopy.configure('simulated', gpus=2)\n"
        "nvtopy.snapshot(); nvtopy.usage_lines()\n"
        "with nvtopy.track('x', callback=lambda r: None): pass\n"
        "with nvtopy.Sampler(interval=0.05): pass\n"
        "import nvtopy.integrations.tensorboard\n"
    )
    assert modules_loaded(code, ("torch", "tensorboard", "tensorboardX", "textual")) == []


def test_unknown_backend_name_is_a_clear_error(monkeypatch):
    runtime.reset()
    monkeypatch.setenv("NVTOPY_BACKEND", "quantum")
    with pytest.raises(nvtopy.errors.UsageError, match="NVTOPY_BACKEND"):
        nvtopy.snapshot()
    runtime.reset()


def test_a_sampling_thread_kept_going_by_a_new_watcher_reads_the_newly_configured_backend():
    """unwatch then configure then watch before the thread wakes: the thread goes on, on the new backend.

    Holding the API's lock keeps the thread from looking between the calls, as a loaded machine did in a CI
    run (an A100 job's track got the previous test's H100 GPM figures).
    """

    class Watcher:
        indices = (0,)
        groups = frozenset({"utilization"})
        interval = 0.01

        def __init__(self) -> None:
            self.names: list[str] = []

        def observe(self, snapshot) -> None:
            self.names += [gpu.static.name for gpu in snapshot.gpus]

    first, second = Watcher(), Watcher()
    runtime.configure(SimulatedBackend(gpus=1, seed=3, model="NVIDIA H100 80GB HBM3"))
    try:
        runtime.watch(first)
        deadline = time.monotonic() + 10
        while not first.names:
            assert time.monotonic() < deadline, "the thread sampled"
            time.sleep(0.01)
        with runtime._lock:
            runtime.unwatch(first)
            runtime.configure(SimulatedBackend(gpus=1, seed=3, model="NVIDIA A100-SXM4-80GB"))
            runtime.watch(second)
        while len(second.names) < 2:
            assert time.monotonic() < deadline, "the thread went on for the new watcher"
            time.sleep(0.01)
        assert set(second.names) == {"NVIDIA A100-SXM4-80GB"}, second.names
    finally:
        runtime.unwatch(second)
        runtime.reset()

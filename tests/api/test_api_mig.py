"""The Python API on a MIG slice: job_gpus names the instance, usage lines and track report it.

The simulated backend puts this process on GPU 0 and, with ``mig=3@0``, on the
MIG instance its pid picks (:func:`nvtopy.backends.simulated.mig.instance_of`).
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest

import nvtopy
from nvtopy.api import state as runtime
from nvtopy.api.jobgpus import JobInstance, find_job_gpus, match_torch_devices
from nvtopy.api.torchmem import torch_devices
from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.backends.simulated.mig import instance_of
from nvtopy.model import GpuStatic
from nvtopy.render.units import fmt_bytes
from nvtopy.selection import Selection, SelectionWarning

from ..builders import gpu_static, mig_instances
from ..fake_torch import FakeDevice, fake_torch
from .sampling import sampled_more

GIB = 1 << 30


@pytest.fixture
def mig_api(monkeypatch):
    """The API's shared backend: GPU 0 split in 3 MIG devices, GPU 2 in 7; this process on GPU 0."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    backend = SimulatedBackend(
        gpus=4,
        seed=3,
        faults=parse_fault_specs(["mig=3@0", "mig=7@2"], gpus=4),
        real_pids=[os.getpid()],
        viewer="alice",
    )
    runtime.configure(backend)
    backend.set_process_memory(os.getpid(), 3 * GIB)
    yield backend
    runtime.reset()


def my_instance(backend: SimulatedBackend):
    return instance_of(os.getpid(), backend.read_static(0).mig_instances)


# --------------------------------------------------------------------------- job_gpus


def test_job_gpus_names_the_mig_device_from_nvml_process_lists(mig_api):
    mine = my_instance(mig_api)
    job = nvtopy.job_gpus()
    assert job.source == "nvml" and job.indices == (0,)
    assert job.instances == (JobInstance.of(0, mine),)
    (instance,) = job.instances
    assert instance.uuid == mine.uuid and instance.uuid.startswith("MIG-")
    assert instance.label == f"0/{mine.gpu_instance_id}/0" and instance.profile == mine.profile
    assert instance.memory_total_bytes == mine.memory_total_bytes < 80 * GIB
    assert instance.describe() == f"GPU 0 MIG {instance.label} {mine.profile}"
    assert job.instances_of(0) == job.instances and job.instances_of(1) == ()
    assert job.selection == Selection((0,), instance_pairs={0: (mine.uuid,)})
    assert job.gpu_spec == [mine.uuid]


def test_job_gpus_without_mig_has_no_instances(monkeypatch):
    runtime.configure(SimulatedBackend(gpus=2, seed=3, real_pids=[os.getpid()], viewer="alice"))
    try:
        job = nvtopy.job_gpus()
        assert job.indices == (0,) and job.instances == ()
        assert job.selection == Selection((0,)) and job.gpu_spec == [0]
    finally:
        runtime.reset()


def test_job_gpus_with_torch_on_a_mig_device(mig_api, monkeypatch):
    mine = my_instance(mig_api)
    torch = fake_torch([FakeDevice(mine.uuid, reserved=2 * GIB)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    job = nvtopy.job_gpus()
    assert job.source == "torch" and job.indices == (0,)
    assert [i.uuid for i in job.instances] == [mine.uuid]
    assert dict(job.torch_ordinals) == {0: 0}


# --------------------------------------------------------------------------- find_job_gpus, pure


def statics_with_mig() -> list[GpuStatic]:
    return [
        gpu_static(0, bare=True, uuid="GPU-11111111-1111-1111-1111-111111111111", bus_id="00000000:1B:00.0"),
        gpu_static(
            1,
            bare=True,
            uuid="GPU-22222222-2222-2222-2222-222222222222",
            bus_id="00000000:2B:00.0",
            mig_mode=True,
            mig_instances=mig_instances(
                "MIG-44444444-4444-4444-4444-444444444444",
                "MIG-55555555-5555-5555-5555-555555555555",
            ),
        ),
    ]


MIG_A, MIG_B = "MIG-44444444-4444-4444-4444-444444444444", "MIG-55555555-5555-5555-5555-555555555555"


def test_torch_devices_match_their_mig_instance():
    statics = statics_with_mig()
    torch = fake_torch([FakeDevice(MIG_B), FakeDevice(None, bus=(0, 0x2B, 0)), FakeDevice(statics[0].uuid)])
    matched = match_torch_devices(torch_devices(torch), statics)
    assert {o: (i, m.uuid if m else None) for o, (i, m) in matched.items()} == {
        0: (1, MIG_B),
        1: (1, None),
        2: (0, None),
    }


class _Proc:
    def __init__(self, pid: int, gi: int | None, ci: int | None = 0) -> None:
        self.pid, self.gpu_instance_id, self.compute_instance_id = pid, gi, ci


@pytest.mark.parametrize(
    ("processes", "indices", "uuids"),
    [
        ({1: [_Proc(7, 2)]}, (1,), [MIG_B]),
        ({1: [_Proc(8, 2), _Proc(7, 1)]}, (1,), [MIG_A]),
        ({0: [_Proc(7, None)], 1: [_Proc(7, 2)]}, (0, 1), [MIG_B]),
        ({1: [_Proc(7, None)]}, (1,), []),  # the driver named no instance: the GPU, whole
        ({1: [_Proc(7, 9)]}, (1,), []),  # an instance nvtopy does not know: the GPU, whole
    ],
)
def test_find_job_gpus_from_processes(processes, indices, uuids):
    job = find_job_gpus(statics_with_mig(), processes_by_gpu=processes, pid=7, environ={})
    assert job.source == "nvml" and job.indices == indices
    assert [i.uuid for i in job.instances] == uuids


@pytest.mark.parametrize(
    ("cvd", "indices", "uuids"),
    [
        (MIG_B, (1,), [MIG_B]),
        ("MIG-5555", (1,), [MIG_B]),
        (f"{MIG_B},{MIG_A}", (1,), [MIG_B]),  # a CUDA process uses the first MIG device only
        ("1", (1,), [MIG_A]),  # a MIG-enabled GPU by index: its first MIG device
        ("0,1", (0, 1), [MIG_A]),
        (None, (0, 1), [MIG_A]),
        ("GPU-11111111", (0,), []),
    ],
)
def test_find_job_gpus_from_cuda_visible_devices(cvd, indices, uuids):
    environ = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    job = find_job_gpus(statics_with_mig(), processes_by_gpu={0: [_Proc(1, None)]}, pid=999, environ=environ)
    assert job.source == "cuda_visible_devices" and job.indices == indices
    assert [i.uuid for i in job.instances] == uuids


# --------------------------------------------------------------------------- print_usage / usage_lines


def test_usage_line_reports_the_instance_and_its_memory(mig_api):
    mine = my_instance(mig_api)
    (line,) = nvtopy.usage_lines()
    head = f"GPU 0 MIG 0/{mine.gpu_instance_id}/0 {mine.profile} (H100 80GB HBM3, 18:00.0): "
    assert line.startswith(head), line
    assert f"/{fmt_bytes(mine.memory_total_bytes)} used" in line, "the instance's memory"
    assert "/79.6GiB used" not in line, "not the GPU's"
    assert "this process 3.0GiB" in line and "util N/A" in line


def test_print_usage_on_a_mig_device_with_torch(mig_api, monkeypatch, capsys):
    mine = my_instance(mig_api)
    torch = fake_torch([FakeDevice(mine.uuid, allocated=GIB, reserved=2 * GIB, peak=GIB)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    nvtopy.print_usage()
    out = capsys.readouterr().out
    assert out.startswith(f"GPU 0 MIG 0/{mine.gpu_instance_id}/0 {mine.profile} ")
    assert out.count("\n") == 1 and "torch cuda:0: allocated 1.0GiB, reserved 2.0GiB" in out


# --------------------------------------------------------------------------- track


def test_track_reports_the_instance(mig_api):
    mine = my_instance(mig_api)
    with nvtopy.track("slice", interval=0.02, callback=lambda r: None) as t:
        mig_api.set_process_memory(os.getpid(), 5 * GIB)
        sampled_more(t)  # the peak seen by a background sample
        mig_api.set_process_memory(os.getpid(), 4 * GIB)
    (gpu,) = t.report.gpus
    assert gpu.index == 0 and gpu.mig_uuid == mine.uuid
    assert gpu.mig_label == f"0/{mine.gpu_instance_id}/0" and gpu.mig_profile == mine.profile
    assert gpu.label == f"GPU 0 MIG {gpu.mig_label} {mine.profile}"
    assert gpu.memory_total_bytes == mine.memory_total_bytes, "the instance's memory, not the GPU's"
    assert gpu.memory_used_peak_bytes <= gpu.memory_total_bytes
    assert gpu.process_memory_peak_bytes == 5 * GIB and gpu.process_memory_end_bytes == 4 * GIB
    assert gpu.samples >= 2 and gpu.utilization_mean_percent is None, "no utilisation under MIG"
    text = t.report.format()
    assert f"  GPU 0 MIG {gpu.mig_label} {mine.profile} (H100 80GB HBM3): memory " in text
    assert f"of {fmt_bytes(mine.memory_total_bytes)})" in text
    assert t.report.as_dict()["gpus"][0]["mig_uuid"] == mine.uuid


def test_track_explicit_mig_device_and_whole_gpu(mig_api):
    other = mig_api.read_static(2).mig_instances[4]
    with nvtopy.track("two", gpus=[other.uuid[:10], 1], callback=lambda r: None) as t:
        pass
    first, second = t.report.gpus
    assert (first.index, first.mig_uuid, first.mig_label) == (2, other.uuid, "2/5/0")
    assert first.memory_total_bytes == other.memory_total_bytes
    assert (second.index, second.mig_uuid, second.mig_label) == (1, None, None)
    assert second.label == "GPU 1" and second.memory_total_bytes > 70 * GIB


# --------------------------------------------------------------------------- snapshot selection


def test_snapshot_of_a_mig_device(mig_api):
    target = mig_api.read_static(2).mig_instances[0]
    (gpu,) = nvtopy.snapshot(gpus=[target.uuid]).gpus
    assert gpu.index == 2 and gpu.static.mig_instances == (target,)
    assert all(target.runs(p) for p in gpu.processes)


def test_snapshot_only_visible_several_mig_devices_warns_at_the_caller(mig_api, monkeypatch):
    first, second = mig_api.read_static(2).mig_instances[3:5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{first.uuid},{second.uuid}")
    with pytest.warns(SelectionWarning, match="lists 2 MIG devices") as caught:
        snap = nvtopy.snapshot(only_visible=True)
    assert [w.filename for w in caught] == [__file__]
    (gpu,) = snap.gpus
    assert gpu.index == 2 and gpu.static.mig_instances == (first,)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", first.uuid)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nvtopy.snapshot(only_visible=True).gpus[0].static.mig_instances == (first,)

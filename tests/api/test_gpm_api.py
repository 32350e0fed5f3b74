"""The Python API's real-work figures: mean SM active and tensor active (GPM) in Sampler summaries and track reports.

On simulated H100s (Hopper: GPM) with the clock frozen, every sample reads the
same values, so the means are known exactly: the snapshot's. On A100s (no GPM)
they are absent from the summary and ``None`` in the report -- never 0 -- and the
text output is what it was before GPM.
"""

from __future__ import annotations

import os
import time

import pytest

import nvtopy
from nvtopy.api import state as runtime
from nvtopy.api import tracking
from nvtopy.api.sampler import METRICS, SAMPLER_GROUPS
from nvtopy.api.usage import activity_text
from nvtopy.backends.base import Reading
from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.backends.simulated.mig import instance_of

from .sampling import sampled_more

A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def frozen(clock, monkeypatch):
    """A factory: the API's shared backend, simulated on the frozen clock, this process on GPU 0."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

    def make(**kwargs) -> SimulatedBackend:
        kwargs.setdefault("gpus", 2)
        backend = SimulatedBackend(seed=3, clock=clock, real_pids=[os.getpid()], viewer="alice", **kwargs)
        runtime.configure(backend)
        return backend

    yield make
    runtime.reset()


def sampled(sampler: nvtopy.Sampler, count: int = 4) -> nvtopy.Sampler:
    """``sampler`` run until it holds ``count`` snapshots, then stopped."""
    with sampler:
        deadline = time.monotonic() + 5
        while len(sampler.history) < count:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    return sampler


def tracked(**kwargs) -> tracking.TrackReport:
    with nvtopy.track("block", interval=0.02, callback=lambda r: None, **kwargs) as t:
        sampled_more(t, 3)
    assert t.report is not None
    return t.report


def test_the_api_reads_gpm() -> None:
    assert "gpm" in SAMPLER_GROUPS and "mig" in SAMPLER_GROUPS
    assert "gpm" in tracking._GROUPS
    assert {"sm_active_percent", "tensor_active_percent"} <= set(METRICS)


# --------------------------------------------------------------------------- Sampler


def test_sampler_summary_has_mean_sm_and_tensor_active(frozen) -> None:
    frozen()
    expected = nvtopy.snapshot()
    sampler = sampled(nvtopy.Sampler(interval=0.02, only_visible=False))
    summary = sampler.summary()
    for gpu in expected.gpus:
        sm, tensor = gpu.sample.sm_active_percent, gpu.sample.tensor_active_percent
        assert sm is not None and tensor is not None and 0 < tensor < sm <= 100
        assert summary[gpu.index]["sm_active_percent"].mean == pytest.approx(sm)
        assert summary[gpu.index]["tensor_active_percent"].mean == pytest.approx(tensor)
        assert summary[gpu.index]["sm_active_percent"].samples == len(sampler.history)


def test_sampler_mean_over_a_series(frozen, monkeypatch) -> None:
    backend = frozen()
    series = iter([10.0, 20.0, 60.0] + [30.0] * 20)
    original = backend.read_sample

    def scripted(index: int, groups) -> Reading:
        reading = original(index, groups)
        if "gpm" in groups and index == 0:
            reading.values["sm_active_percent"] = next(series)
        return reading

    monkeypatch.setattr(backend, "read_sample", scripted)
    sampler = sampled(nvtopy.Sampler(interval=0.02, gpus=[0], history=3), count=3)
    kept = [s.gpus[0].sample.sm_active_percent for s in sampler.history]
    stats = sampler.summary()[0]["sm_active_percent"]
    assert (stats.min, stats.max, stats.samples) == (min(kept), max(kept), 3)
    assert stats.mean == pytest.approx(sum(kept) / 3)


def test_sampler_summary_without_gpm_has_no_entry_never_zero(frozen) -> None:
    frozen(model=A100)
    summary = sampled(nvtopy.Sampler(interval=0.02, only_visible=False)).summary()
    assert set(summary) == {0, 1}
    for per_gpu in summary.values():
        assert "utilization_gpu_percent" in per_gpu
        assert "sm_active_percent" not in per_gpu and "tensor_active_percent" not in per_gpu


def test_sampler_on_a_mig_device_reports_the_instance(frozen) -> None:
    backend = frozen(gpus=4, faults=parse_fault_specs(["mig=3@0"], gpus=4))
    mine = instance_of(os.getpid(), backend.read_static(0).mig_instances)
    expected = nvtopy.snapshot(gpus=[mine.uuid]).gpus[0].mig[0]
    assert expected.instance.uuid == mine.uuid and expected.usage is not None
    sm, tensor = expected.usage.sm_active_percent, expected.usage.tensor_active_percent
    assert sm is not None and tensor is not None
    summary = sampled(nvtopy.Sampler(interval=0.02, gpus=[mine.uuid], only_visible=False)).summary()
    assert summary[0]["sm_active_percent"].mean == pytest.approx(sm), "the instance's, not the GPU's"
    assert summary[0]["tensor_active_percent"].mean == pytest.approx(tensor)
    whole = nvtopy.snapshot(gpus=[0]).gpus[0].sample.sm_active_percent
    assert whole is not None and whole != pytest.approx(sm)


def test_sampler_on_several_mig_devices_weighs_them_by_sms(frozen) -> None:
    backend = frozen(gpus=4, faults=parse_fault_specs(["mig=3@2"], gpus=4))
    everything = backend.read_static(2).mig_instances
    instances = (everything[0], everything[-1])  # 3g (60 SMs) idle, 2g (32 SMs) at work
    shown = nvtopy.snapshot(gpus=[i.uuid for i in instances]).gpus[0].mig
    readings = [(m.usage.sm_active_percent, m.instance.sm_count) for m in shown]
    (idle, big), (busy, small) = readings
    assert idle == 0.0 and busy and busy > 10 and big and small and big != small
    weighted = sum(v * w for v, w in readings) / sum(w for _, w in readings)
    assert weighted != pytest.approx((idle + busy) / 2), "the SMs weigh"
    summary = sampled(nvtopy.Sampler(interval=0.02, gpus=[i.uuid for i in instances], only_visible=False)).summary()
    assert summary[2]["sm_active_percent"].mean == pytest.approx(weighted)


# --------------------------------------------------------------------------- track


def test_track_report_has_mean_sm_and_tensor_active(frozen) -> None:
    frozen()
    sample = nvtopy.snapshot(gpus=[0]).gpus[0].sample
    report = tracked()
    (gpu,) = report.gpus
    assert gpu.samples >= 2
    assert gpu.sm_active_mean_percent == pytest.approx(sample.sm_active_percent)
    assert gpu.tensor_active_mean_percent == pytest.approx(sample.tensor_active_percent)
    data = report.as_dict()["gpus"][0]
    assert data["sm_active_mean_percent"] == gpu.sm_active_mean_percent
    assert data["tensor_active_mean_percent"] == gpu.tensor_active_mean_percent
    work = f"SM {sample.sm_active_percent:.0f}% tensor {sample.tensor_active_percent:.0f}%"
    assert f"util {sample.utilization_gpu_percent}%, {work}, energy 0 J; this process" in report.format()


def test_track_without_gpm_is_none_and_its_line_unchanged(frozen) -> None:
    frozen(model=A100)
    report = tracked()
    (gpu,) = report.gpus
    assert gpu.sm_active_mean_percent is None and gpu.tensor_active_mean_percent is None, "N/A, never 0"
    data = report.as_dict()["gpus"][0]
    assert data["sm_active_mean_percent"] is None and data["tensor_active_mean_percent"] is None
    text = report.format()
    assert "SM " not in text and "tensor" not in text
    expected = f"util {gpu.utilization_mean_percent:.0f}%, energy 0 J; this process"  # the clock is frozen
    assert expected in text, "as before GPM"


def test_track_on_a_mig_device_reports_the_instance(frozen) -> None:
    backend = frozen(gpus=4, faults=parse_fault_specs(["mig=3@0"], gpus=4))
    mine = instance_of(os.getpid(), backend.read_static(0).mig_instances)
    usage = nvtopy.snapshot(gpus=[mine.uuid]).gpus[0].mig[0].usage
    report = tracked()
    (gpu,) = report.gpus
    assert gpu.mig_uuid == mine.uuid and gpu.utilization_mean_percent is None
    assert gpu.sm_active_mean_percent == pytest.approx(usage.sm_active_percent), "the instance's own"
    assert gpu.tensor_active_mean_percent == pytest.approx(usage.tensor_active_percent)
    assert f"util N/A, SM {usage.sm_active_percent:.0f}% tensor " in report.format()


def test_track_mean_skips_samples_without_a_value(frozen, monkeypatch) -> None:
    """The first GPM interval is not measured yet (N/A): the mean is over the samples that have one."""
    backend = frozen()
    original = backend.read_sample
    calls = {"n": 0}

    def first_unmeasured(index: int, groups) -> Reading:
        reading = original(index, groups)
        if "gpm" in groups:
            calls["n"] += 1
            if calls["n"] <= 2:
                reading.values.pop("sm_active_percent", None)
                reading.values.pop("tensor_active_percent", None)
            else:
                reading.values["sm_active_percent"] = 40.0
        return reading

    monkeypatch.setattr(backend, "read_sample", first_unmeasured)
    (gpu,) = tracked().gpus
    assert gpu.sm_active_mean_percent == pytest.approx(40.0)


# --------------------------------------------------------------------------- print_usage


def test_usage_line_adds_sm_and_tensor_where_measured(frozen, capsys) -> None:
    frozen()
    sample = nvtopy.snapshot(gpus=[0]).gpus[0].sample
    nvtopy.print_usage()
    line = capsys.readouterr().out
    work = f"SM {sample.sm_active_percent:.0f}% tensor {sample.tensor_active_percent:.0f}%"
    assert f", util {sample.utilization_gpu_percent}%, {work}, " in line


def test_usage_line_without_gpm_is_unchanged(frozen) -> None:
    frozen(model=A100)
    (line,) = nvtopy.usage_lines()
    assert "SM" not in line and "tensor" not in line
    assert "util " in line and "°C" in line


@pytest.mark.parametrize(
    ("sm", "tensor", "text"),
    [
        (52.4, 26.0, "SM 52% tensor 26%"),
        (52.4, None, "SM 52% tensor N/A"),  # one missing: said, never a 0
        (None, 3.0, "SM N/A tensor 3%"),
        (None, None, None),  # neither: left out
    ],
)
def test_activity_text(sm: float | None, tensor: float | None, text: str | None) -> None:
    assert activity_text(sm, tensor) == text

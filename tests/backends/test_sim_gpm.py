"""GPM on simulated GPUs: Hopper and newer report how much of the GPU works, consistent with its load."""

from __future__ import annotations

import pytest

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import GPM_FIELDS, GPM_PERCENT_FIELDS, MIG_GPM_FIELDS, Reason
from nvtopy.sources.collector import Collector


@pytest.mark.parametrize("model", ["H100 80GB HBM3", "H100 PCIe", "H200"])
def test_hopper_boards_report_every_gpm_field_within_range(sim, clock, model):
    collector = Collector(sim(gpus=4, model=model, steady=True))
    for _ in range(5):
        for gpu in collector.collect().gpus:
            sample = gpu.sample
            assert not any(sample.why(name) for name in GPM_FIELDS), sample.unavailable
            for name in GPM_PERCENT_FIELDS:
                assert 0.0 <= getattr(sample, name) <= 100.0, name
            assert sample.sm_active_percent <= sample.graphics_active_percent + 1e-9, "SMs busy only while active"
            assert sample.tensor_active_percent <= sample.sm_active_percent + 1e-9
            assert sample.sm_occupancy_percent <= sample.sm_active_percent + 1e-9
            assert abs(sample.graphics_active_percent - sample.utilization_gpu_percent) <= 0.5
            assert sample.gpm_pcie_rx_bytes_per_s > 0
        clock.advance(7.0)


@pytest.mark.parametrize("model", ["A100-SXM4-80GB", "L4", "V100", "T4", "RTX 4090"])
def test_boards_before_hopper_say_not_supported_never_zero(sim, model):
    sample = Collector(sim(gpus=1, model=model)).collect().gpus[0].sample
    for name in GPM_FIELDS:
        assert getattr(sample, name) is None and sample.why(name) is Reason.NOT_SUPPORTED, name


def test_a_stuck_gpu_is_busy_with_almost_no_sm_active(sim):
    gpus = Collector(sim(gpus=3, faults=parse_fault_specs(["stuck@2"], gpus=3), steady=True)).collect().gpus
    stuck = gpus[2].sample
    assert stuck.utilization_gpu_percent == 100 and stuck.graphics_active_percent == 100.0
    assert stuck.sm_active_percent < 5.0, "a spinning collective: almost no SM works"
    busy = gpus[0].sample
    assert busy.sm_active_percent > 20.0, "a training job keeps its SMs busy"


def test_mig_instances_have_their_own_activity(sim):
    gpu = Collector(sim(gpus=2, faults=parse_fault_specs(["mig=7@1"], gpus=2))).collect().gpus[1]
    for state in gpu.mig:
        usage = state.usage
        assert not any(usage.unavailable.get(name) for name in MIG_GPM_FIELDS)
        if state.processes:
            assert usage.sm_active_percent > 0
        else:
            assert usage.sm_active_percent == 0.0, "an instance without a process does nothing"
    assert gpu.sample.sm_active_percent is not None, "the whole GPU keeps its own figures under MIG"


def test_mig_instances_of_an_a100_say_not_supported(sim):
    gpu = Collector(sim(gpus=1, model="A100-SXM4-80GB", faults=parse_fault_specs(["mig=2@0"], gpus=1))).collect()
    for state in gpu.gpus[0].mig:
        assert state.usage.sm_active_percent is None
        assert state.usage.unavailable["sm_active_percent"] is Reason.NOT_SUPPORTED
        assert state.usage.memory_used_bytes is not None


def test_gpm_is_deterministic_and_moves_with_the_clock(sim, clock):
    first = Collector(sim(gpus=2, seed=5)).collect().gpus[1].sample.sm_active_percent
    again = Collector(sim(gpus=2, seed=5)).collect().gpus[1].sample.sm_active_percent
    assert first == again
    collector = Collector(sim(gpus=2, seed=5, steady=True))
    seen = set()
    for _ in range(4):
        seen.add(round(collector.collect().gpus[1].sample.sm_active_percent, 6))
        clock.advance(5.0)
    assert len(seen) > 1


def test_history_keeps_sm_and_tensor_activity(sim, clock):
    collector = Collector(sim(gpus=1, steady=True))
    for _ in range(3):
        history = collector.collect().gpus[0].history
        clock.advance(1.0)
    assert len(history.sm_active_percent) == 3 and all(v is not None for v in history.sm_active_percent)
    assert len(history.tensor_active_percent) == 3

"""MIG on simulated GPUs: the layouts, what each instance reports, and what MIG hides (as on real GPUs)."""

from __future__ import annotations

import pytest

from nvtopy.backends.simulated.catalog import find_model
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.backends.simulated.mig import LAYOUTS, profile_name
from nvtopy.errors import UsageError
from nvtopy.model import ALL_GROUPS, Reason
from nvtopy.sources.collector import Collector

from ..builders import run_nvtopy

GIB = 1024**3


def mig_backend(sim, *specs: str, gpus: int = 4, model: str = "H100 80GB HBM3"):
    return sim(gpus=gpus, model=model, faults=parse_fault_specs(specs, gpus=gpus, model=find_model(model)))


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7])
def test_each_layout_fills_the_gpu_without_overflowing_it(sim, count):
    backend = mig_backend(sim, f"mig={count}@1")
    static = backend.read_static(1)
    assert static.mig_mode is True and len(static.mig_instances) == count
    assert sum(m.slices or 0 for m in static.mig_instances) <= 7, "a GPU has 7 compute slices (3g+3g leaves one)"
    assert sum(m.memory_total_bytes or 0 for m in static.mig_instances) <= static.memory_total_bytes
    assert [m.gpu_instance_id for m in static.mig_instances] == list(range(1, count + 1))
    assert len(set(static.mig_devices)) == count and all(u.startswith("MIG-") for u in static.mig_devices)


def test_profiles_are_named_as_nvidia_smi_names_them():
    h100, a100_40 = find_model("H100 80GB HBM3"), find_model("A100-SXM4-40GB")
    assert [profile_name(h100, s) for s in (1, 2, 3, 4, 7)] == ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert [profile_name(a100_40, s) for s in (1, 2, 3, 7)] == ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    assert LAYOUTS[3] == (3, 2, 2)


def test_hopper_and_ampere_instances_have_their_sm_counts(sim):
    h100 = mig_backend(sim, "mig=7@0", gpus=1).read_static(0)
    a100 = mig_backend(sim, "mig=2@0", gpus=1, model="A100-SXM4-80GB").read_static(0)
    assert {m.sm_count for m in h100.mig_instances} == {16}
    assert [m.sm_count for m in a100.mig_instances] == [42, 42]
    assert [m.profile for m in a100.mig_instances] == ["3g.40gb", "3g.40gb"]


def test_mixed_gpus_only_the_named_ones_are_split(sim):
    backend = mig_backend(sim, "mig=3@1", "mig=7@2", "mig=pending@3")
    statics = [backend.read_static(i) for i in range(4)]
    assert [s.mig_mode for s in statics] == [False, True, True, False]
    assert [len(s.mig_instances) for s in statics] == [0, 3, 7, 0]
    assert [s.mig_pending_change for s in statics] == [False, False, False, True]


def test_under_mig_utilisation_is_not_supported_and_memory_is_per_instance(sim):
    backend = mig_backend(sim, "mig=3@1")
    gpu = Collector(backend).collect().gpus[1]
    assert gpu.sample.utilization_gpu_percent is None
    assert gpu.sample.why("utilization_gpu_percent") is Reason.NOT_SUPPORTED
    assert gpu.sample.why("encoder_percent") is Reason.NOT_SUPPORTED
    assert gpu.sample.temperature_c is not None and gpu.sample.power_draw_w is not None, "the parent's own readings"
    states = gpu.mig
    assert len(states) == 3
    for state in states:
        assert 0 < state.memory_used_bytes <= state.memory_total_bytes
        held = sum(p.gpu_memory_bytes or 0 for p in state.processes)
        assert held <= state.memory_used_bytes
    assert gpu.sample.memory_used_bytes == sum(s.memory_used_bytes for s in states)
    assert gpu.processes and all(p.instance_label and p.sm_percent is None for p in gpu.processes)
    assert sum(len(s.processes) for s in states) == len(gpu.processes), "every process runs on one instance"


def test_a_gpu_without_mig_is_unchanged(sim):
    plain = Collector(sim(gpus=2)).collect().gpus[1]
    split = Collector(mig_backend(sim, "mig=3@0", gpus=2)).collect().gpus[1]
    assert plain.sample == split.sample and plain.static == split.static


def test_the_simulation_is_deterministic(sim):
    first = Collector(mig_backend(sim, "mig=7@2")).collect().gpus[2]
    second = Collector(mig_backend(sim, "mig=7@2")).collect().gpus[2]
    assert first.static.mig_instances == second.static.mig_instances
    assert first.sample.mig_usage == second.sample.mig_usage


def test_pending_mig_has_no_instance_and_reports_utilisation(sim):
    gpu = Collector(mig_backend(sim, "mig=pending@0", gpus=1)).collect(ALL_GROUPS).gpus[0]
    assert gpu.static.mig_instances == () and gpu.sample.mig_usage == ()
    assert gpu.sample.utilization_gpu_percent is not None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mig=8@1", "give the number of MIG instances, 0-7, or 'pending'"),
        ("mig=@1", "give the number of MIG instances"),
        ("mig=two@1", "give the number of MIG instances"),
        ("mig=-1@1", "give the number of MIG instances"),
        ("mig=3@9", "no GPU 9"),
    ],
)
def test_bad_mig_specs_are_one_clear_error(spec, message):
    with pytest.raises(UsageError, match=message):
        parse_fault_specs([spec], gpus=4, model=find_model("H100 80GB HBM3"))


def test_a_board_without_mig_refuses_it():
    with pytest.raises(UsageError, match="has no MIG"):
        parse_fault_specs(["mig=2@0"], gpus=1, model=find_model("L4"))


def test_the_demo_shows_instances_on_the_command_line():
    result = run_nvtopy("--demo", "--demo-fault", "mig=2@1", "--once", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("MIG-") >= 2


def test_the_demo_refuses_mig_on_a_board_without_it():
    result = run_nvtopy("--demo", "--demo-model", "L4", "--demo-fault", "mig=2@1", "--once", timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "has no MIG" in result.stderr

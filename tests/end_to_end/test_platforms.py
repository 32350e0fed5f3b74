"""The platforms real captures bring, handled on purpose: unified memory, superchips, WDDM, vGPU, old boards.

Simulated models and ``--demo-fault`` specs stand for them here (deterministic), and the fake driver
(../shared/fake-nvml, skipped without it) for the GB10-class machine whose NVML reports no framebuffer.
"""

from __future__ import annotations

import io
import json
import os
import subprocess

import pytest

from nvtopy.backends.simulated.catalog import find_model
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import Reason
from nvtopy.render.text import NO_FRAMEBUFFER_NOTE, render_snapshot
from nvtopy.sources.collector import Collector

from ..builders import run_nvtopy
from ..conftest import needs_fake_nvml

PLATFORM_MODELS = {
    "GH200": "NVIDIA GH200 480GB",
    "GB200": "NVIDIA GB200",
    "GB10": "NVIDIA GB10",
    "RTX 5090": "NVIDIA GeForce RTX 5090",
    "GRID P4": "GRID P4-1Q",
    "GTX 680": "NVIDIA GeForce GTX 680",
}


@pytest.mark.parametrize(("short", "name"), PLATFORM_MODELS.items())
def test_platform_models_are_in_the_catalogue(short, name):
    assert find_model(short).name == name


def test_a_name_inside_another_still_finds_its_own_model():
    """ "H200" is the H200, though "GH200" contains it; "A100" still names two models."""
    assert find_model("H200").name == "NVIDIA H200"
    with pytest.raises(Exception, match="matches several models"):
        find_model("A100")


def _snapshot(sim, clock, **kwargs):
    collector = Collector(sim(**kwargs))
    for _ in range(3):
        clock.advance(1.0)
        snapshot = collector.collect()
    return snapshot


def _text(snapshot) -> str:
    out = io.StringIO()
    render_snapshot(snapshot, out, color=False)
    return out.getvalue()


def test_unified_memory_is_na_with_its_reason_and_processes_keep_their_memory(sim, clock):
    snapshot = _snapshot(sim, clock, gpus=2, model="GB10", seed=3)
    for gpu in snapshot.gpus:
        assert gpu.static.memory_total_bytes is None
        assert gpu.static.unavailable["memory_total_bytes"] is Reason.NOT_SUPPORTED
        assert gpu.sample.memory_used_bytes is None and gpu.memory_used_percent is None  # never 0 %
        assert gpu.processes and all(p.gpu_memory_bytes for p in gpu.processes)
    text = _text(snapshot)
    assert f"GPUs 0, 1: memory N/A: {NO_FRAMEBUFFER_NOTE}" in text
    assert "(0%)" not in text


def test_no_fb_memory_fault_on_one_gpu(sim, clock):
    faults = parse_fault_specs(["no-fb-memory@1"], gpus=2)
    snapshot = _snapshot(sim, clock, gpus=2, faults=faults)
    assert snapshot.gpus[0].static.memory_total_bytes and snapshot.gpus[0].sample.memory_used_bytes is not None
    assert snapshot.gpus[1].static.memory_total_bytes is None
    assert f"GPU 1: memory N/A: {NO_FRAMEBUFFER_NOTE}" in _text(snapshot)


def test_two_gpus_on_one_board_share_its_serial_and_stay_two_gpus(sim, clock):
    snapshot = _snapshot(sim, clock, gpus=4, model="GB200")
    serials = [gpu.static.serial for gpu in snapshot.gpus]
    assert serials[0] == serials[1] != serials[2] == serials[3]
    assert len({gpu.static.uuid for gpu in snapshot.gpus}) == 4
    assert [gpu.index for gpu in snapshot.gpus] == [0, 1, 2, 3]
    assert {p.gpu_index for p in snapshot.processes} == {0, 1, 2, 3}


def test_superchip_reports_the_vestigial_pcie_link_of_c2c(sim, clock):
    gpu = _snapshot(sim, clock, gpus=1, model="GH200").gpus[0]
    assert (gpu.static.pcie_link_gen_max, gpu.static.pcie_link_width_max) == (4, 1)
    assert gpu.health.verdict.name == "OK"  # x1 is what the C2C board can do: no downgrade warning


def test_wddm_leaves_per_process_memory_na(sim, clock):
    snapshot = _snapshot(sim, clock, gpus=1, faults=parse_fault_specs(["wddm"], gpus=1))
    processes = snapshot.gpus[0].processes
    assert processes and all(p.gpu_memory_bytes is None for p in processes)
    assert snapshot.gpus[0].sample.memory_used_bytes is not None  # the board's memory is still known


VGPU_NA = ("temperature_c", "power_draw_w", "power_limit_w", "ecc_mode", "throttle_reasons")


def test_vgpu_guest_most_fields_na(sim, clock):
    snapshot = _snapshot(sim, clock, gpus=2, model="L4", faults=parse_fault_specs(["vgpu@1"], gpus=2))
    host, guest = snapshot.gpus
    for name in VGPU_NA:
        assert getattr(guest.sample, name) is None and guest.sample.why(name) is Reason.NOT_SUPPORTED, name
        assert getattr(host.sample, name) is not None, name
    assert guest.static.power_default_limit_w is None and guest.static.temperature_slowdown_c is None
    assert guest.sample.memory_used_bytes is not None and guest.sample.utilization_gpu_percent is not None
    assert all(p.sm_percent is None for p in guest.processes)


def _once_json(*args: str) -> dict:
    result = run_nvtopy("--demo", "--once", "--json", *args, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# model -> (fields null on each GPU, fields present, driver, CUDA)
CLI_CASES = {
    "GB10": (("memory_total_bytes", "memory_used_bytes", "memory_free_bytes"), ("power_draw_w",), "580.95.05"),
    "GH200": ((), ("memory_total_bytes", "power_draw_w"), "550.127.05"),
    "GB200": ((), ("memory_total_bytes", "serial"), "580.173.02"),
    "RTX 5090": (("ecc_mode", "mig_mode"), ("fan_percent", "memory_total_bytes"), "570.124.06"),
    "GRID P4": (("temperature_c", "fan_percent", "power_draw_w", "ecc_mode"), ("memory_used_bytes",), "513.46"),
    "GTX 680": (
        ("power_draw_w", "power_limit_w", "utilization_gpu_percent", "ecc_mode"),
        ("fan_percent",),
        "470.256.02",
    ),
}


@pytest.mark.parametrize("model", CLI_CASES)
def test_once_json_on_each_platform(model):
    null, present, driver = CLI_CASES[model]
    data = _once_json("--demo-gpus", "2", "--demo-model", model)
    assert data["driver_version"] == driver
    for gpu in data["gpus"]:
        assert gpu["name"] == PLATFORM_MODELS[model]
        for name in null:
            assert gpu[name] is None and gpu["unavailable"][name] == "not_supported", name
        for name in present:
            assert gpu[name] is not None, name


def test_once_text_of_the_platform_faults():
    result = run_nvtopy(
        "--demo", "--once", "--demo-gpus", "2", "--demo-fault", "no-fb-memory@0", "--demo-fault", "vgpu@1", timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"GPU 0: memory N/A: {NO_FRAMEBUFFER_NOTE}" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("spec", ["wddm@1", "vgpu=2", "no-fb-memory=1", "vgpu@9"])
def test_bad_platform_specs_are_one_line_errors(spec):
    result = run_nvtopy("--demo", "--once", "--demo-gpus", "2", "--demo-fault", spec, timeout=60)
    assert result.returncode != 0 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr


@needs_fake_nvml
def test_gb10_on_the_fake_driver(fake_lib):
    """nvtop#449 / nvitop#195: NVML answers NotSupported for the framebuffer; nvtopy says why, processes keep memory."""
    worker = subprocess.Popen(["sleep", "120"])
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_") and k != "CUDA_VISIBLE_DEVICES"}
        env.update(
            LD_LIBRARY_PATH=fake_lib,
            FAKE_NVML_GPUS="1",
            FAKE_NVML_MODEL="NVIDIA GB10",
            FAKE_NVML_NOT_SUPPORTED="memory",
            FAKE_NVML_PIDS=str(worker.pid),
        )
        text = run_nvtopy("--once", env=env, timeout=60)
        data = run_nvtopy("--once", "--json", env=env, timeout=60)
    finally:
        worker.kill()
        worker.wait()
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    assert f"GPU 0: memory N/A: {NO_FRAMEBUFFER_NOTE}" in text.stdout
    gpu = json.loads(data.stdout)["gpus"][0]
    assert gpu["memory_total_bytes"] is None and gpu["unavailable"]["memory_total_bytes"] == "not_supported"
    assert [p["pid"] for p in gpu["processes"]] == [worker.pid] and gpu["processes"][0]["gpu_memory_bytes"] > 0


def test_superchip_mig_profiles_divide_the_gpus_own_memory():
    """ "GH200 480GB" counts the Grace CPU's memory: its MIG profiles are those of its 96 GB (3g.48gb, not 3g.240gb)."""
    from nvtopy.backends.simulated.mig import profile_name

    gh200 = find_model("GH200")
    assert [profile_name(gh200, slices) for slices in (1, 3, 7)] == ["1g.12gb", "3g.48gb", "7g.96gb"]
    assert profile_name(find_model("H100 80GB HBM3"), 3) == "3g.40gb"


def test_tui_panel_says_why_unified_memory_has_no_bar(sim, clock):
    from nvtopy.render.gpu import panel_lines

    snapshot = _snapshot(sim, clock, gpus=2, faults=parse_fault_specs(["no-fb-memory@1"], gpus=2))
    with_fb, unified = (panel_lines(gpu, 100)[0].plain for gpu in snapshot.gpus)
    assert unified.startswith(f"MEM N/A: {NO_FRAMEBUFFER_NOTE}")
    assert "unified" not in with_fb and "%" in with_fb


def test_the_driver_model_and_virtualization_mode_are_said(sim, clock):
    """A WDDM driver and a vGPU guest say what they are (model, JSON, replay, --once), not only their N/As."""
    from nvtopy.formats.contract import snapshot_to_dict
    from nvtopy.formats.contract_decoder import snapshot_from_dict

    snapshot = _snapshot(sim, clock, gpus=2, faults=parse_fault_specs(["wddm", "vgpu@1"], gpus=2))
    bare, guest = snapshot.gpus
    assert (bare.static.driver_model, bare.static.virtualization_mode) == ("WDDM", "none")
    assert guest.static.virtualization_mode == "vgpu"
    text = _text(snapshot)
    assert "GPU 1: a vGPU guest: the host owns the sensors" in text
    assert "GPUs 0, 1: Windows WDDM driver: per-process GPU memory is N/A" in text
    data = json.loads(json.dumps(snapshot_to_dict(snapshot)))
    assert [g["driver_model"] for g in data["gpus"]] == ["WDDM", "WDDM"]
    assert [g["virtualization_mode"] for g in data["gpus"]] == ["none", "vgpu"]
    replayed = snapshot_from_dict(data)
    assert replayed.gpus[1].static.virtualization_mode == "vgpu" and replayed.gpus[0].static.driver_model == "WDDM"
    linux = _snapshot(sim, clock, gpus=1)
    assert linux.gpus[0].static.driver_model is None
    assert linux.gpus[0].static.unavailable.get("driver_model") is Reason.NOT_SUPPORTED, "Linux: N/A with its reason"
    assert "WDDM" not in _text(linux) and "vGPU" not in _text(linux)


@pytest.mark.parametrize(("answer", "expected"), [([0, 0], "WDDM"), ([1, 1], "TCC"), ([2, 2], "MCDM"), ([7, 7], None)])
def test_nvml_driver_models_in_words(make_backend, answer, expected):
    from ..fake_pynvml import FakeNvml

    fake = FakeNvml(1)
    fake.nvmlDeviceGetDriverModel = lambda handle: answer  # a Windows driver
    fake.nvmlDeviceGetVirtualizationMode = lambda handle: 2  # a vGPU guest
    static = make_backend(fake).read_static(0)
    assert static.driver_model == expected and static.virtualization_mode == "vgpu"
    if expected is None:  # a value NVML never gives: N/A, never a made-up word
        assert static.unavailable.get("driver_model") is Reason.NOT_SUPPORTED

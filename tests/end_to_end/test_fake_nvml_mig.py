"""MIG end to end on the real nvidia-ml-py path (../shared/fake-nvml): every view, 0 to 7 instances, mixed GPUs.

What the issue's "done" names: with ``FAKE_NVML_MIG=1 FAKE_NVML_MIG_DEVICES=3`` each
instance, its memory and its processes are in the TUI, ``--once``, JSON and the
exporter, and ``CUDA_VISIBLE_DEVICES=<an instance's UUID> nvtopy --only-visible``
shows exactly that instance. Skipped where ../shared/fake-nvml (or a C compiler) is absent.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..builders import fake_nvml_env, run_nvtopy
from ..conftest import needs_fake_nvml

pytestmark = needs_fake_nvml
ROOT = Path(__file__).resolve().parents[2]
PROFILES = {1: "7g.80gb", 3: "2g.20gb", 7: "1g.10gb"}  # what fake-nvml names each layout on an H100 80GB


@pytest.fixture
def workers():
    procs = [subprocess.Popen(["sleep", "120"]) for _ in range(6)]
    yield ",".join(str(p.pid) for p in procs)
    for proc in procs:
        proc.kill()
        proc.wait()


def _env(fake_lib: str, **knobs: str) -> dict[str, str]:
    return fake_nvml_env(fake_lib, **{"FAKE_NVML_GPUS": "3", "FAKE_NVML_MIG": "1", **knobs})


def nvtopy(fake_lib: str, *args: str, **knobs: str) -> subprocess.CompletedProcess[str]:
    return run_nvtopy(*args, env=_env(fake_lib, **knobs), cwd=ROOT)


def gpus_of(result: subprocess.CompletedProcess[str]) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["gpus"]


@pytest.mark.parametrize("count", [0, 1, 3, 7])
def test_json_has_each_instance_its_memory_and_processes(fake_lib, workers, count):
    gpus = gpus_of(nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MIG_DEVICES=str(count), FAKE_NVML_PIDS=workers))
    plain, split, other = gpus
    assert plain["mig_mode"] is False and plain["mig_devices"] == [] and other["mig_devices"] == []
    assert plain["utilization_gpu_percent"] is not None
    assert split["mig_mode"] is True and split["utilization_gpu_percent"] is None
    assert split["unavailable"]["utilization_gpu_percent"] == "not_supported"
    devices = split["mig_devices"]
    assert len(devices) == count
    assert [d["gpu_instance_id"] for d in devices] == list(range(1, count + 1))
    for device in devices:
        assert device["uuid"].startswith("MIG-") and device["profile"] == PROFILES[count]
        assert device["compute_instance_id"] == 0 and device["label"] == f"1/{device['gpu_instance_id']}/0"
        assert 0 < device["memory_used_bytes"] <= device["memory_total_bytes"]
        assert device["sm_count"] > 0
        on_it = [p["pid"] for p in split["processes"] if p["gpu_instance_id"] == device["gpu_instance_id"]]
        assert sorted(device["pids"]) == sorted(on_it) and device["process_count"] == len(on_it)
    if count:
        assert split["processes"] and all(p["instance_label"] for p in split["processes"])
        assert sum(d["process_count"] for d in devices) == len(split["processes"])


def test_once_text_shows_each_instance(fake_lib, workers):
    result = nvtopy(fake_lib, "--once", FAKE_NVML_MIG_DEVICES="3", FAKE_NVML_PIDS=workers)
    assert result.returncode == 0, result.stderr
    for gi in (1, 2, 3):
        line = next(line for line in result.stdout.splitlines() if line.startswith(f"1/{gi}/0 "))
        assert "2g.20gb" in line and "GiB" in line and "MIG-" in line
    assert "utilisation is not reported under MIG" in result.stdout


def test_only_visible_with_an_instance_uuid_shows_exactly_that_instance(fake_lib, workers):
    devices = gpus_of(nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MIG_DEVICES="3", FAKE_NVML_PIDS=workers))[1][
        "mig_devices"
    ]
    chosen = next(d for d in devices if d["process_count"]) if any(d["process_count"] for d in devices) else devices[1]
    result = nvtopy(
        fake_lib,
        "--once",
        "--json",
        "--only-visible",
        FAKE_NVML_MIG_DEVICES="3",
        FAKE_NVML_PIDS=workers,
        CUDA_VISIBLE_DEVICES=chosen["uuid"],
    )
    (gpu,) = gpus_of(result)
    assert gpu["index"] == 1 and [d["uuid"] for d in gpu["mig_devices"]] == [chosen["uuid"]]
    assert sorted(p["pid"] for p in gpu["processes"]) == sorted(chosen["pids"])
    assert result.stderr == ""


def test_several_mig_devices_in_cuda_visible_devices_says_cuda_uses_the_first(fake_lib):
    devices = gpus_of(nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MIG_DEVICES="3"))[1]["mig_devices"]
    listed = ",".join(d["uuid"] for d in devices[1:])
    result = nvtopy(
        fake_lib, "--once", "--json", "--only-visible", FAKE_NVML_MIG_DEVICES="3", CUDA_VISIBLE_DEVICES=listed
    )
    (gpu,) = gpus_of(result)
    assert [d["uuid"] for d in gpu["mig_devices"]] == [devices[1]["uuid"]]
    assert "uses only the first" in result.stderr and result.stderr.count("\n") == 1


def test_gpus_takes_a_mig_uuid_prefix_and_the_legacy_form(fake_lib):
    gpus = gpus_of(nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MIG_DEVICES="3"))
    parent, third = gpus[1]["uuid"], gpus[1]["mig_devices"][2]
    by_prefix = gpus_of(nvtopy(fake_lib, "--once", "--json", "--gpus", third["uuid"][:14], FAKE_NVML_MIG_DEVICES="3"))
    legacy = gpus_of(nvtopy(fake_lib, "--once", "--json", "--gpus", f"MIG-{parent}/3/0", FAKE_NVML_MIG_DEVICES="3"))
    for chosen in (by_prefix, legacy):
        assert [(g["index"], [d["uuid"] for d in g["mig_devices"]]) for g in chosen] == [(1, [third["uuid"]])]
    missing = nvtopy(fake_lib, "--once", "--gpus", f"MIG-{parent}/9/0", FAKE_NVML_MIG_DEVICES="3")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and len(missing.stderr.splitlines()) == 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_exporter_has_a_series_per_instance(fake_lib, workers):
    from prometheus_client.parser import text_string_to_metric_families

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "0.5"],
        env=_env(fake_lib, FAKE_NVML_MIG_DEVICES="3", FAKE_NVML_PIDS=workers),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        body = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                if 'GPU_I_ID="3"' in body:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        used = {}
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == "DCGM_FI_DEV_FB_USED" and "GPU_I_ID" in sample.labels:
                    assert sample.labels["gpu"] == "1" and sample.labels["GPU_I_PROFILE"] == "2g.20gb"
                    used[sample.labels["GPU_I_ID"]] = sample.value
        assert set(used) == {"1", "2", "3"}, body[:2000]
        assert all(0 < mib < 20_500 for mib in used.values()), used
        assert "nvtopy_mig_device_info{" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


TUI_SCRIPT = """
import asyncio, sys
from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.tui.app import NvtopyApp
from tests.tui_helpers import screen_text, started

async def main():
    app = NvtopyApp.for_backend(NvmlBackend(), interval=0.5)
    async with app.run_test(size=(170, 60)) as pilot:
        await started(pilot, app, snapshots=2)
        print(screen_text(app))
        await pilot.press("q")

asyncio.run(main())
"""


def test_the_monitor_shows_each_instance_and_its_processes(fake_lib, workers):
    result = subprocess.run(
        [sys.executable, "-c", TUI_SCRIPT],
        capture_output=True,
        text=True,
        env=_env(fake_lib, FAKE_NVML_MIG_DEVICES="3", FAKE_NVML_PIDS=workers),
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    screen = result.stdout
    for gi in (1, 2, 3):
        assert f"1/{gi}/0 2g.20gb" in screen, screen
    assert "utilisation is not reported under MIG" in screen
    rows = [line for line in screen.splitlines() if " 1/" in line and any(pid in line for pid in workers.split(","))]
    assert rows, "a process row names its instance"

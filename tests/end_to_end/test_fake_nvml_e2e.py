"""End to end on the real nvidia-ml-py path, with ../shared/fake-nvml standing in for the driver.

Skipped cleanly where ../shared is absent (a user's clone) or no C compiler exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..builders import fake_nvml_env, run_nvtopy
from ..commands.test_cli import check_contract
from ..conftest import FAKE_NVML_SRC, needs_fake_nvml
from ..waiting import exec_shown

pytestmark = needs_fake_nvml


@pytest.fixture
def workers():
    """Four ``sleep 120``, once the kernel shows their argv (the rows' command is compared with it)."""
    procs = [subprocess.Popen(["sleep", "120"]) for _ in range(4)]
    yield [exec_shown(p.pid) for p in procs]
    for proc in procs:
        proc.kill()
        proc.wait()


def nvtopy(fake_lib: str, *args: str, **knobs: str) -> subprocess.CompletedProcess:
    return run_nvtopy(*args, env=fake_nvml_env(fake_lib, **knobs))


def test_every_field_reported(fake_lib, workers):
    result = nvtopy(fake_lib, "--once", "--json", FAKE_NVML_GPUS="4", FAKE_NVML_PIDS=",".join(map(str, workers)))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    check_contract(data)
    assert data["driver_version"] == "550.54.15" and data["cuda_driver_version"] == "12.4"
    assert data["backend"] == "nvml" and len(data["gpus"]) == 4
    for gpu in data["gpus"]:
        optional = ("processes_unavailable", "processes_hint", "host", "host_index", "note")  # null when not relevant
        assert gpu["unavailable"].get("driver_model") == "not_supported", "Linux: NVML has no driver model"
        optional += ("driver_model",)
        missing = [k for k, v in gpu.items() if v is None and k not in optional]
        assert missing == [], f"GPU {gpu['index']}: null fields {missing} ({gpu['unavailable']})"
        assert gpu["bus_id"].startswith("00000000:") and gpu["uuid"].startswith("GPU-")
        assert gpu["memory_reserved_bytes"] > 0, "memory info v2 is used"
    pids = sorted(p["pid"] for g in data["gpus"] for p in g["processes"])
    assert pids == sorted(workers)
    for proc in (p for g in data["gpus"] for p in g["processes"]):
        assert proc["command"] == "sleep 120" and proc["user"] and proc["gpu_memory_bytes"] > 0
        assert proc["sm_percent"] is not None


def test_faults_degrade_field_by_field(fake_lib, workers):
    result = nvtopy(
        fake_lib,
        "--once",
        "--json",
        FAKE_NVML_GPUS="3",
        FAKE_NVML_PIDS=",".join(map(str, workers)),
        FAKE_NVML_LOST="1",
        FAKE_NVML_LOST_HANDLE="1",
        FAKE_NVML_NOT_SUPPORTED="fan,power",
        FAKE_NVML_NOT_SUPPORTED_GPUS="0",
        FAKE_NVML_NO_PROCESS_MEMORY="1",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    check_contract(data)
    gpu0, gpu1, gpu2 = data["gpus"]
    assert gpu0["fan_percent"] is None and gpu0["unavailable"]["fan_percent"] == "not_supported"
    assert gpu0["power_draw_w"] is None and gpu0["temperature_c"] is not None
    assert gpu1["lost"] is True and gpu1["unavailable"]["temperature_c"] == "lost"
    assert gpu1["processes_unavailable"] == "lost"
    assert gpu2["lost"] is False and gpu2["power_draw_w"] is not None and gpu2["fan_percent"] is not None
    procs = gpu0["processes"] + gpu2["processes"]
    assert procs and all(p["gpu_memory_bytes"] is None for p in procs)
    text = nvtopy(fake_lib, "--once", FAKE_NVML_GPUS="3", FAKE_NVML_LOST="1", FAKE_NVML_LOST_HANDLE="1")
    assert text.returncode == 0 and "LOST" in text.stdout


def test_mig_gpu(fake_lib):
    result = nvtopy(fake_lib, "--once", "--json", FAKE_NVML_GPUS="2", FAKE_NVML_MIG="0", FAKE_NVML_MIG_DEVICES="3")
    assert result.returncode == 0, result.stderr
    gpu0, gpu1 = json.loads(result.stdout)["gpus"]
    assert gpu0["mig_mode"] is True and len(gpu0["mig_devices"]) == 3
    assert all(m["uuid"].startswith("MIG-") for m in gpu0["mig_devices"])
    assert gpu0["utilization_gpu_percent"] is None, "utilisation is not supported under MIG"
    assert gpu1["mig_mode"] is False and gpu1["utilization_gpu_percent"] is not None
    visible = nvtopy(
        fake_lib,
        "--once",
        "--json",
        "--only-visible",
        FAKE_NVML_GPUS="2",
        FAKE_NVML_MIG="0",
        CUDA_VISIBLE_DEVICES=gpu0["mig_devices"][1]["uuid"],
    )
    assert [g["index"] for g in json.loads(visible.stdout)["gpus"]] == [0]


def test_driver_not_loaded_is_one_line(fake_lib):
    result = nvtopy(fake_lib, "--once", FAKE_NVML_DRIVER_NOT_LOADED="1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "driver is not loaded" in result.stderr


def test_zero_gpus(fake_lib):
    result = nvtopy(fake_lib, "--once", FAKE_NVML_GPUS="0")
    assert result.returncode == 0 and "No NVIDIA GPU found" in result.stdout


def test_selection_by_bus_id_on_real_path(fake_lib):
    result = nvtopy(fake_lib, "--once", "--json", "--gpus", "0000:2b:00.0", FAKE_NVML_GPUS="4")
    assert result.returncode == 0, result.stderr
    assert [g["bus_id"] for g in json.loads(result.stdout)["gpus"]] == ["00000000:2B:00.0"]


def test_log_and_exporter_on_the_real_nvml_path(fake_lib, workers, tmp_path):
    import socket
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    knobs = {"FAKE_NVML_GPUS": "2", "FAKE_NVML_PIDS": ",".join(map(str, workers))}
    log = nvtopy(fake_lib, "log", "--count", "2", "--interval", "0.1", "--format", "jsonl", "--processes", **knobs)
    assert log.returncode == 0, log.stderr
    for line in log.stdout.splitlines():
        check_contract(json.loads(line))

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.update(knobs, LD_LIBRARY_PATH=fake_lib)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                if "DCGM_FI_DEV_GPU_UTIL{" in text:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        util = families["DCGM_FI_DEV_GPU_UTIL"].samples
        assert sorted(s.labels["gpu"] for s in util) == ["0", "1"]
        assert util[0].labels["pci_bus_id"].startswith("00000000:") and util[0].labels["UUID"].startswith("GPU-")
        assert util[0].labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
        pids = {int(s.labels["pid"]) for s in families["nvtopy_process_gpu_memory_bytes"].samples}
        assert pids == set(workers)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_mps_clients_are_listed(fake_lib, workers):
    """FAKE_NVML_PROC_TYPE=mps: every process is in the MPS client list only, as under a real MPS server."""
    pids = ",".join(map(str, workers))
    result = nvtopy(fake_lib, "--once", "--json", FAKE_NVML_GPUS="2", FAKE_NVML_PIDS=pids, FAKE_NVML_PROC_TYPE="mps")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    rows = [p for g in data["gpus"] for p in g["processes"]]
    assert sorted(p["pid"] for p in rows) == sorted(workers)
    assert {p["type"] for p in rows} == {"M"}
    assert all(p["gpu_memory_bytes"] > 0 and p["command"] == "sleep 120" for p in rows)
    text = nvtopy(fake_lib, "--once", "--no-color", FAKE_NVML_GPUS="2", FAKE_NVML_PIDS=pids, FAKE_NVML_PROC_TYPE="mps")
    assert text.returncode == 0, text.stderr
    assert text.stdout.count(" M ") == len(workers) and "No GPU processes" not in text.stdout


# --------------------------------------------------------------------------- pids this namespace lacks


def _pids_none_can_have(count: int) -> list[int]:
    """Pids above the kernel's pid_max: no process here has them (a container's, a captured machine's)."""
    with open("/proc/sys/kernel/pid_max") as handle:
        top = int(handle.read())
    return [top + 1000 + k for k in range(count)]


def _host_sees_nvml_pids() -> bool:
    """False where nvtopy itself runs in a nested PID namespace: then every NVML pid is a host pid (not visible)."""
    from nvtopy.backends.host.processes import in_foreign_pid_namespace

    return not in_foreign_pid_namespace()


def test_pids_this_namespace_lacks_are_rows_never_hidden(fake_lib, workers):
    """The driver lists pids no process here has, with their memory: rows marked not visible, in JSON and text.

    GPU 1 lists only such pids: its memory in use is theirs, so no "no process is visible" hint either.
    """
    gone = _pids_none_can_have(2)
    pids = ",".join(map(str, [workers[0], gone[0], workers[1], gone[1]]))  # pid k on GPU k mod 2
    result = nvtopy(fake_lib, "--once", "--json", FAKE_NVML_GPUS="2", FAKE_NVML_PIDS=pids)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    check_contract(data)
    gpu0, gpu1 = data["gpus"]
    assert sorted(p["pid"] for p in gpu0["processes"]) == sorted(workers[:2])
    if _host_sees_nvml_pids():
        assert all(not p["foreign"] and p["command"] == "sleep 120" for p in gpu0["processes"])
    assert sorted(p["pid"] for p in gpu1["processes"]) == gone
    for row in gpu1["processes"]:
        assert row["foreign"] is True and row["type"] == "C" and row["gpu_memory_bytes"] > 0
        assert row["user"] is None and row["command"] is None and row["cpu_percent"] is None
        assert row["host_memory_bytes"] is None and row["create_time"] is None
        assert row["unavailable"]["user"] == row["unavailable"]["command"] == "not_visible"
    hint = gpu1["processes_hint"]
    assert hint and "no process is visible" not in hint and "never signalled" in hint
    assert all(str(pid) in hint for pid in gone)

    text = nvtopy(fake_lib, "--once", "--no-color", FAKE_NVML_GPUS="2", FAKE_NVML_PIDS=pids)
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if any(f" {pid} " in line for pid in gone)]
    assert len(lines) == 2 and all("(not visible from this PID namespace)" in line for line in lines), text.stdout
    assert "no process is visible" not in text.stdout


CAPTURE = FAKE_NVML_SRC.parent / "nvidia-smi-captures" / "rtx-4090-x8-busy-535.154.05-gpud.txt"


@pytest.mark.skipif(not CAPTURE.exists(), reason="../shared/nvidia-smi-captures is not available")
def test_a_real_capture_keeps_every_process_the_driver_lists(fake_lib, workers, tmp_path):
    """A real ``nvidia-smi -q`` of eight busy RTX 4090s, served by fake-nvml: every listed process is a row.

    The first captured pid is replaced by a live process (joined as usual), the others by pids none
    can have here, as on the captured machine seen from elsewhere: each keeps its type and the exact
    GPU memory nvidia-smi printed. GPU 5 lists none and uses none: no row, no hint.
    """
    profile, expected = tmp_path / "capture.profile", tmp_path / "expected.json"
    convert = subprocess.run(
        [
            sys.executable,
            str(FAKE_NVML_SRC / "capture.py"),
            str(CAPTURE),
            "-o",
            str(profile),
            "--expected",
            str(expected),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert convert.returncode == 0, convert.stderr
    captured = [(g["index"], p) for g in json.loads(expected.read_text())["gpus"] for p in g["processes"] or []]
    assert len(captured) == 7
    pids = [workers[0], *_pids_none_can_have(len(captured) - 1)]
    result = nvtopy(
        fake_lib, "--once", "--json", FAKE_NVML_PROFILE=str(profile), FAKE_NVML_PROFILE_PIDS=",".join(map(str, pids))
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    check_contract(data)
    rows = {(g["index"], p["pid"]): p for g in data["gpus"] for p in g["processes"]}
    assert sorted(rows) == sorted((index, pid) for (index, _), pid in zip(captured, pids, strict=True))
    for (index, process), pid in zip(captured, pids, strict=True):
        row = rows[(index, pid)]
        assert (row["type"], row["gpu_memory_bytes"]) == (process["type"], process["used_memory"])
        if pid == workers[0]:
            if _host_sees_nvml_pids():
                assert not row["foreign"] and row["command"] == "sleep 120"
        else:
            assert row["foreign"] and row["user"] is None and row["unavailable"]["command"] == "not_visible"
    by_index = {g["index"]: g for g in data["gpus"]}
    assert by_index[5]["processes"] == [] and by_index[5]["processes_hint"] is None
    assert all("no process is visible" not in (g["processes_hint"] or "") for g in data["gpus"])

"""GPM end to end on the real nvidia-ml-py path (../shared/fake-nvml): Hopper and not, MIG, a hung GPM call.

The issue's "done": on H100s the TUI, ``--once --json``, the log and the exporter
show SM, tensor and DRAM activity; on an A100 they say N/A and why. Skipped
where ../shared/fake-nvml (or a C compiler) is absent.
"""

from __future__ import annotations

import csv
import io
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
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
REAL_WORK = ("sm_active_percent", "tensor_active_percent", "dram_active_percent")


@pytest.fixture
def workers():
    procs = [subprocess.Popen(["sleep", "120"]) for _ in range(4)]
    yield ",".join(str(p.pid) for p in procs)
    for proc in procs:
        proc.kill()
        proc.wait()


def _env(fake_lib: str, **knobs: str) -> dict[str, str]:
    return fake_nvml_env(fake_lib, **{"FAKE_NVML_GPUS": "2", **knobs})


def nvtopy(fake_lib: str, *args: str, timeout: float = 60, **knobs: str) -> subprocess.CompletedProcess[str]:
    return run_nvtopy(*args, env=_env(fake_lib, **knobs), timeout=timeout, cwd=ROOT)


def gpus_of(result: subprocess.CompletedProcess[str]) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["gpus"]


def test_once_json_on_h100_has_the_real_work_figures(fake_lib, workers):
    for gpu in gpus_of(nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MODEL=H100, FAKE_NVML_PIDS=workers)):
        for name in REAL_WORK:
            assert 0.0 <= gpu[name] <= 100.0, (name, gpu[name])
        assert gpu["sm_active_percent"] <= gpu["graphics_active_percent"] + 0.01
        assert gpu["tensor_active_percent"] <= gpu["sm_active_percent"] + 0.01
        assert gpu["gpm_pcie_rx_bytes_per_s"] >= 0 and "sm_active_percent" not in gpu["unavailable"]


def test_once_json_on_a100_says_not_supported(fake_lib):
    for gpu in gpus_of(nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MODEL=A100)):
        for name in REAL_WORK:
            assert gpu[name] is None and gpu["unavailable"][name] == "not_supported"


def test_once_text_names_the_figures_and_says_why_on_a100(fake_lib, workers):
    h100 = nvtopy(fake_lib, "--once", FAKE_NVML_MODEL=H100, FAKE_NVML_PIDS=workers)
    assert h100.returncode == 0, h100.stderr
    assert "SM" in h100.stdout and ("Tensor" in h100.stdout or "TNS" in h100.stdout)
    a100 = nvtopy(fake_lib, "--once", FAKE_NVML_MODEL=A100)
    assert a100.returncode == 0 and "Hopper" in a100.stdout, a100.stdout


def test_mig_instances_have_their_own_figures(fake_lib, workers):
    gpus = gpus_of(
        nvtopy(
            fake_lib,
            "--once",
            "--json",
            FAKE_NVML_MODEL=H100,
            FAKE_NVML_MIG="1",
            FAKE_NVML_MIG_DEVICES="3",
            FAKE_NVML_PIDS=workers,
        )
    )
    devices = gpus[1]["mig_devices"]
    assert len(devices) == 3
    for device in devices:
        assert 0.0 <= device["sm_active_percent"] <= 100.0, device
    assert gpus[1]["sm_active_percent"] is not None, "the whole GPU too"


def test_a_hung_gpm_call_is_treated_like_any_other(fake_lib, workers):
    started = time.monotonic()
    result = nvtopy(
        fake_lib,
        "--once",
        "--json",
        "--timeout",
        "1",
        FAKE_NVML_MODEL=H100,
        FAKE_NVML_PIDS=workers,
        FAKE_NVML_HANG="nvmlGpmSampleGet@1:30",
    )
    assert time.monotonic() - started < 10, "the hung GPU is given up at the deadline"
    gpu0, gpu1 = gpus_of(result)
    assert gpu0["sm_active_percent"] is not None and gpu0["health"]["responding"] is True
    assert gpu1["health"]["verdict"] == "FAIL" and "not-responding" in [f["code"] for f in gpu1["health"]["findings"]]


def test_the_log_writes_the_figures(fake_lib, workers):
    result = nvtopy(
        fake_lib,
        "log",
        "--count",
        "2",
        "--interval",
        "0.3",
        "--fields",
        "index,sm_active_percent,tensor_active_percent,dram_active_percent",
        FAKE_NVML_MODEL=H100,
        FAKE_NVML_PIDS=workers,
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 4
    for row in rows[:2]:  # the first poll: GPM has one sample, no interval yet (a logger never waits)
        assert all(row[name] == "" or 0.0 <= float(row[name]) <= 100.0 for name in REAL_WORK), row
    for row in rows[2:]:
        for name in REAL_WORK:
            assert 0.0 <= float(row[name]) <= 100.0, row


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(fake_lib: str, wanted: str, times: int = 1, **knobs: str) -> str:
    """The exporter's page once ``wanted`` is on it ``times`` times (each GPU's series comes with that GPU's
    first complete reading: under load one GPU's GPM pair can land a scrape later than the other's)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "0.5"],
        env=_env(fake_lib, **knobs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    body = ""
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                if body.count(wanted) >= times:
                    break
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return body


def test_the_exporter_serves_dcgm_profiling_fields(fake_lib, workers):
    from prometheus_client.parser import text_string_to_metric_families

    body = _scrape(fake_lib, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{", 2, FAKE_NVML_MODEL=H100, FAKE_NVML_PIDS=workers)
    found = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name.startswith("DCGM_FI_PROF_"):
                found.setdefault(sample.name, []).append(sample.value)
    for name in (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ):
        assert len(found.get(name, [])) == 2, (name, body[:3000])
        assert all(0.0 <= v <= 1.0 for v in found[name]), "a ratio, as dcgm-exporter"


def test_the_exporter_on_a100_has_no_profiling_series(fake_lib):
    body = _scrape(fake_lib, "DCGM_FI_DEV_GPU_TEMP{", FAKE_NVML_MODEL=A100)
    assert "DCGM_FI_DEV_GPU_TEMP{" in body and "DCGM_FI_PROF_SM_ACTIVE{" not in body, "absent, never 0"


@pytest.mark.parametrize("absurd", ["nan", "inf", "-inf", "huge", "neg", "over"])
def test_gpm_values_no_gpu_gives_are_na_out_of_range(fake_lib, absurd):
    """FAKE_NVML_GPM_ABSURD: NaN used to read as 0 %, inf and 1e308 to end --once --json with an OverflowError."""
    result = nvtopy(fake_lib, "--once", "--json", FAKE_NVML_MODEL=H100, FAKE_NVML_GPM_ABSURD=absurd)
    assert "internal error" not in result.stderr
    for gpu in gpus_of(result):
        for name in REAL_WORK:
            assert gpu[name] is None and gpu["unavailable"][name] == "out_of_range", (name, gpu[name])
        if absurd == "over":  # 250 MiB/s is a rate a bus carries: only the percentages are impossible
            assert gpu["gpm_pcie_rx_bytes_per_s"] == 250 << 20
        else:
            assert gpu["gpm_pcie_rx_bytes_per_s"] is None
        assert gpu["utilization_gpu_percent"] is not None, "the rest is read as usual"


@pytest.mark.parametrize("absurd", ["inf", "huge"])
def test_a_running_log_survives_absurd_gpm_values(fake_lib, absurd):
    """The OverflowError ended `nvtopy log` at its first GPM row, and every row after it was lost."""
    fields = "index,sm_active_percent,tensor_active_percent,utilization_gpu_percent"
    result = nvtopy(
        fake_lib,
        "log",
        "--count",
        "3",
        "--interval",
        "0.2",
        "--fields",
        fields,
        FAKE_NVML_MODEL=H100,
        FAKE_NVML_GPM_ABSURD=absurd,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 6, result.stdout
    assert all(row["sm_active_percent"] == row["tensor_active_percent"] == "" for row in rows)
    assert all(row["utilization_gpu_percent"] != "" for row in rows)

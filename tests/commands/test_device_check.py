"""``make device-check`` (devcheck/device_check.py): run here against the fake driver, as far as it reaches.

The torch checks cannot run without a GPU; their verdicts are tested on the figures a
real job reports (the status file's shape), so a wrong bound fails here, not on the
first real machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT, needs_fake_nvml

SCRIPT = ROOT / "devcheck" / "device_check.py"
CHECKS = ["wheels", "doctor", "against-nvidia-smi", "job-process", "job-memory", "gpm-activity", "track", "exporter"]
GIB = 1 << 30


def load_device_check():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def device_check(tmp_path: Path, fake: str, **knobs: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "results"
    env = {**os.environ, "NVTOPY_DEVICE_CHECK_FAKE": fake, **knobs}
    env.pop("OUT", None)
    command = [sys.executable, str(SCRIPT), "--out", str(out), "--budget", "60", "--wheels", str(tmp_path / "none")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    return result, out


@needs_fake_nvml
def test_runs_against_the_fake_driver(fake_lib, tmp_path):
    result, out = device_check(tmp_path, fake_lib)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = (out / "summary.txt").read_text()
    assert summary.splitlines()[0].startswith("nvtopy device-check: PASS (")
    assert "driver=fake-nvml" in summary
    results = json.loads((out / "results.json").read_text())
    assert results["verdict"] == "PASS"
    checks = {c["name"]: c for c in results["checks"]}
    assert list(checks) == CHECKS
    for check in checks.values():
        assert check["status"] in ("PASS", "FAIL", "SKIP") and check["detail"], check
        assert f"{check['status']:4}  {check['name']}" in summary
    assert [checks[n]["status"] for n in ("doctor", "job-process", "exporter")] == ["PASS"] * 3
    assert checks["job-process"]["numbers"]["command"].endswith("device-check-stand-in")
    assert checks["exporter"]["numbers"]["process_series"] > 0
    for name in ("job-memory", "gpm-activity", "track"):
        assert checks[name]["status"] == "SKIP" and "fake driver" in checks[name]["detail"]
    assert checks["wheels"]["status"] == "SKIP" and "no wheels" in checks["wheels"]["detail"]
    # Another engineer adds --against-nvidia-smi; without it, or without nvidia-smi, it says so.
    assert checks["against-nvidia-smi"]["status"] == "SKIP"
    assert {"doctor.json", "once.json", "metrics.txt"} <= {p.name for p in out.iterdir()}


@needs_fake_nvml
def test_a_broken_driver_fails_with_exit_1(fake_lib, tmp_path):
    result, out = device_check(tmp_path, fake_lib, FAKE_NVML_DRIVER_NOT_LOADED="1")
    assert result.returncode == 1, result.stdout + result.stderr
    results = json.loads((out / "results.json").read_text())
    checks = {c["name"]: c["status"] for c in results["checks"]}
    assert results["verdict"] == "FAIL"
    assert checks["doctor"] == "FAIL" and checks["job-process"] == "FAIL" and checks["exporter"] == "FAIL"
    assert "Traceback" not in result.stderr


@needs_fake_nvml
@pytest.mark.parametrize(
    ("torch_source", "said"),
    [
        ("raise RuntimeError('a broken install')", "exited with code 1 (job.log)"),
        ("__version__ = '9.9'\nclass cuda:\n    is_available = staticmethod(lambda: False)\n", "sees no CUDA device"),
    ],
)
def test_a_torch_job_that_cannot_start_fails_at_once(fake_lib, tmp_path, torch_source, said):
    """Against the real driver path (no stand-in): a torch that breaks ends the wait, with the job's reason."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(torch_source)
    out = tmp_path / "results"
    env = {**os.environ, "LD_LIBRARY_PATH": fake_lib, "FAKE_NVML_GPUS": "1", "PYTHONPATH": str(tmp_path)}
    env.pop("NVTOPY_DEVICE_CHECK_FAKE", None)
    command = [sys.executable, str(SCRIPT), "--out", str(out), "--budget", "100", "--wheels", str(tmp_path / "none")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    results = json.loads((out / "results.json").read_text())
    checks = {c["name"]: c for c in results["checks"]}
    assert checks["job-process"]["status"] == "FAIL" and said in checks["job-process"]["detail"]
    assert checks["doctor"]["status"] == "PASS" and checks["exporter"]["status"] == "PASS"
    assert results["seconds"] < 60  # not the job's whole start-up allowance (100 s of budget)


def test_a_missing_fake_driver_is_one_line(tmp_path):
    result, _ = device_check(tmp_path, str(tmp_path / "nowhere"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "holds no libnvidia-ml.so.1" in result.stderr


def test_wheels_are_nvtopys_own_requirements():
    text = (ROOT / "pyproject.toml").read_text()
    requirements = load_device_check().requirements()
    assert {r.split(">")[0].split("<")[0] for r in requirements} >= {"textual", "rich", "psutil", "nvidia-ml-py"}
    assert all(f'"{r}"' in text for r in requirements)


def test_make_targets():
    made = subprocess.run(["make", "-n", "device-check", "device-wheels"], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert "devcheck/device_check.py" in made.stdout and "--download-wheels --wheels .whl" in made.stdout


# --- the torch checks' verdicts, on the figures a real job writes ---------------------------------


@pytest.mark.parametrize(
    ("used", "verdict"),
    [(6 * GIB + (500 << 20), "PASS"), (6 * GIB, "PASS"), (6 * GIB - 1, "FAIL"), (7 * GIB + 1, "FAIL"), (None, "FAIL")],
)
def test_job_memory_is_torch_reserved_plus_a_context(used, verdict):
    check = load_device_check().check_job_memory(
        {"gpu_memory_bytes": used, "unavailable": {}}, {"reserved_bytes": 6 * GIB, "allocated_bytes": 5 * GIB}
    )
    assert check.status == verdict, check


def track_status(**gpu_changes) -> dict:
    torch = {"allocated_end_bytes": 5 * GIB, "reserved_end_bytes": 6 * GIB}
    gpu = {"samples": 30, "process_memory_end_bytes": 6 * GIB + (500 << 20), "torch": torch}
    gpu.update(gpu_changes)
    own = {"allocated_bytes": 5 * GIB, "reserved_bytes": 6 * GIB}
    return {"track": {"wall_seconds": 3.0, "gpus": [gpu]}, "track_torch_end": own}


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (track_status(), "PASS"),
        (track_status(torch=None), "FAIL"),
        (track_status(torch={"allocated_end_bytes": 1, "reserved_end_bytes": 6 * GIB}), "FAIL"),
        (track_status(process_memory_end_bytes=GIB), "FAIL"),
        (track_status(samples=0), "FAIL"),
        ({"track_error": "RuntimeError: boom"}, "FAIL"),
        ({"track": {"gpus": []}}, "FAIL"),
    ],
)
def test_track_verdict(status, verdict):
    check = load_device_check().check_track(status)
    assert check.status == verdict, check

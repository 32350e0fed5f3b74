"""Health end to end on the real nvidia-ml-py path: every fake-driver knob through the commands users run.

``nvtopy --once --json`` for the readings and verdicts, ``nvtopy log`` for Xid
events (NVML reports only events that happen while nvtopy watches), the exporter's
scrape for the metrics, and a hung driver call (``FAKE_NVML_HANG``) in each.
Skipped where ../shared/fake-nvml (or a C compiler) is absent.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ..builders import run_nvtopy
from ..conftest import needs_fake_nvml

pytestmark = needs_fake_nvml


@pytest.fixture
def workers():
    procs = [subprocess.Popen(["sleep", "120"]) for _ in range(4)]
    yield ",".join(str(p.pid) for p in procs)
    for proc in procs:
        proc.kill()
        proc.wait()


def _env(fake_lib: str, knobs: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(knobs)
    env["LD_LIBRARY_PATH"] = fake_lib
    env.setdefault("FAKE_NVML_GPUS", "4")
    return env


def once(fake_lib: str, pids: str, **knobs: str) -> dict:
    result = run_nvtopy("--once", "--json", env=_env(fake_lib, {"FAKE_NVML_PIDS": pids, **knobs}), timeout=60)
    assert result.returncode == 0, result.stderr
    return {gpu["index"]: gpu for gpu in json.loads(result.stdout)["gpus"]}


def codes(gpu: dict) -> list[str]:
    return [finding["code"] for finding in gpu["health"]["findings"]]


def test_a_healthy_fake_machine_is_ok(fake_lib, workers):
    gpus = once(fake_lib, workers)
    for gpu in gpus.values():
        pcie = gpu["health"]["readings"]["pcie"]
        assert pcie["link_gen_max"] == 5 and pcie["link_width_max"] == 16
        assert gpu["health"]["readings"]["memory"]["remapped_rows_failure"] is False
        assert gpu["health"]["verdict"] in ("OK", "WARN"), gpu["health"]  # WARN only for a real reason:
        assert set(codes(gpu)) <= {"temperature"}, codes(gpu)  # the fake runs hot under load


def test_remapped_rows_pending_and_failed(fake_lib, workers):
    gpus = once(fake_lib, workers, FAKE_NVML_REMAPPED="0:3/1/1/0,1:0/2/0/1")
    memory = gpus[0]["health"]["readings"]["memory"]
    assert (memory["remapped_rows_corrected"], memory["remapped_rows_uncorrected"]) == (3, 1)
    assert memory["remapped_rows_pending"] is True
    assert "remap-pending" in codes(gpus[0]) and gpus[0]["health"]["verdict"] == "WARN"
    assert gpus[1]["health"]["verdict"] == "FAIL" and codes(gpus[1])[0] == "remap-failure"
    assert "replace the board" in gpus[1]["health"]["findings"][0]["action"]


def test_retired_pages_pending(fake_lib, workers):
    gpus = once(fake_lib, workers, FAKE_NVML_RETIRED="2:5/1/1")
    memory = gpus[2]["health"]["readings"]["memory"]
    assert (memory["retired_pages_sbe"], memory["retired_pages_dbe"], memory["retired_pages_pending"]) == (5, 1, True)
    assert "retire-pending" in codes(gpus[2])


def test_a_downgraded_pcie_link(fake_lib, workers):
    gpus = once(fake_lib, workers, FAKE_NVML_PCIE_DOWNGRADE="3:3/8", FAKE_NVML_PCIE_REPLAY="3:7")
    pcie = gpus[3]["health"]["readings"]["pcie"]
    assert (pcie["link_gen"], pcie["link_width"], pcie["replay_counter"]) == (3, 8, 7)
    assert "pcie-downgrade" in codes(gpus[3])
    assert "Gen3 x8" in gpus[3]["health"]["findings"][0]["text"] or any(
        "Gen3 x8" in f["text"] for f in gpus[3]["health"]["findings"]
    )
    assert "pcie-downgrade" not in codes(gpus[0])


def test_throttling_in_plain_words(fake_lib, workers):
    gpus = once(fake_lib, workers, FAKE_NVML_THROTTLE="1:0x8,2:0x4")
    # The fake caps the SM clock at 45 % of max under HW slowdown; below 25 % load it runs slower still.
    words = re.fullmatch(r"HW slowdown: SM at (\d+) % of max", gpus[1]["health"]["throttle"])
    assert words and 0 < int(words.group(1)) <= 45, gpus[1]["health"]["throttle"]
    assert "throttle" in codes(gpus[1])
    assert gpus[2]["health"]["throttle"].startswith("power cap"), "benign: in words, no alarm"
    assert "throttle" not in codes(gpus[2])


def test_nvlink_down(fake_lib, workers):
    gpus = once(fake_lib, workers, FAKE_NVML_NVLINKS="4", FAKE_NVML_NVLINK_DOWN="1:2/3")
    links = gpus[1]["health"]["readings"]["nvlink"]["links"]
    assert [link["active"] for link in links] == [True, True, False, False]
    assert "nvlink-down" in codes(gpus[1]) and "nvlink-down" not in codes(gpus[0])


def test_a_hung_call_on_one_gpu_is_marked_and_once_finishes(fake_lib, workers):
    started = time.monotonic()
    result = run_nvtopy(
        "--once",
        "--json",
        "--timeout",
        "1",
        env=_env(fake_lib, {"FAKE_NVML_PIDS": workers, "FAKE_NVML_HANG": "nvmlDeviceGetPowerUsage@1:30"}),
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 5, f"--once took {elapsed:.1f} s with a 1 s timeout"
    gpus = {gpu["index"]: gpu for gpu in json.loads(result.stdout)["gpus"]}
    assert gpus[1]["health"]["responding"] is False and gpus[1]["health"]["verdict"] == "FAIL"
    assert all(gpus[i]["health"]["responding"] and gpus[i]["power_draw_w"] is not None for i in (0, 2, 3))


def test_a_hung_nvml_init_is_one_line(fake_lib):
    started = time.monotonic()
    result = run_nvtopy(
        "--once",
        "--timeout",
        "1",
        env=_env(fake_lib, {"FAKE_NVML_HANG": "nvmlInit_v2+nvmlInitWithFlags:30"}),
        timeout=60,
    )
    assert time.monotonic() - started < 5
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "did not answer within 1 s" in result.stderr


def test_xid_events_reach_the_log(fake_lib, workers):
    result = run_nvtopy(
        "log",
        "--format",
        "jsonl",
        "--count",
        "5",
        "--interval",
        "0.5",
        env=_env(
            fake_lib,
            {
                "FAKE_NVML_PIDS": workers,
                "FAKE_NVML_XID": "1:79@1,0:13@1,0:13@1.2",
                "FAKE_NVML_XID_LOSES": "1",
                "FAKE_NVML_LOST_HANDLE": "1",
            },
        ),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    last = {gpu["index"]: gpu for gpu in json.loads(result.stdout.splitlines()[-1])["gpus"]}
    zero, one = last[0]["health"], last[1]["health"]
    assert one["last_xid"] == 79 and one["verdict"] == "FAIL" and last[1]["lost"] is True
    assert one["events"][0]["meaning"] == "GPU has fallen off the bus"
    assert zero["xid_counts"] == {"13": 2} and zero["verdict"] == "WARN"
    assert last[2]["health"]["events"] == [] and last[2]["health"]["events_note"] is None, "watched, none came"


def test_a_reset_level_xid_outlasts_an_xid_storm_in_the_log(fake_lib, workers):
    """Issue 23: 64 minor Xids after an Xid 48 pushed it out of the timeline and FAIL dropped to WARN.

    The fake driver's storm sends GPU 1 only Xids of the application and unknown numbers
    (31, 45, 0, 65535, 12345678: it cycles ten numbers over two GPUs).
    """
    result = run_nvtopy(
        "log",
        "--format",
        "jsonl",
        "--count",
        "10",
        "--interval",
        "0.5",
        env=_env(
            fake_lib,
            {
                "FAKE_NVML_GPUS": "2",
                "FAKE_NVML_PIDS": workers,
                "FAKE_NVML_XID": "1:48@1",
                "FAKE_NVML_XID_STORM": "200@1.5",
            },
        ),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    rows = [{gpu["index"]: gpu["health"] for gpu in json.loads(line)["gpus"]} for line in result.stdout.splitlines()]
    after = [row[1] for row in rows if "48" in row[1]["xid_counts"]]
    stormed = [health for health in after if sum(health["xid_counts"].values()) > 64 + 1]
    assert stormed, f"the storm did not pass the timeline's 64 events: {[r[1]['xid_counts'] for r in rows]}"
    for health in after:
        assert health["verdict"] == "FAIL", health["findings"]
        texts = [finding["text"] for finding in health["findings"]]
        assert "Xid 48: double-bit ECC error" in texts
        for xid, count in health["xid_counts"].items():  # all within the hour: the findings count every one
            times = f" x{count}" if count > 1 else ""
            assert any(text.startswith(f"Xid {xid}{times}: ") for text in texts), (xid, count, texts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def test_the_exporter_serves_health_and_keeps_answering_past_a_hung_gpu(fake_lib, workers):
    from prometheus_client.parser import text_string_to_metric_families

    port = _free_port()
    env = _env(
        fake_lib,
        {
            "FAKE_NVML_PIDS": workers,
            "FAKE_NVML_XID": "2:48@0.5",
            "FAKE_NVML_REMAPPED": "0:4/2/0/1",
            "FAKE_NVML_PCIE_REPLAY": "3:9",
            "FAKE_NVML_HANG": "nvmlDeviceGetUtilizationRates@1:60@2",
        },
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}", "--timeout", "1.5"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        samples: dict[tuple[str, str], float] = {}
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                started = time.monotonic()
                text = _scrape(port)
                scrape_s = time.monotonic() - started
            except OSError:
                continue
            samples = {
                (s.name, s.labels.get("gpu", "") + ("/" + s.labels["xid"] if "xid" in s.labels else "")): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            if samples.get(("nvtopy_gpu_responding", "1")) == 0 and samples.get(("DCGM_FI_DEV_XID_ERRORS", "2")) == 48:
                break
        assert samples.get(("nvtopy_gpu_responding", "1")) == 0, "the hung GPU is marked"
        assert samples[("nvtopy_gpu_responding", "0")] == 1
        assert scrape_s < 1.0, "scrapes answer while a GPU hangs"
        assert samples[("DCGM_FI_DEV_XID_ERRORS", "2")] == 48
        assert samples[("nvtopy_xid_events_total", "2/48")] == 1
        assert samples[("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "0")] == 4
        assert samples[("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "0")] == 2
        assert samples[("DCGM_FI_DEV_ROW_REMAP_FAILURE", "0")] == 1
        assert samples[("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "3")] == 9
        assert samples[("nvtopy_gpu_health", "0")] == 2 and samples[("nvtopy_gpu_health", "2")] == 2
        assert samples[("nvtopy_gpu_health", "1")] == 2, "not responding is a failure"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""

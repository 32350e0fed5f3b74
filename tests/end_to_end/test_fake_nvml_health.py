"""Health and Xid events on the real nvidia-ml-py path, with ../shared/fake-nvml standing in for the driver.

Each test runs a small script in a child process (the fake library reads its FAKE_NVML_*
knobs once, when it is loaded) that drives :class:`NvmlBackend` directly -- static
fields, the health groups, ``open_events().wait`` -- and prints what it read as JSON.
Skipped cleanly where ../shared is absent (a user's clone) or no C compiler exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..conftest import ROOT, needs_fake_nvml

pytestmark = needs_fake_nvml

HEALTH = ["nvlink", "pcie_link", "remapped_rows", "retired_pages"]

SCRIPT = r"""
import dataclasses, json, sys, threading, time
import pynvml
from nvtopy.backends.nvml.backend import NvmlBackend

plan = json.loads(sys.argv[1])
if plan.get("legacy_wait"):  # a driver before nvmlEventSetWait_v2
    def missing(*args):
        raise pynvml.NVMLError_FunctionNotFound()
    pynvml.nvmlEventSetWait_v2 = missing

def plain(value):
    if isinstance(value, tuple):
        return [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value]
    return value

def reading_of(backend, index):
    r = backend.read_sample(index, plan["groups"])
    return {"lost": r.lost, "values": {k: plain(v) for k, v in r.values.items()},
            "unavailable": {k: v.value for k, v in r.unavailable.items()}}

backend = NvmlBackend(foreign_pids=False, close_at_exit=False)
count = backend.device_count()
out = {"static": [], "readings": [], "events": [], "notes": None}
stream = backend.open_events() if "events" in plan else None
if stream is not None:
    out["notes"] = {str(k): v for k, v in stream.notes.items()}
for index in range(count):
    s = backend.read_static(index)
    out["static"].append({"pcie_link_gen_max": s.pcie_link_gen_max, "pcie_link_width_max": s.pcie_link_width_max,
                          "nvlink_count": s.nvlink_count,
                          "unavailable": {k: v.value for k, v in s.unavailable.items()}})
for n in range(plan.get("readings", 1)):
    if n:
        time.sleep(plan.get("gap", 0.3))
    out["readings"].append([reading_of(backend, index) for index in range(count)])
out["calls_per_reading"] = None
if stream is not None:
    deadline = time.monotonic() + plan.get("events_within", 5.0)
    started = time.monotonic()
    while len(out["events"]) < plan["events"] and time.monotonic() < deadline:
        for e in stream.wait(0.25):
            out["events"].append({"gpu": e.gpu_index, "xid": e.xid, "kind": e.kind, "gi": e.gpu_instance_id,
                                  "ci": e.compute_instance_id, "after_s": round(time.monotonic() - started, 2)})
    stop = threading.Event()
    def loop():
        while not stop.is_set():
            stream.wait(0.25)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(0.3)
    t = time.monotonic(); stop.set(); thread.join(2)
    out["stop_s"] = round(time.monotonic() - t, 3)
    stream.close(); stream.close()
    out["after_events"] = [reading_of(backend, index) for index in range(count)]
before = backend.call_counts()
for index in range(count):
    backend.read_sample(index, plan["groups"])
after = backend.call_counts()
out["calls_per_reading"] = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
out["calls"] = after
backend.close()
print(json.dumps(out))
"""


def run_backend(fake_lib: str, plan: dict | None = None, **knobs: str) -> dict:
    """Run SCRIPT with the fake library and ``knobs``; its JSON output."""
    plan = {"groups": HEALTH, **(plan or {})}
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(knobs)
    env["LD_LIBRARY_PATH"] = fake_lib
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(plan)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_healthy_gpus_every_health_field_read(fake_lib):
    out = run_backend(fake_lib, FAKE_NVML_GPUS="2")
    for static in out["static"]:
        assert static == {
            "pcie_link_gen_max": 5,
            "pcie_link_width_max": 16,
            "nvlink_count": 0,
            "unavailable": {"driver_model": "not_supported"},  # NVML answers it on Windows only
        }
    for reading in out["readings"][0]:
        assert reading["unavailable"] == {} and not reading["lost"]
        assert reading["values"] == {
            "remapped_rows_corrected": 0,
            "remapped_rows_uncorrected": 0,
            "remapped_rows_pending": False,
            "remapped_rows_failure": False,
            "retired_pages_sbe": 0,
            "retired_pages_dbe": 0,
            "retired_pages_pending": False,
            "pcie_link_gen": 5,
            "pcie_link_width": 16,
            "pcie_replay_counter": 0,
            "nvlinks": [],
            "nvlink_rx_bytes_per_s": 0,
            "nvlink_tx_bytes_per_s": 0,
        }
    # Per GPU: one field-values call each for remapped rows, retired pages and the replay counter, two link calls.
    assert out["calls_per_reading"] == {
        "nvmlDeviceGetFieldValues": 2 * 3,
        "nvmlDeviceGetCurrPcieLinkGeneration": 2,
        "nvmlDeviceGetCurrPcieLinkWidth": 2,
    }


def test_remapped_rows_and_retired_pages(fake_lib):
    out = run_backend(
        fake_lib, FAKE_NVML_GPUS="3", FAKE_NVML_REMAPPED="1:3/1/1/0,2:0/9/0/1", FAKE_NVML_RETIRED="1:3/2/1"
    )
    gpu0, gpu1, gpu2 = (r["values"] for r in out["readings"][0])
    assert (gpu0["remapped_rows_corrected"], gpu0["retired_pages_sbe"], gpu0["retired_pages_pending"]) == (0, 0, False)
    assert [gpu1[f"remapped_rows_{k}"] for k in ("corrected", "uncorrected", "pending", "failure")] == [
        3,
        1,
        True,
        False,
    ]
    assert [gpu1[f"retired_pages_{k}"] for k in ("sbe", "dbe", "pending")] == [3, 2, True]
    assert gpu2["remapped_rows_uncorrected"] == 9 and gpu2["remapped_rows_failure"] is True
    assert (
        out["calls"].get("nvmlDeviceGetRemappedRows", 0) == 0 and out["calls"].get("nvmlDeviceGetRetiredPages", 0) == 0
    )


def test_memory_health_not_supported_is_asked_once(fake_lib):
    out = run_backend(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_NOT_SUPPORTED="ecc", FAKE_NVML_NOT_SUPPORTED_GPUS="1")
    gpu0, gpu1 = out["readings"][0]
    assert gpu0["unavailable"] == {}
    names = [
        "remapped_rows_corrected",
        "remapped_rows_uncorrected",
        "remapped_rows_pending",
        "remapped_rows_failure",
        "retired_pages_sbe",
        "retired_pages_dbe",
        "retired_pages_pending",
    ]
    assert gpu1["unavailable"] == dict.fromkeys(names, "not_supported")
    # After the first reading GPU 1 costs no memory-health call at all: 2 field-values calls for GPU 0, 1 for replay.
    assert out["calls_per_reading"]["nvmlDeviceGetFieldValues"] == 2 + 1 + 1
    assert (
        out["calls"]["nvmlDeviceGetRemappedRows"] == 1 and out["calls"]["nvmlDeviceGetRetiredPagesPendingStatus"] == 1
    )


def test_pcie_downgrade_and_growing_replay_counter(fake_lib):
    out = run_backend(
        fake_lib,
        {"groups": ["pcie_link"], "readings": 2, "gap": 1.1},
        FAKE_NVML_GPUS="3",
        FAKE_NVML_PCIE_DOWNGRADE="1:3/8",
        FAKE_NVML_PCIE_REPLAY="0:5+,2:7",
    )
    first, second = out["readings"]
    assert [(r["values"]["pcie_link_gen"], r["values"]["pcie_link_width"]) for r in second] == [
        (5, 16),
        (3, 8),
        (5, 16),
    ]
    assert all(s["pcie_link_gen_max"] == 5 and s["pcie_link_width_max"] == 16 for s in out["static"])
    replay = [[r["values"]["pcie_replay_counter"] for r in reading] for reading in (first, second)]
    assert replay[0][0] >= 5 and replay[1][0] >= replay[0][0] + 1, f"'5+' grows by 1/s: {replay}"
    assert replay[0][2] == replay[1][2] == 7 and replay[1][1] == 0


def test_nvlinks_with_one_down(fake_lib):
    out = run_backend(
        fake_lib,
        {"groups": ["nvlink"], "readings": 2, "gap": 0.4},
        FAKE_NVML_GPUS="2",
        FAKE_NVML_NVLINKS="4",
        FAKE_NVML_NVLINK_DOWN="1:3",
    )
    assert [s["nvlink_count"] for s in out["static"]] == [4, 4]
    first, second = out["readings"]
    assert first[1]["unavailable"] == {
        "nvlink_rx_bytes_per_s": "not_available",
        "nvlink_tx_bytes_per_s": "not_available",
    }
    assert all(link["tx_bytes_per_s"] is None for link in first[1]["values"]["nvlinks"])
    gpu1 = second[1]
    assert gpu1["unavailable"] == {}
    links = gpu1["values"]["nvlinks"]
    assert [link["active"] for link in links] == [True, True, True, False]
    assert [link["version"] for link in links] == [4, 4, 4, None]
    # H100 SXM: link l reaches NVSwitch l mod 4 at 05..08; a down link is not asked.
    assert [link["remote"] for link in links] == ["00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", None]
    assert all(link["errors"] == 0 for link in links)
    rates = [link["tx_bytes_per_s"] for link in links]
    assert all(rate > 1 << 20 for rate in rates[:3]) and rates[3] == 0, rates  # ~1 GiB/s per link at 50 % util
    assert gpu1["values"]["nvlink_tx_bytes_per_s"] == sum(rates)
    assert gpu1["values"]["nvlink_rx_bytes_per_s"] == sum(link["rx_bytes_per_s"] for link in links)
    assert second[0]["values"]["nvlinks"][3]["active"] is True
    # One field-values call per GPU per reading; link facts were read once.
    assert out["calls_per_reading"] == {"nvmlDeviceGetFieldValues": 2}
    assert out["calls"]["nvmlDeviceGetNvLinkRemotePciInfo"] == 4 + 3
    assert "nvmlDeviceGetNvLinkState" not in out["calls"] and "nvmlDeviceGetNvLinkErrorCounter" not in out["calls"]


def test_nvlink_not_supported_is_a_board_without_links(fake_lib):
    out = run_backend(
        fake_lib, {"groups": ["nvlink"]}, FAKE_NVML_GPUS="2", FAKE_NVML_NVLINKS="4", FAKE_NVML_NOT_SUPPORTED="nvlink"
    )
    assert [s["nvlink_count"] for s in out["static"]] == [0, 0]
    for reading in out["readings"][0]:
        assert reading["values"] == {"nvlinks": [], "nvlink_rx_bytes_per_s": 0, "nvlink_tx_bytes_per_s": 0}
    assert out["calls_per_reading"] == {}, "no NVLink: nothing asked at all"


def test_events_not_supported(fake_lib):
    out = run_backend(
        fake_lib, {"groups": ["pcie_link"], "events": 0, "events_within": 0}, FAKE_NVML_NOT_SUPPORTED="events"
    )
    assert out["notes"] == {"None": "Xid events not supported on this GPU"}
    assert out["stop_s"] < 0.5


def test_xid_events_delivered_and_xid_79_loses_the_gpu(fake_lib):
    out = run_backend(
        fake_lib,
        {"groups": ["pcie_link"], "events": 3},
        FAKE_NVML_GPUS="3",
        FAKE_NVML_XID="1:79@1.2,0:13@1,0:48@1",
        FAKE_NVML_XID_LOSES="1",
    )
    assert out["notes"] == {}
    assert [(e["gpu"], e["xid"], e["kind"], e["gi"], e["ci"]) for e in out["events"]] == [
        (0, 13, "xid", None, None),
        (0, 48, "xid", None, None),
        (1, 79, "xid", None, None),
    ]
    assert all(e["after_s"] < 3 for e in out["events"])
    assert out["stop_s"] < 0.5, "the waiting thread stops within half a second"
    assert out["calls"]["nvmlEventSetFree"] == 1, "closed once"
    gpu0, gpu1, gpu2 = out["after_events"]
    assert gpu1["lost"] and set(gpu1["unavailable"].values()) == {"lost"}
    assert not gpu0["lost"] and not gpu2["lost"] and gpu0["unavailable"] == {}


def test_xid_events_through_the_unversioned_wait(fake_lib):
    out = run_backend(
        fake_lib,
        {"groups": ["pcie_link"], "events": 1, "legacy_wait": True},
        FAKE_NVML_GPUS="2",
        FAKE_NVML_XID="1:43@0.8",
    )
    assert [(e["gpu"], e["xid"], e["gi"], e["ci"]) for e in out["events"]] == [(1, 43, None, None)]
    assert out["calls"]["nvmlEventSetWait"] >= 1 and out["stop_s"] < 0.5

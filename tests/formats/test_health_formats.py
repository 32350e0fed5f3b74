"""GPU health in every file and text view: JSON, CSV, JSONL, ``--once`` text, and a recording replayed.

The snapshot here is built by hand, so every reading, event and finding has a
known value: a failing GPU with Xid events, remapped rows and NVLinks, a GPU
whose driver call is stuck (its last values still shown), a healthy GPU whose
health readings are unsupported, and processes flagged idle-held and
suspected-hang. Outside text (a finding that quotes the driver, an NVLink
peer, a throttle reason from a recording, a flag) is hostile, and must come
out escaped once in files and visible on a terminal.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re

import pytest

from nvtopy.formats.contract import dumps, snapshot_to_dict
from nvtopy.formats.writers import (
    DEFAULT_GPU_FIELDS,
    GPU_FIELDS,
    HEALTH_FIELDS,
    PROCESS_FIELDS,
    CsvWriter,
    JsonlWriter,
)
from nvtopy.health.xid import describe_xid
from nvtopy.model import (
    OK_HEALTH,
    Finding,
    GpuEvent,
    GpuHealth,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    NvLink,
    Reason,
    Severity,
    Snapshot,
)
from nvtopy.render import cells
from nvtopy.render.text import GPU_COLUMNS, STYLES, gpu_row, health_lines, render_snapshot
from nvtopy.sources.replay import load_recording
from nvtopy.textsafe import unescape_text

from ..builders import gpu_process, gpu_sample, gpu_state, gpu_static, host_info, snapshot_of
from ..commands.test_cli import check_contract

GIB = 2**30
NOW = 1_795_000_000.0
OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
DRIVER_QUOTE = f"driver said {OSC_TITLE}GSP\udcff timeout"  # a finding text that quotes the driver
PEER = f"00000000:{CLEAR}9B:00.0"  # an NVLink's remote end, as a driver could report it
FLAG = f"odd{CLEAR}flag"  # a flag a recording could hold
THROTTLE = f"HW slowdown: SM at 45 % of max, {OSC_TITLE}"
# Never on a terminal: C0 (but newlines), DEL, C1, bidi controls, lone surrogates.
TERMINAL_BAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
FILE_BAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")

READINGS = {
    "remapped_rows_corrected": 3,
    "remapped_rows_uncorrected": 1,
    "remapped_rows_pending": True,
    "remapped_rows_failure": True,
    "retired_pages_sbe": 2,
    "retired_pages_dbe": 1,
    "retired_pages_pending": False,
    "pcie_link_gen": 3,
    "pcie_link_width": 8,
    "pcie_replay_counter": 4711,
    "nvlink_rx_bytes_per_s": 7_000_000_000,
    "nvlink_tx_bytes_per_s": 6_000_000_000,
}
LINKS = (
    NvLink(
        0, active=True, version=4, rx_bytes_per_s=4_000_000_000, tx_bytes_per_s=3_000_000_000, errors=0, remote=PEER
    ),
    NvLink(1, active=False, version=4, rx_bytes_per_s=None, tx_bytes_per_s=None, errors=17, remote=None),
    NvLink(2, active=True, version=4, rx_bytes_per_s=3_000_000_000, tx_bytes_per_s=3_000_000_000, errors=2),
)
BASE_SAMPLE = {
    "memory_used_bytes": 60 * GIB,
    "memory_free_bytes": 20 * GIB,
    "utilization_gpu_percent": 97,
    "utilization_memory_percent": 40,
    "temperature_c": 71,
    "power_draw_w": 180.5,
    "power_limit_w": 700.0,
    "pstate": 0,
    "clock_sm_mhz": 890,
    "clock_mem_mhz": 2619,
    "ecc_mode": True,
    "ecc_corrected_volatile": 5,
    "ecc_uncorrected_volatile": 1,
    "ecc_corrected_aggregate": 9,
    "ecc_uncorrected_aggregate": 2,
    "throttle_reasons": ("hw_slowdown",),
    "pcie_rx_bytes_per_s": 1_000_000,
    "pcie_tx_bytes_per_s": 2_000_000,
}


def static(index: int, **changes) -> GpuStatic:
    return gpu_static(index, **{"uuid": f"GPU-{index:04d}", "nvlink_count": 3, **changes})


def process(gpu: int, pid: int, **changes) -> GpuProcess:
    """An hour-old ``python train.py`` of alice's holding 20 GiB of GPU ``gpu``, computing nothing."""
    return gpu_process(gpu, pid, **{"gpu_uuid": f"GPU-{gpu:04d}", "gpu_memory_bytes": 20 * GIB, "sm_percent": 0,
                                    "command": "python train.py", "create_time": NOW - 4000,
                                    "running_seconds": 4000.0, **changes})  # fmt: skip


FAILING = GpuHealth(
    verdict=Severity.FAIL,
    findings=(
        Finding(Severity.FAIL, "remap-failure", "row remapping failed", "replace the board"),
        Finding(Severity.FAIL, "xid", f"Xid 119: {DRIVER_QUOTE}", "reset the GPU"),
        Finding(Severity.WARN, "pcie-downgrade", "PCIe link at Gen3 x8 of Gen5 x16"),
    ),
    events=(
        GpuEvent(NOW - 300.25, 0, "xid", 13, gpu_instance_id=1, compute_instance_id=0),
        GpuEvent(NOW - 120.5, 0, "xid", 79),
        GpuEvent(NOW - 60.125, 0, "xid", 79),
        GpuEvent(NOW - 5.0, 0, "xid", 119),
    ),
    xid_counts=((13, 1), (79, 2), (119, 1)),
    throttle=THROTTLE,
    idle_held_bytes=20 * GIB,
    suspected_hang_seconds=95.5,
)
STALLED = GpuHealth(
    verdict=Severity.FAIL,
    findings=(Finding(Severity.FAIL, "not-responding", "the driver does not answer", "reset the GPU, or reboot"),),
    responding=False,
    stalled_seconds=12.75,
)
UNWATCHED = GpuHealth(events_note="Xid events are not supported on this GPU")
UNSUPPORTED = dict.fromkeys(READINGS, Reason.NOT_SUPPORTED) | {"nvlinks": Reason.NOT_SUPPORTED}


def health_snapshot() -> Snapshot:
    """Four GPUs: failing (every reading), stalled (values kept), healthy without readings, healthy with none."""
    failing = gpu_state(
        0,
        process(0, 101, flags=("idle-held",), idle_seconds=754.5),
        process(0, 102, sm_percent=99, flags=("suspected-hang", FLAG)),
        process(0, 103, sm_percent=40),
        static=static(0),
        sample=gpu_sample(NOW, bare=True, **BASE_SAMPLE, **READINGS, nvlinks=LINKS),
        health=FAILING,
    )
    stalled = gpu_state(
        1,
        static=static(1),
        sample=gpu_sample(
            NOW, bare=True, **BASE_SAMPLE, **{**READINGS, "pcie_link_gen": 5, "pcie_link_width": 16}, nvlinks=LINKS
        ),
        health=STALLED,
    )
    unsupported = gpu_state(
        2,
        static=static(2, pcie_link_gen_max=None, pcie_link_width_max=None, nvlink_count=0),
        sample=gpu_sample(
            NOW, bare=True, **{**BASE_SAMPLE, "throttle_reasons": ()}, nvlinks=None, unavailable=UNSUPPORTED
        ),
        health=UNWATCHED,
    )
    no_nvlink = gpu_state(
        3,
        static=static(3, nvlink_count=0),
        sample=gpu_sample(
            NOW,
            bare=True,
            **{**BASE_SAMPLE, "throttle_reasons": ()},
            **READINGS | {"remapped_rows_failure": False},
            nvlinks=(),
        ),
    )
    host = host_info(hostname="node7", user="alice")
    return snapshot_of(failing, stalled, unsupported, no_nvlink, timestamp=NOW, host=host, sequence=3, interval=1.0)


def assert_file_text(text: str) -> None:
    assert text.encode("utf-8")
    assert FILE_BAD.findall(text.replace("\n", "")) == []


def assert_terminal_text(text: str) -> None:
    assert TERMINAL_BAD.findall(text.replace("\n", "")) == [], "control characters on the terminal"


# --------------------------------------------------------------------------- JSON


def test_json_health_object_carries_everything():
    text = dumps(health_snapshot())
    assert_file_text(text)
    data = json.loads(text)
    check_contract(data)  # the documented contract still holds, health added
    failing = data["gpus"][0]["health"]
    assert failing["verdict"] == "FAIL"
    assert [f["code"] for f in failing["findings"]] == ["remap-failure", "xid", "pcie-downgrade"]
    assert failing["findings"][0] == {
        "severity": "FAIL",
        "code": "remap-failure",
        "text": "row remapping failed",
        "action": "replace the board",
    }
    assert failing["findings"][2]["action"] is None
    assert failing["xid_counts"] == {"13": 1, "79": 2, "119": 1}
    assert failing["last_xid"] == 119
    assert failing["events_note"] is None
    assert failing["responding"] is True and failing["stalled_seconds"] is None
    assert failing["idle_held_bytes"] == 20 * GIB and failing["suspected_hang_seconds"] == 95.5
    first = failing["events"][0]
    info = describe_xid(13)
    assert first == {
        "time": first["time"],
        "timestamp": NOW - 300.25,
        "kind": "xid",
        "xid": 13,
        "meaning": info.meaning,
        "action": info.action,
        "severity": info.severity.value,
        "gpu_instance_id": 1,
        "compute_instance_id": 0,
    }
    assert first["time"].startswith("2026-") and re.search(r"[+-]\d\d:\d\d$|Z$", first["time"])
    assert [e["xid"] for e in failing["events"]] == [13, 79, 79, 119]
    assert failing["events"][1]["meaning"] == "GPU has fallen off the bus"


def test_json_readings_grouped_with_their_maxima():
    data = json.loads(dumps(health_snapshot()))
    readings = data["gpus"][0]["health"]["readings"]
    assert readings["memory"] == {
        "remapped_rows_corrected": 3,
        "remapped_rows_uncorrected": 1,
        "remapped_rows_pending": True,
        "remapped_rows_failure": True,
        "retired_pages_sbe": 2,
        "retired_pages_dbe": 1,
        "retired_pages_pending": False,
        "ecc_mode": True,
        "ecc_corrected_volatile": 5,
        "ecc_uncorrected_volatile": 1,
        "ecc_corrected_aggregate": 9,
        "ecc_uncorrected_aggregate": 2,
    }
    assert readings["pcie"] == {
        "link_gen": 3,
        "link_width": 8,
        "link_gen_max": 5,
        "link_width_max": 16,
        "replay_counter": 4711,
        "rx_bytes_per_s": 1_000_000,
        "tx_bytes_per_s": 2_000_000,
    }
    nvlink = readings["nvlink"]
    assert (nvlink["count"], nvlink["rx_bytes_per_s"], nvlink["tx_bytes_per_s"]) == (3, 7e9, 6e9)
    assert nvlink["links"][1] == {
        "link": 1,
        "active": False,
        "version": 4,
        "rx_bytes_per_s": None,
        "tx_bytes_per_s": None,
        "errors": 17,
        "remote": None,
    }
    # A GPU without the readings: null, and the GPU's unavailable object says why, under the model's names.
    unsupported = data["gpus"][2]
    memory = unsupported["health"]["readings"]["memory"]
    assert memory["remapped_rows_corrected"] is None and memory["retired_pages_pending"] is None
    assert unsupported["health"]["readings"]["nvlink"]["links"] is None
    assert unsupported["unavailable"]["remapped_rows_corrected"] == "not_supported"
    assert unsupported["unavailable"]["nvlinks"] == "not_supported"
    assert unsupported["health"]["events_note"] == UNWATCHED.events_note
    assert data["gpus"][3]["health"]["readings"]["nvlink"]["links"] == [], "no NVLink: an empty list, not null"
    assert data["gpus"][3]["health"] == {**data["gpus"][3]["health"], "verdict": "OK", "findings": [], "events": []}


def test_json_outside_text_is_escaped_once_and_reversibly():
    data = json.loads(dumps(health_snapshot()))
    failing = data["gpus"][0]
    finding = failing["health"]["findings"][1]
    assert finding["text"] != f"Xid 119: {DRIVER_QUOTE}"
    assert unescape_text(finding["text"]) == f"Xid 119: {DRIVER_QUOTE}"
    assert unescape_text(failing["health"]["throttle"]) == THROTTLE
    remote = failing["health"]["readings"]["nvlink"]["links"][0]["remote"]
    assert remote != PEER and unescape_text(remote) == PEER
    flags = failing["processes"][1]["flags"]
    assert flags[0] == "suspected-hang" and flags[1] != FLAG and unescape_text(flags[1]) == FLAG


def test_json_processes_carry_flags_and_idle_time():
    data = json.loads(dumps(health_snapshot()))
    procs = data["gpus"][0]["processes"]
    assert procs[0]["flags"] == ["idle-held"] and procs[0]["idle_seconds"] == 754.5
    assert procs[2]["flags"] == [] and procs[2]["idle_seconds"] is None


def test_stalled_gpu_keeps_its_values_in_json():
    stalled = json.loads(dumps(health_snapshot()))["gpus"][1]
    assert stalled["health"]["responding"] is False and stalled["health"]["stalled_seconds"] == 12.75
    assert stalled["temperature_c"] == 71 and stalled["health"]["readings"]["pcie"]["link_gen"] == 5


# --------------------------------------------------------------------------- CSV and JSONL


def csv_rows(fields, processes: bool = False) -> list[dict[str, str]]:
    out = io.StringIO()
    CsvWriter(out, list(fields), processes, header=True).write(health_snapshot())
    assert_file_text(out.getvalue())
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(out.getvalue().splitlines()) == len(rows) + 1, "no row broken in two"
    return rows


def test_health_fields_are_gpu_fields_and_the_verdict_a_default():
    assert set(HEALTH_FIELDS) <= set(GPU_FIELDS)
    assert "health" not in GPU_FIELDS, "the nested object is no CSV column"
    assert "health_verdict" in DEFAULT_GPU_FIELDS
    assert len(set(GPU_FIELDS)) == len(GPU_FIELDS)
    assert {"flags", "idle_seconds"} <= set(PROCESS_FIELDS)


def test_csv_health_columns():
    rows = csv_rows(["index", *HEALTH_FIELDS])
    failing, stalled, unsupported, no_nvlink = rows
    assert failing["health_verdict"] == "FAIL"
    assert failing["health_findings"] == "remap-failure;xid;pcie-downgrade"
    assert failing["last_xid"] == "119" and failing["xid_events"] == "4"
    assert failing["responding"] == "true" and failing["stalled_seconds"] == ""
    assert unescape_text(failing["throttle_words"]) == THROTTLE
    assert failing["idle_held_bytes"] == str(20 * GIB) and failing["suspected_hang_seconds"] == "95.5"
    for name, value in READINGS.items():
        expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
        assert failing[name] == expected, name
    assert (failing["pcie_link_gen_max"], failing["pcie_link_width_max"]) == ("5", "16")
    assert failing["nvlinks_active"] == "2/3"
    assert stalled["responding"] == "false" and stalled["stalled_seconds"] == "12.75"
    assert stalled["health_findings"] == "not-responding"
    # Unknown is an empty cell, never 0: readings not supported, Xid events not watched.
    for name in (*READINGS, "pcie_link_gen_max", "nvlinks_active", "last_xid", "xid_events"):
        assert unsupported[name] == "", name
    assert unsupported["health_verdict"] == "OK" and unsupported["health_findings"] == ""
    assert unsupported["events_note"] == UNWATCHED.events_note
    assert no_nvlink["nvlinks_active"] == "0/0" and no_nvlink["xid_events"] == "0"


def test_csv_default_fields_have_the_verdict():
    rows = csv_rows(DEFAULT_GPU_FIELDS)
    assert [r["health_verdict"] for r in rows] == ["FAIL", "FAIL", "OK", "OK"]


def test_csv_process_rows_carry_flags():
    rows = csv_rows(PROCESS_FIELDS, processes=True)
    assert rows[0]["flags"] == "idle-held" and rows[0]["idle_seconds"] == "754.5"
    first, second = rows[1]["flags"].split(";")
    assert first == "suspected-hang" and unescape_text(second) == FLAG
    assert rows[2]["flags"] == "" and rows[2]["idle_seconds"] == ""


def test_jsonl_is_the_json_and_chosen_health_fields_are_flat():
    snapshot = health_snapshot()
    out = io.StringIO()
    JsonlWriter(out, None, True).write(snapshot)
    assert out.getvalue().count("\n") == 1
    assert json.loads(out.getvalue()) == json.loads(dumps(snapshot))
    out = io.StringIO()
    JsonlWriter(out, ["temperature_c", "health_verdict", "health_findings", "last_xid", "nvlinks_active"], False).write(
        snapshot
    )
    gpus = json.loads(out.getvalue())["gpus"]
    assert set(gpus[0]) == {
        "index",
        "temperature_c",
        "health_verdict",
        "health_findings",
        "last_xid",
        "nvlinks_active",
        "unavailable",
    }
    assert gpus[0]["health_findings"] == ["remap-failure", "xid", "pcie-downgrade"]
    assert (gpus[0]["health_verdict"], gpus[0]["last_xid"], gpus[0]["nvlinks_active"]) == ("FAIL", 119, "2/3")
    assert gpus[2]["last_xid"] is None and gpus[2]["nvlinks_active"] is None


# --------------------------------------------------------------------------- --once text


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    """render_snapshot clips to the terminal's width: pin it (160, its fallback), so no runner's width decides."""
    monkeypatch.setenv("COLUMNS", "160")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def once_text(snapshot: Snapshot | None = None) -> str:
    out = io.StringIO()
    render_snapshot(snapshot or health_snapshot(), out, color=False)
    return out.getvalue()


def test_text_table_shows_each_gpus_verdict():
    text = once_text()
    assert_terminal_text(text)
    lines = text.splitlines()
    header = lines[1]
    assert header.rstrip().endswith("Health")
    rows = {line.split()[0]: line for line in lines[3:7]}
    assert rows["0"].endswith("FAIL row remapping failed (+2)")
    assert rows["1"].endswith("FAIL not responding (12 s)")
    assert "71°C" in rows["1"] and "180/700W" in rows["1"], "a stuck GPU's last values stay on its line"
    assert rows["2"].endswith("OK") and rows["3"].endswith("OK")
    assert [title for title, _ in GPU_COLUMNS][-1] == "Health"


def test_text_lists_findings_with_fixes_and_the_last_xids_below():
    text = once_text()
    below = text.split("\n\n")[-1].splitlines()
    assert below[0] == "GPU 0: FAIL"
    assert below[1] == "  row remapping failed -> replace the board"
    assert below[2].startswith("  Xid 119: driver said \\e]0;pwned\\x07GSP\\xff timeout -> reset the GPU")
    assert below[3] == "  PCIe link at Gen3 x8 of Gen5 x16"
    xids = [line for line in below if line.startswith("  Xid ") and " at " in line]
    assert len(xids) == 3, "the last three events"
    assert re.fullmatch(r"  Xid 79 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: GPU has fallen off the bus", xids[0])
    assert xids[-1].startswith("  Xid 119 at ") and xids[-1].endswith(": GSP RPC timeout")
    stalled = below.index("GPU 1: FAIL, not responding (12 s)")
    assert below[stalled + 1] == "  the driver does not answer -> reset the GPU, or reboot"
    assert not [line for line in below if line.startswith(("GPU 2", "GPU 3"))], "healthy GPUs add nothing"


def test_text_process_flags_column_only_when_flagged():
    text = once_text()
    table = text.split("\n\n")[1].splitlines()
    assert table[0].split()[-2:] == ["Flags", "Command"]
    rows = {line.split()[1]: line for line in table[2:]}
    assert re.search(r"  idle-held 12 min +python train\.py$", rows["101"]), rows["101"]
    assert re.search(r"  hang\?, odd\\e\[2Jflag +python train\.py$", rows["102"]), "an unknown flag, made safe"
    assert re.search(r"1:06:40 +python train\.py$", rows["103"]), "no flag: an empty cell"
    snapshot = health_snapshot()
    plain = [dataclasses.replace(p, flags=(), idle_seconds=None) for p in snapshot.gpus[0].processes]
    calm = dataclasses.replace(snapshot, gpus=(dataclasses.replace(snapshot.gpus[0], processes=tuple(plain)),))
    assert "Flags" not in once_text(calm), "no flag, no column"


def test_text_healthy_snapshot_has_no_health_section():
    snapshot = health_snapshot()
    healthy = dataclasses.replace(snapshot, gpus=snapshot.gpus[2:])
    text = once_text(healthy)
    assert "GPU 2:" not in text and "->" not in text
    assert all(health_lines(gpu) == [] for gpu in healthy.gpus)


def test_text_colours_follow_the_shared_categories():
    out = _Terminal()
    render_snapshot(health_snapshot(), out, color=True)
    text = out.getvalue()
    assert f"{STYLES[cells.ALERT]}FAIL not responding (12 s)" in text
    assert f"{STYLES[cells.HOT]}  row remapping failed -> replace the board" in text
    assert f"{STYLES[cells.WARN]}  PCIe link at Gen3 x8 of Gen5 x16" in text
    assert f"{STYLES[cells.GOOD]}OK" in text
    row = dict(zip([t for t, _ in GPU_COLUMNS], gpu_row(health_snapshot().gpus[0]), strict=True))
    assert row["Health"] == cells.health_summary_cell(health_snapshot().gpus[0])


def test_text_health_column_is_clipped_on_a_narrow_terminal(monkeypatch):
    """The Health column is last: on an 80-column terminal a long finding never widens the table."""
    import shutil

    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size((80, 24)))
    out = _Terminal()
    render_snapshot(health_snapshot(), out, color=False)
    header, rule, *rows = out.getvalue().splitlines()[1:7]
    assert header.endswith("Health") and len(rule) <= 80
    assert all(len(row) <= len(rule) for row in rows), rows
    # Columns a narrow terminal can spare are left out first (render/text.py, GPU_DROPS); the reason is cut.
    assert [row.rsplit("  ", 1)[-1] for row in rows] == ["FAIL row re…", "FAIL not re…", "OK", "OK"]
    # The details, never clipped, are below the tables.
    assert "GPU 1: FAIL, not responding (12 s)" in out.getvalue()


def test_noted_gpu_has_no_verdict():
    noted = GpuState(GpuStatic(5, host="node9"), GpuSample(NOW, lost=True), note="node9: connection refused")
    row = dict(zip([t for t, _ in GPU_COLUMNS], gpu_row(noted), strict=True))
    assert row["Health"] == ("N/A", cells.DIM)
    assert health_lines(noted) == []


# --------------------------------------------------------------------------- replay


def record(tmp_path, *snapshots: Snapshot):
    path = tmp_path / "run.jsonl"
    with path.open("w", encoding="utf-8") as out:
        writer = JsonlWriter(out, None, True)
        for snapshot in snapshots:
            writer.write(snapshot)
    return load_recording(str(path))


def test_replay_round_trip_is_exact(tmp_path):
    snapshot = health_snapshot()
    later = dataclasses.replace(snapshot, timestamp=NOW + 1, sequence=4)
    loaded = record(tmp_path, snapshot, later)
    assert loaded.stopped is None and len(loaded.snapshots) == 2
    for original, replayed in zip((snapshot, later), loaded.snapshots, strict=True):
        for want, got in zip(original.gpus, replayed.gpus, strict=True):
            assert got.health == want.health, f"GPU {want.index}: health replayed as recorded"
            assert got.sample.nvlinks == want.sample.nvlinks
            for name in READINGS:
                assert getattr(got.sample, name) == getattr(want.sample, name), name
            for name in ("pcie_link_gen_max", "pcie_link_width_max", "nvlink_count"):
                assert getattr(got.static, name) == getattr(want.static, name), name
            assert got.sample.unavailable == want.sample.unavailable
            assert [(p.flags, p.idle_seconds) for p in got.processes] == [
                (p.flags, p.idle_seconds) for p in want.processes
            ]
        # And what it writes again is what was recorded (the backend says "replay of ...", and a
        # replay words the process-list hint itself, as the live monitor would).
        again, first = snapshot_to_dict(replayed), snapshot_to_dict(original)
        for data in (again, first):
            data.pop("backend")
            for gpu in data["gpus"]:
                gpu.pop("processes_hint")
        assert again == first


def test_replay_of_a_recording_without_health_is_ok(tmp_path):
    data = snapshot_to_dict(health_snapshot())
    for gpu in data["gpus"]:
        del gpu["health"]
        for proc in gpu["processes"]:
            del proc["flags"], proc["idle_seconds"]
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(data) + "\n")
    loaded = load_recording(str(path))
    assert loaded.stopped is None
    gpus = loaded.snapshots[0].gpus
    assert all(gpu.health == OK_HEALTH for gpu in gpus)
    assert gpus[0].sample.ecc_corrected_volatile == 5, "the top-level ECC counts are read as before"
    assert gpus[0].sample.remapped_rows_corrected is None and gpus[0].sample.nvlinks is None
    assert all(p.flags == () for p in gpus[0].processes)


@pytest.mark.parametrize(
    "damage",
    [
        {"verdict": "MAYBE"},
        {"findings": [{"severity": "FAIL", "code": "x"}]},
        {"events": [{"timestamp": "yesterday", "xid": 79}]},
        {"events": [{"timestamp": 1.0, "xid": 79.5}]},
        {"xid_counts": {"seventy-nine": 2}},
        {"xid_counts": {"79": -1}},
        {"readings": {"nvlink": {"links": [{"link": "zero"}]}}},
        {"readings": {"memory": []}},
        {"responding": "yes"},
    ],
)
def test_damaged_health_is_damage_not_a_crash(tmp_path, damage):
    good = snapshot_to_dict(health_snapshot())
    bad = json.loads(json.dumps(good))
    bad["gpus"][0]["health"].update(damage)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    loaded = load_recording(str(path))
    assert len(loaded.snapshots) == 1
    assert loaded.stopped.startswith("line 2: not an nvtopy snapshot"), loaded.stopped

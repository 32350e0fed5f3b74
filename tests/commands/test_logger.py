"""``nvtopy log`` and ``nvtopy record`` as scripts use them: files, fields, signals, appends."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import time

import pytest

from nvtopy.commands.log import groups_for
from nvtopy.formats.writers import GPU_FIELDS, PROCESS_FIELDS
from nvtopy.model import ALL_GROUPS

from ..builders import NVTOPY
from ..builders import run_nvtopy as run
from .test_cli import check_contract


def test_csv_one_row_per_gpu_per_sample_header_once():
    result = run("log", "--demo", "--count", "3", "--interval", "0.1")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 4 * 3
    assert result.stdout.count("timestamp,index,") == 1
    assert [r["index"] for r in rows[:4]] == ["0", "1", "2", "3"]
    first = rows[0]
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["pstate"] == "P0"
    assert int(first["memory_used_bytes"]) <= int(first["memory_total_bytes"])
    assert first["fan_percent"] == "", "unavailable (passively cooled): an empty cell, not 0"
    assert len({r["timestamp"] for r in rows}) == 3


def test_csv_chosen_fields_in_order():
    result = run("log", "--demo", "--count", "1", "--fields", "index,temperature_c", "--fields", "uuid")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "index,temperature_c,uuid"
    assert lines[1].startswith("0,") and lines[1].count(",") == 2 and ",GPU-" in lines[1]


def test_unknown_field_is_one_line_naming_the_closest_not_all_109():
    result = run("log", "--demo", "--fields", "index,gpu_temp")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "unknown field 'gpu_temp'; did you mean" in line and "'temperature_c'" in line
    assert f"({len(GPU_FIELDS)} fields: 'nvtopy log --fields help' lists them)" in line
    assert "mig_dram_active_percent" not in line and len(line) < 250, "the close names, never the whole list"


@pytest.mark.parametrize("word", ["help", "?"])
def test_fields_help_lists_fields_one_a_line(word):
    result = run("log", "--fields", word)
    assert result.returncode == 0 and result.stdout.splitlines() == list(GPU_FIELDS)
    result = run("log", "--processes", "--fields", word)
    assert result.stdout.splitlines() == list(PROCESS_FIELDS)


def test_csv_processes_one_row_per_process():
    result = run("log", "--demo", "--count", "1", "--processes")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and all(r["pid"].isdigit() and r["command"] for r in rows)
    assert {r["gpu_index"] for r in rows} <= {"0", "1", "2", "3"}


def test_jsonl_one_object_per_snapshot_in_contract_names():
    result = run("log", "--demo", "--count", "2", "--interval", "0.1", "--format", "jsonl", "--processes")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        check_contract(json.loads(line))
    plain = run("log", "--demo", "--count", "1", "--format", "jsonl")
    assert "processes" not in json.loads(plain.stdout)["gpus"][0], "processes only when asked"


def test_jsonl_fields_filter_gpu_keys():
    result = run("log", "--demo", "--count", "1", "--format", "jsonl", "--fields", "utilization_gpu_percent")
    gpu = json.loads(result.stdout)["gpus"][0]
    assert set(gpu) <= {"index", "utilization_gpu_percent", "unavailable"}
    assert "utilization_gpu_percent" in gpu


def test_output_file_is_appended_and_header_written_once(tmp_path):
    path = tmp_path / "gpus.csv"
    for _ in range(2):
        result = run("log", "--demo", "--count", "1", "--output", str(path))
        assert result.returncode == 0 and result.stdout == ""
    text = path.read_text()
    assert text.count("timestamp,index,") == 1 and len(text.splitlines()) == 1 + 2 * 4


def test_unwritable_output_is_one_line(tmp_path):
    result = run("log", "--demo", "--count", "1", "--output", str(tmp_path / "missing" / "x.csv"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "cannot write" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_cleanly_with_a_complete_file(tmp_path, signum):
    path = tmp_path / "log.jsonl"
    proc = subprocess.Popen(
        [*NVTOPY, "log", "--demo", "--format", "jsonl", "--processes", "--interval", "0.1", "--output", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while (not path.exists() or path.read_text().count("\n") < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        grown = path.read_text().count("\n")
        assert grown >= 3, "each sample is flushed as it is written"
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = path.read_text()
    assert text.endswith("\n")
    for line in text.splitlines():
        check_contract(json.loads(line))


def test_a_killed_logger_loses_at_most_the_sample_in_progress(tmp_path):
    path = tmp_path / "log.csv"
    proc = subprocess.Popen([*NVTOPY, "log", "--demo", "--interval", "0.1", "--output", str(path)])
    deadline = time.monotonic() + 20
    while (not path.exists() or path.read_text().count("\n") < 9) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    text = path.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) >= 8 and text.endswith("\n")
    assert all(r["throttle_reasons"] is not None for r in rows), "no half-written row"
    assert len(rows) % 4 == 0, "a sample (4 GPU rows) is written whole, in one write"


def test_record_writes_snapshots_with_processes(tmp_path):
    path = tmp_path / "run.jsonl"
    result = run("record", str(path), "--demo", "--count", "3", "--interval", "0.1")
    assert result.returncode == 0, result.stderr
    assert "3 snapshots written" in result.stderr
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    data = [json.loads(line) for line in lines]
    assert [d["sequence"] for d in data] == [1, 2, 3]
    assert all(g["processes"] for g in data[0]["gpus"])


def test_groups_follow_the_fields():
    assert groups_for("csv", ["index", "temperature_c", "power_draw_w"], False) == {"temperature", "power"}
    assert groups_for("csv", ["pid"], True) == frozenset()
    assert groups_for("jsonl", None, False) == ALL_GROUPS


def test_bad_count_and_interval():
    assert run("log", "--demo", "--count", "0").returncode == 2
    assert run("log", "--demo", "--interval", "-1").returncode == 2


def test_log_selection_flags_apply():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="2")
    result = run("log", "--demo", "--count", "1", "--only-visible", "--fields", "index", env=env, timeout=60)
    assert result.stdout.split() == ["index", "2"]
    assert run("log", "--demo", "--count", "1", "--gpus", "1,3", "--fields", "index").stdout.split() == [
        "index",
        "1",
        "3",
    ]


@pytest.mark.parametrize("values", [[""], [",,"], [" , ", ""], [",", " \t "]])
def test_empty_field_list_is_a_usage_error(values):
    from nvtopy.commands.log import _parse_fields
    from nvtopy.errors import UsageError
    from nvtopy.formats.writers import DEFAULT_GPU_FIELDS

    with pytest.raises(UsageError, match="--fields: no field given") as info:
        _parse_fields(values, GPU_FIELDS, DEFAULT_GPU_FIELDS)
    assert "\n" not in str(info.value)


def test_empty_parts_of_a_field_list_are_skipped():
    from nvtopy.commands.log import _parse_fields
    from nvtopy.formats.writers import DEFAULT_GPU_FIELDS

    assert _parse_fields(["", ",index,,uuid,"], GPU_FIELDS, DEFAULT_GPU_FIELDS) == ["index", "uuid"]


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="no /dev/stdout here")
def test_output_that_cannot_seek_is_a_new_stream():
    """``--output /dev/stdout`` on a pipe: no position to ask, so a new stream (the header is written)."""
    result = run("log", "--demo", "--count", "1", "--fields", "index", "--output", "/dev/stdout")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["index", "0", "1", "2", "3"]

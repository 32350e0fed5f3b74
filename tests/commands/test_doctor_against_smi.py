"""``nvtopy doctor --against-nvidia-smi [FILE]``: nvtopy beside nvidia-smi, field by field.

The reader (:mod:`nvtopy.formats.nvidia_smi`) and the comparison are tested on
small hand-made documents; the command end to end with ../shared/fake-nvml
serving a real capture (a profile built by its capture.py) while a stand-in
``nvidia-smi`` on PATH prints that same capture, or an edited copy of it (each
deliberate disagreement must be caught, named, and exit 1). Tests needing
../shared skip cleanly without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvtopy.commands.doctor.against_smi import AGREE, DIFFER, WARN, compare, exit_code
from nvtopy.formats.nvidia_smi import MAX_BYTES, SmiError, parse_nvidia_smi

from ..builders import run_nvtopy
from ..conftest import FAKE_NVML_SRC, needs_fake_nvml

CAPTURES = FAKE_NVML_SRC.parent / "nvidia-smi-captures"
needs_captures = pytest.mark.skipif(
    not (CAPTURES / "SOURCES.md").exists(), reason="../shared/nvidia-smi-captures is not available"
)

GPU_XML = """  <gpu id="{bus}">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>{uuid}</uuid>
    <pci><pci_bus_id>{bus}</pci_bus_id></pci>
    <fan_speed>N/A</fan_speed>
    <performance_state>P0</performance_state>
    <fb_memory_usage><total>81559 MiB</total><reserved>480 MiB</reserved><used>1024 MiB</used></fb_memory_usage>
    <utilization><gpu_util>40 %</gpu_util><memory_util>5 %</memory_util></utilization>
    <temperature><gpu_temp>{temp} C</gpu_temp><gpu_temp_slow_threshold>N/A</gpu_temp_slow_threshold></temperature>
    <gpu_power_readings><power_draw>N/A</power_draw><average_power_draw>300.50 W</average_power_draw>
      <current_power_limit>700.00 W</current_power_limit></gpu_power_readings>
    <ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
    <ecc_errors><volatile><sram_correctable>1</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>3</dram_correctable>
      <dram_uncorrectable>0</dram_uncorrectable></volatile></ecc_errors>
  </gpu>
"""


def smi_xml(*gpus: dict, doctype: str = '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">') -> bytes:
    body = "".join(GPU_XML.format(**{"bus": "00000000:53:00.0", "uuid": "GPU-a", "temp": 40, **g}) for g in gpus)
    return (
        f'<?xml version="1.0" ?>\n{doctype}\n<nvidia_smi_log>\n<driver_version>580.105.08</driver_version>\n'
        f"<cuda_version>13.0</cuda_version>\n{body}</nvidia_smi_log>\n"
    ).encode()


def ours(*gpus: dict) -> dict:
    """nvtopy's --once --json, as much of it as the comparison reads."""
    base = {
        "index": 0,
        "uuid": "GPU-a",
        "bus_id": "00000000:53:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "fan_percent": None,
        "pstate": "P0",
        "memory_total_bytes": 81559 << 20,
        "memory_reserved_bytes": 480 << 20,
        "memory_used_bytes": 1024 << 20,
        "utilization_gpu_percent": 40,
        "utilization_memory_percent": 5,
        "temperature_c": 40,
        "temperature_slowdown_c": None,
        "power_draw_w": 300.5,
        "power_limit_w": 700.0,
        "ecc_mode": True,
        "ecc_corrected_volatile": 4,
        "ecc_uncorrected_volatile": 2,
    }
    return {"driver_version": "580.105.08", "cuda_driver_version": "13.0", "gpus": [{**base, **g} for g in gpus]}


# --------------------------------------------------------------------- the reader


def test_reader_takes_what_nvidia_smi_printed_in_nvtopy_units():
    log = parse_nvidia_smi(smi_xml({}))
    assert (log.format, log.driver_version, log.cuda_version, len(log.gpus)) == ("xml", "580.105.08", "13.0", 1)
    fields = log.gpus[0].fields
    assert fields["memory_total_mib"] == 81559 and fields["memory_used_mib"] == 1024
    assert fields["power_draw_w"] == 300.5, "power.draw falls back to the average where draw is N/A"
    assert fields["temperature_slowdown_c"] is None and fields["fan_percent"] is None, "N/A is None"
    assert "clock_sm_mhz" not in fields, "a field not printed is absent: nothing to compare"
    assert fields["ecc_corrected_volatile"] == 4 and fields["ecc_uncorrected_volatile"] == 2, "SRAM + DRAM"
    assert fields["ecc_mode"] is True and fields["pstate"] == "P0"


def test_reader_reads_text_q_too():
    text = (
        "==============NVSMI LOG==============\n\nDriver Version                            : 550.90.12\n"
        "CUDA Version                              : 12.4\n\nAttached GPUs                             : 1\n"
        "GPU 00000000:08:00.0\n    Product Name                          : NVIDIA A10\n"
        "    GPU UUID                              : GPU-b\n    FB Memory Usage\n"
        "        Total                             : 23028 MiB\n        Used                              : 0 MiB\n"
        "    Temperature\n        GPU Current Temp                  : 33 C\n"
    )
    log = parse_nvidia_smi(text.encode())
    assert log.format == "text" and log.driver_version == "550.90.12"
    (gpu,) = log.gpus
    assert (gpu.uuid, gpu.bus_id, gpu.fields["memory_total_mib"], gpu.fields["temperature_c"]) == (
        "GPU-b",
        "00000000:08:00.0",
        23028,
        33,
    )


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (smi_xml({}, doctype='<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaa">]>'), "DTD subset or entities"),
        (b'<?xml version="1.0"?><!DOCTYPE x [<!ELEMENT x ANY>]><x/>', "DTD subset"),
        (b"<nvidia_smi_log><gpu>", "not well-formed XML"),
        (b"<html><body>hello</body></html>", "not an nvidia_smi_log"),
        (b"hello world", "not nvidia-smi -q output"),
        (b"\x80\x81garbage", "neither XML nor UTF-8 text"),
        (b" " * (MAX_BYTES + 1), "larger than 8 MiB"),
        ('<!DOCTYPE l [<!ENTITY a "b">]><nvidia_smi_log/>'.encode("utf-16"), "not UTF-8 XML"),
    ],
    ids=["entity", "dtd-subset", "malformed", "html", "words", "binary", "huge", "utf16-entity"],
)
def test_reader_refuses_what_is_no_capture(data, words):
    with pytest.raises(SmiError, match=re.escape(words)):
        parse_nvidia_smi(data)


# --------------------------------------------------------------------- the comparison


def rows_by(rows, status):
    return [(r.gpu, r.field) for r in rows if r.status == status]


def test_everything_agrees_within_tolerance():
    rows = compare(parse_nvidia_smi(smi_xml({})), ours({"temperature_c": 42, "power_draw_w": 305.0}))
    assert rows_by(rows, DIFFER) == [] and exit_code(rows) == 0
    assert {"temperature", "power draw", "memory total", "fan", "ECC corrected (volatile)"} <= {r.field for r in rows}


def test_a_static_value_must_be_equal_and_a_moving_one_within_tolerance():
    rows = compare(
        parse_nvidia_smi(smi_xml({"temp": 60})),
        ours({"memory_total_bytes": 81920 << 20, "fan_percent": 30, "pstate": "P2"}),
    )
    differ = {r.field: r for r in rows if r.status == DIFFER}
    assert set(differ) == {"memory total", "temperature", "fan"}
    assert "off by 20 °C, tolerance ±3 °C" in differ["temperature"].detail
    assert "must be equal" in differ["memory total"].detail
    assert differ["fan"].detail == "N/A in nvidia-smi only"
    assert rows_by(rows, WARN) == [("GPU 0 GPU-a", "performance state")], "a P-state may change between reads"
    assert exit_code(rows) == 1


# A real H200 (driver 580.159.04, the first real GPU nvtopy met): NVML's reserved 644,939,776 bytes
# (615.06 MiB), nvidia-smi -q -x "616 MiB". nvidia-smi rounds whole MiB up on some drivers, down on others.
H200_RESERVED_BYTES = 644_939_776


@pytest.mark.parametrize(("smi_mib", "agrees"), [(616, True), (615, True), (617, False), (614, False)])
def test_a_mib_figure_agrees_with_nvidia_smis_whole_mib_either_side_only(smi_mib, agrees):
    xml = smi_xml({}).replace(b"<reserved>480 MiB</reserved>", f"<reserved>{smi_mib} MiB</reserved>".encode())
    rows = compare(parse_nvidia_smi(xml), ours({"memory_reserved_bytes": H200_RESERVED_BYTES}))
    (row,) = [r for r in rows if r.field == "memory reserved"]
    assert (row.status == AGREE) is agrees, row
    assert row.nvtopy == 615.1
    if not agrees:
        assert "must be equal" in row.detail


def test_a_whole_mib_figure_must_still_be_equal():
    rows = compare(parse_nvidia_smi(smi_xml({})), ours({"memory_reserved_bytes": 481 << 20}))
    (row,) = [r for r in rows if r.field == "memory reserved"]
    assert row.status == DIFFER and "off by 1 MiB" in row.detail


def test_gpus_pair_by_uuid_else_bus_id_and_a_lone_one_is_named():
    second, third = {"uuid": "GPU-b", "bus": "00000000:64:00.0"}, {"uuid": "N/A", "bus": "0:9a:0.0"}
    log = parse_nvidia_smi(smi_xml({}, second, third))
    mine = ours(
        {"index": 1},
        {"index": 0, "uuid": "GPU-c", "bus_id": "00000000:9A:00.0"},
        {"index": 2, "uuid": "GPU-d", "bus_id": "00000000:AB:00.0"},
    )
    rows = compare(log, mine)
    lone = {(r.gpu, r.nvidia_smi, r.nvtopy) for r in rows if r.field == "GPU"}
    assert lone == {("GPU 1 GPU-b", "present", "absent"), ("GPU 2 GPU-d", "absent", "present")}
    assert ("GPU 0 GPU-c", "temperature") in rows_by(rows, AGREE), "paired by bus id where the UUID is N/A"
    assert ("GPU 1 GPU-a", "temperature") in rows_by(rows, AGREE)
    selected = compare(log, ours({}), selected_only=True)
    assert [r for r in selected if r.field == "GPU"] == [], "--gpus: nvidia-smi's other GPUs are not missing"


# --------------------------------------------------------------------- the command, file errors (no driver needed)


def doctor(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_nvtopy("doctor", *args, env=env, timeout=timeout)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"<nvidia_smi_log><gpu>", "not well-formed XML"),
        (b'<!DOCTYPE l [<!ENTITY a "b">]><nvidia_smi_log>&a;</nvidia_smi_log>', "DTD subset or entities"),
        (b"x" * (MAX_BYTES + 1), "larger than 8 MiB"),
        (None, "no such file"),
    ],
    ids=["malformed", "entity", "huge", "missing"],
)
def test_a_bad_file_is_one_line_and_exit_2(tmp_path, content, words):
    path = tmp_path / "capture.xml"
    if content is not None:
        path.write_bytes(content)
    result = doctor("--demo", "--against-nvidia-smi", str(path))
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr


def stand_in(folder: Path, script: str) -> dict:
    """An environment whose PATH finds a stand-in ``nvidia-smi`` (a shell script) first."""
    folder.mkdir(exist_ok=True)
    program = folder / "nvidia-smi"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_missing_nvidia_smi_is_one_line(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    result = doctor("--demo", "--against-nvidia-smi", env=env)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == (
        "nvtopy: error: nvidia-smi is not installed (not on PATH): pass a saved 'nvidia-smi -q -x' capture as FILE"
    )


def test_hung_nvidia_smi_meets_the_deadline(tmp_path):
    env = stand_in(tmp_path / "bin", "sleep 60")
    started = time.monotonic()
    result = doctor("--demo", "--against-nvidia-smi", "--timeout", "1", env=env)
    took = time.monotonic() - started
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "nvidia-smi did not answer within 1 s" in result.stderr
    assert took < 30, f"took {took:.1f} s"


def test_failing_nvidia_smi_says_what_it_said(tmp_path):
    env = stand_in(tmp_path / "bin", "echo 'NVIDIA-SMI has failed because it could not communicate' >&2; exit 9")
    result = doctor("--demo", "--against-nvidia-smi", env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "nvtopy: error: nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it could not communicate"
    )


# --------------------------------------------------------------------- end to end on the fake driver


# An H100 box, a MIG one, a GeForce card, an old driver (R384, no CUDA version printed), and a text -q
# capture holding two reports (idle, then load: the last is read, as capture.py serves by default).
CASES = [
    "h100-80gb-hbm3-x8-580.105.08-k8stestinfra.xml",
    "a100-sxm4-80gb-x4-mig-535.54.03-telegraf.xml",
    "rtx-3090-525.147.05-telegraf.xml",
    "gtx-1070-x6-384.66-openpai.xml",
    "h100-80gb-hbm3-mig-590.48.01-nvgpuexp-capture.txt",
]


@pytest.fixture
def served(fake_lib, tmp_path):
    """``served(capture)``: an environment where fake-nvml serves that capture and nvidia-smi prints it."""

    def serve(name: str, printed: bytes | None = None) -> tuple[dict, Path]:
        capture = CAPTURES / name
        profile = tmp_path / f"{name}.profile"
        convert = subprocess.run(
            [sys.executable, str(FAKE_NVML_SRC / "capture.py"), str(capture), "-o", str(profile)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert convert.returncode == 0, convert.stderr
        shown = tmp_path / f"printed-{name}"
        shown.write_bytes(capture.read_bytes() if printed is None else printed)
        env = stand_in(tmp_path / "bin", f"cat '{shown}'")
        env.update(LD_LIBRARY_PATH=fake_lib, FAKE_NVML_PROFILE=str(profile))
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return env, shown

    return serve


@needs_fake_nvml
@needs_captures
@pytest.mark.parametrize("name", CASES)
def test_every_field_agrees_on_real_captures(served, name):
    env, _ = served(name)
    result = doctor("--against-nvidia-smi", "--json", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "agree" and data["counts"]["differ"] == 0 and data["source"] == "nvidia-smi -q -x"
    gpus = {r["gpu"] for r in data["rows"] if r["gpu"]}
    fields = {r["field"] for r in data["rows"]}
    assert len(gpus) == len(parse_nvidia_smi((CAPTURES / name).read_bytes()).gpus)
    assert {"memory total", "temperature", "power limit", "ECC mode", "uuid"} <= fields
    text = doctor("--against-nvidia-smi", env=env)
    assert text.returncode == 0 and "AGREE:" in text.stdout.splitlines()[-1], text.stdout[-2000:]


def edit_gpu(xml: bytes, position: int, edit) -> bytes:
    """The XML with its ``position``-th <gpu ...>...</gpu> replaced by ``edit(that element's text)``."""
    spans = [m.span() for m in re.finditer(rb"<gpu id=.*?</gpu>", xml, re.S)]
    start, end = spans[position]
    return xml[:start] + edit(xml[start:end]) + xml[end:]


def _temperature_up_20(gpu: bytes) -> bytes:
    return re.sub(rb"<gpu_temp>(\d+) C", lambda m: b"<gpu_temp>%d C" % (int(m.group(1)) + 20), gpu, count=1)


DISAGREEMENTS = {
    "memory total": (
        lambda xml: edit_gpu(xml, 1, lambda g: re.sub(rb"<total>81559 MiB", b"<total>81920 MiB", g, count=1)),
        "DIFFER  memory total",
        "nvidia-smi 81920 MiB, nvtopy 81559 MiB: off by 361 MiB, must be equal",
    ),
    "temperature": (
        lambda xml: edit_gpu(xml, 2, _temperature_up_20),
        "DIFFER  temperature",
        "off by 20 °C, tolerance ±3 °C",
    ),
    "missing GPU": (  # nvidia-smi lists one GPU fewer: nvtopy reads one it does not list
        lambda xml: edit_gpu(xml, 3, lambda g: b""),
        "GPU 3 GPU-00000003",
        "nvidia-smi absent, nvtopy present: nvtopy reads it, nvidia-smi lists none",
    ),
    "extra GPU": (  # nvidia-smi lists a ninth GPU that nvtopy does not see
        lambda xml: edit_gpu(
            xml, 7, lambda g: g + b"\n" + g.replace(b"GPU-00000007", b"GPU-99999999").replace(b":DB:00.0", b":EE:00.0")
        ),
        "GPU 8 GPU-99999999",
        "nvidia-smi present, nvtopy absent: nvidia-smi lists it, nvtopy not",
    ),
}


@needs_fake_nvml
@needs_captures
@pytest.mark.parametrize("kind", list(DISAGREEMENTS))
def test_each_deliberate_disagreement_is_caught_and_named(served, kind):
    name = CASES[0]
    edit, where, said = DISAGREEMENTS[kind]
    original = (CAPTURES / name).read_bytes()
    edited = edit(original)
    assert edited != original, "the edit changed nothing: the capture is not what this test expects"
    env, _ = served(name, edited)
    result = doctor("--against-nvidia-smi", "--no-color", env=env)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr
    differ = [line for line in result.stdout.splitlines() if "DIFFER " in line]
    assert len(differ) == 1, differ
    block = result.stdout.split(where, 1)
    assert len(block) == 2, f"{where!r} not in the output"
    assert said in differ[0], differ[0]
    assert result.stdout.splitlines()[-1].startswith("DIFFER:")
    data = json.loads(doctor("--against-nvidia-smi", "--json", env=env).stdout)
    assert data["exit_code"] == 1 and data["counts"]["differ"] == 1


@needs_fake_nvml
@needs_captures
def test_saved_file_mode_reads_no_nvidia_smi(served, tmp_path):
    env, shown = served(CASES[2])
    env["PATH"] = str(tmp_path / "nowhere")  # no nvidia-smi at all: the file is enough
    result = run_nvtopy("doctor", "--against-nvidia-smi", str(shown), "--json", env=env, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == str(shown) and data["counts"]["differ"] == 0
    hot = tmp_path / "hot.xml"
    hot.write_bytes(edit_gpu(shown.read_bytes(), 0, _temperature_up_20))
    result = run_nvtopy("doctor", "--against-nvidia-smi", str(hot), env=env, timeout=60)
    assert result.returncode == 1 and "DIFFER  temperature" in result.stdout, result.stdout[-2000:]

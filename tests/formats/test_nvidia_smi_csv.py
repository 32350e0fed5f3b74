"""The nvidia-smi fallback of ``--ssh`` (nvtopy.formats.nvidia_smi_csv): the real loop under real shells, the parser.

The loop runs as the far side would run it: ``loop_command`` under ``sh -c`` and the login shells
present (bash, zsh, fish, tcsh), ``loop_script`` under each POSIX sh present (dash, bash, busybox),
with tests/data/nvidia-smi/fake-nvidia-smi first on PATH as ``nvidia-smi``: its cycles are read
from the pipe with a deadline and parsed. The parser is then fed what a broken or hostile host
could send. The field names are checked against the ``--help-query-gpu`` of the real drivers in
../shared/nvidia-smi-captures, and the CSV those captures hold is parsed and compared with the same
capture's ``nvidia-smi -q``, read by nvtopy's own reader (skipped without ../shared).
"""

from __future__ import annotations

import math
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from nvtopy.formats.nvidia_smi import parse_nvidia_smi
from nvtopy.formats.nvidia_smi_csv import (
    APP_FIELDS,
    BASIC_GPU_FIELDS,
    GPU_FIELDS,
    MAX_CYCLE_LINES,
    MISSING,
    SmiCycle,
    SmiCycleReader,
    loop_command,
    loop_script,
    parse_cycle,
)
from nvtopy.formats.prometheus.parse import MAX_GPUS_PER_HOST, MAX_LABEL, MAX_PROCESSES_PER_HOST
from nvtopy.model import GpuSample, GpuStatic, Reason

from ..conftest import FAKE_NVML_SRC

FAKE_SMI = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi" / "fake-nvidia-smi"
CAPTURES = FAKE_NVML_SRC.parent / "nvidia-smi-captures"
MIB = 1 << 20
UUID0 = "GPU-1b7f8a4e-5c2d-4e11-9a0b-3c4d5e6f7a80"
UUID1 = "GPU-9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b5c4"
DEADLINE = 15.0  # seconds for two cycles at 0.2 s: the fake is a python3 start per query, on a busy 2-core VM


# --------------------------------------------------------------------- the loop under real shells


@pytest.fixture
def smi_path(tmp_path: Path) -> str:
    """A PATH whose first directory holds the fake as ``nvidia-smi``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE_SMI)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"


def _shells() -> Iterator[tuple[str, list[str]]]:
    """(name, argv): loop_command as a login shell runs what ssh hands it, loop_script under each POSIX sh."""
    yield "sh -c loop_command", ["sh", "-c", "COMMAND"]
    for shell in ("bash", "zsh", "fish", "tcsh"):  # login shells: each must hand the command to sh unchanged
        found = shutil.which(shell)
        if found:
            yield f"{shell} -c loop_command", [found, "-c", "COMMAND"]
    for shell in ("dash", "bash", "busybox"):
        found = shutil.which(shell)
        if found:
            yield f"{shell} loop_script", [found, *(["sh"] if shell == "busybox" else []), "-c", "SCRIPT"]


SHELLS = list(_shells())


def _run_loop(argv: list[str], env: dict[str, str], cycles: int = 2) -> tuple[list[SmiCycle], SmiCycleReader]:
    """Run the loop, feed its lines to a reader until ``cycles`` cycles came (or the deadline), kill it."""
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, start_new_session=True
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    reader = SmiCycleReader()
    found: list[SmiCycle] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(found) < cycles and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            cycle = reader.feed(line)
            if cycle is not None:
                found.append(cycle)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    assert len(found) == cycles, f"{len(found)} cycles within {DEADLINE} s"
    return found, reader


def _argv(shell: list[str], interval: float = 0.2) -> list[str]:
    text = loop_command(interval) if shell[-1] == "COMMAND" else loop_script(interval)
    return [*shell[:-1], text]


def _env(path: str, **extra: str) -> dict[str, str]:
    return {"PATH": path, "LC_ALL": "C", **extra}


@pytest.mark.parametrize("shell", [s[1] for s in SHELLS], ids=[s[0] for s in SHELLS])
def test_the_loop_reads_the_fakes_gpus_and_processes(shell: list[str], smi_path: str) -> None:
    cycles, reader = _run_loop(_argv(shell), _env(smi_path))
    for cycle in cycles:
        assert (cycle.mode, cycle.error, cycle.dropped, cycle.processes_unavailable) == ("full", None, 0, None)
        assert cycle.missing == MISSING["full"] and "Xid events" in cycle.missing
        assert cycle.driver_version == "550.90.07"
        (s0, g0), (s1, g1) = cycle.gpus
        assert (s0.index, s0.uuid, s0.name, s0.bus_id) == (0, UUID0, "NVIDIA A100-SXM4-80GB", "00000000:07:00.0")
        assert (s1.index, s1.uuid, s1.name, s1.bus_id) == (1, UUID1, "NVIDIA GeForce RTX 3090", "00000000:41:00.0")
        assert s0.memory_total_bytes == 81920 * MIB and s0.serial == "1324321000001"
        assert (s0.clock_sm_max_mhz, s0.clock_mem_max_mhz, s0.compute_capability) == (1410, 1593, "8.0")
        assert (s0.power_default_limit_w, s0.power_min_limit_w, s0.power_max_limit_w) == (400.0, 100.0, 400.0)
        assert (s0.mig_mode, s0.mig_mode_pending, s1.mig_mode) == (False, False, None)
        assert s1.unavailable["mig_mode"] is Reason.NOT_AVAILABLE
        assert s0.unavailable["driver_model"] is Reason.NOT_AVAILABLE and s0.driver_model is None
        assert s1.serial is None and s1.unavailable["serial"] is Reason.NOT_AVAILABLE
        assert (s0.pcie_link_gen_max, s0.pcie_link_width_max) == (4, 16)
        assert (g0.memory_used_bytes, g0.memory_free_bytes, g0.memory_reserved_bytes) == (
            40500 * MIB,
            40917 * MIB,
            503 * MIB,
        )
        assert (g0.temperature_c, g0.utilization_gpu_percent, g0.utilization_memory_percent) == (41, 87, 43)
        assert (g0.power_draw_w, g0.power_limit_w, g0.pstate) == (312.45, 400.0, 0)
        assert (g0.clock_sm_mhz, g0.clock_mem_mhz, g0.throttle_reasons) == (1410, 1593, ())
        assert (g0.ecc_mode, g0.ecc_uncorrected_volatile, g0.ecc_corrected_aggregate) == (True, 0, 3)
        assert (g0.remapped_rows_pending, g0.remapped_rows_failure, g0.persistence_mode) == (False, False, True)
        assert g0.fan_percent is None and g0.why("fan_percent") is Reason.NOT_AVAILABLE
        assert g0.retired_pages_sbe is None and g0.why("retired_pages_sbe") is Reason.NOT_AVAILABLE
        # GPU 1: no power reading -- N/A with its reason, never 0
        assert g1.power_draw_w is None and g1.why("power_draw_w") is Reason.NOT_AVAILABLE
        assert (g1.power_limit_w, g1.fan_percent, g1.pstate, g1.throttle_reasons) == (350.0, 30, 8, ("gpu_idle",))
        assert g1.ecc_mode is None and g1.why("ecc_mode") is Reason.NOT_AVAILABLE
        assert not g0.lost and not g1.lost and g0.timestamp == g1.timestamp
        assert set(cycle.processes) == {0, 1} and cycle.processes[1] == ()
        first, second = cycle.processes[0]
        assert (first.pid, first.gpu_index, first.gpu_uuid, first.name, first.command) == (
            4242,
            0,
            UUID0,
            "python3",
            "/usr/bin/python3",
        )
        assert first.gpu_memory_bytes == 30000 * MIB
        assert (second.pid, second.name, second.command) == (4343, "run", "/opt/train, v2/run")  # the comma stays
        assert second.unavailable["user"] is Reason.NOT_SUPPORTED
    assert reader.noise == 0 and reader.incomplete == 0


@pytest.mark.parametrize("shell", [s[1] for s in SHELLS], ids=[s[0] for s in SHELLS])
def test_an_old_driver_gets_the_basic_fields(shell: list[str], smi_path: str) -> None:
    cycles, _ = _run_loop(_argv(shell), _env(smi_path, FAKE_SMI_OLD="1"))
    for cycle in cycles:
        assert (cycle.mode, cycle.error, cycle.dropped) == ("basic", None, 0)
        assert "ECC" in cycle.missing and "throttle reasons" in cycle.missing
        (s0, g0), (_, g1) = cycle.gpus
        assert (s0.name, g0.power_limit_w, g1.power_limit_w) == ("NVIDIA A100-SXM4-80GB", 400.0, 350.0)
        assert g0.ecc_mode is None and g0.throttle_reasons is None and s0.mig_mode is None
        assert [p.pid for p in cycle.processes[0]] == [4242, 4343]


def test_a_failing_driver_is_an_error_line_and_no_gpu(smi_path: str) -> None:
    cycles, _ = _run_loop(_argv(["sh", "-c", "COMMAND"]), _env(smi_path, FAKE_SMI_FAIL="1"))
    for cycle in cycles:
        assert cycle.gpus == () and cycle.processes == {}
        assert cycle.error is not None and cycle.error.startswith("NVIDIA-SMI has failed because it couldn't")
        assert cycle.processes_unavailable is Reason.UNKNOWN
        assert cycle.mode == "full"  # the basic query failed as well: nothing says the driver is old


def test_no_nvidia_smi_at_all_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    path = f"{empty}{os.pathsep}/usr/bin{os.pathsep}/bin"
    if shutil.which("nvidia-smi", path=path):
        pytest.skip("this machine has a real nvidia-smi on /usr/bin or /bin")
    cycles, _ = _run_loop(_argv(["sh", "-c", "COMMAND"]), _env(path), cycles=1)
    assert cycles[0].gpus == () and cycles[0].error is not None and "not found" in cycles[0].error


def test_no_process_is_an_empty_list_not_an_unknown_one(smi_path: str) -> None:
    cycles, _ = _run_loop(_argv(["sh", "-c", "COMMAND"]), _env(smi_path, FAKE_SMI_NO_APPS="1"), cycles=1)
    assert cycles[0].processes == {0: (), 1: ()} and cycles[0].processes_unavailable is None


def test_a_process_name_cannot_end_or_forge_a_cycle(smi_path: str) -> None:
    """The fake's extra process is named ``evil\\n#nvtopy-smi end\\n#nvtopy-smi cycle...``: counted lines stay data."""
    cycles, reader = _run_loop(_argv(["sh", "-c", "COMMAND"]), _env(smi_path, FAKE_SMI_EVIL="1"))
    for cycle in cycles:
        assert [p.pid for p in cycle.processes[0]] == [4242, 4343]
        assert [(p.pid, p.name) for p in cycle.processes[1]] == [(6666, "evil")]
        assert len(cycle.gpus) == 2 and cycle.error is None and cycle.dropped == 3  # the name's other lines
    assert reader.noise == 0


def test_the_loop_command_is_one_quoted_line_for_any_login_shell() -> None:
    command = loop_command(0.5)
    assert command.startswith("exec sh -c '") and command.endswith("'") and command.count("'") == 2
    assert "\n" not in command and "!" not in command
    assert "sleep 0.5 " in command and "sleep 1" in command
    assert loop_script(2).count("sleep 2 ") == 1
    for bad in (0, -1, math.nan, math.inf, 1e9):
        with pytest.raises(ValueError, match="interval"):
            loop_command(bad)


def test_the_fake_knows_every_field_and_rejects_an_unknown_one_as_nvidia_smi_does(smi_path: str) -> None:
    env = _env(smi_path)
    fmt = "--format=csv,noheader,nounits"
    full = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", fmt], env=env, capture_output=True, text=True, timeout=30
    )
    assert full.returncode == 0 and len(full.stdout.splitlines()) == 2
    old = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", fmt],
        env={**env, "FAKE_SMI_OLD": "1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    first_new = next(f for f in GPU_FIELDS if f not in BASIC_GPU_FIELDS)
    assert (old.returncode, old.stdout) == (2, f'Field "{first_new}" is not a valid field to query.\n\n')


# --------------------------------------------------------------------- the parser on what a host could send


def _row(values: dict[str, str], fields: Sequence[str] = GPU_FIELDS) -> str:
    return ", ".join(values.get(name, "1") for name in fields)


def _good(number: int = 0, **overrides: str) -> dict[str, str]:
    values = {
        "index": str(number),
        "uuid": f"GPU-{number:08d}",
        "pci.bus_id": f"00000000:{number % 256:02X}:00.0",
        "name": "NVIDIA H100",
        "pstate": "P0",
        "clocks_throttle_reasons.active": "0x0000000000000000",
        "driver_version": "550.1",
    }
    for flag in ("persistence_mode", "ecc.mode.current", "mig.mode.current", "mig.mode.pending"):
        values[flag] = "Enabled"
    for flag in ("retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure"):
        values[flag] = "No"
    values.update({"compute_mode": "Default", "compute_cap": "9.0", "driver_model.current": "[N/A]"})
    values.update(overrides)
    return values


def _cycle(gpu_rows: Sequence[str], app_rows: Sequence[str] = (), mode: str = "full", status: int = 0) -> list[str]:
    return [
        "#nvtopy-smi cycle",
        f"#nvtopy-smi gpu {mode} {len(gpu_rows)} {status}",
        *gpu_rows,
        f"#nvtopy-smi apps {len(app_rows)} 0",
        *app_rows,
        "#nvtopy-smi end",
    ]


def _one(**overrides: str) -> tuple[GpuStatic, GpuSample]:
    cycle = parse_cycle(_cycle([_row(_good(0, **overrides))]), 100.0)
    assert cycle.error is None and len(cycle.gpus) == 1, cycle
    return cycle.gpus[0]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[N/A]", Reason.NOT_AVAILABLE),
        ("N/A", Reason.NOT_AVAILABLE),
        ("[Not Supported]", Reason.NOT_SUPPORTED),
        ("[Unknown Error]", Reason.UNKNOWN),
        ("[Insufficient Permissions]", Reason.NO_PERMISSION),
        ("[GPU is lost]", Reason.LOST),
        ("[Requested functionality has been deprecated]", Reason.NOT_SUPPORTED),
        ("", Reason.NOT_AVAILABLE),
        ("   ", Reason.NOT_AVAILABLE),
        ("forty", Reason.UNKNOWN),
        ("4O", Reason.UNKNOWN),
        ("12.5.3", Reason.OUT_OF_RANGE),
        ("NaN", Reason.OUT_OF_RANGE),
        ("nan", Reason.OUT_OF_RANGE),
        ("inf", Reason.OUT_OF_RANGE),
        ("-Infinity", Reason.OUT_OF_RANGE),
        ("9" * 400, Reason.OUT_OF_RANGE),
        ("1" + "0" * 30, Reason.OUT_OF_RANGE),
        ("99999", Reason.OUT_OF_RANGE),  # beyond the model's range for a temperature
        ("-300", Reason.OUT_OF_RANGE),
        ("\x1b[31m", Reason.UNKNOWN),
    ],
)
def test_a_value_that_is_no_reading_is_na_with_its_reason_never_0(text: str, reason: Reason) -> None:
    _, sample = _one(**{"temperature.gpu": text, "utilization.gpu": text, "memory.used": text, "power.draw": text})
    names = ["temperature_c", "utilization_gpu_percent", "memory_used_bytes", "power_draw_w"]
    for name in names[:1] if text in ("99999", "-300") else names:  # a fine figure for another field
        assert getattr(sample, name) is None, name
        assert sample.why(name) is reason, name
    assert sample.lost is (reason is Reason.LOST)


def test_negative_huge_and_valid_figures_by_the_models_ranges() -> None:
    static, sample = _one(
        **{
            "temperature.gpu": "-5",
            "utilization.gpu": "-1",
            "memory.used": "-10",
            "memory.total": "17592186044416",  # 2**44 MiB: 2**64 bytes, one past the range
            "fan.speed": "101",  # a fan may run past 100 %
            "power.draw": "1e3",
            "clocks.sm": "1980.6",
            "pstate": "P32",
            "clocks_throttle_reasons.active": "0xZZ",
        }
    )
    assert sample.temperature_c == -5 and sample.fan_percent == 101 and sample.clock_sm_mhz == 1981
    for name in ("utilization_gpu_percent", "memory_used_bytes", "pstate"):
        assert getattr(sample, name) is None and sample.why(name) is Reason.OUT_OF_RANGE, name
    assert static.memory_total_bytes is None and static.unavailable["memory_total_bytes"] is Reason.OUT_OF_RANGE
    assert sample.power_draw_w is None and sample.why("power_draw_w") is Reason.UNKNOWN  # no exponent in CSV
    assert sample.throttle_reasons is None and sample.why("throttle_reasons") is Reason.UNKNOWN


def test_units_where_nounits_was_not_honoured_and_unknown_throttle_bits() -> None:
    static, sample = _one(
        **{
            "memory.total": "143771 MiB",
            "power.draw": "77.71 W",
            "clocks.sm": "345 MHz",
            "utilization.gpu": "3 %",
            "clocks_throttle_reasons.active": "0x0000000000000104",
        }
    )
    assert static.memory_total_bytes == 143771 * MIB and sample.power_draw_w == 77.71
    assert (sample.clock_sm_mhz, sample.utilization_gpu_percent) == (345, 3)
    assert sample.throttle_reasons == ("sw_power_cap", "display_clock_setting")


def test_rows_of_the_wrong_shape_are_dropped_and_counted_never_a_crash() -> None:
    good = _row(_good(0))
    rows = [
        good,
        "1, 2, 3",  # too few columns
        _row(_good(1, index="one")),  # no index
        _row(_good(2, index="-2")),
        _row(_good(3, index="99999999")),
        _row(_good(3, index="1024")),  # past the highest GPU index a host may have
        _row(_good(0)),  # index 0 again
        "",
        _row(_good(4, name="A, B, C")),  # the name is the last field: its commas are its own
    ]
    cycle = parse_cycle(_cycle(rows), 1.0)
    assert [s.index for s, _ in cycle.gpus] == [0, 4]
    assert cycle.gpus[1][0].name == "A, B, C"
    assert cycle.dropped == 6 and cycle.error is None
    lost = "Unable to determine the device handle for GPU 0000:41:00.0: Unknown Error"
    cycle = parse_cycle(_cycle([good, lost], status=15), 1.0)
    assert len(cycle.gpus) == 1 and cycle.error == lost and cycle.dropped == 1  # its words, beside the GPUs it read


def test_hostile_text_is_bounded_kept_as_read_and_the_error_line_is_safe() -> None:
    evil = "\x1b]0;owned\x07\x1b[2J" + "x" * 100_000
    cycle = parse_cycle(
        _cycle([_row(_good(0, name=evil, uuid="GPU-0"))], [f"GPU-0, 77, 1, /bin/{evil}", "GPU-0, 0, 1, pid0"]), 1.0
    )
    static, _ = cycle.gpus[0]
    assert static.name is not None and static.name.startswith("\x1b]0;owned") and len(static.name) <= MAX_LABEL
    (process,) = cycle.processes[0]
    assert process.name is not None and len(process.name) <= MAX_LABEL and process.pid == 77
    assert process.command is not None and len(process.command) < 9000
    assert cycle.dropped == 1  # pid 0 is no process
    said = parse_cycle(_cycle([evil], status=9), 1.0)
    assert said.error is not None and "\x1b" not in said.error and "\x07" not in said.error and len(said.error) <= 200


def test_ten_thousand_gpus_and_processes_are_cut_to_the_bounds() -> None:
    gpu_rows = [_row(_good(i % 1000)) for i in range(10_000)]
    app_rows = [f"GPU-{i % 64:08d}, {i + 1}, 1, p" for i in range(MAX_PROCESSES_PER_HOST + 500)]
    lines = _cycle(gpu_rows, app_rows)
    started = time.monotonic()
    cycle = parse_cycle(lines, 1.0)
    assert time.monotonic() - started < 20  # bounded work (well under 1 s on the 2-core VM)
    assert cycle.error is None and [s.index for s, _ in cycle.gpus] == list(range(MAX_GPUS_PER_HOST))
    assert sum(len(p) for p in cycle.processes.values()) == MAX_PROCESSES_PER_HOST
    assert cycle.dropped == len(gpu_rows) + len(app_rows) - MAX_PROCESSES_PER_HOST - MAX_GPUS_PER_HOST
    reader = SmiCycleReader()
    fed = [reader.feed(line, now=2.0) for line in lines]
    last = fed[-1]
    assert fed[:-1] == [None] * (len(lines) - 1) and last is not None
    assert (last.processes, last.dropped, len(last.gpus)) == (cycle.processes, cycle.dropped, MAX_GPUS_PER_HOST)


def test_an_incomplete_cycle_is_not_parsed() -> None:
    lines = _cycle([_row(_good(0))])[:-1]
    cycle = parse_cycle(lines, 1.0)
    assert cycle.gpus == () and cycle.error == "an incomplete cycle (no end marker)"
    assert parse_cycle([], 1.0).gpus == ()


def test_processes_name_their_gpu_by_uuid_and_a_failed_query_is_unknown_not_empty() -> None:
    gpus = [_row(_good(3)), _row(_good(5))]
    apps = [
        "GPU-00000005, 10, 100, /usr/bin/python3",
        "GPU-00000005, 10, 50, /usr/bin/python3",  # two contexts of one pid: one row
        "GPU-00000003, 11, [N/A], C:\\Windows\\explorer.exe",
        "GPU-00000003, 12, 1, [Insufficient Permissions]",
        "MIG-1234, 13, 1, x",  # no GPU of the list
    ]
    cycle = parse_cycle(_cycle(gpus, apps), 1.0)
    assert cycle.processes_unavailable is None and cycle.dropped == 1
    (p10,) = cycle.processes[5]
    assert (p10.gpu_index, p10.gpu_memory_bytes) == (5, 150 * MIB)
    p11, p12 = cycle.processes[3]
    assert p11.name == "explorer.exe" and p11.gpu_memory_bytes is None
    assert p11.unavailable["gpu_memory_bytes"] is Reason.NOT_AVAILABLE
    assert p12.name is None and p12.unavailable["name"] is Reason.NO_PERMISSION
    failed = [
        *_cycle(gpus)[:-2],
        "#nvtopy-smi apps 1 2",
        'Field "used_memory" is not a valid field to query.',
        "#nvtopy-smi end",
    ]
    cycle = parse_cycle(failed, 1.0)
    assert cycle.processes_unavailable is Reason.UNKNOWN and cycle.processes == {3: (), 5: ()}
    assert cycle.error == 'processes: Field "used_memory" is not a valid field to query.'


def test_the_reader_skips_noise_and_an_interrupted_cycle_and_stays_bounded() -> None:
    reader = SmiCycleReader(clock=lambda: 42.0)
    assert reader.feed("Welcome to host7\n") is None and reader.feed("#nvtopy-smi gpu full 3 0") is None
    assert reader.feed("#nvtopy-smi end") is None and reader.noise == 3  # outside a cycle: noise
    assert reader.feed("#nvtopy-smi cycle") is None
    for _ in range(MAX_CYCLE_LINES + 10):
        assert reader.feed("garbage between sections") is None  # counted, not kept
    assert reader.feed("#nvtopy-smi gpu full 9999999 0") is None
    for _ in range(MAX_CYCLE_LINES + 10):
        assert reader.feed("#nvtopy-smi cycle") is None  # data of that section, kept up to its bound
    assert reader.incomplete == 0
    assert reader._cycle is not None and len(reader._cycle.sections["gpu"]) < MAX_CYCLE_LINES
    reader = SmiCycleReader(clock=lambda: 42.0)
    assert all(reader.feed(line) is None for line in _cycle([_row(_good(0))])[:-1])
    results = [reader.feed(line) for line in _cycle([_row(_good(1))])]
    assert reader.incomplete == 1 and results[:-1] == [None] * (len(results) - 1)
    last = results[-1]
    assert last is not None and last.error is None and last.gpus[0][1].timestamp == 42.0
    assert [s.index for s, _ in last.gpus] == [1]


@pytest.mark.parametrize(
    "header",
    [
        f"#nvtopy-smi gpu full {10**9} 0",
        "#nvtopy-smi gpu full 1",
        "#nvtopy-smi gpu turbo 1 0",
        "#nvtopy-smi gpu full x 0",
    ],
)
def test_a_header_the_loop_did_not_write_is_a_malformed_cycle(header: str) -> None:
    lines = ["#nvtopy-smi cycle", header, _row(_good(0)), "#nvtopy-smi apps 0 0", "#nvtopy-smi end"]
    cycle = parse_cycle(lines, 1.0)
    assert cycle.gpus == () and cycle.error is not None and cycle.error.startswith(("a malformed", "an incomplete"))


# --------------------------------------------------------------------- real drivers (../shared)


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("*-nvgpuexp-capture.txt")) if CAPTURES.is_dir() else []


needs_captures = pytest.mark.skipif(not _captures(), reason="../shared/nvidia-smi-captures is not available")


def _sections(text: str) -> dict[str, list[str]]:
    """A capture's sections by title (``load :: query-gpu (csv, ...)``): the lines after each header block."""
    found: dict[str, list[str]] = {}
    lines = text.splitlines()
    rule = re.compile(r"^#{40,}$")
    position = 0
    while position < len(lines):
        if rule.match(lines[position]) and position + 1 < len(lines) and " :: " in lines[position + 1]:
            title = lines[position + 1].removeprefix("# ")
            position += 2
            while position < len(lines) and not rule.match(lines[position]):
                position += 1  # the header's other comment lines
            body = found[title] = []
            position += 1
            while position < len(lines) and not rule.match(lines[position]):
                body.append(lines[position])
                position += 1
        else:
            position += 1
    return found


def _help_fields(lines: list[str]) -> set[str]:
    return {name for line in lines if line.startswith('"') for name in re.findall(r'"([^"]+)"', line)}


def _canonical(name: str) -> str:
    """The name the captures' CSV header uses for one of nvtopy's (its aliases, by --help-query-gpu)."""
    aliases = {
        "clocks.sm": "clocks.current.sm",
        "clocks.mem": "clocks.current.memory",
        "clocks.max.mem": "clocks.max.memory",
        "clocks_throttle_reasons.active": "clocks_event_reasons.active",
        "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
        "retired_pages.dbe": "retired_pages.double_bit.count",
        "used_memory": "used_gpu_memory",
    }
    return aliases.get(name, name)


@needs_captures
@pytest.mark.parametrize("capture", _captures(), ids=lambda p: p.name)
def test_every_field_is_one_the_real_nvidia_smi_lists(capture: Path) -> None:
    sections = _sections(capture.read_text(encoding="utf-8"))
    gpu_help = _help_fields(sections["capabilities :: help-query-gpu"])
    app_help = _help_fields(sections["capabilities :: help-query-compute-apps"])
    assert set(GPU_FIELDS) <= gpu_help, set(GPU_FIELDS) - gpu_help
    assert set(APP_FIELDS) <= app_help, set(APP_FIELDS) - app_help


def _csv_as_nounits(lines: list[str], fields: Sequence[str]) -> list[str]:
    """The capture's ``--format=csv`` (header, units) as the loop's query would print it: those fields, no unit."""
    rows = [line for line in lines if line.strip()]
    header = [re.sub(r" \[.*\]$", "", name) for name in rows[0].split(", ")]
    units = [re.search(r"\[(.*)\]$", name) for name in rows[0].split(", ")]
    out = []
    for row in rows[1:]:
        values = row.split(", ", len(header) - 1)
        by_name = {}
        for name, unit, value in zip(header, units, values, strict=True):
            by_name[name] = value.removesuffix(f" {unit.group(1)}") if unit and not value.startswith("[") else value
        out.append(", ".join(by_name[_canonical(name)] for name in fields))
    return out


@needs_captures
@pytest.mark.parametrize("capture", _captures(), ids=lambda p: p.name)
def test_a_real_drivers_csv_reads_as_its_own_nvidia_smi_q(capture: Path) -> None:
    text = capture.read_text(encoding="utf-8")
    sections = _sections(text)
    gpu_lines = _csv_as_nounits(sections["load :: query-gpu (csv, what the exporter parses)"], GPU_FIELDS)
    app_lines = _csv_as_nounits(sections["load :: query-compute-apps (per-process)"], APP_FIELDS)
    cycle = parse_cycle(_cycle(gpu_lines, app_lines), 5.0)
    assert cycle.error is None and cycle.dropped == 0 and cycle.mode == "full"
    smi = parse_nvidia_smi(text.encode())  # the capture's last -q report: the same load
    assert len(cycle.gpus) == len(smi.gpus) == 1
    (static, sample), q = cycle.gpus[0], smi.gpus[0].fields
    assert (static.name, static.uuid, static.bus_id) == (q["name"], q["uuid"], q["bus_id"])
    assert static.memory_total_bytes == q["memory_total_mib"] * MIB  # type: ignore[operator]
    assert (static.clock_sm_max_mhz, static.clock_mem_max_mhz) == (q["clock_sm_max_mhz"], q["clock_mem_max_mhz"])
    assert (sample.power_limit_w, static.mig_mode, sample.ecc_mode) == (
        q["power_limit_w"],
        q["mig_mode"],
        q["ecc_mode"],
    )
    assert sample.persistence_mode == q["persistence_mode"] and sample.compute_mode == q["compute_mode"]
    for name in ("memory_used_bytes", "temperature_c", "power_draw_w", "clock_sm_mhz", "utilization_gpu_percent"):
        value = getattr(sample, name)
        assert value is not None or sample.why(name) is not None, name  # N/A (MIG's utilization) with its reason
    assert sample.throttle_reasons is not None and sample.pstate is not None
    processes = cycle.processes[static.index]
    assert len(processes) == sum(1 for line in app_lines if line.strip()) > 0
    assert all(p.pid > 0 and p.name and p.gpu_uuid == static.uuid for p in processes)
    windows = "win" in capture.name  # WDDM: per-process memory is [N/A]
    assert all((p.gpu_memory_bytes is None) is windows for p in processes)

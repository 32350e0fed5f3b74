"""``nvtopy --once`` does its own work while the GPUs are read: the config file and the printer (``meanwhile``).

Why: on Hopper the one-shot waits for its GPM pair; the config and the printer's imports need no driver,
so they are done inside that wait (``read_one_snapshot(args, meanwhile=...)``). Nothing may be lost on the
way: the config file's warnings are printed as before, also when the driver cannot be opened.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.commands import dispatch, options
from nvtopy.commands.monitor import build_parser
from nvtopy.errors import BackendUnavailableError

from ..builders import fake_nvml_env
from ..conftest import needs_fake_nvml
from ..import_probe import modules_loaded, once_code
from ..waiting import exec_shown


def _args(*argv: str):
    return build_parser().parse_args(["--once", *argv])


def test_meanwhile_runs_once_while_the_snapshot_is_read(monkeypatch):
    seen: list[bool] = []
    backends: list[SimulatedBackend] = []

    def open_backend(args):
        backends.append(SimulatedBackend(gpus=2, seed=1))
        return backends[-1]

    monkeypatch.setattr(options, "open_backend", open_backend)
    snapshot, count = options.read_one_snapshot(_args(), meanwhile=lambda: seen.append(backends[0].one_shot))
    assert seen == [True], "once, with the driver open for the one-shot"
    assert count == 2 and len(snapshot.gpus) == 2


def test_meanwhile_runs_once_when_the_driver_cannot_be_opened(monkeypatch):
    def no_driver(args):
        raise BackendUnavailableError("no driver here")

    monkeypatch.setattr(options, "open_backend", no_driver)
    seen: list[str] = []
    with pytest.raises(BackendUnavailableError):
        options.read_one_snapshot(_args(), meanwhile=lambda: seen.append("ran"))
    assert seen == ["ran"]


def test_the_config_files_warning_is_printed_before_the_drivers_error(monkeypatch, capsys, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("no_such_setting = 1\n")
    monkeypatch.setenv("NVTOPY_CONFIG", str(config))

    def no_driver(args):
        raise BackendUnavailableError("no driver here")

    monkeypatch.setattr(options, "open_backend", no_driver)
    assert dispatch.main(["--once"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("nvtopy: warning:") and "no_such_setting" in lines[0]
    assert "no driver here" in lines[1]


def test_once_prints_the_config_files_warning_and_the_snapshot(monkeypatch, capsys, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("no_such_setting = 1\n")
    monkeypatch.setenv("NVTOPY_CONFIG", str(config))
    monkeypatch.setattr(options, "open_backend", lambda args: SimulatedBackend(gpus=2, seed=1))
    assert dispatch.main(["--once", "--json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["gpus"]) == 2
    (line,) = captured.err.splitlines()
    assert line.startswith("nvtopy: warning:") and "no_such_setting" in line


@pytest.mark.parametrize("mode", [["--json"], []], ids=["json", "text"])
def test_once_imports_neither_logging_nor_the_charts_history(mode):
    """What the one-shot never uses is not imported: ``logging`` (3 ms), the timeline (charts only)."""
    assert modules_loaded(once_code(mode), ("logging", "nvtopy.sources.timeline")) == []


@needs_fake_nvml
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [["--json"], []], ids=["json", "text"])
def test_once_on_nvml_imports_none_of_the_modules_it_never_uses(mode, fake_lib):
    """On the driver's path (../shared/fake-nvml), a one-shot into a pipe leaves out: inspect (dataclasses imports
    it for a class without a docstring), shutil and textwrap (argparse's help and the terminal's width) and what
    ctypes.util brings (pynvml imports its find_library: subprocess, tempfile, bz2, lzma); psutil, also for a
    process the driver lists that has ended (/proc says so: procstat.pid_absent); the text one, json, the
    JSON contract and datetime (its timestamp is nvtopy.formats.timestamps')."""
    unused = ["inspect", "shutil", "textwrap", "subprocess", "tempfile", "ctypes.util", "bz2", "lzma", "psutil"]
    if not mode:
        unused += ["json", "datetime", "nvtopy.formats.contract"]  # a table needs no JSON (owners import it lazily)
    code = once_code(mode).replace("'--demo', ", "") + (
        f"import sys\nprint('loaded:', [m for m in {unused!r} if m in sys.modules], file=sys.stderr)\n"
    )
    ended = subprocess.Popen(["true"])  # a process the driver still lists, gone by the first sight: no psutil
    ended.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        exec_shown(sleeper.pid)  # a first sight mid-exec (no argv yet) is psutil's: it would import psutil
        env = fake_nvml_env(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_PIDS=f"{sleeper.pid},{ended.pid}")
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "loaded: []"


@pytest.mark.parametrize("columns", [None, "120", "33", "0", "-4", "", "wide"])
def test_the_help_width_is_shutils_without_shutil(monkeypatch, columns):
    """The help's width (``options._terminal_columns``, read for every ``add_argument``): shutil's figure."""
    import shutil

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert options._terminal_columns() == shutil.get_terminal_size().columns

"""A local ``nvtopy --once`` gets a head start: the driver opened and the first GPM samples taken before the CLI loads.

Why it matters: on Hopper the one-shot cannot end sooner than 105 ms after its GPUs' first GPM samples, so
they are taken by the program's entry (``dispatch.console`` -> ``backends/nvml/headstart.py``) and the
backend's static read claims them. What must hold: the head start begins only for a local one-shot (never
for simulated GPUs, other hosts, help or the config), the backend uses only a sample of the very same device
from the same bindings, a sample claimed too late is freed, the driver's references balance, and a hung
driver is still one line within ``--timeout``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from nvtopy.backends.nvml import headstart
from nvtopy.commands.dispatch import local_one_shot
from nvtopy.commands.monitor import build_parser
from nvtopy.errors import UsageError

from ..builders import fake_nvml_calls, fake_nvml_env
from ..conftest import needs_fake_nvml

# What makes the monitor read something other than this machine's driver, or print and exit (by dest).
_ELSEWHERE = ("demo", "ssh", "hostfile", "prometheus", "remote", "print_config", "help", "version")


@pytest.mark.parametrize(
    ("argv", "local"),
    [
        (["--once"], True),
        (["--once", "--json"], True),
        (["--json", "--once", "--gpus", "0,1", "--timeout=2"], True),
        (["--once", "--no-color", "--config", "c.toml"], True),
        ([], False),
        (["--json"], False),
        (["--onc"], False),  # an abbreviation: no head start, only slower
        (["log", "--once"], False),  # a command
        (["doctor", "--once"], False),
        (["--once", "--demo"], False),
        (["--demo-gpus", "2", "--once"], False),
        (["--once", "--dem"], False),  # argparse takes it for --demo
        (["--once", "--ssh", "gpu1"], False),
        (["--once", "--ssh=gpu1"], False),
        (["--once", "--hostfile", "hosts"], False),
        (["--once", "--prometheus", "http://p:9090"], False),
        (["--once", "--prom", "http://p:9090"], False),
        (["--once", "--remote", "n2:9400"], False),
        (["--once", "--print-config"], False),
        (["--once", "-h"], False),
        (["--once", "--help"], False),
        (["--once", "--version"], False),
        (["--once", "--", "x"], False),
    ],
)
def test_a_local_one_shot_is_told_from_the_words_alone(argv, local):
    assert local_one_shot(argv) is local


def _long_options(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    return [(name, action) for action in parser._actions for name in action.option_strings if name.startswith("--")]


def test_every_option_that_reads_elsewhere_and_its_abbreviations_stop_the_head_start():
    """A new --demo-*, --ssh-* (or any option of those families) cannot slip past the list in dispatch."""
    options = _long_options(build_parser())
    names = [name for name, _ in options]
    checked = 0
    for name, action in options:
        if not action.dest.startswith(_ELSEWHERE):
            continue
        # every prefix argparse would accept for it: unambiguous among the parser's options, or the name itself
        for cut in range(3, len(name) + 1):
            prefix = name[:cut]
            if prefix == name or sum(other.startswith(prefix) for other in names) == 1:
                assert not local_one_shot(["--once", prefix]), prefix
                checked += 1
    assert checked > 20


def test_every_option_the_head_start_allows_keeps_the_one_shot_on_this_machines_driver():
    """The other way round: each option that lets the head start begin parses to a local NVML one-shot."""
    from nvtopy.commands import options as cli_options

    parser = build_parser()
    allowed = [(name, action) for name, action in _long_options(parser) if local_one_shot(["--once", name])]
    assert len(allowed) > 8
    for name, action in allowed:
        args = None
        for value in ([], ["1"], ["0"], ["full"], ["nord"], ["x"]):
            if (action.nargs == 0) != (value == []):
                continue
            try:
                args = parser.parse_args(["--once", name, *value])
                break
            except (SystemExit, UsageError):  # argparse exits, nvtopy's parser raises UsageError
                continue
        assert args is not None, name
        assert args.prometheus is None and args.remote is None and not args.ssh and not args.hostfile, name
        assert not args.print_config, name
        assert cli_options.backend_spec(args).kind == "nvml", name


# --- claiming: the backend's side -----------------------------------------------------------------


class _Bindings:
    """Just what the head start calls; handles are ctypes pointers as NVML's are (a device's address)."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: int = 2, *, gpm: bool = True) -> None:
        self.gpus, self.gpm = gpus, gpm
        self.calls: list[str] = []
        self.freed: list[Any] = []
        self.before_sample = lambda index: None

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return ctypes.c_void_p(0x1000 + index)

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        return object()

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> None:
        self.before_sample(ctypes.cast(handle, ctypes.c_void_p).value - 0x1000)
        self.calls.append("sample")

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed.append(sample)


@pytest.fixture
def state(monkeypatch):
    fresh = headstart._State()
    monkeypatch.setattr(headstart, "_state", fresh)
    return fresh


def _run(state: headstart._State, bindings: _Bindings) -> None:
    state.pynvml = bindings
    headstart._take_firsts(state, bindings)


def test_the_backend_gets_a_sample_only_for_the_very_same_device_from_the_same_bindings(state):
    bindings = _Bindings(gpus=3)
    _run(state, bindings)
    assert bindings.calls == ["init", "sample", "sample", "sample"]
    before = time.monotonic()
    sample, taken_at = headstart.claim(bindings, 0, ctypes.c_void_p(0x1000))
    assert taken_at <= before
    assert headstart.claim(bindings, 0, ctypes.c_void_p(0x1000)) is None, "a sample is handed out once"
    assert headstart.claim(bindings, 1, ctypes.c_void_p(0x2000)) is None, "another device's handle"
    assert headstart.claim(_Bindings(), 2, ctypes.c_void_p(0x1002)) is None, "other bindings"
    assert headstart.claim(bindings, 2, object()) is None, "a handle that is no pointer"
    headstart.finish(bindings)
    assert len(bindings.freed) == 2 and sample not in bindings.freed, "the unclaimed ones are freed, once"
    assert bindings.calls[-1] == "shutdown"
    headstart.finish(bindings)
    assert bindings.calls.count("shutdown") == 1


def test_a_sample_taken_after_its_gpu_was_claimed_is_freed_not_kept(state):
    bindings = _Bindings(gpus=2)
    bindings.before_sample = lambda index: headstart.claim(bindings, index, ctypes.c_void_p(0)) if index == 1 else None
    _run(state, bindings)
    assert len(bindings.freed) == 1, "GPU 1 was claimed while its sample was taken: the backend took its own"
    assert headstart.claim(bindings, 1, ctypes.c_void_p(0x1001)) is None
    assert headstart.claim(bindings, 0, ctypes.c_void_p(0x1000)) is not None


def test_nothing_is_given_back_while_the_head_start_is_still_in_the_driver(state):
    bindings = _Bindings()
    state.pynvml = bindings
    state.initialised = True  # its thread is in the driver: done is not set
    headstart.finish(bindings)
    assert "shutdown" not in bindings.calls and not state.finished
    state.done.set()
    headstart.finish(_Bindings())  # another backend's bindings: not its reference to give back
    assert "shutdown" not in bindings.calls
    headstart.finish(bindings)
    assert bindings.calls == ["shutdown"]


def test_a_gpu_that_fails_costs_only_its_own_sample(state):
    bindings = _Bindings(gpus=3)

    def lost(index: int) -> None:
        if index == 1:
            raise bindings.NVMLError("GPU is lost")

    bindings.before_sample = lost
    _run(state, bindings)
    assert len(bindings.freed) == 1, "GPU 1's buffer is given back"
    assert headstart.claim(bindings, 1, ctypes.c_void_p(0x1001)) is None
    assert headstart.claim(bindings, 2, ctypes.c_void_p(0x1002)) is not None, "the GPUs after it are sampled"


def test_no_gpm_no_samples_and_a_failing_driver_is_left_to_the_backend(state):
    bindings = _Bindings(gpm=False)
    _run(state, bindings)
    assert bindings.calls == ["init"] and state.done.is_set()

    failing = _Bindings()

    def no_driver() -> None:
        raise failing.NVMLError("driver not loaded")

    failing.nvmlInit = no_driver  # type: ignore[method-assign]
    fresh = headstart._State()
    fresh.pynvml = failing
    headstart._take_firsts(fresh, failing)  # never raises: the backend's own open says why
    assert fresh.done.is_set() and not fresh.initialised
    headstart.finish(failing)
    assert failing.calls == []


# --- the real program on the fake driver -----------------------------------------------------------


@needs_fake_nvml
@pytest.mark.timeout(120)
def test_the_program_claims_the_head_starts_samples_and_gives_its_driver_reference_back(fake_lib, tmp_path):
    """Two GPUs of an H100: each sampled twice in all (the head start's first, the backend's second: a
    backend that took its own first would make it three), two nvmlInit and two nvmlShutdown, GPM shown."""
    stats = tmp_path / "stats.txt"
    env = fake_nvml_env(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_MODEL="H100 80GB HBM3", FAKE_NVML_STATS=str(stats))
    result = subprocess.run(
        [sys.executable, "-m", "nvtopy", "--once", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    gpus = json.loads(result.stdout)["gpus"]
    assert [gpu["sm_active_percent"] is not None for gpu in gpus] == [True, True]
    counts = fake_nvml_calls(stats)
    assert counts["nvmlGpmSampleGet"] == 4
    inits = sum(count for name, count in counts.items() if name.startswith("nvmlInit"))
    assert inits == 2, "the head start opened the driver beside the backend"
    assert counts["nvmlShutdown"] == inits


@needs_fake_nvml
@pytest.mark.timeout(120)
def test_a_hung_driver_is_still_one_line_within_the_timeout(fake_lib):
    env = fake_nvml_env(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_HANG="nvmlInit_v2+nvmlInitWithFlags:30")
    started = time.monotonic()
    argv = [sys.executable, "-m", "nvtopy", "--once", "--timeout", "1"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("nvtopy: error:") and "nvmlInit is stuck" in line
    assert elapsed < 10, f"{elapsed:.1f} s"

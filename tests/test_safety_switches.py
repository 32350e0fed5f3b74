"""Tests that fail when a safety switch is quietly disconnected.

Each test here closes a gap a mutation audit found: a defect introduced on
purpose that the rest of the suite let through. They check the switch where a
user meets it (a real logger process, the real command line, the real signal
module), not a helper one level down:

- the logger flushes every sample, however small (a file being tailed shows each one);
- ``--readonly`` on the command line reaches the monitor it starts;
- ``--once --json`` writes the backend's figures in the contract's units;
- the history stays bounded and holds the newest samples;
- the read-only refusal covers tagged processes too;
- a signal from the monitor goes through :func:`nvtopy.backends.host.signals.send_signal_checked`,
  which refuses a real process whose create time is not the one shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from nvtopy.backends.simulated import backend as simulated
from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.catalog import find_model
from nvtopy.commands import dispatch as cli
from nvtopy.formats.timestamps import iso_timestamp
from nvtopy.model import ALL_GROUPS, HISTORY_LENGTH
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.screens import ConfirmSignalScreen

from .builders import NVTOPY
from .conftest import FROZEN_TIME, ManualClock
from .tui_helpers import SendSpy as SignalSpy
from .tui_helpers import header_line, more_snapshots, started, wait_until
from .tui_helpers import pids as _pids
from .tui_helpers import select as _select
from .tui_helpers import table_of as _table

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and processes")

SIZE = (120, 40)
MIB = 1024 * 1024


# --------------------------------------------------------------------------- helpers


def _warnings(app) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "warning"]


async def _press_and_confirm(pilot, app, key: str) -> bool:
    """Press ``key``; if a confirmation opens, answer yes and wait for the outcome. True if one opened."""
    await pilot.press(key)
    await pilot.pause()
    if not isinstance(app.screen, ConfirmSignalScreen):
        return False
    await pilot.press("y")
    with contextlib.suppress(AssertionError):
        await wait_until(pilot, lambda: app.last_outcomes, timeout=5, message="the outcome")
    return True


@pytest.fixture
def children():
    """Start sleeping Python children (ready to be signalled); all are killed and reaped at the end."""
    started_: list[subprocess.Popen] = []

    def make() -> subprocess.Popen:
        code = "import time; print('ready', flush=True); time.sleep(120)"
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        started_.append(child)
        assert child.stdout.readline().strip() == "ready"
        threading.Thread(target=child.wait, daemon=True).start()  # reaped as soon as it exits: no zombie
        return child

    yield make
    for child in started_:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        child.stdout.close()


def _exited(child: subprocess.Popen) -> bool:
    return child.returncode is not None or child.poll() is not None


def _assert_alive(child: subprocess.Popen) -> None:
    time.sleep(0.1)  # a signal, had one been sent, would have been delivered by now
    assert child.poll() is None, f"the child exited with {child.returncode}"
    assert psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE


# --------------------------------------------------------------------------- 1. the logger flushes every sample

# Rows far smaller than any write buffer: only a flush per sample makes them visible while the logger runs.
LOGGERS = {
    "csv": (["log", "--demo", "--fields", "index"], 4),  # 8 bytes a sample: "0\n1\n2\n3\n"
    "jsonl": (["log", "--demo", "--format", "jsonl", "--fields", "index"], 1),  # ~600 bytes a sample
    "record": (["record", "{path}", "--demo", "--demo-gpus", "1", "--demo-procs", "0"], 1),  # ~5 kB a snapshot
}
SAMPLES = 4  # under 8 kB in the CSV and JSONL cases: only their flush makes them visible
INTERVAL = 0.5  # long enough for the test to see each sample on its own


def _complete_lines(path: Path, *, running: bool = True) -> list[str]:
    """The file's whole lines. While the logger runs, a line it is writing may be visible in part.

    Why that is allowed: each sample is one write() call, but the kernel copies a write into the
    page cache a page (4 KiB) at a time and a reader can see the file between two pages (a
    ``record`` snapshot is ~5 kB). Followers such as ``tail -f`` read up to the last newline; so
    does this test. After the logger ended, the file must end in a newline.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if not running:
        assert not data or data.endswith(b"\n"), f"a partial line was left: {data[-80:]!r}"
    return data[: data.rfind(b"\n") + 1].decode().splitlines()


@pytest.mark.timing  # reads a running logger's file between its samples, half a second apart
@pytest.mark.parametrize("kind", list(LOGGERS))
def test_a_running_logger_shows_every_small_sample_as_soon_as_it_is_taken(tmp_path, kind):
    path = tmp_path / f"log.{kind}"
    args, lines_per_sample = LOGGERS[kind]
    command = [a.replace("{path}", str(path)) for a in args] + ["--interval", str(INTERVAL)]
    if kind != "record":
        command += ["--output", str(path)]
    header = 1 if kind == "csv" else 0
    proc = subprocess.Popen([*NVTOPY, *command], stderr=subprocess.PIPE, text=True)
    seen: list[int] = []  # the number of samples in the file, each time it changed
    try:
        deadline = time.monotonic() + 15  # for the first sample (start-up), then for each next one
        while not seen or seen[-1] < SAMPLES:
            assert proc.poll() is None, f"the logger ended early: {proc.stderr.read()}"
            assert time.monotonic() < deadline, f"samples seen while running: {seen}, then no more for a while"
            lines = _complete_lines(path)
            body = len(lines) - header if lines else 0
            assert body % lines_per_sample == 0, f"a sample is visible only in part: {lines}"
            count = body // lines_per_sample
            if count and (not seen or count != seen[-1]):
                seen.append(count)
                deadline = time.monotonic() + 10
            time.sleep(0.005)
        assert proc.poll() is None, "all of it was seen while the logger was still running"
        # Each sample showed up on its own, before the next one was taken (INTERVAL apart). The first one
        # must have been seen alone; one later count may be missed if this test was not scheduled in time.
        assert seen[0] == 1 and seen == sorted(set(seen)), f"sample counts seen in turn: {seen}"
        assert len(seen) >= SAMPLES - 1, f"sample counts seen in turn: {seen}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    lines = _complete_lines(path, running=False)
    if kind == "csv":
        assert lines[0] == "index" and lines[1:5] == ["0", "1", "2", "3"]
    else:
        for line in lines:
            data = json.loads(line)
            assert [g["index"] for g in data["gpus"]] == ([0] if kind == "record" else [0, 1, 2, 3])


# --------------------------------------------------------------------------- 2. --readonly on the command line


def test_readonly_on_the_command_line_makes_the_monitor_refuse_signals(monkeypatch):
    """``nvtopy --demo --readonly`` as a user types it: the monitor it starts must not send any signal."""
    sent: list[tuple[int, float | None, int]] = []
    real_send = SimulatedBackend.send_signal

    def spy(self, pid, create_time, signum):
        sent.append((pid, create_time, signum))
        return real_send(self, pid, create_time, signum)

    monkeypatch.setattr(SimulatedBackend, "send_signal", spy)
    monkeypatch.setenv("NVTOPY_DEBUG", "1")  # a failed assertion in the session is raised, not "internal error"
    sessions: list[dict] = []

    def run_in_pilot(app: NvtopyApp, *args, **kwargs) -> None:
        """Stands in for ``App.run``: the same app, driven by a test pilot instead of a terminal."""

        async def session() -> dict:
            result: dict = {}
            async with app.run_test(size=SIZE, notifications=True) as pilot:
                await started(pilot, app)
                me = app.snapshot.host.user
                await _select(pilot, app, lambda p: p.user == me)
                result["target"] = _table(app).selected
                result["header"] = header_line(app)
                result["dialogs"] = [key for key in ("T", "K") if await _press_and_confirm(pilot, app, key)]
                await more_snapshots(pilot, app)
                result["warnings"] = _warnings(app)
                result["outcomes"] = list(app.last_outcomes)
                result["listed"] = result["target"].key in {p.key for p in _table(app).rows}
            return result

        sessions.append(asyncio.run(session()))

    monkeypatch.setattr(NvtopyApp, "run", run_in_pilot)
    assert cli.main(["--demo", "--readonly", "--interval", "2"]) == 0
    (result,) = sessions
    assert result["dialogs"] == [], "no confirmation dialog in read-only mode"
    assert sent == [], "nothing reached the backend"
    assert result["outcomes"] == []
    assert len(result["warnings"]) == 2 and all("read-only" in w for w in result["warnings"]), result["warnings"]
    assert result["listed"], "the process is still there"
    assert "read-only" in result["header"]


# --------------------------------------------------------------------------- 3. --once --json in the contract's units


@pytest.mark.parametrize(
    ("model", "seed", "gpus"),
    [("H100 80GB HBM3", 0, 4), ("RTX 4090", 3, 2), ("A100-SXM4-40GB", 5, 3), ("Tesla T4", 11, 1)],
)
def test_once_json_figures_are_the_backends_exact_values(monkeypatch, capsys, model, seed, gpus):
    """Every figure of ``--once --json`` equals what the backend read, in bytes, W and MHz."""
    built: list[dict] = []

    class FrozenBackend(SimulatedBackend):
        """The backend the CLI builds, on a frozen clock (simulated values depend only on the time)."""

        def __init__(self, *args, **kwargs) -> None:
            assert not args
            kwargs["clock"] = ManualClock()
            built.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(simulated, "SimulatedBackend", FrozenBackend)
    monkeypatch.setenv("NVTOPY_DEBUG", "1")
    argv = ["--once", "--json", "--demo", "--demo-model", model, "--demo-seed", str(seed), "--demo-gpus", str(gpus)]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    (options,) = built
    assert (options["gpus"], options["seed"]) == (gpus, seed)
    catalog = find_model(model)
    reference = SimulatedBackend(**{**options, "clock": ManualClock()})  # the same simulation, read directly
    try:
        assert data["timestamp"] == iso_timestamp(FROZEN_TIME)
        assert [g["index"] for g in data["gpus"]] == list(range(gpus))
        processes_seen = 0
        for gpu in data["gpus"]:
            index = gpu["index"]
            static = reference.read_static(index)
            reading = reference.read_sample(index, ALL_GROUPS)
            values = reading.values
            assert gpu["name"] == catalog.name
            # Memory: bytes (the catalog is in MiB), the three parts adding up to the total.
            assert gpu["memory_total_bytes"] == static.memory_total_bytes == catalog.memory_mib * MIB
            assert gpu["memory_used_bytes"] == values["memory_used_bytes"]
            assert gpu["memory_free_bytes"] == values["memory_free_bytes"]
            assert gpu["memory_reserved_bytes"] == values["memory_reserved_bytes"]
            parts = gpu["memory_used_bytes"] + gpu["memory_free_bytes"] + gpu["memory_reserved_bytes"]
            assert parts == gpu["memory_total_bytes"]
            # Power: W (NVML reads mW), energy mJ.
            assert gpu["power_draw_w"] == values["power_draw_w"]
            assert 0 < gpu["power_draw_w"] <= catalog.power_limit_w
            assert gpu["power_limit_w"] == values["power_limit_w"] == catalog.power_limit_w
            assert gpu["power_default_limit_w"] == catalog.power_limit_w
            assert (gpu["power_min_limit_w"], gpu["power_max_limit_w"]) == (catalog.power_min_w, catalog.power_max_w)
            assert gpu["energy_mj"] == values["energy_mj"]
            # Clocks: MHz.
            assert gpu["clock_sm_mhz"] == values["clock_sm_mhz"]
            assert gpu["clock_mem_mhz"] == values["clock_mem_mhz"]
            assert (gpu["clock_sm_max_mhz"], gpu["clock_mem_max_mhz"]) == (catalog.sm_max_mhz, catalog.mem_max_mhz)
            assert gpu["clock_sm_mhz"] in (catalog.sm_max_mhz, catalog.sm_idle_mhz)
            # The rest of the figures, as read.
            assert gpu["utilization_gpu_percent"] == values["utilization_gpu_percent"]
            assert gpu["temperature_c"] == values["temperature_c"]
            assert gpu["pcie_rx_bytes_per_s"] == values["pcie_rx_bytes_per_s"]
            assert (gpu["temperature_slowdown_c"], gpu["temperature_shutdown_c"]) == (
                catalog.slowdown_c,
                catalog.shutdown_c,
            )
            # Processes: bytes of GPU memory each, adding up to what the GPU reports used.
            expected = {p.pid: p.gpu_memory_bytes for p in reference.read_processes(index).processes}
            assert {p["pid"]: p["gpu_memory_bytes"] for p in gpu["processes"]} == expected
            assert sum(expected.values()) == gpu["memory_used_bytes"]
            processes_seen += len(expected)
        assert processes_seen, "some GPU has processes (or their memory is not checked)"
    finally:
        reference.close()


# --------------------------------------------------------------------------- 4a. the history bound, a second time


def test_the_pollers_history_keeps_exactly_the_newest_samples(sim, clock):
    """Through the poller (what the TUI uses): never longer than asked, always the latest samples in order."""
    length = 6
    backend = sim(gpus=2, seed=4)
    poller = Poller(backend, history=length, processes=False)
    taken: dict[int, list[tuple]] = {0: [], 1: []}
    for n in range(1, 41):
        clock.advance(1.5)
        snapshot = poller.poll_once(slow=True)
        for gpu in snapshot.gpus:
            sample = gpu.sample
            taken[gpu.index].append((sample.timestamp, sample.utilization_gpu_percent, sample.power_draw_w))
            history = gpu.history
            kept = min(n, length)
            for series in history.values():
                assert len(series) == kept, f"poll {n}, GPU {gpu.index}: {len(series)} points kept, not {kept}"
            newest = taken[gpu.index][-kept:]
            assert history.timestamps == tuple(t for t, _, _ in newest)
            assert history.utilization_gpu_percent == tuple(u for _, u, _ in newest)
            assert history.power_draw_w == tuple(p for _, _, p in newest)
            assert history.timestamps[-1] == snapshot.timestamp


def test_the_default_history_is_bounded_by_history_length(sim, clock):
    collector = Collector(sim(gpus=1, seed=2))
    timestamps = []
    for _ in range(HISTORY_LENGTH + 25):
        clock.advance(1)
        snapshot = collector.collect(processes=False)
        timestamps.append(snapshot.timestamp)
    history = snapshot.gpus[0].history
    assert len(history.timestamps) == HISTORY_LENGTH
    assert history.timestamps == tuple(timestamps[-HISTORY_LENGTH:]), "the oldest samples were dropped, not the newest"


# --------------------------------------------------------------------------- 4b. the read-only refusal, a second path


@pytest.mark.parametrize("key", ["K", "I"])
async def test_readonly_refuses_tagged_processes(sim, key):
    """Tags choose the targets by another path than the cursor: read-only still refuses, and keeps the tags."""
    backend = sim(gpus=2, seed=1, viewer="alice")
    spy = SignalSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=2.0, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        mine = [p for p in _table(app).rows if p.user == "alice"]  # processes read-only mode alone keeps safe
        others = [p for p in _table(app).rows if p.user != "alice"]
        assert mine and others
        for process in (mine[0], others[0]):
            await _select(pilot, app, lambda p, key=process.key: p.key == key)
            await pilot.press("space")
        tagged = set(app.tags.keys)
        assert len(tagged) == 2
        assert not await _press_and_confirm(pilot, app, key), "no confirmation dialog"
        await more_snapshots(pilot, app)
        assert spy.calls == []
        assert app.last_outcomes == []
        assert [w for w in _warnings(app) if "read-only" in w], _warnings(app)
        assert app.tags.keys == tagged, "nothing was sent, so nothing is untagged"
        assert tagged <= {p.key for p in _table(app).rows}


# --------------------------------------------------------------------------- 5. the real create-time check


# Create times are seconds since the epoch: pytest.approx's default relative tolerance would be ~30 minutes.
SAME_TIME = 1e-6


class ShownCreateTime(SimulatedBackend):
    """Reports real child processes, but with the create time of an earlier process that had the same pid.

    What the monitor shows is then a process that has exited; the pid now belongs to
    another one. Signals to real pids go through :func:`nvtopy.backends.host.signals.send_signal_checked`.
    """

    def __init__(self, *args, shift: float, **kwargs) -> None:
        self.shift = shift
        super().__init__(*args, **kwargs)

    def inspect_processes(self, pids):
        found = super().inspect_processes(pids)
        return {
            pid: info if info is None or info.create_time is None else _shifted(info, self.shift)
            for pid, info in found.items()
        }


def _shifted(info, shift: float):
    return dataclasses.replace(info, create_time=info.create_time - shift)


@pytest.fixture
def checked_calls(monkeypatch):
    """Every call of the real :func:`nvtopy.backends.host.signals.send_signal_checked` the simulated backend makes."""
    from nvtopy.backends.host import signals

    calls: list[tuple[int, float | None, int, bool]] = []

    def recording(pid, create_time, signum):
        outcome = signals.send_signal_checked(pid, create_time, signum)
        calls.append((pid, create_time, signum, outcome.ok))
        return outcome

    monkeypatch.setattr(simulated, "send_signal_checked", recording)
    return calls


async def _signal_from_the_monitor(pilot, app, pid: int, key: str = "T"):
    await started(pilot, app)
    assert pid in _pids(app)
    await _select(pilot, app, lambda p: p.pid == pid)
    target = _table(app).selected
    await pilot.press(key)
    await pilot.pause()
    assert isinstance(app.screen, ConfirmSignalScreen)
    await pilot.press("y")
    await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
    (outcome,) = app.last_outcomes
    return target, outcome


async def test_a_real_process_whose_create_time_differs_is_not_signalled(children, checked_calls):
    child = children()
    real_created = psutil.Process(child.pid).create_time()
    backend = ShownCreateTime(gpus=1, real_pids=[child.pid], processes_per_gpu=0, viewer="alice", shift=30.0)
    try:
        app = NvtopyApp.for_backend(backend, interval=2.0)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            target, outcome = await _signal_from_the_monitor(pilot, app, child.pid, "K")
            shown = pytest.approx(real_created - 30.0, abs=SAME_TIME)
            assert target.create_time == shown, "the row shows the earlier process"
            assert checked_calls == [(child.pid, target.create_time, signal.SIGKILL, False)]
            assert not outcome.ok
            assert f"pid {child.pid} now belongs to another process" in outcome.message
            assert "nothing sent" in outcome.message
            errors = [n.message for n in app._notifications if n.severity == "error"]
            assert errors == [outcome.message], "the refusal is shown"
            _assert_alive(child)
            await more_snapshots(pilot, app)
            assert child.pid in _pids(app), "still running, still listed"
        _assert_alive(child)
    finally:
        backend.close()


async def test_a_real_process_whose_create_time_matches_is_signalled(children, checked_calls):
    child, bystander = children(), children()
    child_created = psutil.Process(child.pid).create_time()
    backend = ShownCreateTime(
        gpus=1, real_pids=[child.pid, bystander.pid], processes_per_gpu=0, viewer="alice", shift=0.0
    )
    try:
        app = NvtopyApp.for_backend(backend, interval=2.0)
        async with app.run_test(size=SIZE) as pilot:
            target, outcome = await _signal_from_the_monitor(pilot, app, child.pid, "T")
            assert target.create_time == pytest.approx(child_created, abs=SAME_TIME), "the row shows this very process"
            assert checked_calls == [(child.pid, target.create_time, signal.SIGTERM, True)]
            assert outcome.ok, outcome.message
            assert f"sent SIGTERM to pid {child.pid}" in outcome.message
            await wait_until(pilot, lambda: _exited(child), timeout=5, message="the child exits")
            assert child.returncode == -signal.SIGTERM
            await wait_until(pilot, lambda: child.pid not in _pids(app), timeout=5, message="its row goes")
        _assert_alive(bystander)
    finally:
        backend.close()


NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _spawn_with_pid(pid: int, attempts: int = 200) -> subprocess.Popen | None:
    """A sleeping child with exactly ``pid`` (needs a writable ns_last_pid); None if others took it first."""
    code = "import time; print('ready', flush=True); time.sleep(120)"
    for _ in range(attempts):
        try:
            NS_LAST_PID.write_text(str(pid - 1))
        except OSError:
            return None
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        if child.pid == pid:
            assert child.stdout.readline().strip() == "ready"
            return child
        child.kill()
        child.wait()
        child.stdout.close()
    return None


def _can_set_pids() -> bool:
    try:
        return NS_LAST_PID.exists() and os.access(NS_LAST_PID, os.W_OK) and os.geteuid() == 0
    except OSError:
        return False


@pytest.mark.skipif(not _can_set_pids(), reason="needs root and a writable /proc/sys/kernel/ns_last_pid")
async def test_a_real_pid_reused_after_the_dialog_opened_is_not_signalled(children, checked_calls):
    """The real thing: the process exits while the dialog is open and a new process gets its pid."""
    first = children()
    pid, first_created = first.pid, psutil.Process(first.pid).create_time()
    backend = SimulatedBackend(gpus=1, real_pids=[pid], processes_per_gpu=0, viewer="alice")
    second = None
    try:
        app = NvtopyApp.for_backend(backend, interval=2.0)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            await _select(pilot, app, lambda p: p.pid == pid)
            assert _table(app).selected.create_time == pytest.approx(first_created, abs=SAME_TIME)
            await pilot.press("T")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmSignalScreen)
            first.kill()
            first.wait(timeout=10)
            second = _spawn_with_pid(pid)
            if second is None:
                pytest.skip(f"could not get pid {pid} again (other processes took it)")
            assert psutil.Process(pid).create_time() != pytest.approx(first_created, abs=1e-3)
            await pilot.press("y")
            await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
            (outcome,) = app.last_outcomes
            assert checked_calls == [(pid, pytest.approx(first_created, abs=SAME_TIME), signal.SIGTERM, False)]
            assert not outcome.ok
            assert f"pid {pid} now belongs to another process" in outcome.message
            _assert_alive(second)
    finally:
        backend.close()
        if second is not None:
            second.kill()
            second.wait(timeout=10)
            second.stdout.close()

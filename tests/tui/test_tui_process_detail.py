"""The process screen (Enter on a process row): its contents, its keys, and what it does when things go wrong.

Real processes (children of this test, started in a temporary directory with a known environment)
are reported as GPU processes by the simulated backend (``real_pids``), so the details come through the
poller's thread from psutil exactly as on the NVML path.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from nvtopy.model import GpuProcess, Snapshot
from nvtopy.render.chart import block_chart
from nvtopy.tui import process_screen
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.process_screen import CHART_HEIGHT, ProcessHistory, ProcessScreen, history_lines
from nvtopy.tui.screens import ConfirmSignalScreen

from ..builders import FixedSource, gpu_process, gpu_sample, gpu_state, gpu_static, host_info, snapshot_of
from ..scenes import SCENES, build
from ..tui_helpers import more_snapshots, screen_text, select, started, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SIZE = (120, 40)
INTERVAL = 2.0  # snapshots come when a test asks for them


@pytest.fixture
def sleeper(tmp_path):
    """``sleep 120`` in ``tmp_path`` with CUDA_VISIBLE_DEVICES=1; reaped in the background once signalled."""
    child = subprocess.Popen(["sleep", "120"], cwd=tmp_path, env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"})
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).cmdline()[-1:] != ["120"]:
        assert time.monotonic() < deadline, "child did not start"
        time.sleep(0.01)
    threading.Thread(target=child.wait, daemon=True).start()  # no zombie once it is killed
    yield child
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


def is_pid(pid: int):
    return lambda p: isinstance(p, GpuProcess) and p.pid == pid


async def open_screen(pilot, app, pid: int) -> ProcessScreen:
    await select(pilot, app, is_pid(pid))
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, ProcessScreen)
    return app.screen


async def with_details(pilot, screen: ProcessScreen) -> None:
    await wait_until(pilot, lambda: screen.details is not None, message="the details")
    await pilot.pause()


# --------------------------------------------------------------------------- contents


async def test_enter_opens_the_screen_with_what_the_host_knows(sim, sleeper, tmp_path):
    backend = sim(gpus=2, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_screen(pilot, app, sleeper.pid)
        await with_details(pilot, screen)
        text = screen.plain_text()
        assert f"Process {sleeper.pid}" in text and "sleep" in text
        assert "Command               sleep 120" in text
        assert f"Working directory     {tmp_path}" in text
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(psutil.Process(sleeper.pid).create_time()))
        assert f"Started               {when}" in text
        assert f"{psutil.Process(os.getpid()).name()} ({os.getpid()}" in text, "the parent chain starts with us"
        assert "(1, " in text, "up to pid 1"
        assert 'CUDA_VISIBLE_DEVICES  "1"  → CUDA 0=GPU 1' in text, "which GPU the variable means"
        assert "GPU 0 H100 80GB HBM3" in text, "the GPU it runs on"
        assert "Children              none" in text
        assert " · 1 thread" in text and "1 threads" not in text, "sleep has one thread"
        assert "GPU memory" in text and "Host memory (RSS)" in text
        assert str(tmp_path) in screen_text(app), "shown, not only held"


async def test_the_screen_follows_snapshots_and_keeps_a_history(sim, sleeper, clock):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        key = (sleeper.pid, psutil.Process(sleeper.pid).create_time())
        screen = await open_screen(pilot, app, sleeper.pid)
        before = len(app.process_history.series(key).timestamps)
        for _ in range(3):
            clock.advance(1)
            await more_snapshots(pilot, app)
        series = app.process_history.series(key)
        assert len(series.timestamps) == before + 3
        assert all(not math.isnan(v) for v in series.gpu_memory), "GPU memory read each time"
        assert screen.snapshot is app.snapshot


async def test_escape_and_q_close_it(sim, sleeper):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        for key in ("escape", "q"):
            await open_screen(pilot, app, sleeper.pid)
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ProcessScreen)
        assert app.is_running, "q closed the screen, not the monitor"


async def test_enter_on_a_group_row_lists_its_processes(sim):
    backend = sim(gpus=2, seed=1)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("b")
        await pilot.pause()
        table = app.query_one("#processes")
        folded = len(table.rows)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessScreen)
        assert len(table.rows) == folded + len(table.selected.members)


# --------------------------------------------------------------------------- signals


async def test_kill_from_the_screen_asks_first_then_the_screen_says_it_exited(sim, sleeper):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_screen(pilot, app, sleeper.pid)
        await pilot.press("K")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmSignalScreen), "asks first"
        assert dialog.signal == "SIGKILL" and [p.pid for p in dialog.targets] == [sleeper.pid]
        assert dialog.targets[0].create_time == psutil.Process(sleeper.pid).create_time(), "start time captured"
        await pilot.press("y")
        await wait_until(pilot, lambda: sleeper.poll() is not None, message="the child killed")
        await wait_until(pilot, lambda: screen.exited, message="the screen to notice")
        assert app.screen is screen, "the screen stays, saying so"
        assert "EXITED" in screen.plain_text() and "EXITED" in screen_text(app)
        assert app.last_outcomes and app.last_outcomes[0].ok
        await pilot.press("K")
        await pilot.pause()
        assert app.screen is screen, "nothing to signal any more: no dialog"


async def test_cancel_sends_nothing(sim, sleeper):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_screen(pilot, app, sleeper.pid)
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is screen and sleeper.poll() is None


async def test_readonly_refuses_from_the_screen(sim, sleeper):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_screen(pilot, app, sleeper.pid)
        assert "read-only" in screen.plain_text()
        for key in ("T", "K", "I"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is screen
        assert any("read-only" in str(n.message) for n in app._notifications)
        assert sleeper.poll() is None


# --------------------------------------------------------------------------- when things go wrong


async def test_a_process_that_vanishes_is_reported(sim, sleeper):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_screen(pilot, app, sleeper.pid)
        await with_details(pilot, screen)
        sleeper.kill()
        await wait_until(pilot, lambda: sleeper.poll() is not None)
        await more_snapshots(pilot, app)
        assert screen.exited
        text = screen.plain_text()
        assert "EXITED" in text and "exited" in text, "title and status say so"
        assert "sleep 120" in text, "its last facts stay"


async def test_a_stuck_backend_never_holds_the_screen(sim, sleeper, monkeypatch):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    release = threading.Event()
    original = backend.process_details
    calls: list[int] = []

    def stuck(pid, create_time):
        calls.append(pid)
        release.wait(20)
        return original(pid, create_time)

    backend.process_details = stuck
    monkeypatch.setattr(process_screen, "DETAILS_DEADLINE", 0.2)
    monkeypatch.setattr(process_screen, "DETAILS_EVERY", 0.0)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_screen(pilot, app, sleeper.pid)
        await wait_until(pilot, lambda: screen.details_note is not None, message="the deadline")
        assert "has not answered" in screen.plain_text()
        for _ in range(3):  # more snapshots do not pile requests up on the stuck thread
            screen.show(app.snapshot)
        assert screen.details_requests == 1 and calls == [sleeper.pid]
        release.set()
        await with_details(pilot, screen)
        assert "has not answered" not in screen.plain_text()
        release.clear()
        screen.show(app.snapshot)  # due again (DETAILS_EVERY is 0 here): stuck again
        await wait_until(pilot, lambda: len(calls) == 2, message="the second request")
        await pilot.press("escape")  # the UI answers while the backend is stuck
        await pilot.pause()
        assert not isinstance(app.screen, ProcessScreen)
        release.set()


def _row(pid: int, **fields: object) -> GpuProcess:
    """alice's ``python train.py`` on GPU 0 (no UUID), started at 1000."""
    values = {"gpu_uuid": None, "gpu_memory_bytes": 2**30, "command": "python train.py", "create_time": 1000.0}
    return gpu_process(0, pid, **{**values, **fields})


def _snapshot(*rows: GpuProcess) -> Snapshot:
    static = gpu_static(0, bare=True, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * 2**30)
    gpu = gpu_state(0, *rows, static=static, sample=gpu_sample(2000.0, bare=True))
    return snapshot_of(gpu, timestamp=2000.0, host=host_info(hostname="host", driver_version="550", user="alice"))


async def test_a_source_without_a_host_shows_what_the_snapshot_has():
    app = NvtopyApp(FixedSource(), poll=False)
    async with app.run_test(size=SIZE) as pilot:
        app.source._publish(_snapshot(_row(4242, cuda_visible_devices="0")))
        await wait_until(pilot, lambda: app.snapshots_applied >= 1)
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        text = screen.plain_text()
        assert "no host to ask" in text and "python train.py" in text
        assert 'CUDA_VISIBLE_DEVICES  "0"  → CUDA 0=GPU 0' in text
        assert "read-only" in text, "such a source cannot signal"


async def test_a_pid_of_another_namespace_is_never_asked_about():
    source = FixedSource()
    asked: list[int] = []
    source.can_inspect = True  # type: ignore[misc]
    source.process_details = lambda pid, ct: asked.append(pid)  # type: ignore[method-assign]
    app = NvtopyApp(source, poll=False)
    async with app.run_test(size=SIZE) as pilot:
        foreign = _row(77, foreign=True, user=None, command=None, create_time=None)
        source._publish(_snapshot(foreign))
        await wait_until(pilot, lambda: app.snapshots_applied >= 1)
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessScreen)
        assert "not visible from this PID namespace" in app.screen.plain_text()
        assert asked == []


async def test_hostile_text_is_shown_escaped():
    app = NvtopyApp(FixedSource(), poll=False)
    async with app.run_test(size=SIZE) as pilot:
        evil = "python \x1b]0;pwned\x07 [bold]x[/bold]"
        app.source._publish(_snapshot(_row(4242, command=evil, user="eve\x1b[31m")))
        await wait_until(pilot, lambda: app.snapshots_applied >= 1)
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        text = app.screen.plain_text()
        assert "\x1b" not in text and "\\e]0;pwned\\x07 [bold]x[/bold]" in text and "eve\\e[31m" in text


# --------------------------------------------------------------------------- the history and its charts


def _proc_snapshot(t: float, *rows: GpuProcess, seq: int = 0) -> Snapshot:
    return dataclasses.replace(_snapshot(*rows), timestamp=t, sequence=seq)


def test_history_sums_gpus_keeps_points_and_forgets_the_gone():
    history = ProcessHistory(points=3, tracked=2)
    a0, a1 = _row(1, gpu_index=0, sm_percent=10), _row(1, gpu_index=0, sm_percent=20, gpu_memory_bytes=2**31)
    for i in range(5):
        history.add(_proc_snapshot(float(i), a0, dataclasses.replace(a1, gpu_index=1), seq=i))
    series = history.series((1, 1000.0))
    assert series.timestamps == (2.0, 3.0, 4.0), "the last points only"
    assert series.gpu_memory[-1] == 3 * 2**30 and series.sm[-1] == 30, "summed over its GPUs"
    history.add(_proc_snapshot(5.0, seq=5))
    assert history.series((1, 1000.0)) is None, "gone and not on screen: forgotten"


def test_history_memory_stays_within_its_stated_bound():
    """64 processes for 800 snapshots: 300 points each, at most 10.3 KiB a process, times kept exactly."""
    history = ProcessHistory()
    rows = [_row(pid, host_memory_bytes=3_000_000_123 + pid, cpu_percent=12.5) for pid in range(1, 65)]
    start = 1_764_000_000.0  # a Unix time: a float32 of it would be off by up to two minutes
    for i in range(800):
        history.add(_proc_snapshot(start + i, *rows, seq=i))
    assert len(history) == 64
    assert history.nbytes() <= 64 * 10.3 * 1024, f"{history.nbytes() / 64:.0f} bytes a process"
    series = history.series((7, 1000.0))
    assert len(series.timestamps) == 300 and series.timestamps[-1] == start + 799, "the newest 300, to the second"
    assert series.rss[-1] == pytest.approx(3_000_000_130, rel=1e-6) and series.cpu[-1] == 12.5


def test_history_tracks_a_bounded_number_and_always_the_pinned():
    history = ProcessHistory(points=10, tracked=1)
    history.pin((3, 1000.0))
    history.add(_proc_snapshot(1.0, _row(1), _row(2), _row(3)))
    assert history.series((3, 1000.0)) is not None, "pinned: tracked past the bound"
    assert len(history) == 2
    history.add(_proc_snapshot(2.0, _row(1), _row(2)))
    assert history.series((3, 1000.0)) is not None, "pinned: kept after it exited"
    history.add(_proc_snapshot(2.0, _row(1), _row(2)))
    assert len(history.series((1, 1000.0)).timestamps) == 2, "the same snapshot twice adds nothing"
    history.unpin((3, 1000.0))
    history.add(_proc_snapshot(3.0, _row(1), seq=3))
    assert history.series((3, 1000.0)) is None


def test_block_chart_scale_gaps_and_baseline():
    lines = block_chart([0.0, float("nan"), 50.0, 100.0], width=6, height=2, top=100.0, style_name="green")
    assert [line.plain for line in lines] == ["     █", "  ▁·██"]
    assert all(line.cells == 6 for line in lines)
    assert block_chart([1.0], width=0, height=2, top=1.0, style_name="") == []


def test_the_charts_have_a_value_axis():
    history = ProcessHistory()
    for t in range(5):
        history.add(_proc_snapshot(float(t), _row(1), seq=t))
    lines = [line.plain for line in history_lines(history.series((1, 1000.0)), 120, height=6)]
    memory = next(i for i, line in enumerate(lines) if line.startswith("GPU memory"))
    plot = lines[memory + 1 : memory + 7]
    assert plot[0].lstrip().startswith("80GiB┤") and plot[-1].lstrip().startswith("0┤"), plot
    assert "40GiB┤" in plot[2], "the middle of the scale on a chart tall enough"
    assert "100%┤" in plot[0] and "0%┤" in plot[-1], "the host CPU beside it, its scale 0-100 %"
    assert all(len(line) <= 120 for line in lines)


async def test_the_charts_take_the_rows_a_tall_terminal_spares():
    app, prepare = build(SCENES["process"])
    async with app.run_test(size=(200, 50)) as pilot:
        await prepare(pilot)
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        await wait_until(pilot, lambda: screen.chart_height(197) > CHART_HEIGHT, message="the charts grow")
        await pilot.pause()
        body = screen.query_one("#process-body")
        charts = screen.query_one("#process-charts")
        assert charts.region.bottom >= body.region.bottom - 3, "no blank rows under the charts"
        assert charts.region.bottom <= body.region.bottom, "and no scrolling to see them"

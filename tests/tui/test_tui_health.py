"""GPU health in the TUI: verdicts in the panels, the health screen, process flags, a stuck GPU.

Most tests show hand-made snapshots through a fixed source (no poller, no
timing): a GPU with findings, Xid events and link faults, one whose driver call
is stuck, flagged processes. One test runs the real poller on a simulated GPU
whose reads hang, to check that nothing the user presses waits for it. The
health scenes of tests/scenes.py are also pinned as SVG snapshots.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from rich.style import Style
from textual.containers import VerticalScroll

from nvtopy.model import (
    Finding,
    GpuEvent,
    GpuHealth,
    GpuProcess,
    GpuSample,
    GpuState,
    Reason,
    Severity,
    Snapshot,
)
from nvtopy.render.gpu import compact_line, interconnect_line, panel_lines, panel_title
from nvtopy.render.health import health_lines
from nvtopy.render.processes import FLAG_FILTERS, ProcessFilter, visible_columns
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.gpu_view import GpuView, plan_layout
from nvtopy.tui.health_screen import HealthScreen
from nvtopy.tui.screens import HelpScreen

from .. import builders
from ..builders import GIB, NOW, FixedSource, gpu_process, gpu_state, host_info, nvlinks
from ..builders import gpu_sample as sample
from ..builders import gpu_static as static
from ..scenes import SCENES, build
from ..tui_helpers import header_line, pids, screen_text, table_of, wait_until, widget_lines, widget_strips

ME = "alice"
WARN, FAIL = Severity.WARN, Severity.FAIL


# --------------------------------------------------------------------------- hand-made GPUs


def proc(gpu: int, pid: int, *flags: str, **changes: object) -> GpuProcess:
    """Working at 30 % of SMs; with ``flags``, at 0 % (an idle-held one idle for 25 min)."""
    idle = 1500.0 if "idle-held" in flags else None
    return gpu_process(gpu, pid, sm_percent=0 if flags else 30, flags=flags, idle_seconds=idle, **changes)


HOSTILE = "[bold]evil\x1b[2J"

SICK_HEALTH = GpuHealth(
    verdict=FAIL,
    findings=(
        Finding(FAIL, "remap-failure", "row remapping failed", "replace the board (RMA)"),
        Finding(FAIL, "xid", "Xid 79: GPU has fallen off the bus", "reboot the node"),
        Finding(WARN, "pcie-downgrade", "PCIe link Gen3 x8, the GPU can do Gen5 x16", "reseat the board"),
        Finding(WARN, "nvlink-down", "NVLink 2 inactive (3/4 up)", "check the fabric"),
        Finding(WARN, "throttle", "HW slowdown: SM at 45 % of max", "check cooling"),
        Finding(WARN, "idle-held", f"1 process holds 8.0 GiB {HOSTILE}", "ask the owner"),
    ),
    events=(GpuEvent(NOW - 600, 1, xid=31, gpu_instance_id=2, compute_instance_id=0), GpuEvent(NOW - 60, 1, xid=79)),
    xid_counts=((31, 1), (79, 1)),
    throttle="HW slowdown: SM at 45 % of max",
    idle_held_bytes=8 * GIB,
    suspected_hang_seconds=420.0,
)


def healthy_gpu(index: int = 0) -> GpuState:
    health = GpuHealth(events_note="Xid events are not supported on this GPU")
    return gpu_state(index, proc(index, 100 + index), sample=sample(), health=health)


def sick_gpu(index: int = 1) -> GpuState:
    """Everything wrong at once: a failed remapping, Xids, a narrow link, a link down, throttling, an idle process."""
    readings = sample(
        remapped_rows_uncorrected=2,
        remapped_rows_pending=True,
        remapped_rows_failure=True,
        pcie_link_gen=3,
        pcie_link_width=8,
        pcie_replay_counter=17,
        throttle_reasons=("hw_slowdown",),
        clock_sm_mhz=891,
        nvlinks=(*nvlinks(down=(2,))[:3], dataclasses.replace(nvlinks()[3], remote=HOSTILE)),
    )
    processes = (proc(index, 200, "idle-held", gpu_memory_bytes=8 * GIB), proc(index, 201))
    return gpu_state(index, *processes, sample=readings, health=SICK_HEALTH)


def stalled_gpu(index: int = 2, seconds: float = 12.0) -> GpuState:
    health = GpuHealth(
        verdict=FAIL,
        findings=(Finding(FAIL, "not-responding", f"not responding ({int(seconds)} s): a driver call is stuck"),),
        responding=False,
        stalled_seconds=seconds,
    )
    return gpu_state(index, proc(index, 300, "suspected-hang"), sample=sample(), health=health)


def my_snapshot(*gpus: GpuState, timestamp: float = NOW) -> Snapshot:
    """These GPUs as their processes' owner (``ME``) sees them: the views mark the processes as the user's."""
    return builders.snapshot_of(*gpus, timestamp=timestamp, host=host_info(user=ME))


async def show(pilot, app: NvtopyApp, snapshot: Snapshot) -> None:
    target = app.snapshots_applied + 1
    app.source._publish(snapshot)
    await wait_until(pilot, lambda: app.snapshots_applied >= target, message="the snapshot")
    await pilot.pause()


def health_text(app: NvtopyApp) -> str:
    """Everything the health screen holds (scrolled out of view or not)."""
    screen = app.screen
    assert isinstance(screen, HealthScreen), screen
    return str(screen.query_one("#health-text").content)


# --------------------------------------------------------------------------- render: panels, lines, columns


def test_panel_title_shows_the_verdict_and_keeps_it_when_narrow():
    assert panel_title(healthy_gpu()).plain.endswith(" OK ")
    title = panel_title(sick_gpu()).plain
    assert "FAIL row remapping failed (+5)" in title
    narrow = panel_title(sick_gpu(), 40)
    assert narrow.cells <= 40 and "FAIL row" in narrow.plain, "the bus id goes before the verdict"
    assert "not responding (12 s)" in panel_title(stalled_gpu()).plain


def test_interconnect_line_flags_a_downgrade_and_links_down_and_drops_rates_first():
    wide = interconnect_line(healthy_gpu(), 100).plain
    assert "PCIe Gen5 x16" in wide and "RX 120MiB/s TX 40MiB/s" in wide and "NVLink 4/4" in wide
    assert "RX 20MiB/s TX 16MiB/s" in wide
    sick = interconnect_line(sick_gpu(), 48)
    assert sick.cells == 48
    assert "Gen3 x8 ⚠ max Gen5 x16" in sick.plain and "NVLink 3/4" in sick.plain
    assert "RX" not in sick.plain, "throughput gives way to the link state"
    unknown = GpuState(static(0, nvlink_count=None), GpuSample(NOW))
    assert interconnect_line(unknown, 60).plain.strip() == "PCIe N/A"


def test_throttling_in_words_replaces_the_clocks_when_short_of_room():
    info = panel_lines(sick_gpu(), 48)[3].plain
    assert "⚠ HW slowdown: SM at 45 % of max" in info
    assert "MHz" not in info


def test_a_stalled_gpu_is_dimmed_in_its_panel_and_compact_line():
    for line in panel_lines(stalled_gpu(), 60, links=True):
        assert all(piece_style is not None and piece_style.dim for text, piece_style in line.parts if text.strip())
    for line in panel_lines(healthy_gpu(), 60, links=True):
        assert not any(piece_style is not None and piece_style.dim for text, piece_style in line.parts if "GiB" in text)
    compact = compact_line(stalled_gpu(), 100)
    assert "FAIL" in compact.plain and "not responding (12 s)" in compact.plain
    values = [(text, s) for text, s in compact.parts if "%" in text or "W" in text]
    assert values and all(s is not None and s.dim for _, s in values)


def test_compact_line_has_the_verdict_and_the_reason_instead_of_the_name():
    assert compact_line(healthy_gpu(), 100).plain.startswith(" 0 OK   ")
    sick = compact_line(sick_gpu(), 100).plain
    assert sick.startswith(" 1 FAIL ") and "row remapping failed" in sick


def test_plan_drops_the_interconnect_line_first():
    assert plan_layout(4, 120, 40, links=True).links
    assert plan_layout(4, 120, 40, links=True).lines == 14
    assert not plan_layout(4, 120, 30, links=True).links and plan_layout(4, 120, 30, links=True).kind == "full"
    assert plan_layout(4, 80, 24, links=True).kind == "compact"
    assert plan_layout(1, 80, 24, links=True).links
    assert not plan_layout(4, 120, 40, links=False).links
    assert plan_layout(4, 120, 40, "compact", links=True).kind == "compact"


def test_flag_filter_and_flags_column():
    rows = [proc(0, 1), proc(0, 2, "idle-held"), proc(0, 3, "suspected-hang"), proc(0, 4, "idle-held", "x")]
    matched = {f: [p.pid for p in rows if ProcessFilter(flag=f).matches(p, ME)] for f in FLAG_FILTERS}
    assert matched == {None: [1, 2, 3, 4], "flagged": [2, 3, 4], "idle-held": [2, 4], "suspected-hang": [3]}
    assert ProcessFilter(flag="idle-held").describe() == ["idle-held"] and ProcessFilter(flag="flagged").active
    keys = [c.key for c in visible_columns(140, flags=True)]
    assert keys[-2:] == ["flags", "command"]
    assert "flags" not in [c.key for c in visible_columns(140)]
    assert "flags" not in [c.key for c in visible_columns(90, flags=True)], "it yields first at small widths"
    assert "flags" in [c.key for c in visible_columns(78, keep_flags=True)], "unless the filter asked for it"


def test_health_lines_say_why_a_reading_is_missing_and_escape_outside_text():
    text = "\n".join(line.plain for line in health_lines(my_snapshot(healthy_gpu(), sick_gpu())))
    assert "Retired pages    N/A (not supported)" in text
    assert "not watched: Xid events are not supported on this GPU" in text
    bare = GpuState(static(3, nvlink_count=None), GpuSample(NOW, unavailable={"nvlinks": Reason.NO_PERMISSION}))
    bare_text = "\n".join(line.plain for line in health_lines(my_snapshot(bare)))
    assert "Links            N/A (no permission)" in bare_text
    assert "Remapped rows    N/A (not reported)" in bare_text
    assert "\x1b" not in text and "\\e[2J" in text


# --------------------------------------------------------------------------- the app


async def test_health_screen_opens_shows_the_evidence_and_closes():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, my_snapshot(healthy_gpu(), sick_gpu(), stalled_gpu()))
        await pilot.press("H")
        await pilot.pause()
        text = health_text(app)
        # The overview and every finding with its fix.
        assert "GPU 1  FAIL  row remapping failed (+5)" in text
        assert "GPU 2  FAIL  not responding (12 s)" in text
        assert "FAIL  row remapping failed" in text and "fix: replace the board (RMA)" in text
        assert "WARN  PCIe link Gen3 x8, the GPU can do Gen5 x16" in text and "fix: reseat the board" in text
        # The Xid timeline, newest first, with meaning and action; the MIG instance; counts.
        assert "Xid 31 x1 · Xid 79 x1" in text
        assert text.index("Xid 79   GPU has fallen off the bus") < text.index("Xid 31   GPU memory page fault")
        assert "fix: reboot the node; check power, cooling and the slot" in text
        assert "(MIG GI 2 CI 0)" in text and "(60 s ago)" in text and "(10 min ago)" in text
        assert "not watched: Xid events are not supported on this GPU" in text
        # Memory, PCIe, NVLink and work readings.
        assert "Remapped rows    corrected 0 · uncorrected 2 · pending yes · failure yes" in text
        assert "ECC volatile     corrected 1 · uncorrected 0" in text
        assert "ECC aggregate    corrected 5 · uncorrected 0" in text
        assert "Link             Gen3 x8 · max Gen5 x16 · downgraded" in text
        assert "Replays          17" in text and "RX 120MiB/s · TX 40MiB/s" in text
        assert "Links            3/4 up" in text and "00000000:42:00.0" in text
        assert "Throttling       HW slowdown: SM at 45 % of max" in text
        assert "Idle-held memory 8.0GiB held by processes that compute nothing" in text
        assert "Suspected hang   busy at low power for 7 min" in text
        assert "pid 200" in text and "idle-held 25 min" in text
        assert "the readings below are the last ones read" in text
        assert "\x1b" not in text and "[bold]evil\\e[2J" in text, "outside text is shown escaped, never obeyed"
        assert "4 GPUs" not in screen_text(app) and "3 GPUs: 2 FAIL · 1 OK" in screen_text(app)
        # The monitor's keys do not reach past it: no sort, no signal dialog for a process out of sight.
        order = app.order
        await pilot.press("s", "K", "f")
        await pilot.pause()
        assert isinstance(app.screen, HealthScreen) and app.order == order and app.row_filter.flag is None
        # It scrolls.
        body = app.screen.query_one("#health-body")
        await pilot.press("pagedown")
        await pilot.pause()
        assert body.scroll_y > 0
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HealthScreen)
        for key in ("q", "H"):  # q and H close it too (q does not quit the app from there)
            await pilot.press("H")
            await pilot.pause()
            assert isinstance(app.screen, HealthScreen)
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, HealthScreen)
        assert app.is_running


async def test_health_screen_updates_live():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, my_snapshot(healthy_gpu(), stalled_gpu(seconds=12)))
        await pilot.press("H")
        await pilot.pause()
        assert "not responding (12 s)" in health_text(app)
        await show(pilot, app, my_snapshot(healthy_gpu(), stalled_gpu(seconds=47)))
        assert "not responding (47 s)" in health_text(app)
        await show(pilot, app, my_snapshot(healthy_gpu(), healthy_gpu(2)))
        assert "not responding" not in health_text(app) and "2 GPUs: 2 OK" in screen_text(app)


async def test_health_screen_counts_follow_the_colorblind_theme_and_a_theme_change():
    """The title's FAIL / WARN / OK counts are drawn in the theme's palette, read when drawn (not at import)."""

    def count_colours() -> set[str]:
        found = set()
        for strip in widget_strips(app.screen.query_one("#health-title")):
            for segment in strip:
                for color in (segment.style.color, segment.style.bgcolor) if segment.style else ():
                    if color is not None:
                        found.add(color.triplet.hex.upper() if color.triplet else color.name)
        return found

    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    app.theme = "colorblind"
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, my_snapshot(healthy_gpu(), sick_gpu()))
        await pilot.press("H")
        await pilot.pause()
        assert "2 GPUs: 1 FAIL · 1 OK" in screen_text(app)
        colours = count_colours()
        assert {"#D55E00", "#56B4E9"} <= colours and not colours & {"red", "green"}, colours
        app.theme = "textual-dark"  # the command palette's "Change theme", with the screen open
        await pilot.pause()
        await show(pilot, app, my_snapshot(healthy_gpu(), sick_gpu()))  # the next snapshot recolours the counts
        colours = count_colours()
        assert colours and not colours & {"#D55E00", "#56B4E9"}, colours


async def test_health_screen_opens_before_the_first_snapshot():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("H")
        await pilot.pause()
        assert "waiting for the first sample" in str(app.screen.query_one("#health-text").content)
        await show(pilot, app, my_snapshot(sick_gpu()))
        assert "row remapping failed" in health_text(app)


def _panel_cells(app: NvtopyApp) -> list[list[tuple[str, Style | None, int]]]:
    """Each GpuView line as (text, style, x) segments, as the view draws them (before Textual turns dim
    into darker colours on the way to the terminal)."""
    view = app.query_one(GpuView)
    lines = []
    for strip in (view.render_line(y) for y in range(view.size.height)):
        x, cells = 0, []
        for segment in strip:
            cells.append((segment.text, segment.style, x))
            x += segment.cell_length
        lines.append(cells)
    return lines


async def test_a_stalled_gpu_is_drawn_not_responding_and_dimmed_while_the_other_is_not():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, my_snapshot(healthy_gpu(0), stalled_gpu(1)))
        view = app.query_one(GpuView)
        assert view.plan.kind == "full" and view.plan.columns == 2 and view.plan.links
        lines = widget_lines(view)
        half = app.size.width // 2
        assert "not responding (12 s)" in lines[0][half:] and "not responding" not in lines[0][:half]
        body = _panel_cells(app)[1 : view.plan.panel_height - 1]
        values = [(t, s, x) for line in body for t, s, x in line if t.strip() and not set(t) <= set("│ ")]
        right = [(t, s) for t, s, x in values if x >= half]
        left = [(t, s) for t, s, x in values if x < half]
        assert right and all(s is not None and s.dim for _, s in right), "the stalled GPU's last values are dim"
        assert any("GiB" in t for t, _ in left) and not any(s is not None and s.dim for t, s in left if "GiB" in t)
        assert "PCIe Gen5 x16" in "".join(lines)
        assert "1 FAIL (H)" in header_line(app)
        # Compact lines: the same.
        await pilot.press("v", "v")
        await pilot.pause()
        assert view.plan.kind == "compact"
        labels, compact = widget_lines(view)  # the column labels, then two GPUs side by side on one line
        assert "MEM" in labels and "UTIL" in labels
        assert compact.startswith(" 0 OK") and " 1 FAIL " in compact and "not responding (12 s)" in compact


async def test_flag_filter_shows_only_flagged_rows_and_esc_clears_it():
    snapshot = my_snapshot(healthy_gpu(0), sick_gpu(1), stalled_gpu(2))
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await show(pilot, app, snapshot)
        assert pids(app) == {100, 200, 201, 300}
        lines = widget_lines(table_of(app))
        assert "FLAGS" in lines[0], "some process has a flag: the column is shown"
        row = next(line for line in lines if " 200 " in line)
        assert row.startswith(" !") and "idle-held 25 min" in row
        assert not next(line for line in lines if " 100 " in line).startswith(" !")
        expected = {"flagged": {200, 300}, "idle-held": {200}, "suspected-hang": {300}, None: {100, 200, 201, 300}}
        for flag in FLAG_FILTERS[1:] + FLAG_FILTERS[:1]:
            await pilot.press("f")
            await pilot.pause()
            assert app.row_filter.flag == flag and pids(app) == expected[flag], flag
            assert (f"filter: {flag}" in header_line(app)) is (flag is not None)
        await pilot.press("f")
        await pilot.pause()
        assert pids(app) == {200, 300}
        await pilot.press("escape")
        await pilot.pause()
        assert app.row_filter.flag is None and pids(app) == {100, 200, 201, 300}
        # No flag anywhere: no FLAGS column.
        await show(pilot, app, my_snapshot(healthy_gpu(0)))
        assert "FLAGS" not in widget_lines(table_of(app))[0]


async def test_flag_filter_keeps_the_flags_column_at_80_columns():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await show(pilot, app, my_snapshot(healthy_gpu(0), sick_gpu(1)))
        assert "FLAGS" not in widget_lines(table_of(app))[0], "it yields first on a small terminal"
        await pilot.press("f")
        await pilot.pause()
        lines = widget_lines(table_of(app))
        assert "FLAGS" in lines[0] and "idle-held 25 min" in next(line for line in lines if " 200 " in line)


async def test_help_lists_the_new_keys():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 70)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        sections = dict(app.screen.sections)
        assert any(keys == "H" and "GPU health" in words for keys, words in sections["View"])
        assert any(keys == "f" and "Flagged processes" in words for keys, words in sections["Filtering"])
        app.screen.query_one(VerticalScroll).scroll_end(animate=False)  # the help is longer than its box
        await pilot.pause()
        visible = screen_text(app)
        assert "any flag, idle-held" in visible
        app.screen.query_one(VerticalScroll).scroll_end(animate=False)  # the View section ends the help
        await pilot.pause()
        assert "GPU health: findings and fixes" in screen_text(app)


async def test_80x24_stays_usable():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        gpus = [healthy_gpu(0), sick_gpu(1), stalled_gpu(2), healthy_gpu(3)]
        await show(pilot, app, my_snapshot(*gpus))
        view = app.query_one(GpuView)
        assert view.plan.kind == "compact" and view.plan.lines == 5
        labels, *lines = widget_lines(view)
        assert labels.startswith("GPU ") and "MEM" in labels and "UTIL" in labels
        assert [line[:7] for line in lines] == [" 0 OK  ", " 1 FAIL", " 2 FAIL", " 3 OK  "]
        assert "H100 80GB HBM3" in lines[0] and "not responding" in lines[2]
        table = widget_lines(table_of(app))
        assert table[0].lstrip().startswith("GPU") and " 200 " in "".join(table)
        assert "2 FAIL" in header_line(app)
        await pilot.press("H")
        await pilot.pause()
        visible = screen_text(app)
        assert "Overview" in visible and "GPU 2  FAIL  not responding (12 s)" in visible


class HangingBackend:
    """Wraps a simulated backend: GPU 1's sample reads block once ``hang`` is set, until ``release`` is."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.hang = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def read_sample(self, index, groups):
        if index == 1 and self.hang.is_set():
            self.release.wait(30)
        return self._backend.read_sample(index, groups)


async def test_a_hung_gpu_freezes_nothing(sim, clock):
    """A real poller, GPU 1's driver call stuck: it turns "not responding", GPU 0 keeps updating, keys answer."""
    backend = HangingBackend(sim(gpus=2, seed=3))
    app = NvtopyApp.for_backend(backend, interval=0.25, events=False)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await wait_until(pilot, lambda: app.snapshots_applied >= 2, message="two snapshots")
            backend.hang.set()

            def stalled() -> bool:
                gpu = app.snapshot.gpu(1) if app.snapshot else None
                return gpu is not None and not gpu.health.responding

            await wait_until(pilot, stalled, message="GPU 1 not responding")
            assert "not responding" in widget_lines(app.query_one(GpuView))[0]
            before = app.snapshots_applied
            for key in ("h", "escape", "f", "escape", "question_mark", "escape"):
                started = time.monotonic()
                await pilot.press(key)
                await pilot.pause()
                # The stuck call lasts until the test ends (30 s at most): a key that waited on it would
                # take that long. Textual's own screen switch takes a few tenths of a second under the pilot.
                assert time.monotonic() - started < 3.0, f"{key} waited for the stuck driver"
            await wait_until(pilot, lambda: app.snapshots_applied >= before + 2, message="GPU 0 keeps updating")
            assert app.snapshot.gpu(0).health.responding
        finally:
            backend.release.set()


# --------------------------------------------------------------------------- SVG snapshots


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@pytest.mark.parametrize("name", ["sick", "health"])
def test_health_scene(snap_compare, utc, name, size):
    app, prepare = build(SCENES[name])
    assert snap_compare(app, terminal_size=size, run_before=prepare)

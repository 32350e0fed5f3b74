"""Every key of the monitor, driven through Textual's pilot on simulated GPUs.

Each test checks what the key is for (the rows' actual order, which rows are
left, what the header and the GPU view draw), not only that the app survives.
"""

from __future__ import annotations

import ast
import asyncio
import re
import time
from dataclasses import fields, replace
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.command import CommandPalette
from textual.widgets import Input, SelectionList

from nvtopy.backends.simulated.catalog import Workload
from nvtopy.interval import MAX_INTERVAL, MIN_INTERVAL
from nvtopy.render.processes import ProcessFilter, SortOrder
from nvtopy.sources.timeline import WINDOWS
from nvtopy.tui import app as app_module
from nvtopy.tui import header as header_module
from nvtopy.tui import preferences as preferences_module
from nvtopy.tui.app import INTERVALS, NvtopyApp
from nvtopy.tui.charts import CHART_MODES
from nvtopy.tui.gpu_view import MODES
from nvtopy.tui.screens import SORT_LETTERS, GpuPickerScreen, HelpScreen, help_keys, help_sections
from nvtopy.tui.view_state import ViewState

from ..tui_helpers import (
    assert_in_order,
    header_line,
    more_snapshots,
    screen_text,
    started,
    wait_until,
    widget_lines,
    widget_strips,
)

SIZE = (120, 40)
INTERVAL = 2.0  # snapshots come when a test asks for them (more_snapshots); pressing keys stays fast

# What each column sorts by, written out here (not taken from procview) so a wrong key there fails.
SORT_VALUES = {
    "gpu": lambda p: p.gpu_index,
    "pid": lambda p: p.pid,
    "user": lambda p: p.user,
    "owner": lambda p: None if p.owner is None else "-" if p.owner.kind.value == "host" else p.owner.label,
    "type": lambda p: p.type.value,
    "gpu_memory": lambda p: p.gpu_memory_bytes,
    "sm": lambda p: p.sm_percent,
    "cpu": lambda p: p.cpu_percent,
    "host_memory": lambda p: p.host_memory_bytes,
    "time": lambda p: p.running_seconds,
    "command": lambda p: p.command,
}
# The order ``s`` steps through, and whether each column starts biggest first.
CYCLE = [
    ("pid", False),
    ("user", False),
    ("owner", False),
    ("type", False),
    ("gpu_memory", True),
    ("sm", True),
    ("cpu", True),
    ("host_memory", True),
    ("time", True),
    ("command", False),
    ("gpu", False),
]


def table_of(app):
    return app.query_one("#processes")


def assert_rows_sorted(app, column: str, reverse: bool) -> None:
    rows = table_of(app).rows
    assert len(rows) >= 5, "enough rows to tell an order"
    assert (app.order.column, app.order.reverse) == (column, reverse)
    assert_in_order([SORT_VALUES[column](p) for p in rows], reverse=reverse)


def keys_of(rows) -> list:
    return [p.key for p in rows]


def matches(process, needle: str) -> bool:
    needle = needle.lower()
    return needle in str(process.pid) or needle in (process.user or "").lower() or needle in process.command.lower()


async def type_text(pilot, text: str) -> None:
    await pilot.press(*text)
    await pilot.pause()


# --------------------------------------------------------------------------- sorting


async def test_s_cycles_every_column_in_its_natural_direction(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert_rows_sorted(app, "gpu", False)
        for column, reverse in CYCLE:
            await pilot.press("s")
            assert_rows_sorted(app, column, reverse)
        # The table draws the rows in that order: its first data line is the first row.
        await pilot.press("s", "s", "s", "s", "s")  # gpu -> pid -> user -> owner -> type -> gpu_memory
        await pilot.pause()
        table = table_of(app)
        assert_rows_sorted(app, "gpu_memory", True)
        lines = widget_lines(table)
        assert "GPU-MEM▼" in lines[0]
        assert f" {table.rows[0].pid} " in lines[1]
        assert f" {table.rows[1].pid} " in lines[2]
        memory = [p.gpu_memory_bytes for p in table.rows]
        assert memory[0] == max(m for m in memory if m is not None)


async def test_greater_less_and_shift_s_step_both_ways(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("greater_than_sign")
        assert_rows_sorted(app, "pid", False)
        await pilot.press("greater_than_sign")
        assert_rows_sorted(app, "user", False)
        await pilot.press("less_than_sign")
        assert_rows_sorted(app, "pid", False)
        await pilot.press("S")
        assert_rows_sorted(app, "gpu", False)
        await pilot.press("S")  # wraps around to the last column
        assert_rows_sorted(app, "command", False)
        await pilot.press("less_than_sign")
        assert_rows_sorted(app, "time", True)


async def test_r_reverses_the_order(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("s", "s", "s", "s", "s")
        assert_rows_sorted(app, "gpu_memory", True)
        before = keys_of(table_of(app).rows)
        await pilot.press("r")
        assert_rows_sorted(app, "gpu_memory", False)
        assert "GPU-MEM▲" in widget_lines(table_of(app))[0]
        assert keys_of(table_of(app).rows) != before
        await pilot.press("r")
        assert_rows_sorted(app, "gpu_memory", True)
        assert keys_of(table_of(app).rows) == before


async def test_clicking_a_column_title_sorts_by_it_and_again_reverses(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        header = widget_lines(table_of(app))[0]
        x = header.index("GPU-MEM") + 2
        assert await pilot.click("#processes", offset=(x, 0))
        await pilot.pause()
        assert_rows_sorted(app, "gpu_memory", True)
        assert await pilot.click("#processes", offset=(x, 0))
        await pilot.pause()
        assert_rows_sorted(app, "gpu_memory", False)
        x = widget_lines(table_of(app))[0].index("USER")
        assert await pilot.click("#processes", offset=(x, 0))
        await pilot.pause()
        assert_rows_sorted(app, "user", False)
        x = widget_lines(table_of(app))[0].index("COMMAND") + 3
        assert await pilot.click("#processes", offset=(x, 0))
        await pilot.pause()
        assert_rows_sorted(app, "command", False)


async def test_sort_survives_refreshes_with_changing_values(sim, clock):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("s", "s", "s", "s", "s", "s", "s")  # CPU%, biggest first
        assert_rows_sorted(app, "cpu", True)
        before = [(p.key, p.cpu_percent) for p in table_of(app).rows]
        for _ in range(3):
            clock.advance(1)
            await more_snapshots(pilot, app, 2)
            assert_rows_sorted(app, "cpu", True)
        after = [(p.key, p.cpu_percent) for p in table_of(app).rows]
        assert after != before, "the values changed meanwhile (the sort was re-applied to new data)"


# --------------------------------------------------------------------------- cursor


async def test_cursor_keys_move_the_selection(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=16), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        rows = len(table.rows)
        page = table.size.height - 1
        assert rows > page + 2, "more rows than fit: paging and scrolling matter"
        assert table.cursor == 0
        assert table.selected.key == table.rows[0].key
        await pilot.press("down", "down", "down")
        assert table.cursor == 3
        await pilot.press("up")
        assert table.cursor == 2
        assert table.selected.key == table.rows[2].key
        await pilot.press("pagedown")
        assert table.cursor == 2 + page
        await pilot.pause()
        assert table.scroll_offset.y <= table.cursor < table.scroll_offset.y + page, "the cursor is scrolled into view"
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor == rows - 1
        assert table.selected.key == table.rows[-1].key
        assert table.scroll_offset.y > 0
        assert f" {table.rows[-1].pid} " in widget_lines(table)[-1], "the last row is drawn at the bottom"
        await pilot.press("down")
        assert table.cursor == rows - 1, "stops at the end"
        await pilot.press("pageup")
        assert table.cursor == rows - 1 - page
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor == 0
        assert table.scroll_offset.y == 0
        await pilot.press("up")
        assert table.cursor == 0, "stops at the top"


async def test_clicking_a_row_selects_it(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        assert await pilot.click("#processes", offset=(30, 4))
        await pilot.pause()
        assert table.cursor == 3
        assert table.selected.key == table.rows[3].key
        assert await pilot.click("#processes", offset=(5, 2))
        await pilot.pause()
        assert table.cursor == 1


async def test_cursor_follows_its_process_across_sorts_and_refreshes(sim, clock):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        await pilot.press("down", "down", "down")
        key = table.selected.key
        positions = {table.cursor}
        for _ in range(len(CYCLE)):
            await pilot.press("s")
            assert table.selected.key == key
            assert table.rows[table.cursor].key == key
            positions.add(table.cursor)
        assert len(positions) > 1, "some sort moved the row, and the cursor went with it"
        await pilot.press("s", "s", "s", "s", "s", "s", "s")  # CPU%: changes between refreshes
        assert_rows_sorted(app, "cpu", True)
        for _ in range(4):
            clock.advance(1)
            await more_snapshots(pilot, app, 2)
            assert table.selected.key == key
            positions.add(table.cursor)
        # The selection is drawn on the row of that process.
        await pilot.pause()
        line = widget_strips(table)[1 + table.cursor - round(table.scroll_offset.y)]
        assert f" {key[1]} " in line.text
        assert any(segment.style and segment.style.reverse for segment in line), "drawn as the cursor line"


# --------------------------------------------------------------------------- filters


async def test_slash_filters_by_pid_user_or_command(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        box = app.query_one("#filter", Input)
        assert not box.display, "hidden until / is pressed"
        everything = list(app.snapshot.processes)
        users = sorted({p.user for p in everything})
        assert len(users) > 1
        some = everything[len(everything) // 2]
        words = sorted({w for p in everything for w in p.command.lower().split() if w.isalpha() and len(w) > 3})
        word = next(w for w in words if 0 < sum(matches(p, w) for p in everything) < len(everything))
        for needle in (word, users[-1], str(some.pid)):
            wanted = {p.key for p in everything if matches(p, needle)}
            assert 0 < len(wanted) < len(everything), f"{needle!r} narrows the table"
            await pilot.press("slash")
            await pilot.pause()
            assert box.display and box.has_focus
            await type_text(pilot, needle)
            assert app.row_filter.text == needle
            assert {p.key for p in table.rows} == wanted
            assert f'filter: "{needle}" ({len(wanted)}/{len(everything)})' in header_line(app)
            await pilot.press("enter")
            await pilot.pause()
            assert table.has_focus, "enter returns to the table"
            assert box.display, "the kept filter stays visible"
            assert app.row_filter.text == needle
            assert {p.key for p in table.rows} == wanted
            await more_snapshots(pilot, app)
            assert {p.key for p in table.rows} == wanted, "the filter holds across refreshes"
            await pilot.press("escape")
            await pilot.pause()
            assert not box.display
            assert box.value == ""
            assert len(table.rows) == len(everything)
            assert "filter" not in header_line(app)


async def test_escape_clears_every_filter(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        everything = len(app.snapshot.processes)
        await pilot.press("u", "y")
        await pilot.press("slash")
        await type_text(pilot, "python")
        assert app.row_filter == ProcessFilter(text="python", mine_only=True, process_type="C")
        assert len(table.rows) < everything
        await pilot.press("escape")  # from the input itself
        await pilot.pause()
        assert app.row_filter == ProcessFilter()
        assert not app.query_one("#filter").display
        assert table.has_focus
        assert len(table.rows) == everything
        await pilot.press("u", "slash")
        await type_text(pilot, "zzz")
        await pilot.press("enter")
        await pilot.pause()
        assert table.rows == []
        assert "No process matches the filters" in widget_lines(table)[1]
        await pilot.press("escape")  # from the table
        await pilot.pause()
        assert app.row_filter == ProcessFilter()
        assert len(table.rows) == everything


async def test_u_shows_only_my_processes(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4, viewer="alice"), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        everything = list(app.snapshot.processes)
        mine = {p.key for p in everything if p.user == "alice"}
        assert 0 < len(mine) < len(everything)
        await pilot.press("u")
        assert app.row_filter.mine_only
        assert {p.key for p in table.rows} == mine
        assert "mine" in header_line(app)
        await more_snapshots(pilot, app)
        assert {p.user for p in table.rows} == {"alice"}
        await pilot.press("u")
        assert not app.row_filter.mine_only
        assert len(table.rows) == len(everything)
        assert "mine" not in header_line(app)


TYPED_WORKLOADS = [
    Workload("python compute_job.py", (0.1, 0.2), (0.3, 0.5), (600, 600), kind="C"),
    Workload("Xorg :0 vt1", (0.01, 0.02), (0.0, 0.01), (600, 600), kind="G"),
    Workload("blender -b scene.blend", (0.1, 0.2), (0.3, 0.5), (600, 600), kind="C+G"),
]


async def test_y_cycles_process_type_compute_graphics_all(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, workloads=TYPED_WORKLOADS, model="RTX 4090"), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        everything = list(app.snapshot.processes)
        kinds = {p.type.value for p in everything}
        assert kinds == {"C", "G", "C+G"}, "every kind of process is present"
        await pilot.press("y")
        assert app.row_filter.process_type == "C"
        assert {p.key for p in table.rows} == {p.key for p in everything if p.type.value in ("C", "C+G")}
        assert "type C" in header_line(app)
        await pilot.press("y")
        assert app.row_filter.process_type == "G"
        assert {p.key for p in table.rows} == {p.key for p in everything if p.type.value in ("G", "C+G")}
        assert {p.type.value for p in table.rows} == {"G", "C+G"}
        assert "type G" in header_line(app)
        await pilot.press("y")
        assert app.row_filter.process_type is None
        assert len(table.rows) == len(everything)
        assert "type" not in header_line(app)


# --------------------------------------------------------------------------- GPU picker


async def test_g_hides_a_gpu_and_its_processes(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        assert {p.gpu_index for p in table.rows} >= {1}, "GPU 1 has processes to hide"
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GpuPickerScreen)
        picker = app.screen.query_one(SelectionList)
        assert set(picker.selected) == {0, 1, 2, 3}
        await pilot.press("down", "space")  # the second entry: GPU 1
        await pilot.pause()
        assert set(picker.selected) == {0, 2, 3}
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, GpuPickerScreen)
        assert app.row_filter.gpus == frozenset({0, 2, 3})
        assert [g.index for g in app.visible_gpus()] == [0, 2, 3]
        assert table.rows and all(p.gpu_index != 1 for p in table.rows)
        assert "GPUs 3/4" in header_line(app)
        gpu_text = "\n".join(widget_lines(app.query_one("#gpus")))
        assert "╭─ 0 " in gpu_text and "╭─ 2 " in gpu_text and "╭─ 3 " in gpu_text
        assert "╭─ 1 " not in gpu_text
        await more_snapshots(pilot, app)
        assert all(p.gpu_index != 1 for p in table.rows)

        # Cancel leaves the choice as it was.
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GpuPickerScreen)
        await pilot.press("space")  # GPU 0 off, then cancelled
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, GpuPickerScreen)
        assert app.row_filter.gpus == frozenset({0, 2, 3})
        assert [g.index for g in app.visible_gpus()] == [0, 2, 3]

        # Selecting all again shows everything (no GPU filter at all).
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("a", "enter")
        await pilot.pause()
        assert app.row_filter.gpus is None
        assert [g.index for g in app.visible_gpus()] == [0, 1, 2, 3]
        assert any(p.gpu_index == 1 for p in table.rows)


async def test_g_cancel_without_a_filter_changes_nothing(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        rows = len(table_of(app).rows)
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("space", "down", "space")
        await pilot.press("escape")
        await pilot.pause()
        assert app.row_filter == ProcessFilter()
        assert len(app.visible_gpus()) == 4
        assert len(table_of(app).rows) == rows


# --------------------------------------------------------------------------- layout


async def test_v_cycles_auto_full_compact(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        gpus = app.query_one("#gpus")
        assert app.layout_mode == "auto"
        assert gpus.plan.kind == "full", "4 GPUs fit as panels in 120x40"
        assert gpus.size.height == 16, "two rows of 8-line panels (with the SM/tensor line and the PCIe/NVLink line)"
        await pilot.press("v")
        await pilot.pause()
        assert app.layout_mode == "full"
        assert gpus.plan.kind == "full"
        assert gpus.size.height == 16
        assert "view full" in header_line(app)
        await pilot.press("v")
        await pilot.pause()
        assert app.layout_mode == "compact"
        assert gpus.plan.kind == "compact"
        assert gpus.size.height == gpus.plan.lines <= 4
        lines = widget_lines(gpus)
        assert not any("╭" in line for line in lines), "no panel borders in compact mode"
        assert "view compact" in header_line(app)
        await pilot.press("v")
        await pilot.pause()
        assert app.layout_mode == "auto"
        assert gpus.plan.kind == "full"
        assert gpus.size.height == 16


async def test_auto_layout_with_16_gpus_in_80x24_is_compact_and_keeps_rows(sim):
    app = NvtopyApp.for_backend(sim(gpus=16, seed=1), interval=INTERVAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        gpus = app.query_one("#gpus")
        table = table_of(app)
        assert gpus.plan.kind == "compact"
        assert gpus.size.height == gpus.plan.lines < 12
        gpu_text = "\n".join(widget_lines(gpus))
        assert all(any(f"{i:>2}{sign}" in gpu_text for sign in "✓!✗") for i in range(16)), "every GPU, its verdict"
        assert table.size.height >= 5, "the process table keeps room"
        lines = widget_lines(table)
        assert "PID" in lines[0]
        shown = [p for p in table.rows if any(f" {p.pid} " in line for line in lines[1:])]
        assert len(shown) >= 3, "processes are visible"
        await pilot.press("v")  # full: 16 panels do not fit, but the user asked for them
        await pilot.pause()
        assert gpus.plan.kind == "full"


# --------------------------------------------------------------------------- refresh


async def test_p_pauses_and_resumes(sim, clock):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1), interval=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, 2)
        await pilot.press("p")
        assert app.source.paused
        assert "PAUSED" in header_line(app)
        await pilot.pause(0.15)  # a snapshot already being read may still land
        count = app.snapshots_applied
        clock.advance(5)
        await asyncio.sleep(0.4)  # four intervals
        await pilot.pause()
        assert app.snapshots_applied == count, "no refresh while paused"
        assert "PAUSED" in header_line(app)
        await pilot.press("p")
        assert not app.source.paused
        await wait_until(pilot, lambda: app.snapshots_applied >= count + 3, message="refreshing again on its own")
        await pilot.pause()
        assert "PAUSED" not in header_line(app)
        assert "⟳ 0.1s" in header_line(app)


async def test_plus_and_minus_step_the_interval_within_the_limits_of_interval(sim):
    """+ and - reach what --interval takes, 0.1 s to 86400 s (one set of limits: nvtopy.config's), and stop there."""
    app = NvtopyApp.for_backend(sim(gpus=1, seed=1), interval=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        seen = []
        for _ in range(4):
            await pilot.press("plus")
            seen.append(app.source.interval)
        assert seen == [0.5, 0.25, MIN_INTERVAL, MIN_INTERVAL]
        assert "⟳ 0.1s" in header_line(app)
        await pilot.press("equals_sign")
        assert app.source.interval == MIN_INTERVAL
        seen = []
        for _ in range(len(INTERVALS) + 1):
            await pilot.press("minus")
            seen.append(app.source.interval)
        assert seen[:7] == [0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0]
        assert seen == sorted(seen), "- never speeds up"
        assert seen[-2:] == [MAX_INTERVAL, MAX_INTERVAL], "stops at the longest --interval takes"


@pytest.mark.parametrize(("start", "faster", "slower"), [(0.1, 0.1, 0.25), (45.0, 30.0, 60.0)])
async def test_interval_keys_never_go_the_wrong_way_from_outside_the_steps(sim, start, faster, slower):
    """``--interval 0.1``: + (faster) must not slow it to 0.25; ``--interval 45`` (between steps): the steps beside."""
    app = NvtopyApp.for_backend(sim(gpus=1, seed=1), interval=start)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus")
        assert app.source.interval == faster
        app.source.set_interval(start)
        await pilot.press("minus")
        assert app.source.interval == slower


# --------------------------------------------------------------------------- help and palette


def test_every_binding_is_in_the_help_in_its_own_section():
    """The help is made from the bindings: a new binding is in it, under the section its action is mapped to.

    Fails when a binding is added whose action has no section (it would land in "General" by default), when a
    mapped action is no longer bound, or when the help stops listing a binding (a hand-kept table again).
    """
    bound = {b.action.split("(")[0] for b in NvtopyApp.BINDINGS if isinstance(b, Binding)}
    assert bound == set(NvtopyApp.HELP_SECTIONS), "HELP_SECTIONS maps exactly the bound actions"
    assert set(NvtopyApp.HELP_SECTIONS.values()) <= set(NvtopyApp.HELP_ORDER)
    added = Binding("x", "explode", "Explode", tooltip="A binding made up for this test")
    bindings = [*NvtopyApp.BINDINGS, added]
    section_of = {**NvtopyApp.HELP_SECTIONS, "explode": "View"}
    sections = dict(help_sections(bindings, section_of, lambda b: b.key, order=NvtopyApp.HELP_ORDER, extra={}))
    for binding in bindings:
        assert isinstance(binding, Binding)
        section = section_of[binding.action.split("(")[0]]
        row = (help_keys(binding, lambda b: b.key), binding.tooltip or binding.description)
        assert row in sections[section], f"{binding.action} is not in the help's {section}"


def test_the_sort_by_key_names_letters_it_has():
    """``o``'s help names some letters (``o then p PID, g GPU memory, s SM%``): they sort by those columns."""
    (binding,) = [b for b in NvtopyApp.BINDINGS if isinstance(b, Binding) and b.action == "sort_by"]
    named = re.findall(r"(?:then|,) (\w) ([^,(]+?)(?= \(|,|$)", binding.tooltip or "")
    assert len(named) == 3, named
    for letter, words in named:
        assert SORT_LETTERS[letter] == words.lower().replace(" ", "_").rstrip("%"), (letter, words)


async def test_help_lists_every_binding_and_escape_closes_it(sim):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1), interval=INTERVAL)
    async with app.run_test(size=(120, 60)) as pilot:
        await started(pilot, app)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        sections = dict(app.screen.sections)
        listed = [(keys, text) for rows in sections.values() for keys, text in rows]
        keys_column = " ".join(keys for keys, _ in listed).split()
        texts = [text for _, text in listed]
        for binding in app.BINDINGS:
            for name in binding.key.split(","):
                shown = "ctrl+c" if name == "ctrl+c" else app.get_key_display(Binding(name, ""))
                assert shown in keys_column, f"key {name!r} ({binding.action}) missing from the help"
            assert (binding.tooltip or binding.description) in texts, binding.action
        assert set(sections) == {"General", "Processes", "Sorting", "Filtering", "View"}
        visible = screen_text(app)
        for text in ("nvtopy keys", "Send SIGKILL", "Send SIGTERM", "Filtering", "Filter processes by pid", "ctrl+p"):
            assert text in visible, f"{text!r} is on screen"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")  # closes the help, does not quit the app
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        assert app.is_running


async def test_ctrl_p_opens_the_command_palette(sim):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CommandPalette)
        assert table_of(app).has_focus
        # A command found by name runs the action.
        await pilot.press("ctrl+p")
        await pilot.pause()
        await type_text(pilot, "GPU-MEM")
        await wait_until(pilot, lambda: "Sort by GPU-MEM" in screen_text(app), message="the command is offered")
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette), message="palette closes")
        assert_rows_sorted(app, "gpu_memory", True)


# --------------------------------------------------------------------------- tags


async def test_space_tags_and_moves_down_and_shift_u_untags_all(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        first, second = table.rows[0].key, table.rows[1].key
        await pilot.press("space")
        assert app.tags.keys == {first}
        assert table.cursor == 1
        await pilot.press("space")
        assert app.tags.keys == {first, second}
        assert table.cursor == 2
        assert "2 tagged" in header_line(app)
        lines = widget_lines(table)
        assert lines[1].startswith("● ") and lines[2].startswith("● ") and not lines[3].startswith("● ")
        await more_snapshots(pilot, app)
        assert app.tags.keys == {first, second}, "tags survive refreshes"
        await pilot.press("up", "space")  # untag the second one; the cursor moves on to the third
        assert app.tags.keys == {first}
        assert table.cursor == 2
        await pilot.press("space")
        assert app.tags.keys == {first, table.rows[2].key}
        await pilot.press("U")
        assert app.tags.keys == set()
        assert "tagged" not in header_line(app)
        assert not any(line.startswith("● ") for line in widget_lines(table))


# --------------------------------------------------------------------------- faults


async def test_lost_gpu_shows_lost_while_others_keep_updating(sim, clock):
    backend = sim(gpus=4, seed=1)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        gpu_view = app.query_one("#gpus")
        assert "LOST" not in "\n".join(widget_lines(gpu_view))
        backend.set_lost(1)
        app.source.refresh()
        await wait_until(pilot, lambda: app.visible_gpus()[1].lost, message="GPU 1 lost")
        await pilot.pause()
        states = app.visible_gpus()
        assert [g.lost for g in states] == [False, True, False, False]
        assert states[1].sample.power_draw_w is None, "a lost GPU shows no stale values"
        assert "GPU LOST" in "\n".join(widget_lines(gpu_view))
        assert all(p.gpu_index != 1 for p in table_of(app).rows)
        for _ in range(3):
            before = {g.index: g.sample for g in app.visible_gpus()}
            clock.advance(1)
            now = clock.now
            app.source.refresh()
            await wait_until(
                pilot, lambda now=now: app.visible_gpus()[0].sample.timestamp >= now, message="a newer snapshot"
            )
            after = {g.index: g.sample for g in app.visible_gpus()}
            for index in (0, 2, 3):
                assert after[index].power_draw_w != before[index].power_draw_w, f"GPU {index} keeps changing"
            assert after[1].lost
        await pilot.pause()
        assert "GPU LOST" in "\n".join(widget_lines(gpu_view))
        await pilot.press("v", "v")  # compact lines say it too
        await pilot.pause()
        assert gpu_view.plan.kind == "compact"
        assert "LOST" in widget_lines(gpu_view)[0] + widget_lines(gpu_view)[1]
        await pilot.press("v")
        backend.set_lost(1, False)
        app.source.refresh()
        await wait_until(pilot, lambda: not app.visible_gpus()[1].lost, message="GPU 1 back")
        await pilot.pause()
        assert app.visible_gpus()[1].sample.power_draw_w is not None
        assert "LOST" not in "\n".join(widget_lines(gpu_view))
        assert app.is_running


UNTRUSTED = [
    Workload("python [/bold] [red]x", (0.1, 0.2), (0.1, 0.2), (600, 600)),
    Workload("evil \x1b[2J\x1b[31mred", (0.1, 0.2), (0.1, 0.2), (600, 600)),
    Workload("训练 模型 🚀", (0.1, 0.2), (0.1, 0.2), (600, 600)),
]


async def test_untrusted_commands_are_drawn_literally_and_safely(sim):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, workloads=UNTRUSTED), interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        commands = {p.command for p in table_of(app).rows}
        assert commands == {w.command for w in UNTRUSTED}, "all three are listed"
        text = screen_text(app)
        assert "python [/bold] [red]x" in text
        assert "evil \\e[2J\\e[31mred" in text, "the escape sequence is shown as visible text"
        assert "训练 模型 🚀" in text
        svg = app.export_screenshot()
        assert "python&#160;[/bold]&#160;[red]x" in svg
        assert "\x1b" not in svg
        # No raw ESC (or any control character) reaches the terminal from any widget.
        for widget in app.screen.walk_children(with_self=True):
            for strip in widget_strips(widget):
                assert "\x1b" not in strip.text
                assert all(segment.text.isprintable() for segment in strip if not segment.control), widget
        # Wide characters keep the columns aligned: every row line is exactly as wide as the table.
        table = table_of(app)
        for strip in widget_strips(table):
            assert strip.cell_length == table.size.width
        # Filtering on such text and opening the dialogs does not break either.
        await pilot.press("slash")
        await type_text(pilot, "[/bold]")
        assert [p.command for p in table.rows] == ["python [/bold] [red]x"] * len(table.rows)
        await pilot.press("enter")
        await pilot.pause()
        assert "[/bold]" in header_line(app)
        await pilot.press("T")
        await pilot.pause()
        assert "python [/bold] [red]x" in screen_text(app)
        await pilot.press("n")
        await pilot.pause()
        assert app.is_running


# --------------------------------------------------------------------------- quitting


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_quit_keys_exit_promptly_and_stop_the_poller(sim, key):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1), interval=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.source.running
        started_at = time.monotonic()
        await pilot.press(key)
        await pilot.pause()
    assert time.monotonic() - started_at < 1.0
    assert not app.source.running
    assert app.return_code == 0


async def test_a_snapshot_arriving_after_the_widgets_are_gone_is_ignored(sim):
    """run_test's shutdown removes the screens while the poller still posts: a late snapshot must not crash."""
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1), poll=False)
    close_all = app._close_all

    async def close_then_poll() -> None:  # the window of that race, made certain
        await close_all()
        before = app.snapshots_applied
        app.source.poll_once()
        deadline = time.monotonic() + 5.0  # the app's message loop still runs: it handles the snapshot
        while app.snapshots_applied == before and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    app._close_all = close_then_poll
    async with app.run_test(size=SIZE) as pilot:
        app.source.poll_once()
        await started(pilot, app)
        applied = app.snapshots_applied
    assert app.snapshots_applied == applied + 1, "the late snapshot was delivered, and ignored"


# --------------------------------------------------------------------------- the view state


@pytest.mark.parametrize(
    ("key", "changed"),
    [
        ("s", "order"),
        ("S", "order"),
        ("r", "order"),
        ("b", "group_by"),
        ("t", "tree_view"),
        ("v", "layout_mode"),
        ("c", "chart_mode"),
        ("z", "chart_window"),
        ("Z", "chart_window"),
        ("u", "row_filter"),
        ("y", "row_filter"),
        ("f", "row_filter"),
    ],
)
async def test_a_view_key_changes_the_view_state_once_and_redraws_once(sim, key, changed):
    """Every key that changes the view goes through change_view: one new ViewState, one redraw."""
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, processes_per_gpu=3), poll=False)
    async with app.run_test(size=SIZE) as pilot:
        app.source.poll_once()
        await started(pilot, app)
        before = app.view
        redraws: list[ViewState] = []
        redraw = app.refresh_view

        def counted() -> None:
            redraws.append(app.view)
            redraw()

        app.refresh_view = counted  # type: ignore[method-assign]
        await pilot.press(key)
        await pilot.pause()
        assert len(redraws) == 1, f"{key}: {len(redraws)} redraws"
        changes = {f.name for f in fields(ViewState) if getattr(app.view, f.name) != getattr(before, f.name)}
        assert changes == {changed}, (key, changes)


async def test_the_view_is_read_through_the_app_but_changed_only_by_change_view(sim):
    app = NvtopyApp.for_backend(sim(gpus=1), poll=False)
    with pytest.raises(AttributeError):
        app.order = SortOrder("pid")  # type: ignore[misc]
    app.change_view(replace(app.view, order=SortOrder("pid"), group_by="user"))  # before the app runs: recorded
    async with app.run_test(size=SIZE) as pilot:
        app.source.poll_once()
        await started(pilot, app)
        assert (app.order, app.group_by, app.view.tree_view) == (SortOrder("pid"), "user", False)
        assert "grouped by user" in header_line(app)
        await pilot.press("t")  # a tree is never grouped
        await pilot.pause()
        assert (app.tree_view, app.group_by) == (True, None)
        await pilot.press("b")  # nor a grouped table a tree
        await pilot.pause()
        assert (app.tree_view, app.group_by) == (False, "user")


def test_view_state_steps_round_and_keeps_tree_and_groups_apart():
    view = ViewState()
    assert [view := view.next_layout() for _ in MODES][-1].layout_mode == "auto"
    assert [view := view.next_chart_mode() for _ in CHART_MODES][-1].chart_mode == CHART_MODES[0]
    assert ViewState().zoomed(-1).chart_window == WINDOWS[-1] and ViewState().zoomed(1).chart_window == WINDOWS[1]
    assert ViewState(chart_window=123.0).zoomed(1).chart_window == WINDOWS[1], "a window not on the steps: the first"
    assert ViewState(group_by="user").toggled_tree() == ViewState(tree_view=True)
    assert ViewState(tree_view=True).grouped("gpu") == ViewState(group_by="gpu")
    assert ViewState(tree_view=True).grouped(None) == ViewState(tree_view=True)


def test_the_app_assigns_the_view_in_one_place_and_says_why_it_redraws_elsewhere():
    """One home: no view attribute is set on the app; ``self.view`` is assigned in __init__ and change_view only,
    and every other redraw says why on its line (a new snapshot, a resize, a theme, the source's state, tags)."""
    names = {f.name for f in fields(ViewState)}
    assigned_in: list[str] = []
    for module in (app_module, preferences_module, header_module):
        for function in ast.walk(ast.parse(Path(module.__file__).read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                for target in node.targets if isinstance(node, ast.Assign) else []:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                        assert target.attr not in names, f"{function.name} sets {target.attr}: not in the ViewState"
                        if target.attr == "view":
                            assigned_in.append(f"{module.__name__}.{function.name}")
    assert sorted(assigned_in) == ["nvtopy.tui.app.__init__", "nvtopy.tui.app.change_view"]
    source = Path(app_module.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    change_view = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "change_view")
    for number, line in enumerate(lines, start=1):
        if "self.refresh_view()" in line and not change_view.lineno <= number <= (change_view.end_lineno or 0):
            assert "#" in line, f"app.py line {number} redraws without saying why: {line.strip()}"

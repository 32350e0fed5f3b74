"""Owners in the process table and the text view: the OWNER column, the filter, group-by and group signals.

Unit tests run on hand-made processes (owners of each kind, a process on two GPUs,
missing figures) and check every total against sums worked out by hand. Pilot
tests show the same processes through a fixed source (a spy on its signal), and
kill real child processes of this test grouped by GPU on the simulated backend.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import threading
import time

import pytest

from nvtopy.columns import owner_label
from nvtopy.model import (
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HostInfo,
    OwnerKind,
    ProcessOwner,
    Snapshot,
)
from nvtopy.render import cells
from nvtopy.render.processes import (
    GROUP_SM_TITLE,
    MIN_COMMAND_WIDTH,
    ProcessFilter,
    ProcessGroup,
    SortOrder,
    build_groups,
    build_rows,
    visible_columns,
)
from nvtopy.render.text import PROCESS_COLUMNS, process_row, render_snapshot
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.process_screen import ProcessScreen
from nvtopy.tui.process_table import ProcessTable
from nvtopy.tui.screens import ConfirmSignalScreen, HelpScreen

from .. import builders
from ..builders import GIB, MIB, FixedSource, gpu_process, gpu_sample, gpu_state, gpu_static, host_info
from ..tui_helpers import header_line, pids, screen_text, started, table_of, wait_until, widget_lines

ME = "alice"

WEB = ProcessOwner(OwnerKind.DOCKER, id="a" * 64, name="web-1", container="web-1", container_id="a" * 64)
POD = ProcessOwner(OwnerKind.KUBERNETES, id="uid-1", namespace="ml", pod="trainer", container="main")
JOB = ProcessOwner(OwnerKind.SLURM, id="1234", job="1234", step="0", name="bert-large")
HOST = ProcessOwner(OwnerKind.HOST)


def proc(gpu: int, pid: int, user: str | None, owner: ProcessOwner | None, **changes: object) -> GpuProcess:
    """1 GiB at 10 % of SMs, 5 % of a CPU and 100 MiB of RAM, running 100 s."""
    values = {"gpu_memory_bytes": GIB, "sm_percent": 10, "cpu_percent": 5.0, "host_memory_bytes": 100 * MIB}
    return gpu_process(gpu, pid, user=user, owner=owner, **{**values, "running_seconds": 100.0, **changes})


# a: one process on GPUs 0 and 1 (two rows, one process); c: another user's pod; d: a host process; e: all unknown.
A0 = proc(0, 10, ME, WEB, gpu_memory_bytes=1 * GIB, sm_percent=10)
A1 = proc(1, 10, ME, WEB, gpu_memory_bytes=2 * GIB, sm_percent=20)
C = proc(
    0,
    20,
    "bob",
    POD,
    gpu_memory_bytes=4 * GIB,
    sm_percent=30,
    cpu_percent=50.0,
    host_memory_bytes=GIB,
    running_seconds=500.0,
)
D = proc(
    2,
    30,
    ME,
    HOST,
    gpu_memory_bytes=512 * MIB,
    sm_percent=None,
    cpu_percent=1.0,
    host_memory_bytes=10 * MIB,
    running_seconds=50.0,
)
E = proc(
    2,
    40,
    "bob",
    None,
    gpu_memory_bytes=None,
    sm_percent=5,
    cpu_percent=None,
    host_memory_bytes=None,
    running_seconds=None,
)
F = proc(
    3,
    50,
    "carol",
    JOB,
    gpu_memory_bytes=8 * GIB,
    sm_percent=90,
    cpu_percent=99.0,
    host_memory_bytes=3 * GIB,
    running_seconds=7200.0,
)
ALL = (A0, A1, C, D, E, F)


def totals(group: ProcessGroup) -> tuple[object, ...]:
    return (
        group.processes,
        group.gpus,
        group.gpu_memory_bytes,
        group.sm_percent,
        group.cpu_percent,
        group.host_memory_bytes,
        group.running_seconds,
    )


def groups_of(mode: str, order: SortOrder | None = None) -> dict[object, ProcessGroup]:
    order = order or SortOrder()
    return {g.value: g for g in build_groups(build_rows(ALL, order, ProcessFilter(), ME), mode, order)}


# --------------------------------------------------------------------------- the OWNER cell


def test_owner_cell_words():
    assert cells.owner_cell(A0) == ("web-1", cells.PLAIN)
    assert cells.owner_cell(C) == ("ml/trainer", cells.PLAIN)
    assert cells.owner_cell(F) == ("slurm 1234.0", cells.PLAIN)
    assert cells.owner_cell(D) == ("-", cells.DIM), "a plain host process"
    assert cells.owner_cell(E) == ("N/A", cells.DIM), "unknown"


def test_owner_cell_escapes_hostile_names_and_cuts_long_ones():
    hostile = ProcessOwner(OwnerKind.DOCKER, name="[bold]x\x1b]0;pwn\x07[/bold]")
    text, category = cells.owner_cell(proc(0, 1, ME, hostile))
    assert "\x1b" not in text and "\x07" not in text
    assert text == "[bold]x\\e]0;pwn\\x07[/bold]" and category == cells.PLAIN
    long = ProcessOwner(OwnerKind.CGROUP, cgroup="/" + "x" * 300)
    text, _ = cells.owner_cell(proc(0, 1, ME, long))
    assert len(text) == cells.OWNER_MAX and text.endswith("…")


def test_text_view_shows_the_owner_column():
    assert [t for t, _, _ in PROCESS_COLUMNS][:5] == ["GPU", "PID", "Type", "User", "Owner"]
    row = dict(zip((t for t, _, _ in PROCESS_COLUMNS), process_row(C, ME), strict=True))
    assert row["Owner"] == ("ml/trainer", cells.PLAIN)
    state = GpuState(GpuStatic(0, uuid="GPU-0", name="NVIDIA H100"), GpuSample(1.0), processes=(A0, C, D, E))
    out = io.StringIO()
    render_snapshot(Snapshot(1.0, HostInfo("h", "550", "12.4", user=ME), (state,)), out, color=False)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("GPU  ") and "Owner" in line)
    assert header.split()[:5] == ["GPU", "PID", "Type", "User", "Owner"]
    text = out.getvalue()
    assert "web-1" in text and "ml/trainer" in text


def test_command_shrinks_last_at_80_columns_and_owner_widens_at_200():
    # 80 columns (the tag marker and the scrollbar take 3): OWNER gives way before COMMAND gets under 25 cells,
    # USER is as wide as its widest name, and TIME still fits.
    narrow = {c.key: c for c in visible_columns(77, users=5, owners=12)}
    assert list(narrow) == ["gpu", "pid", "user", "gpu_memory", "sm", "cpu", "time", "command"]
    assert narrow["user"].width == 5
    assert 77 - sum(c.width + 1 for c in narrow.values() if c.key != "command") >= MIN_COMMAND_WIDTH
    assert {c.key: c.width for c in visible_columns(100, users=5, owners=12)}["owner"] == 11, "back at 100"
    assert {c.key: c.width for c in visible_columns(197)}["owner"] == 32, "wide, unknown widths: up to 32"
    assert {c.key: c.width for c in visible_columns(197, owners=12)}["owner"] == 12, "no wider than its cells"
    assert {c.key: c.width for c in visible_columns(197, users=2)}["user"] == 4, "never narrower than its title"
    assert "owner" not in {c.key for c in visible_columns(50)}, "below 80 columns OWNER goes before USER"


HASHED = ProcessOwner(
    OwnerKind.CGROUP, cgroup="/process_api/64a1d6e2f0c4b8a9d7e6f5c4b3a29180716253443526170819a0b1c2d3e4f5a6"
)


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        (HASHED.cgroup, "process_api/64a1d6e2…"),
        ("/process_api", "process_api"),
        ("/batch/jobs/nightly-eval", "nightly-eval"),
        ("/system.slice/slurmstepd.scope/system", "slurmstepd.scope/system"),
        ("/init.scope", "init.scope"),
        ("/runner/3f2a9c1e-1b2c-4d5e-8f90-a1b2c3d4e5f6/payload", "3f2a9c1e…/payload"),
        ("/machine.slice/libpod-conmon-" + "ab" * 32 + ".scope", "libpod-conmon-abababab….scope"),
        ("/", "/"),
    ],
)
def test_a_raw_cgroup_owner_is_shown_short(path, shown):
    assert cells.short_cgroup(path) == shown
    owner = ProcessOwner(OwnerKind.CGROUP, cgroup=path)
    assert cells.owner_cell(proc(0, 1, ME, owner)) == (shown, cells.PLAIN)
    assert owner_label(proc(0, 1, ME, owner)) == path, "grouped and sorted by the whole path"


def test_the_process_screen_keeps_the_whole_cgroup_path():
    from nvtopy.tui.process_screen import _owner_words

    assert HASHED.cgroup in _owner_words(HASHED).plain


async def test_the_table_at_80_columns_gives_command_what_user_and_owner_do_not_need(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1), interval=2.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        table = table_of(app)
        placed = {p.column.key: p.width for p in table._placed}
        users = max(len(p.user or "N/A") for p in table.rows)
        assert placed["user"] == max(4, users), "USER as wide as its widest name"
        assert placed["command"] >= MIN_COMMAND_WIDTH
        row = next(line for line in widget_lines(table)[1:] if "train.py" in line)
        assert "python train.py --config" in row, "a job's command reads at 80 columns"


async def test_a_hashed_cgroup_owner_takes_few_columns_at_200():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await show(pilot, app, owners_snapshot((*ALL, proc(3, 60, ME, HASHED))))
        table = table_of(app)
        placed = {p.column.key: p.width for p in table._placed}
        assert placed["owner"] == len("process_api/64a1d6e2…") < 32
        row = next(line for line in widget_lines(table) if " 60 " in line)
        assert "process_api/64a1d6e2…" in row and "/process_api/" not in row


# --------------------------------------------------------------------------- the filter


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("web-1", {10}),
        ("trainer", {20}),  # pod
        ("ML/", {20}),  # namespace, in the label, any case
        ("main", {20}),  # container name
        ("1234", {50}),  # Slurm job
        ("bert", {50}),  # job name
        ("slurm 1234.0", {50}),  # the label as shown
    ],
)
def test_filter_matches_owner_label_and_names(text, wanted):
    rows = build_rows(ALL, SortOrder(), ProcessFilter(text=text), ME)
    assert {p.pid for p in rows} == wanted


# --------------------------------------------------------------------------- group-by


def test_group_by_user_totals():
    groups = groups_of("user")
    assert set(groups) == {"alice", "bob", "carol"}
    # alice: process 10 on GPUs 0 and 1 (CPU and host memory once), process 30 on GPU 2.
    # SM%: the average per GPU of the GPUs with a figure (10 on GPU 0, 20 on GPU 1; none on GPU 2), never a sum.
    assert totals(groups["alice"]) == (2, (0, 1, 2), 3 * GIB + 512 * MIB, 15, 6.0, 110 * MIB, 100.0)
    # bob: the pod on GPU 0, and the process with unknown figures on GPU 2 (None values are left out of sums).
    assert totals(groups["bob"]) == (2, (0, 2), 4 * GIB, 18, 50.0, GIB, 500.0)  # (30 + 5) / 2 GPUs
    assert totals(groups["carol"]) == (1, (3,), 8 * GIB, 90, 99.0, 3 * GIB, 7200.0)


def test_group_by_owner_totals():
    groups = groups_of("owner")
    assert set(groups) == {"web-1", "ml/trainer", "slurm 1234.0", "-", None}
    assert totals(groups["web-1"]) == (1, (0, 1), 3 * GIB, 15, 5.0, 100 * MIB, 100.0)
    assert totals(groups["ml/trainer"]) == (1, (0,), 4 * GIB, 30, 50.0, GIB, 500.0)
    assert totals(groups["-"]) == (1, (2,), 512 * MIB, None, 1.0, 10 * MIB, 50.0)
    assert totals(groups[None]) == (1, (2,), None, 5, None, None, None)


def test_group_by_gpu_totals():
    groups = groups_of("gpu")
    assert set(groups) == {0, 1, 2, 3}
    assert totals(groups[0]) == (2, (0,), 5 * GIB, 40, 55.0, GIB + 100 * MIB, 500.0)
    assert totals(groups[1]) == (1, (1,), 2 * GIB, 20, 5.0, 100 * MIB, 100.0)
    assert totals(groups[2]) == (2, (2,), 512 * MIB, 5, 1.0, 10 * MIB, 50.0)
    assert groups[2].targets() == [D, E]


def test_groups_sort_by_their_totals():
    def order(mode: str, column: str, reverse: bool) -> list[object]:
        sort = SortOrder(column, reverse)
        return [g.value for g in build_groups(build_rows(ALL, sort, ProcessFilter(), ME), mode, sort)]

    # GPU memory: carol 8 GiB, bob 4 GiB, alice 3.5 GiB.
    assert order("user", "gpu_memory", True) == ["carol", "bob", "alice"]
    assert order("user", "gpu_memory", False) == ["alice", "bob", "carol"]
    assert order("user", "time", True) == ["carol", "bob", "alice"]  # the longest runtime
    assert order("user", "sm", False) == ["alice", "bob", "carol"]  # 15, 18, 90 per GPU
    assert order("owner", "owner", False) == ["-", "ml/trainer", "slurm 1234.0", "web-1", None], "unknown last"
    assert order("owner", "gpu_memory", True) == ["slurm 1234.0", "ml/trainer", "web-1", "-", None]
    assert order("gpu", "gpu", False) == [0, 1, 2, 3]
    assert order("gpu", "gpu", True) == [3, 2, 1, 0]
    assert order("gpu", "pid", True)[:2] in ([0, 2], [2, 0]), "PID sorts by the number of processes"


def test_group_cells():
    group = groups_of("owner")["web-1"]
    row = dict(zip(cells.PROCESS_CELL_KEYS, cells.group_cells(group, ME), strict=True))
    assert row["gpu"] == ("0,1", cells.PLAIN)
    assert row["pid"] == ("(1)", cells.PLAIN)
    assert row["user"] == (ME, cells.PLAIN)
    assert row["owner"] == ("web-1", cells.PLAIN)
    assert row["gpu_memory"] == ("3.0GiB", cells.PLAIN)
    assert row["command"][0] == "▸ web-1: 1 process on 2 GPUs"
    by_gpu = dict(zip(cells.PROCESS_CELL_KEYS, cells.group_cells(groups_of("gpu")[0], ME), strict=True))
    assert by_gpu["command"][0] == "▸ GPU 0: 2 processes"
    users = dict(zip(cells.PROCESS_CELL_KEYS, cells.group_cells(groups_of("gpu")[0], ME), strict=True))
    assert users["user"] == ("2 users", cells.DIM) and users["owner"] == ("2 owners", cells.DIM)
    hostile = build_groups([proc(0, 1, "ev\x1b[8mil", None)], "user", SortOrder())[0]
    assert "\x1b" not in "".join(text for text, _ in cells.group_cells(hostile, ME))


# --------------------------------------------------------------------------- the TUI


def owners_snapshot(processes: tuple[GpuProcess, ...] = ALL) -> Snapshot:
    gpus = (
        gpu_state(
            i,
            *(p for p in processes if p.gpu_index == i),
            static=gpu_static(i, bare=True, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB),
            sample=gpu_sample(1.0, bare=True),
        )
        for i in range(4)
    )
    return builders.snapshot_of(*gpus, host=host_info(driver_version="550", user=ME))


async def show(pilot, app, snapshot: Snapshot | None = None) -> None:
    target = app.snapshots_applied + 1
    app.source._publish(snapshot or owners_snapshot())
    await wait_until(pilot, lambda: app.snapshots_applied >= target, message="the snapshot")
    await pilot.pause()


async def group_by(pilot, app, mode: str | None) -> None:
    for _ in range(4):
        if app.group_by == mode:
            return
        await pilot.press("b")
        await pilot.pause()
    raise AssertionError(f"b never reached {mode}")


async def test_owner_column_on_screen_and_escaped():
    hostile = ProcessOwner(OwnerKind.DOCKER, name="[red]evil\x1b[2J")
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await show(pilot, app, owners_snapshot((*ALL, proc(3, 60, ME, hostile))))
        lines = widget_lines(table_of(app))
        assert "OWNER" in lines[0]
        row = next(line for line in lines if " 60 " in line)
        assert "[red]evil\\e[2J" in row
        assert "ml/trainer" in screen_text(app)


async def test_filter_by_owner_in_the_tui():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await pilot.press("slash", *"trainer", "enter")
        await pilot.pause()
        assert pids(app) == {20}


@pytest.mark.parametrize(
    ("mode", "values"),
    [
        ("user", {"alice", "bob", "carol"}),
        ("owner", {"web-1", "ml/trainer", "slurm 1234.0", "-", None}),
        ("gpu", {0, 1, 2, 3}),
    ],
)
async def test_b_cycles_group_modes_and_the_header_says_so(mode, values):
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, mode)
        rows = table_of(app).rows
        assert all(isinstance(r, ProcessGroup) for r in rows)
        assert {r.value for r in rows} == values
        assert f"grouped by {'GPU' if mode == 'gpu' else mode}" in header_line(app)
        await group_by(pilot, app, None)
        assert {p.pid for p in table_of(app).rows} == {10, 20, 30, 40, 50}
        assert "grouped by" not in header_line(app)


async def test_group_rows_follow_the_sort_and_the_cursor_follows_its_group():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "user")
        app.set_sort(SortOrder("gpu_memory", True))
        await pilot.pause()
        assert [g.value for g in table_of(app).rows] == ["carol", "bob", "alice"]
        await pilot.press("end")
        assert table_of(app).selected.value == "alice"
        # alice's process 10 grows to 20 GiB on GPU 1: her group moves to the top, the cursor with it.
        grown = tuple(dataclass_replace(p, gpu_memory_bytes=20 * GIB) if p is A1 else p for p in ALL)
        await show(pilot, app, owners_snapshot(grown))
        table = table_of(app)
        assert [g.value for g in table.rows] == ["alice", "carol", "bob"]
        assert table.selected.value == "alice"
        assert table.cursor == 0


async def test_the_cursor_goes_with_its_process_between_group_modes():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        table = table_of(app)
        await pilot.press("home", *["down"] * next(i for i, p in enumerate(table.rows) if p.pid == 50))
        assert table.selected.pid == 50
        await group_by(pilot, app, "user")
        assert table.selected.value == "carol"
        await group_by(pilot, app, "owner")
        assert table.selected.value == "slurm 1234.0"
        await group_by(pilot, app, "gpu")
        assert table.selected.value == 3
        await group_by(pilot, app, None)
        assert table.selected.pid == 50


def dataclass_replace(process: GpuProcess, **changes: object) -> GpuProcess:
    import dataclasses

    return dataclasses.replace(process, **changes)


@pytest.mark.parametrize(("key", "signum"), [("T", signal.SIGTERM), ("K", signal.SIGKILL), ("I", signal.SIGINT)])
async def test_signalling_a_group_signals_each_process_once_after_confirmation(key, signum):
    source = FixedSource(signal_refusal=None)
    app = NvtopyApp(source, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "user")
        app.set_sort(SortOrder("gpu_memory", False))  # alice, bob, carol
        await pilot.pause()
        await pilot.press("home")
        assert table_of(app).selected.value == "alice"
        await pilot.press(key)
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmSignalScreen)
        assert sorted((p.pid, p.create_time) for p in dialog.targets) == [(10, 10.0), (30, 30.0)], "process 10 once"
        question = "".join(widget_lines(dialog.query_one("#question")))
        assert f"Send {signal.Signals(signum).name} to 2 processes of user alice?" in question
        targets = "\n".join(widget_lines(dialog.query_one("#targets")))
        assert "python job10.py" in targets and "python job30.py" in targets
        assert source.sent == [], "nothing before the answer"
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.last_outcomes) == 2, message="two outcomes")
        assert sorted(source.sent) == [(10, 10.0, signum), (30, 30.0, signum)], "pid and create time, each once"


async def test_cancelling_a_group_signal_sends_nothing():
    source = FixedSource(signal_refusal=None)
    app = NvtopyApp(source, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "gpu")
        await pilot.press("home", "K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        assert "of GPU 0?" in "".join(widget_lines(app.screen.query_one("#question")))
        await pilot.press("n")
        await pilot.pause(0.1)
        assert source.sent == []


async def test_readonly_refuses_a_group():
    source = FixedSource(signal_refusal=None)
    app = NvtopyApp(source, poll=False, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "user")
        await pilot.press("home", "K")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        await pilot.pause(0.1)
        assert source.sent == []


async def test_a_group_with_a_foreign_pid_is_refused():
    foreign = proc(0, 70, None, None, foreign=True, command=None)
    source = FixedSource(signal_refusal=None)
    app = NvtopyApp(source, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, owners_snapshot((A0, foreign)))
        await group_by(pilot, app, "gpu")
        assert [g.value for g in table_of(app).rows] == [0]
        await pilot.press("home", "T")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        await pilot.pause(0.1)
        assert source.sent == []


async def test_space_tags_a_whole_group():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "gpu")
        await pilot.press("home", "space")
        assert app.tags.keys == {A0.key, C.key}
        await pilot.press("home", "space")
        assert app.tags.keys == set()


async def test_help_and_palette_name_the_group_key():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        rows = [row for _, section in app.help_sections() for row in section]
        assert ("b", next(d for k, d in rows if k == "b")) in rows
        assert "Group by: none, user, owner, GPU" in next(d for k, d in rows if k == "b")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Group by user", "Group by owner", "Group by GPU", "Group by nothing"} <= set(titles)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "Group by: none, user, owner, GPU" in screen_text(app)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
async def test_layouts_with_owners_and_groups(size):
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=size) as pilot:
        await show(pilot, app)
        header = widget_lines(table_of(app))[0]
        titles = header.split()
        assert "USER" in titles and "COMMAND" in titles
        if size[0] == 80:  # OWNER gives way to COMMAND (grouping by owner, below, names them)
            assert "TYPE" not in titles and "HOST-MEM" not in titles and "OWNER" not in titles
        else:
            assert {"OWNER", "TYPE", "HOST-MEM", "TIME", "CPU%", "SM%"} <= set(titles)
            text = screen_text(app)
            assert "ml/trainer" in text and "web-1" in text
        await group_by(pilot, app, "owner")
        text = screen_text(app)
        assert "grouped by owner" in text
        assert "▸ ml/trainer" in text
        lines = widget_lines(table_of(app))
        assert all(len(line) <= size[0] for line in lines)


# --------------------------------------------------------------------------- real processes


@pytest.fixture
def spawn():
    children: list[subprocess.Popen] = []

    def make() -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        children.append(child)
        threading.Thread(target=child.wait, daemon=True).start()
        return child

    yield make
    for child in children:
        if child.returncode is None:
            child.kill()
        child.wait(timeout=10)


async def test_sigterm_to_a_gpu_group_kills_its_real_processes(sim, spawn):
    children = [spawn() for _ in range(3)]
    backend = sim(gpus=3, real_pids=[c.pid for c in children], processes_per_gpu=0, clock=time.time)
    app = NvtopyApp.for_backend(backend, interval=2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        assert pids(app) == {c.pid for c in children}
        by_gpu = {p.pid: p.gpu_index for p in table_of(app).rows}
        await group_by(pilot, app, "gpu")
        table = table_of(app)
        group = table.selected
        assert isinstance(group, ProcessGroup)
        doomed = {p.pid for p in group.members}
        assert doomed == {pid for pid, gpu in by_gpu.items() if gpu == group.value}
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.last_outcomes) == len(doomed), message="outcomes")
        assert all(o.ok for o in app.last_outcomes), [o.message for o in app.last_outcomes]
        for child in children:
            if child.pid in doomed:
                await wait_until(pilot, lambda c=child: c.poll() is not None, timeout=5, message="exits")
                assert child.returncode == -signal.SIGTERM
            else:
                assert child.poll() is None, "other GPUs' processes are spared"


async def test_a_slurm_job_id_exported_from_a_login_session_joins_no_job_group(sim, spawn, tmp_path):
    """Real processes, owners read from fixture cgroup and environ files: a job's task, and a session's
    process whose environment claims the same job. ``b`` by owner, ``K`` on the job: only the job's task.
    """
    from nvtopy.backends.host.owners import OwnerResolver

    task, intruder = spawn(), spawn()
    env = b"SLURM_JOB_ID=1392969\0SLURM_JOB_NAME=llama-finetune\0SLURM_STEP_ID=0\0"
    for child, cgroup in (
        (task, "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n"),
        (intruder, "0::/user.slice/user-1000.slice/session-3.scope\n"),
    ):
        base = tmp_path / str(child.pid)
        base.mkdir()
        (base / "cgroup").write_text(cgroup)
        (base / "environ").write_bytes(env)
    backend = sim(gpus=1, real_pids=[task.pid, intruder.pid], processes_per_gpu=0, clock=time.time)
    backend._inspector.resolver = OwnerResolver(proc_root=str(tmp_path))
    app = NvtopyApp.for_backend(backend, interval=2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        owners = {p.pid: p.owner for p in table_of(app).rows}
        assert owners[task.pid] is not None and owners[task.pid].job == "1392969"
        assert owners[intruder.pid] is not None and owners[intruder.pid].kind is OwnerKind.USER_SESSION
        for _ in range(4):
            if app.group_by == "owner":
                break
            await pilot.press("b")
        groups = {g.value: g for g in table_of(app).rows}
        job = groups["slurm 1392969.0"]
        assert [p.pid for p in job.members] == [task.pid]
        await pilot.press("home", *["down"] * table_of(app).rows.index(job), "K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        assert [p.pid for p in app.screen.targets] == [task.pid], "the session's process is no target"
        await pilot.press("n")
    assert task.poll() is None and intruder.poll() is None


# --------------------------------------------------------------------------- folding groups


def group_line(app, value: str) -> str:
    return next(line for line in widget_lines(table_of(app)) if f" {value}: " in line)


async def test_enter_right_and_left_open_and_fold_a_group_which_stays_open_across_refreshes_and_sorts():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "user")
        await pilot.press("home")
        table = table_of(app)
        assert [r.value for r in table.rows] == ["alice", "bob", "carol"] and table.cursor == 0
        assert "▸ alice: 2 processes on 3 GPUs" in group_line(app, "alice")
        await pilot.press("enter")
        await pilot.pause()
        assert [getattr(r, "value", getattr(r, "pid", None)) for r in table.rows] == [
            "alice",
            10,
            10,
            30,
            "bob",
            "carol",
        ]
        assert "▾ alice: 2 processes on 3 GPUs" in group_line(app, "alice")
        lines = widget_lines(table)
        assert "├ python job10.py" in lines[2] and "└ python job30.py" in lines[4]
        await show(pilot, app)  # a refresh
        assert len(table.rows) == 6 and table.selected.value == "alice"
        app.set_sort(SortOrder("gpu_memory", True))  # a new sort: alice last, still open
        await pilot.pause()
        assert [getattr(r, "value", None) for r in table.rows] == ["carol", "bob", "alice", None, None, None]
        assert table.selected.value == "alice", "the cursor stayed on the group"
        await pilot.press("down", "left")  # on one of its processes: folds the group, the cursor goes to it
        await pilot.pause()
        assert [r.value for r in table.rows] == ["carol", "bob", "alice"] and table.selected.value == "alice"
        await pilot.press("right", "right")  # opens; once open, stays open
        await pilot.pause()
        assert len(table.rows) == 6 and table.cursor == 2
        await pilot.press("left")
        await pilot.pause()
        assert len(table.rows) == 3
        await pilot.press("enter", "enter")
        await pilot.pause()
        assert len(table.rows) == 3, "Enter toggles"


async def test_enter_on_a_process_of_an_open_group_opens_its_screen():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "user")
        await pilot.press("home", "enter", "down")
        await pilot.pause()
        assert table_of(app).selected.pid == 10
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ProcessScreen), message="the process screen")


async def test_signals_go_to_an_open_groups_process_or_to_the_whole_group_once():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app)
        await group_by(pilot, app, "user")
        await pilot.press("home", "enter")  # alice open: her process 10 is on two rows
        await pilot.pause()
        assert sorted(p.pid for p in app.signal_targets()) == [10, 30], "the group: each process once"
        await pilot.press("down", "down", "down")
        assert [p.pid for p in app.signal_targets()] == [30], "one of its processes: that process"


async def test_group_sm_is_an_average_per_gpu_and_the_header_and_help_say_so():
    app = NvtopyApp(FixedSource(signal_refusal=None), poll=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await show(pilot, app)
        header = widget_lines(table_of(app))[0]
        assert " SM% " in header and GROUP_SM_TITLE not in header
        await group_by(pilot, app, "user")
        assert GROUP_SM_TITLE in widget_lines(table_of(app))[0]
        sm = next(p for p in table_of(app)._placed if p.column.key == "sm")
        assert group_line(app, "alice")[sm.x : sm.x + sm.width].strip() == "15", "(10 + 20) / 2 GPUs with a figure"
        helped = {keys: words for _, rows in app.help_sections() for keys, words in rows}
        assert helped.get("⏎ → ←") == ProcessTable.KEYS_HELP, "Enter, → and ← on a group are in the help"

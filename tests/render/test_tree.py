"""The tree view: processes under their parents (``build_tree``, pure) and its key in the monitor (``w``)."""

from __future__ import annotations

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import GpuProcess, ProcessRelative
from nvtopy.render.tree import AncestorRow, TreeEntry, ancestor_cells, build_tree
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.process_screen import ProcessScreen

from ..builders import gpu_process
from ..tui_helpers import header_line, started, table_of, widget_lines

SIZE = (120, 40)


def row(pid: int, *parents: tuple[int, str], gpu: int = 0, **fields: object) -> GpuProcess:
    """A GPU process whose ancestors are ``parents`` (pid, name), nearest first."""
    chain = tuple(ProcessRelative(p, name, "alice") for p, name in parents)
    ppid = chain[0].pid if chain else fields.pop("ppid", None)
    values = {"gpu_uuid": None, "gpu_memory_bytes": 2**30, "command": f"proc{pid}", "create_time": 100.0}
    return gpu_process(gpu, pid, ppid=ppid, parents=chain, **{**values, **fields})


def drawn(entries: list[TreeEntry]) -> list[str]:
    """Each line as the table's COMMAND column starts: glyphs, then the process (or its ancestor's name)."""
    out = []
    for entry in entries:
        what = entry.row.name if isinstance(entry.row, AncestorRow) else f"{entry.row.command}@{entry.row.gpu_index}"
        out.append(entry.prefix + str(what))
    return out


# --------------------------------------------------------------------------- build_tree


def test_ranks_gather_under_their_launcher_and_its_ancestors():
    launcher, shell = (900, "torchrun"), (800, "bash")
    rows = [row(901, launcher, shell, gpu=0), row(902, launcher, shell, gpu=1), row(500, (400, "sshd"))]
    assert drawn(build_tree(rows)) == [
        "bash",
        "└ torchrun",
        "  ├ proc901@0",
        "  └ proc902@1",
        "sshd",
        "└ proc500@0",
    ]
    kinds = [type(e.row).__name__ for e in build_tree(rows)]
    assert kinds == ["AncestorRow", "AncestorRow", "GpuProcess", "GpuProcess", "AncestorRow", "GpuProcess"]


def test_a_gpu_process_hangs_under_its_gpu_parent_through_a_shell():
    rows = [
        row(20, (15, "sh"), (10, "vllm"), (5, "bash"), gpu=1),
        row(10, (5, "bash"), gpu=0),
        row(30, (10, "vllm"), (5, "bash"), gpu=2),
    ]
    assert drawn(build_tree(rows)) == [
        "bash",
        "└ proc10@0",
        "  ├ sh",
        "  │ └ proc20@1",
        "  └ proc30@2",
    ]
    assert drawn(build_tree(rows, ancestors=False)) == ["proc10@0", "├ proc20@1", "└ proc30@2"]


def test_siblings_keep_the_tables_order_and_an_ancestor_stands_where_its_first_descendant_would():
    rows = [row(3, (1000, "a")), row(1, (2000, "b")), row(2, (1000, "a"))]  # sorted by, say, GPU memory
    assert drawn(build_tree(rows)) == ["a", "├ proc3@0", "└ proc2@0", "b", "└ proc1@0"]


def test_a_process_on_several_gpus_is_a_row_per_gpu_and_its_children_hang_under_the_last():
    rows = [row(10, gpu=0), row(10, gpu=1), row(11, (10, "python"), gpu=2)]
    assert drawn(build_tree(rows)) == ["proc10@0", "proc10@1", "└ proc11@2"]
    nested = [row(10, (5, "sh"), gpu=0), row(10, (5, "sh"), gpu=1), row(11, (10, "python"), (5, "sh"), gpu=2)]
    assert drawn(build_tree(nested)) == ["sh", "├ proc10@0", "└ proc10@1", "  └ proc11@2"]


def test_rows_without_parents_stay_as_they_were():
    """A recording, remote hosts, another PID namespace: no parents, so the tree is the list."""
    rows = [row(3), row(1), row(2, foreign=True)]
    assert [e.row for e in build_tree(rows)] == rows and all(e.prefix == "" and e.depth == 0 for e in build_tree(rows))


def test_a_bare_ppid_links_gpu_processes():
    rows = [row(2, ppid=1), row(7, ppid=2)]
    assert drawn(build_tree(rows)) == ["proc2@0", "└ proc7@0"]


def test_reused_pids_making_a_loop_are_cut():
    rows = [row(1, (2, "x")), row(2, (1, "y"))]  # each the other's parent: impossible, unless pids were reused
    entries = build_tree(rows)
    assert sorted(e.row.pid for e in entries) == [1, 2] and entries[0].depth == 0


def test_ancestor_cells_are_dim_and_blank_where_nothing_was_read():
    cells = dict(
        zip(
            ("gpu", "pid", "user", "owner", "type", "gpu_memory", "sm", "cpu", "host_memory", "time", "command"),
            ancestor_cells(AncestorRow(900, "torch\x1b[2Jrun", "bob"), "alice"),
            strict=True,
        )
    )
    assert cells["pid"] == ("900", "dim") and cells["user"] == ("bob", "dim")
    assert cells["command"] == ("torch\\e[2Jrun", "dim"), "outside text made safe"
    assert cells["gpu_memory"] == ("", "") and cells["gpu"] == ("", "")
    assert ancestor_cells(AncestorRow(1, None, "alice"), "alice")[2] == ("alice", "")


# --------------------------------------------------------------------------- the monitor


def stuck_sim(sim):
    return sim(gpus=4, seed=4, faults=parse_fault_specs(["stuck@1", "stuck@2"]))


async def test_w_toggles_the_tree_and_the_cursor_stays_on_its_process(sim):
    app = NvtopyApp.for_backend(stuck_sim(sim), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = table_of(app)
        flat = list(table.rows)
        assert not any(isinstance(r, AncestorRow) for r in flat)
        await pilot.press("end")
        chosen = table.selected
        await pilot.press("w")
        await pilot.pause()
        assert app.tree_view and "│ tree " in header_line(app)
        assert table.selected.key == chosen.key, "the cursor follows its process into the tree"
        assert {r.key for r in table.rows if isinstance(r, GpuProcess)} == {r.key for r in flat}
        launcher = next(i for i, r in enumerate(table.rows) if isinstance(r, AncestorRow) and r.name == "torchrun")
        lines = widget_lines(table)
        assert "└ torchrun" in lines[launcher + 1]
        assert "├ /opt/conda/bin/python" in lines[launcher + 2] and "└ /opt/conda/bin/python" in lines[launcher + 3]
        await pilot.press("w")
        await pilot.pause()
        assert not app.tree_view and "tree" not in header_line(app)
        assert list(table.rows) == flat and table.selected.key == chosen.key


async def test_grouping_leaves_the_tree_and_the_tree_leaves_grouping(sim):
    app = NvtopyApp.for_backend(stuck_sim(sim), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("w", "b")
        await pilot.pause()
        assert app.group_by == "user" and not app.tree_view
        await pilot.press("w")
        await pilot.pause()
        assert app.tree_view and app.group_by is None


async def test_an_ancestor_row_is_no_target(sim):
    backend = stuck_sim(sim)
    sent: list[int] = []
    backend.send_signal = lambda pid, ct, signum: sent.append(pid)
    app = NvtopyApp.for_backend(backend, interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("w", "home")
        await pilot.pause()
        assert isinstance(table_of(app).selected, AncestorRow)
        await pilot.press("space", "up", "K")
        await pilot.pause()
        assert not app.tags.keys, "never tagged"
        assert any("no process selected" in str(n.message) for n in app._notifications)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessScreen)
        assert any("uses no GPU" in str(n.message) for n in app._notifications)
        assert sent == []


async def test_enter_in_the_tree_opens_a_process(sim):
    app = NvtopyApp.for_backend(stuck_sim(sim), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("w", "home", "down")
        await pilot.pause()
        ancestor, process = table_of(app).rows[:2]
        assert isinstance(ancestor, AncestorRow) and process.ppid == ancestor.pid
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessScreen) and app.screen.process.pid == process.pid
        parents = next(line for line in app.screen.plain_text().splitlines() if line.startswith("Parents"))
        assert f"{ancestor.name} ({ancestor.pid}" in parents


async def test_the_help_and_the_palette_know_the_keys(sim):
    app = NvtopyApp.for_backend(sim(gpus=1), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        sections = {key: words for _, rows in app.help_sections() for key, words in rows}
        assert "Tree view" in sections["t w"] and "process screen" in sections["⏎"]

"""The column chooser (``C``, F2): hide, reorder, apply, cancel; the table follows and the choice is remembered.

Each test runs with its own empty XDG config directory (conftest), which is
where the chooser writes ``columns``.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from textual.widgets import SelectionList

from nvtopy.columns import COLUMN_IDS, TABLE_COLUMNS
from nvtopy.config import Config, load_config
from nvtopy.model import GpuProcess, ProcessType
from nvtopy.render.cells import PROCESS_CELL_KEYS, process_cells
from nvtopy.render.processes import COLUMNS, FLAGS_COLUMN, HOST_COLUMN, MIG_COLUMN, visible_columns
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.columns_screen import ColumnsScreen
from nvtopy.tui.preferences import configure
from nvtopy.tui.screens import HelpScreen

from ..package_source import PACKAGE, modules, nodes, reads_the_package
from ..tui_helpers import started, widget_lines

SIZE = (160, 40)
INTERVAL = 2.0


def config_file() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "nvtopy" / "config.toml"


def header(app) -> str:
    return widget_lines(app.query_one("#processes"))[0]


def titles(app) -> list[str]:
    return [word.rstrip("▲▼") for word in header(app).split()]


def chooser(app) -> SelectionList:
    assert isinstance(app.screen, ColumnsScreen)
    return app.screen.query_one(SelectionList)


async def open_chooser(pilot, app) -> ColumnsScreen:
    await pilot.press("C")
    await pilot.pause()
    assert isinstance(app.screen, ColumnsScreen)
    return app.screen


async def highlight(pilot, app, key: str) -> None:
    """Move the chooser's highlight to column ``key`` with the arrow keys."""
    screen = app.screen
    target = screen.order.index(key)
    await pilot.press("home", *["down"] * target)
    await pilot.pause()
    assert chooser(app).highlighted == target


def app_of(sim) -> NvtopyApp:
    return NvtopyApp.for_backend(sim(gpus=2, seed=1, processes_per_gpu=3), interval=INTERVAL)


async def test_c_lists_every_column_shown_first_and_ticked(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        screen = await open_chooser(pilot, app)
        assert screen.order == list(COLUMN_IDS)
        assert chooser(app).selected == list(COLUMN_IDS)
        assert chooser(app).has_focus


async def test_hide_and_reorder_then_apply_changes_the_table_and_is_remembered(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot, app)
        assert titles(app) == [
            "GPU",
            "PID",
            "USER",
            "OWNER",
            "TYPE",
            "GPU-MEM",
            "SM%",
            "CPU%",
            "HOST-MEM",
            "TIME",
            "COMMAND",
        ]
        await open_chooser(pilot, app)
        await highlight(pilot, app, "owner")
        await pilot.press("space")  # hide OWNER
        await highlight(pilot, app, "gpu_memory")
        await pilot.press(*["shift+up"] * 7)  # to the top
        await highlight(pilot, app, "pid")
        await pilot.press("right_square_bracket")  # PID one further down (the [ ] keys)
        await pilot.pause()
        screen = app.screen
        assert screen.order[:5] == ["gpu_memory", "gpu", "host", "mig", "user"]
        assert "owner" not in chooser(app).selected
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ColumnsScreen)
        assert titles(app) == ["GPU-MEM", "GPU", "USER", "PID", "TYPE", "SM%", "CPU%", "HOST-MEM", "TIME", "COMMAND"]
        chosen = (
            "gpu_memory",
            "gpu",
            "host",
            "mig",
            "user",
            "pid",
            "type",
            "sm",
            "cpu",
            "host_memory",
            "time",
            "flags",
            "command",
        )
        assert app.columns == chosen
        # Remembered: the config file in the XDG directory now says so, and nothing else.
        assert load_config(config_file()) == (Config(columns=chosen), [])
        assert any("columns remembered in" in n.message for n in app._notifications)
        # Reopened, the chooser lists the shown columns first, in their order, then the hidden one.
        await open_chooser(pilot, app)
        assert app.screen.order == [*chosen, "owner"]
        assert chooser(app).selected == list(chosen)


async def test_cancel_changes_nothing(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        before = header(app)
        await open_chooser(pilot, app)
        await highlight(pilot, app, "user")
        await pilot.press("space", "shift+up")
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ColumnsScreen)
        assert header(app) == before
        assert app.columns is None
        assert not config_file().exists()


async def test_defaults_key_and_an_empty_choice(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot, app)
        await open_chooser(pilot, app)
        chooser(app).deselect_all()
        await pilot.press("enter")  # nothing ticked: the chooser stays open and says why
        await pilot.pause()
        assert isinstance(app.screen, ColumnsScreen)
        assert any("at least one column" in n.message for n in app._notifications)
        await highlight(pilot, app, "time")
        await pilot.press("left_square_bracket")  # TIME one up (the [ ] keys)
        await pilot.pause()
        assert app.screen.order.index("time") == COLUMN_IDS.index("time") - 1
        await pilot.press("d")  # back to the defaults: every column, in its place
        await pilot.pause()
        assert app.screen.order == list(COLUMN_IDS)
        assert chooser(app).selected == list(COLUMN_IDS)


async def test_the_buttons_apply_and_cancel(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await open_chooser(pilot, app)
        await highlight(pilot, app, "type")
        await pilot.press("space")
        await pilot.click("#apply")
        await pilot.pause()
        assert "TYPE" not in titles(app)
        await open_chooser(pilot, app)
        await pilot.click("#cancel")
        await pilot.pause()
        assert not isinstance(app.screen, ColumnsScreen)
        assert "TYPE" not in titles(app)


async def test_a_config_file_that_cannot_be_written_still_applies_and_says_so(sim, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    app = app_of(sim)
    app.config_path = blocker / "config.toml"
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot, app)
        await open_chooser(pilot, app)
        await highlight(pilot, app, "user")
        await pilot.press("space", "enter")
        await pilot.pause()
        assert "USER" not in titles(app)
        warnings = [n.message for n in app._notifications if n.severity == "warning"]
        said = f"{blocker / 'config.toml'}: cannot read it (Not a directory)"
        assert warnings == [f"columns applied, not remembered: {said}"]


async def test_columns_from_the_config_file_at_start(sim):
    app = app_of(sim)
    configure(app, Config(columns=("command", "pid", "gpu_memory"), sort="gpu_memory"))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert titles(app) == ["COMMAND", "PID", "GPU-MEM"]
        line = widget_lines(app.query_one("#processes"))[1]
        process = app.query_one("#processes").rows[0]
        # COMMAND first takes the width the others leave: PID and GPU-MEM still end the line.
        assert line.split()[-2] == str(process.pid)
        assert line.index(f" {process.pid} ") > 100


async def test_help_and_palette_name_the_chooser(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        view = dict(app.screen.sections)["View"]
        assert ("C f2", "Choose, hide and reorder the process table's columns") in view
        commands = [c.title for c in app.get_system_commands(app.screen)]
        assert "Choose columns" in commands


async def test_defaults_remove_the_columns_entry_from_the_config_file(sim):
    """d then enter: the file keeps its other settings and loses ``columns`` (not the whole list written out)."""
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('theme = "nord"\ncolumns = ["pid", "command"]\nsort = "pid"\n', encoding="utf-8")
    app = app_of(sim)
    configure(app, load_config(path)[0])
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert titles(app)[:2] == ["PID", "COMMAND"]
        await open_chooser(pilot, app)
        await pilot.press("d", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, ColumnsScreen)
        assert app.columns is None, "the defaults, as without a config file"
        assert "GPU" in titles(app)
    text = path.read_text(encoding="utf-8")
    assert "columns" not in text
    assert 'theme = "nord"' in text and 'sort = "pid"' in text
    assert load_config(path)[0].columns == COLUMN_IDS


async def test_ticked_and_unticked_rows_read_differently_without_colour(sim):
    """[x] on a shown column, [ ] on a hidden one: in the text, not only in the colour."""
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await open_chooser(pilot, app)
        await highlight(pilot, app, "user")
        await pilot.press("space")  # hide USER
        await pilot.pause()
        lines = [line for line in widget_lines(chooser(app)) if line.strip()]
        assert any("[ ] USER " in line for line in lines), lines
        assert any("[x] PID " in line for line in lines), lines
        assert sum("[ ] " in line for line in lines) == 1


def test_visible_columns_follow_the_choice():
    keys = [c.key for c in visible_columns(200, chosen=("command", "mig", "pid", "flags"))]
    assert keys == ["command", "pid"], "MIG and FLAGS only while there is something to show"
    keys = [c.key for c in visible_columns(200, mig=True, flags=True, chosen=("command", "mig", "pid", "flags"))]
    assert keys == ["command", "mig", "pid", "flags"]
    # Narrow: the least important go first, in the chosen order otherwise.
    keys = [c.key for c in visible_columns(55, chosen=("time", "type", "pid", "user", "command"))]
    assert keys == ["time", "pid", "user", "command"]
    # Without COMMAND nothing needs its 25 cells: more columns fit.
    keys = [c.key for c in visible_columns(50, chosen=("pid", "user", "owner", "type", "gpu_memory"))]
    assert keys == ["pid", "user", "owner", "type", "gpu_memory"]
    assert visible_columns(120) == visible_columns(120, chosen=COLUMN_IDS)
    assert visible_columns(120, mig=True, flags=True) == visible_columns(120, mig=True, flags=True, chosen=COLUMN_IDS)


@reads_the_package
def test_the_columns_have_one_list_and_everything_derives_from_it():
    """nvtopy.columns.TABLE_COLUMNS is the one list: the config's ids, the table's columns, the cells' order and
    the chooser's rows are read from it, and no module restates the column ids or builds a Column of its own."""
    assert COLUMN_IDS == tuple(c.key for c in TABLE_COLUMNS) == Config().columns
    assert tuple(c for c in TABLE_COLUMNS if c.shown_when is None) == COLUMNS
    assert tuple(c.key for c in COLUMNS) == PROCESS_CELL_KEYS
    assert [c.key for c in (HOST_COLUMN, MIG_COLUMN, FLAGS_COLUMN)] == ["host", "mig", "flags"]
    assert all(c in TABLE_COLUMNS for c in (HOST_COLUMN, MIG_COLUMN, FLAGS_COLUMN))
    restated, built = [], []
    for path in modules():
        name = path.relative_to(PACKAGE).as_posix()
        for node in nodes(path):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if {"gpu_memory", "host_memory", "command"} <= words:
                    restated.append(name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Column":
                built.append(name)
    assert restated == [], "a list of column ids outside nvtopy/columns.py"
    assert set(built) == {"columns.py"}


def test_the_cells_come_in_the_order_of_the_list():
    """process_cells returns its cells by position: each must be the one its key (PROCESS_CELL_KEYS) names."""
    process = GpuProcess(3, None, 4242, ProcessType.COMPUTE, 2**30, user="alice", command="train.py --big")
    cells = dict(zip(PROCESS_CELL_KEYS, process_cells(process, "alice"), strict=True))
    assert cells["gpu"][0] == "3" and cells["pid"][0] == "4242" and cells["type"][0] == "C"
    assert cells["user"][0] == "alice" and cells["command"][0] == "train.py --big"

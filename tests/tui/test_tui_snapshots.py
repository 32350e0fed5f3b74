"""SVG snapshot tests: the layout at fixed terminal sizes on frozen simulated snapshots.

The scenes are tests/scenes.py (the same ones ``make screenshots`` draws). A
layout change fails here; when it is intended, accept it with
``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and look at the new SVGs.
"""

from __future__ import annotations

import pytest

from ..scenes import SCENES, build


@pytest.fixture(autouse=True)
def _in_utc(utc):
    """The header shows the snapshot's time of day: every picture here in UTC (conftest's utc)."""


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@pytest.mark.parametrize(
    "name", ["main", "compact", "kill", "help", "filter", "faults", "workstation", "platforms", "realwork"]
)
def test_scene(snap_compare, name, size):
    app, prepare = build(SCENES[name])
    assert snap_compare(app, terminal_size=size, run_before=prepare)


@pytest.mark.parametrize("size", [(120, 54), (120, 40), (80, 24)], ids=["120x54", "120x40", "80x24"])
def test_mig_scene(snap_compare, size):
    """MIG: full panels with instance lines and real-work lines (120x54), compact lines in two columns (120x40)
    and in one (80x24)."""
    app, prepare = build(SCENES["mig"])
    assert snap_compare(app, terminal_size=size, run_before=prepare)


def test_column_chooser(snap_compare):
    """The column chooser (``o``), OWNER just hidden and GPU-MEM moved up; on an app of its own, so the picture
    changes only with the chooser (the monitor under it has pictures of its own)."""
    from textual.app import App

    from nvtopy.tui.columns_screen import ColumnsScreen

    class Chooser(App[None]):
        def on_mount(self) -> None:
            self.push_screen(ColumnsScreen(None))

    async def edit(pilot) -> None:
        await pilot.pause()
        await pilot.press("down", "down", "down", "down", "down", "space")  # OWNER hidden
        await pilot.press("down", "down", "shift+up", "shift+up")  # GPU-MEM above OWNER and USER
        await pilot.pause()

    assert snap_compare(Chooser(), terminal_size=(80, 24), run_before=edit)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@pytest.mark.parametrize("name", ["tree", "process"])
def test_process_scene(snap_compare, name, size):
    """The tree view (w: the ranks of a torchrun under their launcher, ancestors dimmed) and the process
    screen (Enter: history charts, command line, cwd, parents, CUDA_VISIBLE_DEVICES)."""
    app, prepare = build(SCENES[name])
    assert snap_compare(app, terminal_size=size, run_before=prepare)

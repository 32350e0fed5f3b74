"""Changed lines go to Textual in one refresh call a redraw (nvtopy/tui/redraw.py)."""

from __future__ import annotations

from textual.geometry import Region

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.charts import ChartView
from nvtopy.tui.gpu_view import GpuView
from nvtopy.tui.process_table import ProcessTable
from nvtopy.tui.redraw import changed_lines, refresh_lines


def test_changed_lines_are_the_new_lines_that_differ_or_were_not_there():
    same = ["kept"]
    assert changed_lines(["a", "b", "c"], ["a", "x", "c", "d"]) == [1, 3]
    assert changed_lines(same, same) == []
    assert changed_lines([], ["a"]) == [0]
    assert changed_lines(["a", "b"], ["a"]) == []  # fewer lines: the caller refreshes the whole widget


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Region, ...]] = []

    def refresh(self, *regions: Region) -> None:
        self.calls.append(regions)


def test_refresh_lines_is_one_call_with_a_line_region_each_and_none_without_lines():
    widget = _Recorder()
    refresh_lines(widget, [0, 1, 5], 80)  # type: ignore[arg-type]
    assert widget.calls == [(Region(0, 0, 80, 1), Region(0, 1, 80, 1), Region(0, 5, 80, 1))]
    refresh_lines(widget, [], 80)  # type: ignore[arg-type]
    assert len(widget.calls) == 1


async def test_a_changed_snapshot_refreshes_each_widget_once_with_its_changed_lines(sim, clock, monkeypatch):
    backend = sim(gpus=4, seed=1, processes_per_gpu=4)
    app = NvtopyApp.for_backend(backend, poll=False)
    async with app.run_test(size=(160, 60)) as pilot:
        for _ in range(5):
            clock.advance(1)
            app.source.poll_once(slow=True)
            await pilot.pause()
        assert app.query_one(ChartView).rows, "the charts must be on screen for this test"
        calls: dict[str, list[tuple[Region, ...]]] = {}
        for widget in (app.query_one(GpuView), app.query_one(ProcessTable), app.query_one(ChartView)):
            original = widget.refresh
            name = type(widget).__name__

            def spy(*regions, _name=name, _original=original, **kwargs):
                calls.setdefault(_name, []).append(regions)
                return _original(*regions, **kwargs)

            monkeypatch.setattr(widget, "refresh", spy)
        clock.advance(1)
        app.source.poll_once(slow=True)
        await pilot.pause()
        assert calls, "changed values must be redrawn"
        for name, made in calls.items():
            assert len(made) == 1, f"{name} refreshed {len(made)} times for one snapshot"
            assert made[0] and all(region.height == 1 for region in made[0]), (name, made[0])


async def test_a_row_redrawn_with_only_its_changed_cells_is_the_row_made_whole(sim, clock, monkeypatch):
    """ProcessTable._spliced remakes only the cells that changed (TIME each second): the line must be the very
    segments a whole remake gives, at the table's width, whatever changed (values, sort order, the cursor)."""
    backend = sim(gpus=2, seed=3, processes_per_gpu=6)
    app = NvtopyApp.for_backend(backend, poll=False)
    spliced: list[int] = []
    original = ProcessTable._spliced

    def counting(self, *args, **kwargs):
        made = original(self, *args, **kwargs)
        spliced.append(made is not None)
        return made

    monkeypatch.setattr(ProcessTable, "_spliced", counting)
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.query_one(ProcessTable)
        for step in range(8):
            clock.advance(1)
            app.source.poll_once(slow=True)
            if step == 4:
                await pilot.press("down")  # the cursor moves: two rows change more than their cells
            await pilot.pause()
            width = table._width
            for y in range(1, min(len(table.rows), table._viewport_rows()) + 1):
                drawn = table.render_line(y)
                index = round(table.scroll_offset.y) + y - 1
                whole, _ = table._row_strip(index, width, table._signature(index))
                assert drawn.cell_length == width
                assert list(drawn) == list(whole), (step, y)
    assert any(spliced), "no row was redrawn from its changed cells: the test saw no steady refresh"

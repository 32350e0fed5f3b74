"""The process table's drawable width is kept between lines (ProcessTable._width): it must follow the terminal's
width and the scrollbar, which takes the last column while the rows do not fit."""

from __future__ import annotations

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.process_table import ProcessTable
from tests.tui_helpers import started, wait_until


async def test_rows_are_as_wide_as_the_room_with_and_without_the_scrollbar(sim):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=5, processes_per_gpu=12), poll=False)
    async with app.run_test(size=(150, 70)) as pilot:
        app.source.poll_once(slow=True)
        await started(pilot, app)
        table = app.query_one(ProcessTable)
        seen = []
        for size in [(150, 70), (150, 22), (130, 22), (130, 70), (150, 70)]:
            await pilot.resize_terminal(*size)
            await wait_until(pilot, lambda size=size: app.size == size, message=f"the terminal at {size}")
            app.source.poll_once()
            await pilot.pause()
            room = table.scrollable_content_region.width
            seen.append((table.show_vertical_scrollbar, room))
            for y in range(min(len(table.rows), table.size.height - 1) + 1):
                assert table.render_line(y).cell_length == room, (size, y)
    assert {shown for shown, _ in seen} == {True, False}, f"the scrollbar must come and go: {seen}"
    assert len({room for _, room in seen}) >= 3, seen


async def test_rows_follow_the_scrollbar_at_one_size(sim):
    """The rows stop fitting and fit again with the terminal as it is: the scrollbar alone moves the width."""
    app = NvtopyApp.for_backend(sim(gpus=2, seed=5, processes_per_gpu=12), poll=False)
    async with app.run_test(size=(150, 24)) as pilot:
        app.source.poll_once(slow=True)
        await started(pilot, app)
        table = app.query_one(ProcessTable)
        seen = []
        for text in ["", "no such process", "", "no such process"]:
            app.set_filter(text=text)
            filtered = bool(text)
            await wait_until(pilot, lambda f=filtered: (len(table.rows) == 0) == f, message=f"the filter {text!r}")
            await pilot.pause()
            room = table.scrollable_content_region.width
            seen.append((table.show_vertical_scrollbar, room))
            for y in range(min(max(1, len(table.rows)), table.size.height - 1) + 1):
                assert table.render_line(y).cell_length == room, (text, y)
    assert [shown for shown, _ in seen] == [True, False, True, False], seen

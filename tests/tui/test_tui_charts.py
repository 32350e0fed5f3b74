"""The history charts: where they appear, their keys, when they redraw, what they draw, and their pictures.

Charts come from each GPU's timeline (tests/sources/test_timeline.py); here, the monitor's
side: the rows they take (and leave to the process table), ``z`` / ``Z`` (zoom) and
``c`` (per metric, per GPU, off), no drawing without new data, a replay feeding
them, the braille renderer itself, and SVG snapshots at 200x50 and 120x40.
"""

from __future__ import annotations

import json
import math

import pytest

from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.render.chart import ChartMemo, Trace, braille_chart, nice_ceiling, rate_ceiling, short_rate, time_label
from nvtopy.render.styled import Line
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.sources.replay import ReplayPlayer, load_recording
from nvtopy.sources.timeline import WINDOWS, Timeline
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.charts import CHART_MIN_HEIGHT, TABLE_MIN, ChartView, chart_rows, spare_rows
from nvtopy.tui.messages import SnapshotReady
from nvtopy.tui.screens import HelpScreen

from ..scenes import SCENES, build
from ..tui_helpers import header_line, wait_until, widget_lines

BRAILLE = {chr(c) for c in range(0x2801, 0x2900)}


def drawn(view: ChartView) -> str:
    return "\n".join(widget_lines(view))


async def scene(name: str, size: tuple[int, int]):
    """The app of a frozen scene, brought to its pictured state (the caller runs it)."""
    app, prepare = build(SCENES[name])
    return app, prepare, size


async def poll(pilot, app, count: int = 1) -> None:
    """``count`` more snapshots of a scene's poller, a simulated second apart."""
    poller = app.source
    assert isinstance(poller, Poller)
    clock = poller.backend._clock  # the scene's frozen clock
    for _ in range(count):
        clock.now += 1.0
        poller.poll_once(slow=True)
    await pilot.pause()


# ----------------------------------------------------------------- where they appear


async def test_charts_fill_the_spare_rows_at_200x50_and_stay_away_at_80x24():
    for size, shown in (((200, 50), True), ((120, 40), True), ((80, 24), False)):
        app, prepare = build(SCENES["main"])
        async with app.run_test(size=size) as pilot:
            await prepare(pilot)
            view = app.query_one(ChartView)
            table = app.query_one("#processes")
            if not shown:
                assert view.rows == 0 and not view.display, "80x24 looks as it did without charts"
                continue
            assert view.display and view.rows >= CHART_MIN_HEIGHT and view.size.height == view.rows
            text = drawn(view)
            assert "GPU util" in text and "memory used" in text and "power" in text
            assert set(text) & BRAILLE, "data drawn in braille"
            assert "now" in text and "-1m" in text and "100%" in text, "time axis and value axis"
            rows = len(table.rows) + 1
            assert table.size.height >= min(rows, TABLE_MIN), "the table keeps what its processes need"
            if size == (200, 50):
                assert view.rows >= 15, "most of the spare rows of a 200x50 terminal"
                assert table.size.height >= rows, "every process still shows"
                assert "NVLink RX" in text and "SM active" in text, "room for every metric"


def test_chart_rows_share_the_room_with_the_table():
    assert chart_rows(spare=31, table_rows=13) == 17, "200x50, 4 GPUs, 12 processes: the rest of the rows"
    assert chart_rows(spare=44, table_rows=65) == 14, "8 GPUs x 64 processes: a third of the room"
    assert chart_rows(spare=17, table_rows=13) == 0, "80x24: none"
    assert chart_rows(spare=31, table_rows=14, current=17) == 16, "shrink at once for one more process"
    assert chart_rows(spare=31, table_rows=13, current=16) == 16, "grow back only by GROW_STEP rows or more"
    assert chart_rows(spare=31, table_rows=10, current=16) == 20
    assert spare_rows(50, 16) == 31 and spare_rows(50, 16, filter_shown=True) == 29


# ----------------------------------------------------------------- keys


async def test_z_cycles_the_window_and_Z_goes_back():
    app, prepare = build(SCENES["main"])
    async with app.run_test(size=(200, 50)) as pilot:
        await prepare(pilot)
        view = app.query_one(ChartView)
        assert view.window == 60.0
        seen = []
        for _ in WINDOWS:
            await pilot.press("z")
            await pilot.pause()
            seen.append(view.window)
        assert seen == [600.0, 3600.0, 86400.0, 60.0]
        assert "charts per metric" not in header_line(app), "the default window says nothing"
        await pilot.press("z")
        await pilot.pause()
        assert "charts per metric · 10 min" in header_line(app), "the mode is in the header, not a notification"
        await pilot.press("Z")
        await pilot.pause()
        assert not app._notifications
        await pilot.press("z", "z")  # 1 h
        await pilot.pause()
        assert "-1h" in drawn(view) and "-30m" in drawn(view)
        await pilot.press("Z")
        await pilot.pause()
        assert view.window == 600.0 and "-10m" in drawn(view)


async def test_c_cycles_per_metric_per_gpu_and_off():
    app, prepare = build(SCENES["main"])
    async with app.run_test(size=(200, 50)) as pilot:
        await prepare(pilot)
        view = app.query_one(ChartView)
        table = app.query_one("#processes")
        assert view.mode == "metric" and "GPU util" in drawn(view)
        await pilot.press("c")
        await pilot.pause()
        text = drawn(view)
        assert view.mode == "gpu" and all(f"GPU {i}" in text for i in range(4)) and "util" in text and "pwr" in text
        height_with = table.size.height
        await pilot.press("c")
        await pilot.pause()
        assert view.mode == "off" and not view.display
        assert table.size.height > height_with, "the table takes the rows back"
        await pilot.press("c")
        await pilot.pause()
        assert view.mode == "metric" and view.display
        assert not app._notifications, "a mode is said in the header"


async def test_help_lists_the_chart_keys():
    app, prepare = build(SCENES["main"])
    async with app.run_test(size=(120, 60)) as pilot:
        await prepare(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        view_keys = dict(app.screen.sections)["View"]
        described = {text for _, text in view_keys}
        assert any("longer window" in text for text in described)
        assert any("shorter window" in text for text in described)
        assert any("per metric, per GPU, off" in text for text in described)


# ----------------------------------------------------------------- when they redraw


async def test_no_new_data_no_drawing():
    app, prepare = build(SCENES["main"])
    async with app.run_test(size=(200, 50)) as pilot:
        await prepare(pilot)
        view = app.query_one(ChartView)
        draws = view.draws
        for key in ("s", "r", "down", "S", "space"):  # the table changes, the charts' data and size do not
            await pilot.press(key)
            await pilot.pause()
        for _ in range(5):
            await pilot.pause(0.05)
        app.post_message(SnapshotReady(app.snapshot))  # the same snapshot again
        await pilot.pause()
        assert view.draws == draws, "nothing new: not drawn again"
        await poll(pilot, app)
        assert view.draws == draws + 1, "a new snapshot: drawn once"
        await pilot.press("z")
        await pilot.pause()
        assert view.draws == draws + 2, "another window: drawn once"
        await pilot.resize_terminal(180, 50)
        await wait_until(pilot, lambda: app.size.width == 180)
        await pilot.pause()
        assert view.draws == draws + 3, "another size: drawn once"


async def test_a_chart_whose_dots_did_not_move_keeps_its_lines():
    timeline = Timeline()
    end = 1_794_999_600.0
    for second in range(600):
        timeline.add(end - 599 + second, (50.0, 40.0, 300.0, None, None, None, None, None))
    memo = ChartMemo()

    def draw(at: float) -> list[Line]:
        s = timeline.series("utilization", 3600, at)
        trace = Trace("cyan", s.step, s.buckets, s.lo, s.mean, s.hi, key="util")
        return braille_chart(Line("util"), [trace], 60, 10, window=3600, end=at, top=100, axis=str, memo=memo)

    first = draw(end)
    assert draw(end + 1) is first, "an idle GPU one second later: the same lines, not drawn again"


# ----------------------------------------------------------------- what they draw


def test_a_flat_line_at_half_sits_on_the_middle_label():
    timeline = Timeline()
    end = 1_794_999_600.0
    for second in range(60):
        timeline.add(end - 59 + second, (50.0, None, None, None, None, None, None, None))
    s = timeline.series("utilization", 60, end)
    lines = braille_chart(
        Line("util"),
        [Trace("cyan", s.step, s.buckets, s.lo, s.mean, s.hi)],
        40,
        11,
        window=60,
        end=end,
        top=100,
        axis=lambda v: f"{v:.0f}%",
    )
    assert len(lines) == 11 and all(line.cells == 40 for line in lines)
    plain = [line.plain for line in lines]
    middle = next(i for i, text in enumerate(plain) if text.startswith(" 50%┤"))
    assert set(plain[middle][5:]) <= BRAILLE, "the whole window on the 50 % row"
    assert all(not set(text) & BRAILLE for i, text in enumerate(plain) if i != middle)
    assert plain[-1].startswith("    └-1m") and plain[-1].rstrip().endswith("now")


def test_gaps_stay_empty_short_ones_are_held_and_peaks_show():
    timeline = Timeline()
    end = 1_794_999_600.0
    for second in range(0, 600, 5):  # a sample every 5 s: held across
        if 200 <= second < 400:
            continue  # a gap of 200 s: the GPU was lost
        util = 100.0 if second == 500 else 10.0
        timeline.add(end - 599 + second, (util, None, None, None, None, None, None, None))
    s = timeline.series("utilization", 600, end)
    lines = braille_chart(
        Line("util"),
        [Trace("cyan", s.step, s.buckets, s.lo, s.mean, s.hi)],
        64,
        12,
        window=600,
        end=end,
        top=100,
        axis=lambda v: f"{v:.0f}%",
    )
    plot = [line.plain[5:] for line in lines[1:-1]]
    bottom = plot[-2]  # 10 % is on the row above the 0 % one
    filled = [x for x, char in enumerate(bottom) if char in BRAILLE]
    assert filled and filled[0] < 5, "held across the 5 s between samples"
    missing = [x for x in range(filled[0], filled[-1]) if bottom[x] not in BRAILLE]
    assert 15 <= len(missing) <= 25, "the 200 s gap (about a third of the window) stays empty"
    assert any(char in BRAILLE for char in plot[0]), "the one-sample spike to 100 % shows at the top"


@pytest.mark.parametrize("window", [3600.0, 86400.0])
def test_a_spike_that_is_not_the_last_of_its_bucket_or_column_shows_at_the_long_zooms(window):
    """Issue 23, item 15: a bucket (or a dot column) that kept its last value instead of its highest
    passed every test, which fed the largest value last; the spike would vanish at the 1 h and 24 h
    zooms. Here it comes first in its bucket (10 s at 1 h, a minute at 24 h) and its dot column."""
    width, height, end = 64, 12, 1_794_999_600.0
    dot = window / (2 * (width - len("100%") - 1))  # a dot column's seconds (the value axis takes 5 cells)
    bucket = 10.0 if window == 3600 else 60.0
    column = math.floor((end - window / 2) / dot)  # a column in the middle of the window
    spike = math.ceil(column * dot / bucket) * bucket  # the first sample of the column's first whole bucket
    assert spike + bucket < (column + 1) * dot, "the premise: the spike's bucket is not the column's last"
    timeline = Timeline()
    for when in range(int(end - window) + 5, int(end) + 1, 5):  # a sample every 5 s: the spike is not the last
        timeline.add(float(when), (100.0 if when == spike else 10.0, None, None, None, None, None, None, None))
    s = timeline.series("utilization", window, end)
    assert s.step == bucket
    lines = braille_chart(
        Line("util"),
        [Trace("cyan", s.step, s.buckets, s.lo, s.mean, s.hi)],
        width,
        height,
        window=window,
        end=end,
        top=100,
        axis=lambda v: f"{v:.0f}%",
    )
    plot = [line.plain[5:] for line in lines[1:-1]]
    peaks = [x for x, char in enumerate(plot[0]) if char in BRAILLE]
    assert peaks == [int(column - math.floor(end / dot) + 2 * (width - 5) - 1) // 2], "one peak, the spike's"


def test_memo_draws_what_a_fresh_chart_draws():
    timeline = Timeline()
    end = 1_794_999_600.0
    for second in range(2000):
        value = 50 + 45 * math.sin(second / 37)
        timeline.add(end - 1999 + second, (value, value / 2, None, None, None, None, None, None))
    memo = ChartMemo()
    for window in (600, 3600):
        for at in range(int(end) - 300, int(end) + 1, 7):
            traces = []
            for metric in ("utilization", "memory"):
                s = timeline.series(metric, window, at)
                traces.append(Trace("cyan", s.step, s.buckets, s.lo, s.mean, s.hi, key=metric))
            args = {"window": window, "end": float(at), "top": 100.0, "axis": str}
            kept = braille_chart(Line("t"), traces, 50, 9, memo=memo, **args)
            fresh = braille_chart(Line("t"), traces, 50, 9, **args)
            assert [line.plain for line in kept] == [line.plain for line in fresh], (window, at)


def test_axis_words():
    assert [time_label(s) for s in (0, 15, 60, 90, 600, 3600, 5400, 86400)] == [
        "now",
        "-15s",
        "-1m",
        "-1m30",
        "-10m",
        "-1h",
        "-1h30",
        "-24h",
    ]
    assert [nice_ceiling(v) for v in (0, 0.5, 3, 10, 11, 700, 701)] == [1, 1, 5, 10, 20, 1000, 1000]
    assert [short_rate(rate_ceiling(v)) for v in (0, 500, 1.75e8, 1023 * 2**20, 185 * 2**30)] == [
        "1",
        "500",
        "200M",
        "1G",
        "200G",
    ]


# ----------------------------------------------------------------- replay


@pytest.fixture
def long_recording(tmp_path, sim, clock):
    """Ten minutes of two simulated GPUs, as ``nvtopy record`` writes them."""
    collector = Collector(sim(gpus=2, seed=5))
    lines = []
    for _ in range(600):
        clock.advance(1)
        lines.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_replay_feeds_the_same_charts(long_recording):
    player = ReplayPlayer(load_recording(str(long_recording)), speed=64.0)
    app = NvtopyApp(player)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None)
        player.pause()
        await pilot.pause()
        player.step(599 - player.position)
        await wait_until(pilot, lambda: app.snapshot is player.snapshots[599])
        view = app.query_one(ChartView)
        await pilot.press("z")  # 10 min: the whole recording
        await pilot.pause()
        whole = drawn(view)
        assert view.display and set(whole) & BRAILLE and "-10m" in whole
        player.step(-500)  # back to the 100th snapshot: the charts as they were then
        await wait_until(pilot, lambda: app.snapshot is player.snapshots[99])
        await pilot.pause()
        then = drawn(view)
        assert then != whole
        width = 48  # the first of four charts in 200 columns, 2 between them: its plot from column 5
        util = [line[5:width] for line in then.splitlines()[1:8]]
        assert any(set(row[-8:]) & BRAILLE for row in util), "the first 100 s at the right, ending now"
        assert not any(set(row[:-9]) & BRAILLE for row in util), "nothing before the recording began"


# ----------------------------------------------------------------- pictures


@pytest.mark.parametrize("size", [(200, 50), (120, 40)], ids=["200x50", "120x40"])
@pytest.mark.parametrize("name", ["charts", "charts-gpu"])
def test_charts_scene(snap_compare, utc, name, size):
    app, prepare = build(SCENES[name])
    assert snap_compare(app, terminal_size=size, run_before=prepare)

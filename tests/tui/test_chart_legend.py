"""Charts of many GPUs stay readable (issue 24): one chart per metric overlays at most a few GPUs -- the
highest and the lowest lately -- each in a colour of its own and named in the legend, which says how many
more there are; a legend never loses an entry silently.

Before, with 8+ GPUs every GPU was overlaid, the legend was cut after the 4th GPU
("4:8…") and the colours repeated at 16.
"""

from __future__ import annotations

import re

from nvtopy.render.chart import legend_line
from nvtopy.render.styled import Line
from nvtopy.tui.charts import OVERLAID, ChartView, spread

from ..scenes import Scene, build

BRAILLE = {chr(c) for c in range(0x2801, 0x2900)}
ENTRY = re.compile(r" (\d+):(\S+)")


def test_spread_draws_the_highest_and_the_lowest_in_index_order() -> None:
    means = [(i, float(m)) for i, m in enumerate([50, 90, 10, 70, 95, 5, 60, 40])]
    assert spread(means, 4) == [1, 2, 4, 5], "the two busiest and the two idlest"
    assert spread(means, 3) == [1, 4, 5]
    assert spread(means[:3], 4) == [0, 1, 2], "few enough: all of them"
    assert spread([(0, None), (1, 20.0), (2, None), (3, 30.0), (4, None)], 4) == [0, 1, 2, 3], "no value: last"


def test_a_legend_counts_what_it_cannot_list_and_never_cuts_an_entry() -> None:
    title = Line(" GPU util ", "bold")
    entries = [Line(f" {i}:{50 + i}%") for i in range(4)]
    assert legend_line(title, entries, 40).plain.rstrip() == " GPU util  0:50% 1:51% 2:52% 3:53%"
    narrow = legend_line(title, entries, 29).plain
    assert narrow.rstrip() == " GPU util  0:50% +3 more" and len(narrow) == 29 and "…" not in narrow
    hidden = legend_line(title, entries[:2], 60, hidden=12, note="10% to 90%").plain.rstrip()
    assert hidden == " GPU util  0:50% 1:51% +12 more 10% to 90%"
    assert legend_line(title, entries[:2], 34, hidden=12, note="10% to 90%").plain.rstrip().endswith("+12 more")
    keep = Line("  +5 GPUs")
    assert legend_line(title, entries, 35, keep=keep).plain.rstrip().endswith("+3 more  +5 GPUs"), "kept whole"


async def test_16_gpus_per_metric_each_drawn_line_named_colours_apart() -> None:
    app, prepare = build(Scene("many", "16 GPUs", gpus=16))
    async with app.run_test(size=(200, 50)) as pilot:
        await prepare(pilot)
        view = app.query_one(ChartView)
        assert view.rows and view.mode == "metric"
        charts = view._charts()
        assert len(charts) >= 3
        for chart in charts:
            lines = chart(40, 10)
            title = lines[0]
            listed = ENTRY.findall(title.plain)
            more = re.search(r"\+(\d+) more", title.plain)
            assert "…" not in title.plain, title.plain
            assert 1 <= len(listed) <= OVERLAID and more, title.plain
            assert len(listed) + int(more.group(1)) == 16, "every GPU is listed or counted"
            named = {style.color for text, style in title.parts if style is not None and re.fullmatch(r" \d+:", text)}
            assert len(named) == len(listed), "a colour of its own for each GPU drawn"
            plotted = {
                style.color
                for line in lines[1:-1]
                for text, style in line.parts
                if style is not None and set(text) & BRAILLE
            }
            assert plotted and plotted <= named, "no line on the chart that its legend does not name"


async def test_per_gpu_charts_say_how_many_gpus_found_no_room() -> None:
    app, prepare = build(Scene("many", "16 GPUs", gpus=16, keys=("c",)))
    async with app.run_test(size=(120, 40)) as pilot:
        await prepare(pilot)
        view = app.query_one(ChartView)
        assert view.mode == "gpu"
        text = "\n".join(strip.text for strip in view._lines)
        shown = len(re.findall(r"GPU \d+ ", text))
        assert f"+{16 - shown} GPUs" in text and "…" not in text.splitlines()[0]


def _legend_made_whole(chart, series, title, width, scale, formats):  # type: ignore[no-untyped-def]
    """The legend as it was chosen before issue 27's cut: every candidate's lines and traces made, then measured."""
    from nvtopy.render.chart import GPU_COLORS, Trace
    from nvtopy.tui.charts import _INDEX, _recent_mean

    metric = chart.spec.metric
    means = [(g.index, _recent_mean(s.mean)) for g, s in series]
    entries, traces, others = [], [], []
    for count in range(min(OVERLAID, len(series)), 0, -1):
        drawn = set(spread(means, count))
        more = Line(f" +{len(series) - count} more") if count < len(series) else Line()
        for fmt in formats:
            entries, traces, others = [], [], []
            for gpu, s in series:
                value = chart.values[gpu.index][_INDEX[metric]]
                if gpu.index not in drawn:
                    if value is not None:
                        others.append(value)
                    continue
                color = GPU_COLORS[len(traces) % len(GPU_COLORS)]
                entries.append(Line(f" {gpu.index}:", color).add("N/A" if value is None else fmt(value), color))
                traces.append(Trace(color, s.step, s.buckets, s.lo, s.mean, s.hi, scale, (id(gpu.timeline), metric)))
            if title.cells + sum(entry.cells for entry in entries) + more.cells <= width:
                return entries, traces, others, fmt
    return entries, traces, others, formats[-1]


async def test_the_legend_measured_from_its_texts_is_the_one_made_whole_at_every_width() -> None:
    """_MetricChart._legend measures the candidates' texts and makes the chosen entries once: same choice."""
    from nvtopy.tui.charts import _series_of

    app, prepare = build(Scene("many", "16 GPUs", gpus=16))
    async with app.run_test(size=(200, 50)) as pilot:
        await prepare(pilot)
        view = app.query_one(ChartView)
        checked = 0
        for chart in view._charts():
            series = [(g, _series_of(g, chart.spec.metric, view.window, chart.end)) for g in chart.gpus]
            title = Line(f" {chart.spec.title} ", "bold")
            formats = (lambda v: f"{v:.1f}%", lambda v: f"{v:.0f}")
            for count in (16, 5, 3, 1, 0):
                for width in range(8, 120, 3):
                    got = chart._legend(series[:count], title, width, 1.0, formats)
                    want = _legend_made_whole(chart, series[:count], title, width, 1.0, formats)
                    assert [e.parts for e in got[0]] == [e.parts for e in want[0]], (chart.spec.metric, count, width)
                    assert got[1:] == want[1:], (chart.spec.metric, count, width)
                    checked += 1
        assert checked > 500

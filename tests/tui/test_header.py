"""The header, the host line and the key footer: by priority at every width; modes said there, not in toasts."""

from __future__ import annotations

import re

import pytest

from nvtopy.render.header import Part, fit, plain, width_of
from nvtopy.tui.app import NvtopyApp

from ..tui_helpers import header_line, started, wait_until, widget_lines

INTERVAL = 2.0
CLOCK = re.compile(r"\d\d:\d\d:\d\d$")


def test_fit_drops_the_least_important_parts_whole_and_keeps_rank_zero() -> None:
    parts = [
        Part((("host", ""),)),
        Part((("driver 550.54", ""),), 5),
        Part((("filter: mine", ""),), 1),
        Part((("GPUs 4/4", ""),)),
    ]
    clock = Part((("12:00:00", ""),))
    for width in range(30, 80):
        line = plain(fit(parts, width, right=clock))
        assert width_of(fit(parts, width, right=clock)) <= width
        assert line.startswith("host") and "GPUs 4/4" in line and line.endswith("12:00:00"), (width, line)
        for word in ("driver 550.54", "filter: mine"):  # whole or not at all
            assert word in line or word.split()[0] not in line, (width, line)
    expected = "host │ filter: mine │ GPUs 4/4" + " " * 7 + "12:00:00"
    assert plain(fit(parts, 45, right=clock)) == expected, "the driver goes first"
    assert "…" in plain(fit(parts, 10, right=clock)), "too narrow for what must stay: an ellipsis says it was cut"


@pytest.mark.parametrize("width", [80, 100, 120, 200])
async def test_header_and_footer_shorten_by_priority_never_mid_word(sim, width):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1), interval=INTERVAL)
    async with app.run_test(size=(width, 24)) as pilot:
        await started(pilot, app)
        await pilot.press("u")  # a filter: ranked high, kept at 80 columns
        await wait_until(pilot, lambda: "filter" in header_line(app), message="the filter in the header")
        header = header_line(app).rstrip()
        assert CLOCK.search(header), f"the clock stays at {width} columns: {header!r}"
        assert "GPUs 4/4" in header and "filter: mine" in header
        assert "…" not in header
        if width >= 120:
            assert "driver 550.54.15 · CUDA 12.4" in header
        elif "driver" in header or "CUDA" in header:
            assert "driver 550.54.15 · CUDA 12.4" in header, "the driver part is whole or gone"
        footer = "".join(widget_lines(app.query_one("KeyFooter"))).rstrip()
        shown = [b for b in app.BINDINGS if b.show]
        descriptions = [b.description for b in shown]
        assert footer.startswith(" q  Quit") and "Help" in footer
        # Every word of the footer belongs to a whole key: cut the known items out, nothing is left over.
        rest = footer
        for binding in shown:
            key = app.get_key_display(type(binding)(binding.key.split(",")[0], ""))
            rest = rest.replace(f" {key}  {binding.description}", "", 1)
        assert rest.strip() == "", f"a cut key in the footer at {width}: {footer!r} (left: {rest!r})"
        if width == 200:
            assert all(d in footer for d in descriptions), "at 200 columns every key shows"


async def test_mode_keys_say_their_mode_in_the_header_without_a_notification(sim):
    app = NvtopyApp.for_backend(sim(gpus=4, seed=1), interval=INTERVAL)
    async with app.run_test(size=(200, 50)) as pilot:
        await started(pilot, app)
        for key, words in (
            ("b", "grouped by user"),
            ("c", "charts per GPU · 1 min"),
            ("z", "charts per GPU · 10 min"),
            ("v", "view full"),
            ("f", "filter: flagged"),
            ("plus", "⟳ 1s"),
        ):
            await pilot.press(key)
            await wait_until(pilot, lambda w=words: w in header_line(app), message=f"{key}: {words} in the header")
        assert not app._notifications, [n.message for n in app._notifications]


async def test_the_host_line_shows_cpu_load_memory_and_swap_and_grows_with_the_width(sim):
    widths = {}
    for width in (80, 200):
        app = NvtopyApp.for_backend(sim(gpus=2, seed=1), interval=INTERVAL)
        async with app.run_test(size=(width, 24)) as pilot:
            await started(pilot, app)
            line = "".join(widget_lines(app.query_one("#host"))).rstrip()
            assert re.search(r"CPU \d+% .*load [\d.]+ [\d.]+ [\d.]+ .*MEM [\d.]+/[\d.]+GiB .*swap", line), line
            assert len(line) <= width
            widths[width] = line.count("█") + line.count("░")
    assert widths[200] > widths[80], "the bars take the room a wide terminal gives"

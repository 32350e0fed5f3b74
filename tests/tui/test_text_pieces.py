"""The header and the host line go to their TextLine as (text, style) pieces (TextLine.show_pieces): the runs made
straight from them are the ones their rich Text gives, and the widget draws the very line show_text draws."""

from __future__ import annotations

import random

from rich.text import Text
from textual.strip import Strip

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.header import HeaderBar, HostBar, _pieces, _runs, header_text
from tests.tui_helpers import started, widget_strips


def _random_pieces(rng: random.Random) -> list[tuple[str, str]]:
    texts = ["", " ", "CPU ", "42%", "█▍░░", "GPUs 8/8", "\x07bell", "\r", "日本", " │ ", "…"]
    styles = ["", "", "bold", "dim", "bold reverse", "yellow", "bright_black", "bold magenta"]
    return [(rng.choice(texts), rng.choice(styles)) for _ in range(rng.randint(0, 9))]


def test_runs_are_the_pieces_of_the_assembled_text_on_many_cases():
    rng = random.Random(27)
    nones = 0
    for _ in range(5000):
        pieces = _random_pieces(rng)
        want = _pieces(Text.assemble(*pieces))
        assert _runs(pieces) == want, pieces
        nones += want is None
    assert 100 < nones < 4000, "both ways must be met often"


async def test_the_header_and_host_line_draw_what_their_text_draws(sim, clock):
    app = NvtopyApp.for_backend(sim(gpus=3, seed=2, processes_per_gpu=2), poll=False)
    async with app.run_test(size=(150, 40)) as pilot:
        for count in range(1, 4):
            clock.advance(1)
            app.source.poll_once(slow=True)
            await started(pilot, app, count)
        header, host = app.query_one(HeaderBar), app.query_one(HostBar)
        assert header._given is not None and host._given is not None, "both must be drawn from their pieces"
        drawn = [list(strip) for strip in widget_strips(header) + widget_strips(host)]
        assert header.render() == header_text(app, app.snapshot, app._header_counts, app.size.width)
        for widget in (header, host):
            widget.show_text(Text.assemble(*widget._given))  # the way before: the Text
        await pilot.pause()
        assert [list(strip) for strip in widget_strips(header) + widget_strips(host)] == drawn
        assert all(isinstance(strip, Strip) for strip in widget_strips(header))

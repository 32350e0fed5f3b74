"""The header and host line draw their text as segments (nvtopy/tui/header.py's TextLine)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.header import HeaderBar, HostBar, _pieces


def test_pieces_split_at_each_span_and_leave_what_the_static_draws_to_it():
    text = Text.assemble((" nvtopy ", "bold reverse"), " host ", ("12:00:00", "cyan"))
    assert _pieces(text) == [
        (" nvtopy ", Style.parse("bold reverse")),
        (" host ", None),
        ("12:00:00", Style.parse("cyan")),
    ]
    assert _pieces(Text("starting", style="bold")) is None  # a style of its own
    assert _pieces(Text.assemble(("a", "yellow"), ("b", "yellow"))) is None  # touching spans of one style


async def test_an_unchanged_header_and_host_line_are_not_redrawn(sim, clock, monkeypatch):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, processes_per_gpu=2), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.source.poll_once(slow=True)
        await pilot.pause()
        header, host = app.query_one(HeaderBar), app.query_one(HostBar)
        assert header._pieces is not None and host._pieces is not None, "the cheap path draws them"
        refreshed: list[str] = []
        for widget in (header, host):
            original = widget.refresh
            name = type(widget).__name__

            def spy(*regions, _original=original, _name=name, **kwargs):
                refreshed.append(_name)
                return _original(*regions, **kwargs)

            monkeypatch.setattr(widget, "refresh", spy)
        app.refresh_view()  # the same snapshot again
        await pilot.pause()
        assert refreshed == []

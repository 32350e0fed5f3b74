"""The monitor without colour: every state readable under NO_COLOR, and TERM=dumb drawn without colour in ASCII.

Under NO_COLOR each state is checked where it is drawn, after the filters, as the
terminal gets it: its words are there, its text contrasts with what is behind it
(never grey on the same grey), and an attribute marks it -- reverse, bold or
underline -- not a colour alone. "[simulated]" is a word in brackets: readable is
enough there.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import sys
import unicodedata

import pytest
from rich.cells import cell_len
from rich.style import Style

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import Finding, GpuHealth, Severity
from nvtopy.render.cells import PALETTES, RICH_STYLES
from nvtopy.render.styled import Line
from nvtopy.render.terminal import ascii_drawing, color_allowed, dumb_terminal
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.plain import MIN_CONTRAST, readable_grey

from ..builders import FixedSource
from ..tui_helpers import started, wait_until, widget_strips
from .test_tui_health import healthy_gpu, my_snapshot, show, sick_gpu, stalled_gpu
from .test_tui_hosts import fleet

SIZE = (120, 40)


def wcag(first: tuple[int, int, int], second: tuple[int, int, int]) -> float:
    """WCAG 2's contrast ratio of two colours (worked out here, not with the code under test)."""

    def luminance(rgb: tuple[int, int, int]) -> float:
        def channel(value: int) -> float:
            c = value / 255
            return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b = (channel(v) for v in rgb)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    a, b = sorted((luminance(first), luminance(second)))
    return (b + 0.05) / (a + 0.05)


@dataclasses.dataclass
class Drawn:
    """A piece of a widget's line as the terminal gets it: its text, its style, and the colour behind it."""

    text: str
    style: Style
    behind: tuple[int, int, int]

    @property
    def marked(self) -> bool:
        return bool(self.style.bold or self.style.reverse or self.style.underline)

    def contrast(self) -> float | None:
        """The text's contrast with what is behind it; None when the text is the terminal's own colour."""
        if self.style.color is None:
            return None
        fg = self.style.color.get_truecolor()
        return wcag((fg.red, fg.green, fg.blue), self.behind)


def drawn(app: NvtopyApp, selector: str) -> list[list[Drawn]]:
    """Each line of a widget, piece by piece, after the app's filters (NO_COLOR's among them)."""
    widget = app.query_one(selector)
    base = widget.background_colors[1].monochrome if app.no_color else widget.background_colors[1]
    lines = []
    for strip in widget_strips(widget):
        pieces = []
        for segment in strip:
            style = segment.style or Style()
            if style.bgcolor is not None:
                t = style.bgcolor.get_truecolor()
                behind = (t.red, t.green, t.blue)
            else:
                behind = (base.r, base.g, base.b)
            pieces.append(Drawn(segment.text, style, behind))
        lines.append(pieces)
    return lines


def pieces_with(app: NvtopyApp, selector: str, words: str) -> list[Drawn]:
    """The pieces that draw ``words`` (one piece, or a run of pieces on one line that spells them)."""
    found = []
    for line in drawn(app, selector):
        text = "".join(p.text for p in line)
        start = text.find(words)
        if start < 0:
            continue
        x = 0
        for piece in line:
            if x < start + len(words) and x + len(piece.text) > start and piece.text.strip():
                found.append(piece)
            x += len(piece.text)
    assert found, f"{words!r} is not drawn in {selector}"
    return found


def assert_readable(pieces: list[Drawn], *, marked: bool = True) -> None:
    for piece in pieces:
        ratio = piece.contrast()
        assert ratio is None or ratio >= MIN_CONTRAST - 0.01, f"{piece.text!r}: {ratio:.2f}:1 against its background"
        if marked:
            assert piece.marked, f"{piece.text!r} is told by colour alone: {piece.style}"


@pytest.fixture
def no_color(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")


# --------------------------------------------------------------------------- NO_COLOR: state by state


@pytest.mark.parametrize("view", ["full", "compact"])
async def test_a_lost_gpu_reads_without_colour(sim, no_color, view):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, faults=parse_fault_specs(("lost@1",))), interval=2.0, layout=view)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.no_color
        words = ("FAIL lost: the GPU stopped answering", "GPU LOST") if view == "full" else ("LOST",)
        for text in words:
            assert_readable(pieces_with(app, "#gpus", text))
        alert = "FAIL" if view == "full" else "LOST"
        assert all(p.style.reverse for p in pieces_with(app, "#gpus", alert)), "an alert is in reverse video"


async def test_a_gpu_not_responding_reads_without_colour(no_color):
    for view in ("full", "compact"):
        app = NvtopyApp(FixedSource(), poll=False, layout=view)
        async with app.run_test(size=SIZE) as pilot:
            await show(pilot, app, my_snapshot(healthy_gpu(), stalled_gpu(1)))
            pieces = pieces_with(app, "#gpus", "not responding (12 s)")
            assert_readable(pieces)
            assert all(p.style.reverse for p in pieces), view


async def test_fail_and_warn_read_without_colour(no_color):
    finding = Finding(Severity.WARN, "throttle", "HW slowdown: SM at 45 % of max", "check the cooling")
    warn = dataclasses.replace(healthy_gpu(2), health=GpuHealth(verdict=Severity.WARN, findings=(finding,)))
    app = NvtopyApp(FixedSource(), poll=False)
    async with app.run_test(size=SIZE) as pilot:
        await show(pilot, app, my_snapshot(healthy_gpu(), sick_gpu(), warn))
        assert_readable(pieces_with(app, "#gpus", "FAIL row remapping failed"))
        assert_readable(pieces_with(app, "#header", "1 FAIL"))
        assert_readable(pieces_with(app, "#header", "1 WARN"))
        assert_readable(pieces_with(app, "#gpus", " OK "), marked=False)  # OK is the quiet one: its word says it


async def test_the_simulated_backend_in_the_header_reads_without_colour(sim, no_color):
    app = NvtopyApp.for_backend(sim(gpus=1), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert_readable(pieces_with(app, "#header", "[simulated]"), marked=False)  # its words say it


async def test_the_selected_row_reads_without_colour_focused_or_not(sim, no_color):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, processes_per_gpu=2), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        table = app.query_one("#processes")
        pid = str(table.selected.pid)

        def cursor_row() -> list[Drawn]:
            for line in drawn(app, "#processes"):
                if re.search(rf"\b{pid}\b", "".join(p.text for p in line)):
                    return [p for p in line if p.text.strip()]
            raise AssertionError("the selected row is not drawn")

        assert all(p.style.reverse for p in cursor_row())
        await pilot.press("slash")  # the filter box takes the focus: the cursor stays, out of focus
        await wait_until(pilot, lambda: not table.has_focus, message="the table loses the focus")
        await pilot.pause()
        row = cursor_row()
        assert_readable(row)
        assert all(p.style.underline for p in row), "a grey bar alone is no cursor without colour"


async def test_a_stale_host_reads_without_colour(sim, no_color):
    app = NvtopyApp(FixedSource(), poll=False, layout="compact")
    async with app.run_test(size=(160, 40)) as pilot:
        await show(pilot, app, fleet(sim, ["node-a", "node-b"], stale=("node-b",)))
        assert_readable(pieces_with(app, "#gpus", "stale 2 min"))


async def test_no_color_draws_every_theme_with_the_monochrome_palette(sim, no_color):
    app = NvtopyApp.for_backend(sim(gpus=1), interval=2.0)
    app.theme = "colorblind"
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert PALETTES["monochrome"] == RICH_STYLES
        app.theme = "nord"
        await pilot.pause()
        assert PALETTES["monochrome"] == RICH_STYLES


def test_the_monochrome_palette_has_no_colour_and_marks_every_state():
    palette = PALETTES["monochrome"]
    assert set(palette) == set(PALETTES["default"])
    for category, definition in palette.items():
        style = Style.parse(definition)
        assert style.color is None and style.bgcolor is None, category
    for category in ("warn", "hot", "alert", "bad"):
        assert Style.parse(palette[category]).bold, category
    assert Style.parse(palette["alert"]).reverse


def test_readable_grey_reads_on_every_background_and_keeps_what_reads_already():
    for background in range(0, 256, 5):
        for text in range(0, 256, 5):
            grey = readable_grey(text, background)
            ratio = wcag((grey,) * 3, (background,) * 3)
            assert ratio >= MIN_CONTRAST, (text, background, grey)
            if wcag((text,) * 3, (background,) * 3) >= MIN_CONTRAST:
                assert grey == text


# --------------------------------------------------------------------------- a piece keeps its own colours


def test_restyling_a_line_keeps_each_pieces_own_colours():
    """A lost GPU's title is restyled red: its verdict, white on red, stays white on red (not red on red)."""
    line = Line(" 1 ", "bold").add(" FAIL lost ", "bold white on red").restyle("red")
    (index, verdict) = [style for _, style in line.parts]
    assert index == Style.parse("bold red")
    assert verdict.color != verdict.bgcolor and verdict == Style.parse("bold white on red")


async def test_a_lost_gpus_verdict_is_never_drawn_in_its_own_background_colour(sim):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, faults=parse_fault_specs(("lost@1",))), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        for piece in pieces_with(app, "#gpus", "FAIL lost"):
            assert piece.style.bgcolor is None or piece.style.color != piece.style.bgcolor, piece


# --------------------------------------------------------------------------- TERM=dumb: no colour, ASCII


def test_ascii_drawing_keeps_widths_and_text():
    samples = ["⣿⡀⠉⢀ ⣤⣤", "╭─ 0 H100 ─╮│ ├┤ └┘ ═║", "████▌░░ ▁▂▃▄▅▆▇█", "▲▼▸●⚠✓✗⟳⏸ … · 52°C", "Zoë 张伟 Ωμ"]
    for text in samples:
        shown = ascii_drawing(text)
        assert cell_len(shown) == cell_len(text), (text, shown)
        for char in shown:
            assert char.isascii() or unicodedata.category(char)[0] in "LMN", (text, char)
    assert ascii_drawing("⣀⣀⠉⠉") == "__''", "a braille dot's height is kept"
    assert ascii_drawing("╭─┤│╰") == "+-+|+"
    assert ascii_drawing("Zoë 张伟") == "Zoë 张伟", "names are text, not drawing"
    assert ascii_drawing("plain") == "plain"


@pytest.mark.parametrize(
    ("environ", "dumb", "colour"),
    [
        ({}, False, True),
        ({"TERM": "xterm-256color"}, False, True),
        ({"TERM": "dumb"}, True, False),
        ({"TERM": "DUMB"}, True, False),
        ({"TERM": "unknown"}, True, False),
        ({"NO_COLOR": "1", "TERM": "xterm"}, False, False),
        ({"NO_COLOR": ""}, False, True),
    ],
)
def test_the_terminal_rule(environ, dumb, colour):
    assert dumb_terminal(environ) is dumb
    assert color_allowed(environ) is colour


async def test_a_dumb_terminal_gets_no_colour_and_only_ascii_drawing(sim, monkeypatch):
    monkeypatch.setenv("TERM", "dumb")
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, faults=parse_fault_specs(("lost@1",))), interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        app.source.poll_once()  # a second sample: the charts draw a line
        await wait_until(pilot, lambda: app.snapshots_applied >= 2, message="a second snapshot")
        await pilot.pause()
        assert app.no_color and PALETTES["monochrome"] == RICH_STYLES
        text = []
        for selector in ("#header", "#gpus", "#charts", "#processes"):
            for line in drawn(app, selector):
                for piece in line:
                    assert piece.style.color is None and piece.style.bgcolor is None, (selector, piece)
                    text.append(piece.text)
        drawing = "".join(text)
        assert all(char.isascii() or unicodedata.category(char)[0] in "LMN" for char in drawing), {
            char for char in drawing if not char.isascii()
        }
        assert "+-" in drawing and "|" in drawing, "the borders and the chart axes, in ASCII"
        assert any(p.style.reverse for p in pieces_with(app, "#gpus", "FAIL")), "an alert is still marked"


def test_once_writes_no_colour_on_a_dumb_terminal(sim, monkeypatch):
    from nvtopy.render.text import render_snapshot
    from nvtopy.sources.collector import Collector

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    snapshot = Collector(sim(gpus=1, faults=parse_fault_specs(("hot@0",)))).collect()
    for term, coloured in (("xterm-256color", True), ("dumb", False)):
        monkeypatch.setenv("TERM", term)
        out = Tty()
        render_snapshot(snapshot, out, color=True)
        assert ("\x1b[" in out.getvalue()) is coloured, term
        assert ("─" in out.getvalue()) is coloured, "the table's rule in ASCII on a dumb terminal"
    assert os.environ["TERM"] == "dumb"
    piped = io.StringIO()
    render_snapshot(snapshot, piped, color=True)
    assert "─" in piped.getvalue(), "a pipe gets the text as it is, whatever TERM says"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pty")
def test_the_monitor_on_a_dumb_terminal_writes_no_24_bit_colour_and_no_braille():
    """The real CLI in a pseudo-terminal with TERM=dumb: Textual alone falls back to 24-bit colour there."""
    from ..end_to_end.test_slow_driver import PROMPT, Terminal

    term = Terminal(["--demo", "--interval", "0.25"], env={"TERM": "dumb", "NO_COLOR": ""})
    try:
        axis = term.wait_for(b"now", timeout=30)  # the charts' time axis: the charts are drawn
        term.wait_for(b"GPUs 4/4", timeout=30, start=axis)  # and a refresh after them
        assert term.quit_time() < PROMPT + 1.0
        out = term.text()
    finally:
        term.close()
    assert b"\x1b[38;2;" not in out and b"\x1b[48;2;" not in out, "no 24-bit colour"
    attributes = {int(code or 0) for sgr in re.findall(rb"\x1b\[([0-9;]*)m", out) for code in sgr.split(b";")}
    assert attributes and attributes <= {0, 1, 2, 3, 4, 7, 9, 21, 22, 23, 24, 27, 29}, "attributes only, no colour"
    drawing = out.decode("utf-8", "replace")
    assert not [c for c in drawing if 0x2800 <= ord(c) <= 0x28FF], "no braille"
    assert all(c.isascii() or unicodedata.category(c)[0] in "LMN" for c in drawing), {
        c for c in drawing if not c.isascii()
    }

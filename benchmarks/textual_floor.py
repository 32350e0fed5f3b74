"""What any Textual monitor costs before it does any work: the floor under nvtopy's steady CPU and RSS.

A Textual app with one widget filling a 200x50 terminal, and no data at all: two
precomputed frames of styled lines (about a dozen colour runs a line, braille and
digits, as nvtopy's panels, charts and table draw), swapped once a second with every
line refreshed (``--dirty all``: what a monitor whose charts scroll redraws), half of
them, or none (Textual idle). What it costs is Textual's compositor and the terminal output alone.

Run in tmux like ``make bench-peers`` runs the monitors::

    .venv/bin/python benchmarks/textual_floor.py            # CPU ms/s and peak RSS, all lines dirty
    .venv/bin/python benchmarks/textual_floor.py --dirty half

Why it is here: issue 15 asked for nvtopy's steady CPU at most 0.3x nvitop's and a peak
RSS of at most 40 MiB. This measures how much of both a Textual UI spends before
nvtopy polls a GPU or draws a panel (benchmarks/README.md has the figures).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time

WIDTH, HEIGHT = 200, 50
COLOURS = (
    "#56B4E9", "#E69F00", "#009E73", "#F0E442", "#CC79A7", "#D55E00",
    "#0072B2", "#C8C8C8", "green", "yellow", "red", "bright_black",
)  # fmt: skip


def serve(dirty: str, mark: str = "") -> None:
    """The floor app itself (run inside tmux by :func:`main`); ``mark`` begins its last line (``bench_peers``
    waits for it: the first whole frame is on the terminal)."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.app import App, ComposeResult
    from textual.geometry import Region
    from textual.strip import Strip
    from textual.widget import Widget

    rng = random.Random(1)

    def frame() -> list[Strip]:
        lines = []
        for _ in range(HEIGHT):
            segments, x = [], 0
            while x < WIDTH:
                size = min(WIDTH - x, rng.randint(4, 30))
                text = "".join(rng.choice("⠁⠃⠇⡇⣇⣧⣷⣿ abc0123456789%") for _ in range(size))
                segments.append(Segment(text, Style.parse(rng.choice(COLOURS))))
                x += size
            lines.append(Strip(segments, WIDTH))
        return lines

    frames = (frame(), frame())
    if mark:
        for shown in frames:
            shown[-1] = Strip([Segment(mark), *shown[-1].crop(len(mark), WIDTH)], WIDTH)
    rows = {"all": HEIGHT, "half": HEIGHT // 2, "none": 0}[dirty]

    class Screenful(Widget):
        DEFAULT_CSS = "Screenful { width: 1fr; height: 1fr; }"
        shown = 0

        def render_line(self, y: int) -> Strip:
            return frames[self.shown][y] if y < HEIGHT else Strip.blank(self.size.width)

        def tick(self) -> None:
            self.shown ^= 1
            for y in range(rows):
                self.refresh(Region(0, y, WIDTH, 1))

    class Floor(App[None]):
        def compose(self) -> ComposeResult:
            yield Screenful()

        def on_mount(self) -> None:
            self.set_interval(1.0, self.query_one(Screenful).tick)

    Floor().run()


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirty", choices=("all", "half", "none"), default="all", help="lines refreshed each second")
    parser.add_argument("-d", "--duration", type=float, default=20.0, help="seconds measured, after 6 s to settle")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mark", default="", help=argparse.SUPPRESS)  # with --serve: bench_peers' first frame
    args = parser.parse_args()
    if args.serve:
        serve(args.dirty, args.mark)
        return 0
    if not shutil.which("tmux"):
        print("textual_floor skipped: 'tmux' is not installed")
        return 0
    session = f"floor{os.getpid()}"
    cmd = f"exec {sys.executable} {os.path.abspath(__file__)} --serve --dirty {args.dirty}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", str(HEIGHT), cmd], check=True)
    try:
        time.sleep(6)
        pane = subprocess.run(
            ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
        )
        pid = int(pane.stdout.split()[0])
        hz = os.sysconf("SC_CLK_TCK")
        before, started = _ticks(pid), time.monotonic()
        time.sleep(args.duration)
        used = (_ticks(pid) - before) / hz
        elapsed = time.monotonic() - started
        print(
            f"Textual floor, {WIDTH}x{HEIGHT}, {args.dirty} lines redrawn each second: "
            f"{1000 * used / elapsed:.1f} ms CPU a second ({100 * used / elapsed:.2f} %), "
            f"peak RSS {_peak_rss_kib(pid) / 1024:.1f} MiB"
        )
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

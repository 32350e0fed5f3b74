"""``nvtopy replay FILE``: a recording in the monitor, with pause, step and speed.

The reading and playing are :mod:`nvtopy.sources.replay`'s; this is the wiring
from the command line to the monitor.
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..sources.replay import ReplayPlayer, load_recording
from . import options

__all__ = ["build_parser", "run"]


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(command, "Replay a recording (nvtopy record) in the monitor.")
    parser.add_argument("file", metavar="FILE", help="a recording: JSON lines written by 'nvtopy record'")
    parser.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="playback speed (default 1; keys + and -)"
    )
    parser.add_argument("--view", choices=("auto", "full", "compact"), default="auto", help="GPU panels (key v)")
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    if not 0 < args.speed <= 1000:
        raise UsageError("--speed must be more than 0 and at most 1000")
    recording = load_recording(args.file)
    from ..tui.app import NvtopyApp

    player = ReplayPlayer(recording, speed=args.speed)
    app = NvtopyApp(player, layout=args.view)  # read-only: a replay cannot signal
    app.run()
    return 0

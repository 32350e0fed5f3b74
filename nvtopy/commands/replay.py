"""``nvtopy replay FILE``: a recording in the monitor, with pause, step and speed.

The reading and playing are :mod:`nvtopy.sources.replay`'s; this is the wiring
from the command line to the monitor. The player indexes the file on its own
thread: a small file is done within :data:`HEAD_START` (a file with nothing to
replay is then one error line before any screen is drawn), a big one is indexed
while the monitor shows how far it is, and ``q`` quits at any time.
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..sources.replay import ReplayPlayer
from . import options

__all__ = ["HEAD_START", "build_parser", "run"]

HEAD_START = 0.3
"""Seconds the indexing is given before the monitor starts: a small file's errors come before any screen."""


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(command, "Replay a recording (nvtopy record) in the monitor.")
    parser.add_argument("file", metavar="FILE", help="a recording: JSON lines written by 'nvtopy record'")
    parser.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="playback speed (default 1; keys + and -)"
    )
    parser.add_argument(
        "--view", choices=("auto", "full", "compact"), help="GPU panels (default: the config file's, else auto; key v)"
    )
    parser.add_argument("--theme", type=options.theme_name, metavar="NAME", help=options.THEME_HELP)
    options.add_config_option(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    """The recording in the monitor, dressed as the config file says (view, theme, columns, sort, group-by,
    chart window); its health verdicts are the recorded ones, so the file's ``[health]`` thresholds do not apply."""
    if not 0 < args.speed <= 1000:
        raise UsageError("--speed must be more than 0 and at most 1000")
    player = ReplayPlayer(args.file, speed=args.speed)
    player.start()  # indexes the file on its thread
    if player.indexed.wait(HEAD_START) and player.open_error is not None:
        raise player.open_error
    config = options.user_config(args, "view", "theme")  # a bad file: one line, then the defaults
    from ..alerts.settings import alert_settings

    alerts = alert_settings(config.alerts_rules)  # listed and toasted, never sent (no notify): they are history
    from ..tui.app import NvtopyApp
    from ..tui.preferences import configure

    app = NvtopyApp(player, layout=config.view, alerts=alerts)  # read-only: a replay cannot signal
    configure(app, config, options.config_file(args))
    app.startup_warnings = options.config_warnings(args)
    app.run()
    if app.open_error is not None:  # nothing to replay, found once the monitor was drawing
        raise app.open_error
    return 0

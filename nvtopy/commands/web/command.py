"""``nvtopy web``: the monitor, as the terminal shows it, in a browser; read-only, behind a token.

Why these defaults: a browser view is a door into the machine, so it opens
narrowly. It binds to 127.0.0.1 unless told otherwise; a token is made at start
and printed once, in the URL to open (as Jupyter does), and every request needs
it; each session's monitor runs with ``--readonly`` whatever the flags, so no page
can send a signal; sessions are few (each is a process: ``--max-sessions``) and
one left alone is closed (``--idle-timeout``). ``--tls-cert``/``--tls-key`` serve
HTTPS with the exporter's checks of the files. The monitor's flags (``--demo``,
``--remote``, ``--prometheus``, ``--ssh``, ``--gpus``, ``--view`` ...) are checked
here, at once, and passed to every session and to ``/once.txt`` and ``/once.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from ...errors import NvtopyError, UsageError
from .. import monitor, options
from ..exporter.command import add_tls_options, is_loopback, parse_listen, tls_from_args
from ..options import Parser

if TYPE_CHECKING:
    import ssl

    from .server import WebSettings

__all__ = ["DEFAULT_LISTEN", "build_parser", "check_args", "run"]

DEFAULT_LISTEN = "127.0.0.1:9410"
MAX_SESSIONS = 64  # the largest --max-sessions: each session is a process of about 40 MiB (README)
_NOT_HERE = {"once": "--once", "json": "--json", "print_config": "--print-config"}


_session_count = options.whole_number(1, MAX_SESSIONS, "session count")
_seconds = options.seconds_between(1, 7 * 86400)


def _add_own_options(parser: argparse.ArgumentParser) -> None:
    """The web server's own flags; the rest of the command line is the monitor's."""
    own = parser.add_argument_group("the web server")
    own.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}; 0.0.0.0:9410 for every interface)",
    )
    own.add_argument(
        "--max-sessions",
        type=_session_count,
        default=4,
        metavar="N",
        help="browser sessions at once (default 4; each runs a monitor process, about 40 MiB)",
    )
    own.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=1800.0,
        metavar="SECONDS",
        help="close a session after this long without a key, click or resize from its browser (default 1800)",
    )
    add_tls_options(parser, "open a page")


class _WebParser(Parser):
    """The monitor's parser, renamed, with the server's flags; it keeps the monitor's part of the line as written.

    Why as written: each session runs ``nvtopy`` with exactly the flags the user gave (and ``--readonly``);
    rebuilding them from the parsed values would need every flag's inverse.
    """

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        parsed = super().parse_args(argv, namespace)
        own = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        _add_own_options(own)
        _, parsed.monitor_argv = own.parse_known_args(argv)
        return parsed


def build_parser(command: str = "web") -> argparse.ArgumentParser:
    parser = _WebParser(
        prog=f"nvtopy {command}",
        description="The monitor in a browser, read-only: it prints a URL with an access token to open. "
        "Takes the monitor's flags (--demo, --remote, --prometheus, --ssh, --gpus, --view ...); "
        "/once.txt and /once.json answer 'nvtopy --once' and 'nvtopy --once --json' with them.",
        epilog="examples:\n"
        "  nvtopy web --demo                     simulated GPUs, on http://127.0.0.1:9410/?token=...\n"
        "  nvtopy web --prometheus http://prom:9090   the fleet, in a browser\n"
        "  curl -H 'Authorization: Bearer TOKEN' http://127.0.0.1:9410/once.txt",
        parents=[monitor.build_parser("monitor")],
        conflict_handler="resolve",
        allow_abbrev=False,  # a shortened flag would go to the monitor as written
    )
    _add_own_options(parser)
    for action in parser._actions:  # the monitor's flags that make no page: refused (check_args), not shown
        if action.dest in _NOT_HERE or action.dest == "no_color":
            action.help = argparse.SUPPRESS
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors, one line, before anything listens."""
    for name, flag in _NOT_HERE.items():
        if getattr(args, name):
            parser.error(f"{flag} is not a web view: use /once.txt or /once.json on the server (see README)")
    monitor.check_args(parser, args)
    try:
        parse_listen(args.listen)
    except UsageError as exc:
        parser.error(str(exc))


def _url_host(host: str) -> str:
    """The host as a URL names it: an IPv6 address in brackets; every interface as this machine's name."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def run(command: str, args: argparse.Namespace) -> int:
    from .server import WebSettings

    host, port = parse_listen(args.listen)
    tls = tls_from_args(args)  # before anything listens: a bad file is one line
    nvtopy = (sys.executable, "-m", "nvtopy", *args.monitor_argv)
    _check_monitor(nvtopy)
    settings = WebSettings(
        monitor=(*nvtopy, "--readonly"),  # whatever the flags: no page may send a signal
        once=nvtopy,
        token=secrets.token_urlsafe(32),
        cookie=f"nvtopy_web_{secrets.token_hex(4)}",
        tls=tls is not None,
        max_sessions=args.max_sessions,
        idle_timeout=args.idle_timeout,
    )
    return asyncio.run(_serve(settings, host, port, tls))


CHECK_DEADLINE = 60.0
"""Seconds the first snapshot (:func:`_check_monitor`) may take before the server starts without it."""


def _check_monitor(nvtopy: tuple[str, ...]) -> None:
    """One snapshot with the monitor's flags, before anything listens: what every session would meet.

    Why: some of the monitor's usage errors are found only when it runs (``--demo`` with ``--remote``,
    an ``@group`` the config lacks, ``--gpus`` naming a GPU that is not there); found in each browser's
    session they would be a page that closes. A usage error (exit 2) is raised here, one line; any
    other failure (no driver yet, hosts down) is a warning: the sessions show it, and it may pass.
    """
    import subprocess

    try:
        result = subprocess.run(
            [*nvtopy, "--once", "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=CHECK_DEADLINE,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"nvtopy: warning: no snapshot within {CHECK_DEADLINE:g} s; serving anyway", file=sys.stderr)
        return
    if result.returncode == 0:
        return
    lines = result.stderr.decode("utf-8", "replace").strip().splitlines() or ["nvtopy --once failed"]
    line = lines[-1].removeprefix("nvtopy: error: ")  # already made safe by the CLI that wrote it
    if result.returncode == UsageError.exit_code:
        raise UsageError(line)
    print(f"nvtopy: warning: {line} (the sessions will show it until it passes)", file=sys.stderr, flush=True)


async def _serve(settings: WebSettings, host: str, port: int, tls: ssl.SSLContext | None) -> int:
    from aiohttp import web

    from .server import STOP_DEADLINE, make_app

    # A session takes up to 2 x STOP_DEADLINE to end (asked, then killed): its handler gets that before it is cancelled.
    runner = web.AppRunner(make_app(settings), access_log=None, shutdown_timeout=2 * STOP_DEADLINE + 1)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=tls)
        try:
            await site.start()
        except OSError as exc:
            raise NvtopyError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        bound = runner.addresses[0][1]
        scheme = "https" if tls is not None else "http"
        # The one place the token is written: the URL to open.
        print(
            f"nvtopy web: serving the monitor (read-only) on {scheme}://{_url_host(host)}:{bound}/?token="
            f"{settings.token} (Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )
        if not is_loopback(host):
            clear = " (in clear: without --tls-cert the token crosses the network unencrypted)" if tls is None else ""
            print(
                f"nvtopy: warning: listening on {host}: whoever has the URL sees GPU and process metrics{clear}",
                file=sys.stderr,
                flush=True,
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        return 0
    finally:
        with contextlib.suppress(asyncio.TimeoutError):  # sessions: STOP_DEADLINE each, at once, then killed
            await asyncio.wait_for(runner.cleanup(), 3 * STOP_DEADLINE + 5)

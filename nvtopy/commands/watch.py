"""``nvtopy watch``: the alert rules evaluated headless, each transition one line on stdout.

For a systemd user service or a tmux pane: it polls the GPUs (NVML, or ``--demo``'s
simulation) every ``--interval``, feeds each snapshot to the local alert engine
(:class:`nvtopy.alerts.engine.AlertEngine`, the rules of :mod:`nvtopy.alerts.catalog` as the
config's ``[alerts]`` table sets them: :mod:`nvtopy.alerts.settings`) and writes each alert
that fires or clears as one line -- or, with ``--json``, one JSON object a line
(:meth:`~nvtopy.alerts.events.AlertEvent.to_json`). Text from outside (command lines, user
names) is escaped for a terminal. SIGTERM and SIGINT end it with exit code 0, the poll in
progress completed and the driver closed.

``--once-free [N]`` is for scripts: it waits until N GPUs are free (the ``gpu-free`` rule's
definition and threshold, and its GPU scope: no process, under ``memory_mib`` MiB used),
prints their indices comma-separated (``0,3``; the lowest ones when more are free) and exits
0, so ``CUDA_VISIBLE_DEVICES=$(nvtopy watch --once-free 2) python train.py`` works. A GPU
counts once it has been free for ``--for`` seconds (default 0: free at one poll -- a script
wants a GPU now, not the rule's 30 s; ``--for 30`` asks for the rule's patience).
``--timeout S`` gives up after S seconds with one line on stderr and exit code 1.

Where notifications plug in: :func:`run` takes ``notify``, a callable given every event
(the notify layer's dispatcher, which must not block: a slow channel never delays the
poll). A notifier that raises is reported once on stderr and the watch goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..alerts.events import AlertEvent, Transition
from ..errors import NvtopyError, UsageError
from ..model import ALL_GROUPS
from ..textsafe import safe_text
from . import options
from .signals import stop_on_signals

if TYPE_CHECKING:
    from ..alerts.engine import AlertEngine
    from ..alerts.settings import AlertSettings
    from ..model import Snapshot
    from ..notify import Dispatcher

__all__ = ["build_parser", "channels_notifier", "event_line", "json_line", "run", "watch_loop"]

Notify = Callable[[AlertEvent], None]
DRIVER_TIMEOUT = options.DEFAULT_TIMEOUT  # seconds nvmlInit and the GPUs' first read may take
CLOSE_TIMEOUT = 3.0  # seconds the channels have, at the end, to send what is queued
MAX_WAIT_S = 7 * 86400.0  # --timeout and --for: a week at most


_count = options.whole_number(1, 256, "number of GPUs")
_seconds = options.seconds_between(0, MAX_WAIT_S)


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(
        command,
        "Evaluate the alert rules (the config's [alerts]) and write each alert that fires or clears as one line; "
        "or, with --once-free, wait for free GPUs and print their indices.",
    )
    parser.epilog = (
        "examples:\n"
        "  nvtopy watch\n"
        "  nvtopy watch --json >> alerts.jsonl\n"
        "  CUDA_VISIBLE_DEVICES=$(nvtopy watch --once-free 2 --timeout 3600) python train.py\n"
        "  nvtopy watch --demo --demo-fault xid=79:10@1"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object a line (JSONL) instead of text")
    parser.add_argument(
        "--once-free",
        type=_count,
        nargs="?",
        const=1,
        metavar="N",
        help="wait until N GPUs (default 1) are free (no process, memory under the gpu-free rule's memory_mib), "
        "print their indices comma-separated (0,3) and exit",
    )
    parser.add_argument(
        "--for",
        dest="for_",
        type=_seconds,
        metavar="SECONDS",
        help="with --once-free: seconds a GPU must have been free (default 0: free at one poll)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="with --once-free: give up after SECONDS (one line on stderr, exit code 1); default: wait on",
    )
    options.add_interval_option(parser, "seconds between polls")
    options.add_gpu_options(parser)
    options.add_health_options(parser)
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.once_free is None:
        for flag, value in (("--for", args.for_), ("--timeout", args.timeout)):
            if value is not None:
                parser.error(f"{flag} goes with --once-free")
    elif args.json:
        parser.error("--json does not go with --once-free (it prints GPU indices)")


def event_line(event: AlertEvent) -> str:
    """One transition as a line for people: time, FIRING/cleared, severity, rule, summary (and what to do).

    ``2026-11-29T12:00:00+0000 FIRING critical gpu-lost: GPU 1 of node fell off the bus -- Drain the node...``.
    Outside text in it is escaped for a terminal (it cannot retitle it or break the line).
    """
    record = event.to_json()
    firing = event.transition is Transition.FIRING
    words = f"{record['time']} {'FIRING' if firing else 'cleared'} {event.severity.value} {event.rule_id}: "
    words += event.summary
    if firing and event.action:
        words += f" -- {event.action}"
    return safe_text(words)


def json_line(event: AlertEvent) -> str:
    """One transition as a JSON object on one line (ASCII: nothing in it can reach a terminal raw)."""
    return json.dumps(event.to_json(), ensure_ascii=True, separators=(",", ":"))


class _Notifier:
    """Calls ``notify`` with each event; a notifier that raises is said once on stderr, never ends the watch."""

    def __init__(self, notify: Notify | None) -> None:
        self._notify = notify
        self._failed = False

    def __call__(self, event: AlertEvent) -> None:
        if self._notify is None:
            return
        try:
            self._notify(event)
        except Exception as exc:  # noqa: BLE001 - a channel's bug must not end the watch
            if not self._failed:
                self._failed = True
                options.warn_user(f"notifications failed: {type(exc).__name__}: {exc} (said once)")


def watch_loop(
    poll: Callable[[], Snapshot],
    engine: AlertEngine,
    interval: float,
    stop: threading.Event,
    emit: Notify,
    *,
    until: Callable[[AlertEngine], bool] | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Poll, evaluate, ``emit`` each event, every ``interval`` s until ``stop`` is set; the loop of ``watch``.

    ``until``: stop as soon as it is true of the engine (returns True then); ``deadline`` (on
    ``clock``): give up then (returns False). Returns False when stopped by ``stop`` too.
    """
    from ..sources.ticker import Ticker

    ticker = Ticker()
    while not stop.is_set():
        ticker.tick()
        for event in engine.observe(poll()):
            emit(event)
        if until is not None and until(engine):
            return True
        wait = ticker.remaining(interval)
        if deadline is not None:
            left = deadline - clock()
            if left <= 0:
                return False
            wait = min(wait, left)
        stop.wait(wait)
    return False


def _settings(args: argparse.Namespace) -> AlertSettings:
    """The rules and channels in force; a config file that cannot be read whole is a usage error here.

    Why stricter than the monitor (which warns and goes on with the defaults): an alerting service that
    started on the defaults after a typo in its file would alert on what its user turned off and send
    nowhere they set up -- and say so only once, in a log nobody reads.
    """
    from ..alerts.settings import alert_settings
    from ..config import load_config

    if getattr(args, "_config_loaded", None) is None:
        config, problems = load_config(getattr(args, "config", None) or None)
        if problems:
            said = problems[0].removesuffix("; using defaults")
            raise UsageError(f"{said} (nvtopy watch does not start on a config file it cannot read whole)")
        args._config_loaded = (config, problems)
    config = options.user_config(args)
    return alert_settings(config.alerts_rules, _channels(config.alerts_channels))


DEFAULT_CHANNELS = ("desktop",)
"""Where ``watch`` sends alerts when the config sets no ``[alerts] channels``: the desktop, where one runs."""


def _channels(configured: tuple[str, ...] | None, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The channel entries in force: the config's; when it sets none, the desktop's where a session bus exists.

    Why only then: on a server (no session bus) a default desktop channel could only fail; the line on
    stdout is the alert there. ``channels = []`` in the config turns every channel off.
    """
    if configured is not None:
        return configured
    env = os.environ if environ is None else environ
    return DEFAULT_CHANNELS if env.get("DBUS_SESSION_BUS_ADDRESS") else ()


def _said_on_stderr(channel: str, text: str) -> None:
    options.warn_user(f"alert channel {safe_text(channel)}: {safe_text(text)}")


def channels_notifier(
    settings: AlertSettings, on_problem: Callable[[str, str], None] = _said_on_stderr
) -> Dispatcher | None:
    """A dispatcher for ``settings.channels`` (started), or None: none configured. A bad entry: UsageError.

    The dispatcher never blocks the caller (a deadline per send, a bounded queue per channel); a channel's
    trouble is said once through ``on_problem`` (failing, working again, dropping alerts), never once per
    alert: on stderr for ``watch``, a toast in the monitor. The caller closes it.
    """
    if not settings.channels:
        return None
    from ..notify import open_dispatcher

    return open_dispatcher(settings.channels, on_problem)


def run(command: str, args: argparse.Namespace, *, notify: Notify | None = None) -> int:
    """The watch (or ``--once-free``'s wait).

    ``notify`` gets every event besides the line on stdout (default: :func:`channels_notifier`'s, from the
    config's channels). ``--once-free`` notifies nobody: a script's wait is no alert.
    """
    from ..alerts.engine import AlertEngine
    from ..sources.collector import Collector
    from ..sources.poller import Poller

    settings = _settings(args)  # a bad [alerts] entry: one line, exit 2, before any driver is opened
    once_free = args.once_free
    if once_free is not None:
        if not settings.get("gpu-free").enabled:
            raise UsageError("--once-free: the gpu-free rule is disabled in the config ([alerts.gpu-free])")
        settings = settings.only("gpu-free", for_s=args.for_ or 0.0, clear_s=0.0, cooldown_s=0.0)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    # The channels: a bad entry is one line and exit 2 before the driver opens. --once-free notifies nobody.
    dispatcher = channels_notifier(settings) if once_free is None and notify is None else None
    with stop_on_signals() as stop:  # from the start: a SIGTERM while the driver opens ends it cleanly too
        backend = options.open_backend_within(args, DRIVER_TIMEOUT)
        collector: Collector | None = None
        poller: Poller | None = None
        try:
            collector = Collector(backend, history=1, thresholds=options.health_thresholds(args), timeline=False)
            # --timeout is --once-free's own here: the driver gets the usual wait, as every command's.
            options.open_selection(argparse.Namespace(**{**vars(args), "timeout": DRIVER_TIMEOUT}), collector)
            poller = Poller(backend, interval=args.interval, groups=ALL_GROUPS, processes=True, collector=collector)
            poller.watch_events()
            engine = AlertEngine(settings)
            if once_free is None:
                notifier = _Notifier(notify if notify is not None or dispatcher is None else dispatcher.send)
                write = json_line if args.json else event_line

                def emit(event: AlertEvent) -> None:
                    sys.stdout.write(write(event) + "\n")
                    sys.stdout.flush()
                    notifier(event)

                watch_loop(poller.poll_once, engine, args.interval, stop, emit)
                return 0
            found = watch_loop(
                poller.poll_once,
                engine,
                args.interval,
                stop,
                lambda _event: None,
                until=lambda e: len(e.firing_gpus("gpu-free", holding=True)) >= once_free,
                deadline=deadline,
            )
        finally:
            options.release_backend(backend, collector, poller)
            if dispatcher is not None:
                dispatcher.close(timeout=CLOSE_TIMEOUT)  # what is queued goes out; a hung channel is left behind
    free = engine.firing_gpus("gpu-free", holding=True)
    if not found:
        why = "stopped by a signal" if stop.is_set() else f"gave up after {args.timeout:g} s"
        raise NvtopyError(f"--once-free: {why}: {len(free)} of the {once_free} GPUs asked for were free")
    print(",".join(str(i) for i in free[:once_free]))
    return 0

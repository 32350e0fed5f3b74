"""``nvtopy`` itself: the interactive monitor, ``--once`` / ``--json`` snapshots, ``--remote``, ``--prometheus``,
``--ssh``.

Alerts: the monitor evaluates the config's ``[alerts]`` rules on what it shows (local GPUs and fleets
alike; :mod:`nvtopy.tui.alert_feed` says why). On this machine's GPUs it also hands each transition to
the channels of ``[alerts] channels`` (:func:`nvtopy.commands.watch.channels_notifier`, the one seam for
both commands); a fleet's (``--remote``, ``--prometheus``, ``--ssh``) are shown, never sent: sending them
is the fleet's Alertmanager's job, and every open monitor sending them would page a team once per viewer.
A bad ``[alerts]`` entry is one line and exit 2 before anything is drawn, as for ``nvtopy watch``.

Why the lazy imports: ``nvtopy --once --json`` is run from scripts and cron jobs
and must start fast, so neither Textual nor rich is imported unless the chosen
mode draws with them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import NvtopyError, UsageError
from ..interval import remote_interval
from ..textsafe import safe_text
from . import options
from .options import Parser, add_gpu_options, backend_opener, resolve_selection, warn_user

if TYPE_CHECKING:
    from ..alerts.settings import AlertSettings
    from ..config import Config
    from ..model import Snapshot
    from ..tui.app import NvtopyApp

__all__ = ["build_parser", "check_args", "run"]


def build_parser(command: str = "monitor") -> argparse.ArgumentParser:
    parser = Parser(
        prog="nvtopy",
        description="A top-like monitor for NVIDIA GPUs: without a COMMAND, the interactive monitor; "
        "with --once, one snapshot as text (--json: as JSON). Try 'nvtopy --demo' on any machine: "
        "it shows simulated GPUs.\n\n"
        f"{options.commands_text()}",
        epilog="examples:\n"
        "  nvtopy --demo         the monitor, on simulated GPUs (q quits)\n"
        "  nvtopy --once         one snapshot of this machine's GPUs, as text\n"
        "  nvtopy --once --json  the same as JSON\n"
        "  nvtopy doctor         what is wrong with the driver or the GPUs, and the fix",
        takes_command=True,
    )
    parser.add_argument("--version", action="version", version=f"nvtopy {__version__}")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="with --once: print the snapshot as JSON")
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes")
    options.add_interval_option(parser, "refresh interval", from_config=True)
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective configuration (config file and flags) as TOML, and exit",
    )
    tui = parser.add_argument_group("interactive monitor")
    tui.add_argument("--readonly", action="store_true", help="never send signals (the kill keys are disabled)")
    tui.add_argument(
        "--remote",
        metavar="URL[,URL...]",
        help="show other hosts' GPUs, read from their exporters (nvtopy exporter or dcgm-exporter), e.g. node2:9400",
    )
    tui.add_argument(
        "--prometheus",
        metavar="URL",
        help="show every GPU a Prometheus server has from dcgm-exporter or nvtopy exporters, grouped by host, "
        "e.g. http://prom:9090 (read-only; two queries per refresh)",
    )
    tui.add_argument(
        "--ssh",
        metavar="HOSTS",
        help="show the GPUs of machines reached with your ssh: [user@]host[:port] or @group, comma-separated, "
        "e.g. gpu1,gpu2 (nvtopy there if installed, else nvidia-smi; read-only)",
    )
    tui.add_argument(
        "--hostfile",
        metavar="FILE",
        help="like --ssh, the hosts of FILE: one a line, # comments",
    )
    tui.add_argument(
        "--ssh-config",
        metavar="FILE",
        help="with --ssh: the ssh client's config file (ssh -F) instead of ~/.ssh/config",
    )
    tui.add_argument(
        "--ssh-option",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="with --ssh: an ssh option (ssh -o), e.g. ProxyJump=bastion; may be repeated",
    )
    tui.add_argument(
        "--where",
        metavar="MATCHERS",
        help="with --prometheus: only the series these PromQL label matchers select, e.g. 'Hostname=~\"node[1-4]\"'",
    )
    tui.add_argument(
        "--ca-file",
        metavar="PEM",
        help="with --remote or --prometheus: verify https:// servers against the CA certificates in this file "
        "instead of the system's (a private CA)",
    )
    tui.add_argument(
        "--view",
        choices=("auto", "full", "compact"),
        help="GPU panels: full, one compact line per GPU, or chosen by terminal size (default auto; key v)",
    )
    tui.add_argument("--theme", type=options.theme_name, metavar="NAME", help=options.THEME_HELP)
    options.add_timeout_option(
        parser,
        "with --once: how long to wait for the driver before a GPU is marked not responding; "
        "with --prometheus: each query's deadline",
    )
    add_gpu_options(parser)
    options.add_health_options(parser)
    return parser


HEAD_START_WAIT_S = 0.15
"""The longest the monitor waits for its poller's first snapshot before it imports the UI (fake driver, 8 GPUs x 64
processes: 50-150 ms, the longer on a busy VM). Past it the UI loads beside the poller, which says what it waits for:
a slow driver holds the monitor's start this long at most (``--once``'s head start waits 0.1 s)."""

# The Config fields the monitor has flags for (besides the health thresholds, options.HEALTH_FLAGS).
CONFIG_FLAGS = ("interval", "view", "theme")


def _print_config(args: argparse.Namespace, config: Config) -> int:
    """``--print-config``: the effective configuration as a config file (it reads back as the same settings)."""
    from ..config import to_toml
    from ..notify import redacted_entry

    path = options.config_file(args)
    if path is None:
        source = "no config file (no home directory): the defaults"
    elif path.is_file():
        troubled = " (with the warnings above)" if options.config_warnings(args) else ""
        source = f"read from {path}{troubled}"
    else:
        source = f"{path} does not exist: the defaults"
    header = ("nvtopy's effective configuration", source, "command-line flags win over the file")
    sys.stdout.write(to_toml(config, header, channel_text=redacted_entry))  # a channel's secret never printed
    return 0


def _configure(app: NvtopyApp, args: argparse.Namespace, config: Config) -> None:
    """The app's starting state from the config (sort, columns, group-by, theme, ...) and its warnings."""
    from ..tui.preferences import configure

    configure(app, config, options.config_file(args))
    app.startup_warnings = options.config_warnings(args)


def monitor_alerts(args: argparse.Namespace) -> AlertSettings:
    """The monitor's alert rules (the config's ``[alerts]``): its channels as the config sets them, none if unset.

    Why no default channel here (``nvtopy watch`` has the desktop's): the monitor shows each alert itself, as a
    toast and on its alerts screen. A bad entry raises :class:`~nvtopy.alerts.settings.AlertConfigError` (a
    usage error: one line, exit 2).
    """
    from ..alerts.settings import alert_settings

    config = options.user_config(args, *CONFIG_FLAGS)
    return alert_settings(config.alerts_rules, config.alerts_channels or ())


def _write_json(snapshot: Snapshot) -> None:
    """The snapshot as JSON on stdout, always UTF-8 (RFC 8259), whatever the locale's encoding."""
    from ..formats.contract import dumps

    options.write_utf8(dumps(snapshot) + "\n")


def _run_once(args: argparse.Namespace) -> int:
    """One snapshot, whatever the driver does (:func:`~nvtopy.commands.options.read_one_snapshot`), printed.

    Why the config file and the printer come in ``meanwhile``: nothing of ``--once`` depends on the
    config (it is read for its warnings, as every run reads it), and the printer's imports need no
    driver, so both are done while the GPUs are read -- on Hopper, during the wait for the GPM pair.
    """
    printers: list[Callable[[Snapshot, int], None]] = []

    def meanwhile() -> None:
        options.user_config(args, *CONFIG_FLAGS)
        printers.append(_printer(args))

    snapshot, gpu_count = options.read_one_snapshot(args, meanwhile=meanwhile)
    printers[0](snapshot, gpu_count)
    return 0


def _printer(args: argparse.Namespace) -> Callable[[Snapshot, int], None]:
    """What prints ``--once``'s snapshot (JSON or text), its modules imported now."""
    if args.json:
        from ..formats.contract import dumps  # noqa: F401 -- imported now, during the wait; _write_json uses it

        return lambda snapshot, _count: _write_json(snapshot)
    from ..render.text import render_snapshot

    color = not args.no_color
    return lambda snapshot, count: render_snapshot(snapshot, sys.stdout, color=color, gpu_count=count)


def _run_interactive(args: argparse.Namespace) -> int:
    """The monitor. It draws at once: the backend is opened and the GPUs selected on its poller thread.

    The poller is started before Textual and the app's modules are imported, and the main
    thread waits for its first snapshot (at most :data:`HEAD_START_WAIT_S`) before importing
    them, so the first frame shows the GPUs and their processes instead of a "starting"
    screen followed by the poll. Why wait rather than import beside it: both threads need the
    GIL, and the poller's hundreds of NVML and ``/proc`` calls each hand it back and may wait
    up to a switch interval (5 ms) for the importing thread to give it up (tried 2026-11-27:
    first frame 0.52 s against 0.42 s on a quiet VM); alone, its open and first poll take
    about 60 ms of the fake driver's 8 GPUs x 64 processes. A slower driver is waited for
    that long at most, then the UI loads beside it and says what it waits for. The
    selection's warnings said on the poller's thread before the app has mounted wait for it
    (:mod:`nvtopy.tui.notices`).

    An error found there (no driver, --gpus naming a GPU that is not there) ends
    the app and is raised here, once the terminal is restored: the same one line
    and exit code as when it is found before the app starts. Quitting never
    waits for the driver (see :mod:`nvtopy.tui.app`), so the backend is not closed
    here: its poller thread closes it if the driver lets it before the process exits.
    """
    import gc

    from ..sources.gc_policy import MONITOR_THRESHOLDS, settle_for_monitor
    from ..sources.poller import Poller
    from ..tui.notices import LateNotices

    collecting, settled = gc.isenabled(), False

    def settle() -> None:
        """After the first frame: the collector settled for the long run, and collecting again.

        Why not before: Textual's imports and the first poll set off collections that walk every
        object alive (about 15 ms of the start), and the settling collection itself took 8-30 ms
        before the first frame; none of it frees anything the first frame needs.
        """
        nonlocal settled
        settled = True
        settle_for_monitor()  # the collector ran about a tenth of the monitor's CPU at CPython's thresholds
        if collecting:
            gc.enable()

    waiting_for, opener = backend_opener(args, close_at_exit=False)  # usage errors: now, before drawing
    alerts = monitor_alerts(args)  # a bad [alerts] entry too
    app: NvtopyApp | None = None  # once made: what channel_trouble tells
    warnings: list[str] = []
    notices = LateNotices()

    def warn(text: str) -> None:
        """A selection warning (why no GPU is shown, CUDA's MIG rule): in the monitor, on stderr after it."""
        warnings.append(text)
        notices.say(text)  # thread-safe; held until the app has mounted

    def channel_trouble(channel: str, text: str) -> None:
        """A channel failing, back, dropping alerts (once each, from the dispatcher's thread): a toast."""
        if app is not None:  # alerts are sent from the app's snapshots: it exists by then
            app.notify(safe_text(f"alert channel {channel}: {text}"), severity="warning", timeout=15, markup=False)

    dispatcher = None
    if alerts.channels:  # none configured, the usual: nvtopy watch's module (and json) is not imported
        from .watch import channels_notifier

        dispatcher = channels_notifier(alerts, channel_trouble)  # a bad entry: one line, exit 2, before drawing
    gc.disable()  # until the first frame is out: the imports and the first poll, uninterrupted (see settle)
    poller = Poller.for_monitor(
        None,
        opener=opener,
        select=lambda collector: resolve_selection(args, collector, warn=warn),
        waiting_for=waiting_for,
        interval=args.interval,
        thresholds=options.health_thresholds(args),
    )
    poller.start()  # the head start: the driver opened and read before the UI's modules load
    try:
        poller.wait_for_first(HEAD_START_WAIT_S)  # alone: the UI's imports do not compete with it for the GIL
        NvtopyApp = _import_app_without_tls()  # noqa: N806 -- a class, imported late
        app = NvtopyApp(
            poller,
            readonly=args.readonly,
            layout=args.view,
            alerts=alerts,
            notify=None if dispatcher is None else dispatcher.send,
            notices=notices,
            after_first_frame=settle,
        )
        _configure(app, args, options.user_config(args, *CONFIG_FLAGS))
        gc.set_threshold(*MONITOR_THRESHOLDS)  # the monitor's from the start; collected and frozen by settle()
        app.run()
    finally:
        if collecting and not settled:  # the app never drew (an error, a quit at once): as before the start
            gc.enable()
        poller.stop(timeout=0.0)  # the app stopped it on quit; never waits for a driver call in progress
        if dispatcher is not None:
            from .watch import CLOSE_TIMEOUT

            dispatcher.close(timeout=CLOSE_TIMEOUT)  # what is queued goes out; a hung channel is left behind
    for warning in warnings:
        warn_user(warning)
    if app.open_error is not None:
        raise app.open_error
    return 0


def _import_app_without_tls() -> type[NvtopyApp]:
    """The TUI's app class, imported so that asyncio leaves out TLS: the local monitor never talks TLS.

    asyncio imports :mod:`ssl` for the event loop's TLS transports, and that maps
    OpenSSL (libcrypto, libssl): 3.3 MiB of the local monitor's resident memory and
    about 10 ms of its start (``make bench-peers``). A ``None`` in ``sys.modules``
    makes those imports fail the way they do on a Python built without TLS, which
    asyncio handles; the entry is removed again at once, so a later ``import ssl``
    (urllib's, for a remote host) works. Where asyncio is loaded already (tests, an
    embedding application) nothing changes.
    """
    blocked = "asyncio" not in sys.modules and "ssl" not in sys.modules
    if blocked:
        sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        from ..tui.app import NvtopyApp
    finally:
        if blocked and sys.modules.get("ssl", 0) is None:
            del sys.modules["ssl"]
    return NvtopyApp


def _run_remote(args: argparse.Namespace) -> int:
    from ..sources.remote.exporters import RemoteHosts

    if args.gpus or args.only_visible or args.demo or args.demo_gpus is not None:
        raise UsageError("--remote shows whole hosts: it cannot be combined with --gpus, --only-visible or --demo")
    urls = [u for u in args.remote.split(",") if u.strip()]
    if not urls:  # '', ' ', ',': never a fall-through to the local GPUs
        raise UsageError("--remote: give at least one URL, e.g. --remote node2:9400")
    source = RemoteHosts(urls, interval=remote_interval(args.interval), ca_file=args.ca_file)
    return _show(args, source, source.poll_once)


def _nothing_read(snapshot: Snapshot) -> str | None:
    """Why no host could be read (every line of ``snapshot`` a host's error), one line; None when one could."""
    if not snapshot.gpus or not all(gpu.note and gpu.lost for gpu in snapshot.gpus):
        return None
    hosts = len({gpu.static.host for gpu in snapshot.gpus})
    said = "the host could not be read" if hosts == 1 else f"none of {hosts} hosts could be read"
    return f"{said}: " + "; ".join(gpu.note or "" for gpu in snapshot.gpus)


def _show(args: argparse.Namespace, source: Any, read_once: Callable[[], Snapshot]) -> int:
    """A source of other hosts' GPUs (``--remote``, ``--prometheus``) as ``--once``, ``--json`` or the monitor.

    ``--once`` when no host could be read is an error (one line, exit 1), as an unreadable Prometheus server is:
    a script must not take a table of errors for GPUs. Hosts that could not be read beside others that could
    are each a line under the table (the JSON has them as lost entries with their ``note``).
    """
    if args.once:
        snapshot = read_once()
        failed = _nothing_read(snapshot)
        if failed is not None:
            raise NvtopyError(failed)
        if args.json:
            _write_json(snapshot)
        else:
            from ..render.text import render_snapshot

            render_snapshot(snapshot, sys.stdout, color=not args.no_color)
        return 0
    alerts = monitor_alerts(args)  # a bad [alerts] entry: one line, exit 2, before drawing; never sent (above)
    from ..sources.gc_policy import settle_for_fleet
    from ..tui.app import NvtopyApp

    app = NvtopyApp(source, layout=args.view, alerts=alerts)  # a fleet's alerts: shown, not sent (see above)
    _configure(app, args, options.user_config(args, *CONFIG_FLAGS))
    settle_for_fleet()  # thousands of short-lived objects a refresh: a collector set for them (gc_policy)
    app.run()  # on quit it stops the source: every ssh ended before it returns
    from .dispatch import exit_at_once

    exit_at_once()  # the fleet's objects are not freed one by one at exit: the prompt comes back at once
    return 0


def _run_prometheus(args: argparse.Namespace) -> int:
    """The fleet a Prometheus server knows of: the monitor, or one snapshot (``--once``, ``--json``).

    Usage errors (the URL, ``--where``) are one line and exit 2 before anything is asked;
    with ``--once``, a server that cannot be read is one line and exit 1, and a matcher
    the server refuses (a bad regex) is a usage error.
    """
    from ..sources.remote.fleet import PrometheusFleet
    from ..sources.remote.prometheus import PrometheusError

    if args.gpus or args.only_visible or args.demo or args.demo_gpus is not None:
        raise UsageError("--prometheus shows the whole fleet: it cannot be combined with --gpus or --demo")
    source = PrometheusFleet(
        args.prometheus,
        where=args.where or "",
        interval=remote_interval(args.interval),
        timeout=args.timeout,
        ca_file=args.ca_file,
    )

    def read_once() -> Snapshot:
        try:
            return source.read_once()
        except PrometheusError as exc:
            if args.where and exc.error_type == "bad_data":
                raise UsageError(f"--where: the server refused it: {exc}") from None
            raise

    return _show(args, source, read_once)


def _ssh_wanted(args: argparse.Namespace) -> bool:
    return args.ssh is not None or args.hostfile is not None


def _expanded(path: str | None) -> str | None:
    """A path as the user wrote it in the config file, ``~`` expanded (ssh's ``-F`` takes it literally)."""
    import os

    return None if path is None else os.path.expanduser(path)


def _run_ssh(args: argparse.Namespace, config: Config) -> int:
    """Machines reached over SSH: the monitor, or one snapshot of them all (``--once``, ``--json``)."""
    from ..sources.remote.ssh.hosts import SshHosts
    from ..sources.remote.ssh.targets import expand, read_hostfile, split_hosts

    if args.gpus or args.only_visible or args.demo or args.demo_gpus is not None:
        raise UsageError("--ssh shows whole hosts: it cannot be combined with --gpus, --only-visible or --demo")
    specs = split_hosts(args.ssh) if args.ssh is not None else []
    if args.hostfile is not None:
        specs += read_hostfile(args.hostfile)
    where = "--ssh" if args.hostfile is None else ("--hostfile" if args.ssh is None else "--ssh/--hostfile")
    targets = expand(specs, dict(config.ssh_groups), where)
    source = SshHosts(
        targets,
        interval=remote_interval(args.interval),
        program=config.ssh_program,
        config_file=_expanded(args.ssh_config if args.ssh_config is not None else config.ssh_config),
        options=(*config.ssh_options, *args.ssh_option),
        remote_nvtopy=config.ssh_remote_nvtopy,
        connect_timeout=config.ssh_connect_timeout,
    )
    return _show(args, source, source.read_once)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations argparse cannot express: a usage error, one line."""
    if args.json and not args.once:
        parser.error("--json needs --once (or use 'nvtopy log --format jsonl')")
    if args.where is not None and args.prometheus is None:
        parser.error("--where needs --prometheus URL")
    if args.prometheus is not None and args.remote is not None:
        parser.error("--prometheus and --remote are two ways to see other hosts: give one")
    if _ssh_wanted(args) and (args.prometheus is not None or args.remote is not None):
        parser.error("--ssh, --remote and --prometheus are three ways to see other hosts: give one")
    if (args.ssh_config is not None or args.ssh_option) and not _ssh_wanted(args):
        parser.error("--ssh-config and --ssh-option need --ssh HOSTS or --hostfile FILE")
    if args.ssh_option:
        from ..config import ssh_option_ok  # here: --once imports no more than it needs

        for option in args.ssh_option:
            if not ssh_option_ok(option):
                said = repr(safe_text(option)[:80])
                parser.error(f"--ssh-option: {said} is not KEY=VALUE (an ssh -o option, e.g. ProxyJump=bastion)")
    if args.ca_file is not None and args.prometheus is None and args.remote is None:
        parser.error("--ca-file needs --remote or --prometheus (the servers it verifies)")


def run(command: str, args: argparse.Namespace) -> int:
    """The monitor, a snapshot, or other hosts' GPUs, as the options say; ``--print-config`` prints the config.

    The config file's values stand where a flag was not given (``interval``, ``view``, ``theme``, the health
    thresholds: :func:`options.user_config`).
    """
    others = args.prometheus is not None or args.remote is not None or _ssh_wanted(args)
    if args.once and not args.print_config and not others:
        return _run_once(args)  # it reads the config file while it waits for the driver
    config = options.user_config(args, *CONFIG_FLAGS)
    if args.print_config:
        return _print_config(args, config)
    args.interval, args.view = config.interval, config.view
    if args.prometheus is not None:  # also --prometheus '': an error there, not a fall-through to NVML
        return _run_prometheus(args)
    if args.remote is not None:  # also --remote '': an error there, not a fall-through to NVML
        return _run_remote(args)
    if _ssh_wanted(args):  # also --ssh '': an error there, not a fall-through to NVML
        return _run_ssh(args, config)
    return _run_interactive(args)

"""``nvtopy serve-stdio``: this machine's snapshots on stdout, the far end of ``nvtopy --ssh``.

The monitor runs ``ssh HOST 'nvtopy serve-stdio ...'`` once per host and reads the
lines this command writes (:mod:`nvtopy.formats.stream`: a hello at once, then a
snapshot as soon as one is read and, an interval apart, what changed since (patches, a
whole snapshot every few minutes), or a failure line and a non-zero exit). Nobody runs it
by hand.

Why it ends the way it does: it runs on every GPU box for as long as a monitor is open
somewhere, so it must never outlive that monitor. The near side closing the session is
seen three ways, and each ends it with exit 0 and nothing on stderr: its stdin reaches
end of file (a thread reads and drops whatever comes in), a signal (SIGTERM, SIGHUP,
SIGINT), or its stdout is closed (EPIPE). A stop finishes the poll in progress; should
the main thread stay stuck anyway (a write to a reader that stopped reading, a driver
call), the process exits :data:`GRACE_S` seconds after the stop.

Why the poller and not a thread of its own: it is ``nvtopy log``'s loop (the ticker,
:class:`~nvtopy.sources.poller.Poller` with a GPU a thread and a deadline, so a hung GPU
is marked "not responding" and the stream goes on), reading what the monitor shows
(:data:`~nvtopy.sources.poller.MONITOR_GROUPS`) at the monitor's cadences. Read-only:
no signals are sent.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from ..errors import BackendUnavailableError, NvtopyError
from ..formats.stream import StreamWriter, error_line, hello_line
from . import options
from .signals import stop_on_signals

if TYPE_CHECKING:
    from ..sources.collector import Collector
    from ..sources.poller import Poller

__all__ = ["GRACE_S", "build_parser", "run"]

GRACE_S = 5.0
"""Seconds the main thread has to finish after a stop before the process exits regardless."""
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(
        command,
        "Stream this machine's snapshots on stdout as JSON lines: the far end of 'nvtopy --ssh', which runs it "
        "over ssh (you never run it yourself).",
    )
    parser.epilog = (
        'The first line is the hello ({"nvtopy_stream": 1, ...}), then one snapshot a line as nvtopy record '
        'writes them, or an error line ({"nvtopy_stream": 1, "error": ...}) and a non-zero exit. It ends when '
        "its stdin is closed, on SIGTERM, SIGHUP or SIGINT, and when its stdout is closed."
    )
    options.add_interval_option(parser, "seconds between snapshots")
    options.add_timeout_option(parser, "seconds the driver may take to open and the GPUs to be first read")
    options.add_gpu_options(parser)
    options.add_demo_hostname_option(parser, "several hosts behind one sshd")
    options.add_health_options(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    if sys.stdout is None:  # started with stdout closed: nobody to stream to
        return 0
    try:
        with _stop_requests() as stop:
            _write(hello_line(_hostname(args), args.interval))
            _serve(args, stop)
    except ConnectionError:  # the reader went away (EPIPE, a reset): the end of the session, no error
        options.discard_stdout()
    return 0


def _serve(args: argparse.Namespace, stop: threading.Event) -> None:
    """Open the GPUs and write a snapshot an interval until ``stop``; a failure is the error line, then raised."""
    from ..sources.collector import Collector
    from ..sources.poller import MONITOR_GROUPS, Poller
    from ..sources.ticker import Ticker

    try:
        backend = options.open_backend_within(args, args.timeout)
    except Exception as exc:
        _fail(exc)
        raise
    collector: Collector | None = None
    poller: Poller | None = None
    try:
        collector = Collector(backend, history=1, thresholds=options.health_thresholds(args), timeline=False)
        options.open_selection(args, collector)
        if backend.device_count() == 0:
            raise BackendUnavailableError(f"no GPU found on {_hostname(args)}: the driver reports none")
        poller = Poller(backend, interval=args.interval, groups=MONITOR_GROUPS, processes=True, collector=collector)
        poller.watch_events()
        ticker = Ticker()  # log's pace: drift compensated, missed ticks skipped; the first poll at once
        writer = StreamWriter()  # the first snapshot whole, then what changed (formats.stream: patches)
        while not stop.is_set():
            ticker.tick()
            snapshot = poller.poll_once()
            if stop.is_set():
                break
            _write(writer.snapshot(snapshot))
            stop.wait(ticker.remaining(args.interval))
    except ConnectionError:
        raise
    except Exception as exc:
        _fail(exc)
        raise
    finally:
        options.release_backend(backend, collector, poller)


def _hostname(args: argparse.Namespace) -> str:
    """The host the hello names: ``--demo-hostname`` for simulated GPUs given one, else this machine's."""
    return getattr(args, "demo_hostname", None) or os.uname().nodename


def _write(line: str) -> None:
    """One line on stdout as UTF-8, flushed: the near side reads it now, not when a buffer fills."""
    options.write_utf8(line)
    sys.stdout.flush()


def _fail(exc: Exception) -> None:
    """The error line for ``exc`` (the same words :func:`~nvtopy.commands.dispatch.guarded` prints on stderr)."""
    if isinstance(exc, ConnectionError):
        return
    message = str(exc) if isinstance(exc, NvtopyError) else f"internal error: {type(exc).__name__}: {exc}"
    with suppress(OSError):  # a reader already gone: the exit code still says it
        _write(error_line(message))


@contextmanager
def _stop_requests() -> Iterator[threading.Event]:
    """An event set by a stop signal or the end of stdin; once set, the process has :data:`GRACE_S` to finish."""
    finished = threading.Event()
    with stop_on_signals(_STOP_SIGNALS) as stop:  # the event set from a thread of the handler's (see there)
        threading.Thread(target=_watch_stdin, args=(stop,), name="nvtopy-stdin", daemon=True).start()
        threading.Thread(target=_exit_after_grace, args=(stop, finished), name="nvtopy-grace", daemon=True).start()
        try:
            yield stop
        finally:
            finished.set()
            stop.set()  # the grace thread ends too


def _watch_stdin(stop: threading.Event) -> None:
    """Read stdin to its end, dropping what comes, then ask for the stop: the near side has closed the session."""
    try:
        descriptor = sys.stdin.fileno()
        while os.read(descriptor, 1 << 16):
            pass
    except (OSError, ValueError, AttributeError):  # no stdin at all (closed, None): nobody is on the other side
        pass
    stop.set()


def _exit_after_grace(stop: threading.Event, finished: threading.Event) -> None:
    """After a stop, give the main thread :data:`GRACE_S`; a thread stuck in a write or the driver must not keep
    the process alive after its monitor is gone."""
    stop.wait()
    if not finished.wait(GRACE_S):
        os._exit(0)

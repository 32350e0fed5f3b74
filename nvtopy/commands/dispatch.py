"""Command line: ``nvtopy`` (TUI), ``--once`` / ``--json`` snapshots, and the shared GPU options.

Why the lazy imports: ``nvtopy --once --json`` is run from scripts and cron jobs
and must start fast, so neither Textual nor rich is imported unless the chosen
mode draws with them. Every error the user can cause is one line on stderr and
a non-zero exit (2 for bad arguments, 1 for an unusable machine), never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from .._version import __version__
from ..errors import NvtopyError, UsageError

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..model import Snapshot
    from ..sources.collector import Collector

__all__ = ["backend_opener", "build_parser", "main", "open_backend", "resolve_selection"]

MIN_INTERVAL = 0.1
MAX_INTERVAL = 86400.0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def interval_type(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid interval {text!r}: give seconds, e.g. 0.5 or 2") from None
    if not MIN_INTERVAL <= value <= MAX_INTERVAL:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"interval must be between {MIN_INTERVAL} and {MAX_INTERVAL:.0f} seconds")
    return value


def _gpu_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid GPU count {text!r}") from None
    if not 0 <= value <= 256:
        raise argparse.ArgumentTypeError("GPU count must be between 0 and 256")
    return value


def add_gpu_options(parser: argparse.ArgumentParser) -> None:
    """Options every mode shares: which GPUs, which backend."""
    group = parser.add_argument_group("GPU selection")
    group.add_argument(
        "--gpus",
        metavar="LIST",
        help="only these GPUs: comma-separated indices, PCI bus ids (3b:00.0) or UUIDs/unique prefixes",
    )
    group.add_argument(
        "--only-visible",
        action="store_true",
        help="only the GPUs CUDA_VISIBLE_DEVICES exposes (CUDA's rules)",
    )
    demo = parser.add_argument_group("simulated GPUs (no NVIDIA driver needed)")
    demo.add_argument("--demo", action="store_true", help="use simulated GPUs instead of NVML")
    demo.add_argument("--demo-gpus", type=_gpu_count, metavar="N", help="number of simulated GPUs (default 4)")
    demo.add_argument("--demo-model", metavar="NAME", help="simulated GPU model, e.g. 'A100-SXM4-80GB' or 'RTX 4090'")
    demo.add_argument("--demo-seed", type=int, default=0, metavar="N", help="seed of the simulation (default 0)")
    demo.add_argument(
        "--demo-procs", type=_gpu_count, default=3, metavar="N", help="process slots per simulated GPU (default 3)"
    )
    demo.add_argument(
        "--demo-steady", action="store_true", help="every process slot always busy (exact counts, for benchmarks)"
    )
    demo.add_argument(
        "--demo-fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a fault: lost@1, unsupported=fan+power@0, no-process-memory, access-denied, slow=3, ...",
    )


COMMANDS = {
    "log": ("log", "log samples as CSV or JSONL (like nvidia-smi --query-gpu --loop)"),
    "record": ("log", "record snapshots to a file, for 'nvtopy replay'"),
    "replay": ("replay", "replay a recording in the monitor"),
    "exporter": ("exporter", "serve Prometheus metrics under dcgm-exporter's names"),
}


def command_parser(command: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``nvtopy COMMAND``, with the same one-line errors."""
    return _Parser(prog=f"nvtopy {command}", description=description)


def build_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  nvtopy {name:<9} {help_}" for name, (_, help_) in COMMANDS.items())
    parser = _Parser(
        prog="nvtopy",
        description="A top-like monitor for NVIDIA GPUs: interactive TUI, scriptable snapshots.",
        epilog=f"commands (nvtopy COMMAND --help):\n{commands}\n\n"
        "Without --once, nvtopy starts the interactive monitor. Try 'nvtopy --demo' on any machine.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nvtopy {__version__}")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="with --once: print the snapshot as JSON")
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes")
    parser.add_argument(
        "--interval",
        type=interval_type,
        default=1.0,
        metavar="SECONDS",
        help=f"refresh interval (default 1.0; {MIN_INTERVAL} to {MAX_INTERVAL:.0f})",
    )
    tui = parser.add_argument_group("interactive monitor")
    tui.add_argument("--readonly", action="store_true", help="never send signals (the kill keys are disabled)")
    tui.add_argument(
        "--remote",
        metavar="URL[,URL...]",
        help="show other hosts' GPUs, read from their exporters (nvtopy exporter or dcgm-exporter), e.g. node2:9400",
    )
    tui.add_argument(
        "--view",
        choices=("auto", "full", "compact"),
        default="auto",
        help="GPU panels: full, one compact line per GPU, or chosen by terminal size (default auto; key v)",
    )
    add_gpu_options(parser)
    return parser


DEMO_MODEL = "H100 80GB HBM3"


def backend_opener(args: argparse.Namespace, *, close_at_exit: bool = True) -> tuple[str, Callable[[], Backend]]:
    """What :func:`open_backend` does, in two steps: check the options now, open the backend later.

    Returns what a slow start waits for ("the NVIDIA driver") and the function
    that opens the backend (``nvmlInit``: as slow as the driver; the monitor
    calls it on its poller thread). Every usage error (an unknown or ambiguous
    --demo-model, a bad --demo-fault, a GPU the simulation lacks) is raised here,
    at once, before anything waits for a driver.
    """
    demo_options = (
        args.demo_gpus is not None,
        args.demo_model is not None,
        args.demo_fault,
        args.demo_procs != 3,
        args.demo_steady,
    )
    if args.demo or any(demo_options):
        from ..backends.sim_catalog import find_model
        from ..backends.sim_faults import parse_fault_specs

        gpus = 4 if args.demo_gpus is None else args.demo_gpus
        model = find_model(DEMO_MODEL if args.demo_model is None else args.demo_model)
        faults = parse_fault_specs(args.demo_fault, gpus)

        def open_simulated() -> Backend:
            from ..backends.simulated import SimulatedBackend

            return SimulatedBackend(
                gpus=gpus,
                model=model,
                seed=args.demo_seed,
                faults=faults,
                processes_per_gpu=args.demo_procs,
                steady=args.demo_steady,
                lifetime_scale=0.25,  # jobs come and go within minutes, so a demo shows it
            )

        return "the simulated driver", open_simulated

    def open_nvml() -> Backend:
        from ..backends.nvml import NvmlBackend

        return NvmlBackend(close_at_exit=close_at_exit)

    return "the NVIDIA driver", open_nvml


def open_backend(args: argparse.Namespace) -> Backend:
    """The backend the options ask for: simulated with --demo, NVML otherwise."""
    return backend_opener(args)[1]()


def resolve_selection(
    args: argparse.Namespace, collector: Collector, warn: Callable[[str], object] | None = None
) -> list[int]:
    """Apply --gpus and --only-visible to the GPUs the backend reports; both = intersection.

    ``warn(text)`` gets each warning (default: printed on stderr at once).
    """
    statics = collector.statics()
    indices = [g.index for g in statics]
    if args.gpus is None and not args.only_visible:
        return indices
    from ..selection import parse_cuda_visible_devices, resolve_gpu_list

    if args.gpus is not None:
        indices = resolve_gpu_list(args.gpus, statics)
    if args.only_visible:
        visible = parse_cuda_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), statics, os.environ)
        for warning in visible.warnings:
            if warn is not None:
                warn(warning)
            else:
                warn_user(warning)
        allowed = visible.nvml_indices
        indices = [i for i in indices if i in allowed] if args.gpus is not None else allowed
    return indices


def warn_user(text: str) -> None:
    """One warning line on stderr; it may quote outside text (CUDA_VISIBLE_DEVICES), so made safe."""
    from ..textsafe import safe_text

    print(f"nvtopy: warning: {safe_text(text)}", file=sys.stderr)


def _write_json(snapshot: Snapshot) -> None:
    """The snapshot as JSON on stdout, always UTF-8 (RFC 8259), whatever the locale's encoding."""
    from ..formats.contract import dumps

    text = dumps(snapshot) + "\n"
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a replaced stdout (tests, embedding): text is all it takes
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8"))


def _run_once(args: argparse.Namespace, backend: Backend) -> int:
    from ..sources.collector import Collector

    collector = Collector(backend)
    collector.select(resolve_selection(args, collector))
    snapshot = collector.collect()
    if args.json:
        _write_json(snapshot)
    else:
        from ..render.text import render_snapshot

        render_snapshot(snapshot, sys.stdout, color=not args.no_color, gpu_count=backend.device_count())
    return 0


def _run_interactive(args: argparse.Namespace) -> int:
    """The monitor. It draws at once: the backend is opened and the GPUs selected on its poller thread.

    An error found there (no driver, --gpus naming a GPU that is not there) ends
    the app and is raised here, once the terminal is restored: the same one line
    and exit code as when it is found before the app starts. Quitting never
    waits for the driver (see :mod:`nvtopy.tui.app`), so the backend is not closed
    here: its poller thread closes it if the driver lets it before the process exits.
    """
    waiting_for, opener = backend_opener(args, close_at_exit=False)  # usage errors: now, before drawing
    from ..tui.app import NvtopyApp

    warnings: list[str] = []
    app = NvtopyApp(
        None,
        opener=opener,
        select=lambda collector: resolve_selection(args, collector, warn=warnings.append),
        waiting_for=waiting_for,
        interval=args.interval,
        readonly=args.readonly,
        layout=args.view,
    )
    app.run()
    for warning in warnings:
        warn_user(warning)
    if app.open_error is not None:
        raise app.open_error
    return 0


def _run_remote(args: argparse.Namespace) -> int:
    from ..sources.remote import RemoteHosts

    if args.gpus or args.only_visible or args.demo or args.demo_gpus is not None:
        raise UsageError("--remote shows whole hosts: it cannot be combined with --gpus, --only-visible or --demo")
    urls = [u for u in args.remote.split(",") if u.strip()]
    if not urls:  # '', ' ', ',': never a fall-through to the local GPUs
        raise UsageError("--remote: give at least one URL, e.g. --remote node2:9400")
    source = RemoteHosts(urls, interval=max(args.interval, 1.0))
    if args.once:
        snapshot = source.poll_once()
        if args.json:
            _write_json(snapshot)
        else:
            from ..render.text import render_snapshot

            render_snapshot(snapshot, sys.stdout, color=not args.no_color)
        return 0
    from ..tui.app import NvtopyApp

    NvtopyApp(None, source=source, layout=args.view).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        from importlib import import_module

        module = import_module(f".{COMMANDS[argv[0]][0]}", __package__)
        args = module.build_parser(argv[0]).parse_args(argv[1:])
        return guarded(lambda: module.run(argv[0], args))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.json and not args.once:
        parser.error("--json needs --once (or use 'nvtopy log --format jsonl')")

    def run() -> int:
        if args.remote is not None:  # also --remote '': an error there, not a fall-through to NVML
            return _run_remote(args)
        if not args.once:
            return _run_interactive(args)
        backend = open_backend(args)
        try:
            return _run_once(args, backend)
        finally:
            backend.close()

    return guarded(run)


def guarded(function: Callable[[], int]) -> int:
    """Run a command; every error the user can cause becomes one line and an exit code.

    An error message may quote outside text (a peer's reply, a file's line, a
    driver string): it is printed through ``safe_text``, once, here, so it can
    neither retitle the terminal nor break the one line. And whatever the
    locale, text that stdout or stderr cannot encode (an ASCII or Latin-1
    terminal, a stray undecodable byte) is written as a backslash escape
    instead of raising UnicodeEncodeError.
    """
    import contextlib

    from ..textsafe import safe_text

    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            with contextlib.suppress(OSError, ValueError):  # a replaced stream that cannot: keep it as it is
                stream.reconfigure(errors="backslashreplace")
    try:
        return _run_and_flush(function)
    except BrokenPipeError:
        # The reader (head, less) went away: not an error, exit 0 without a word.
        # What is still buffered for stdout goes to /dev/null at exit, quietly.
        _discard_stdout()
        return 0
    except UsageError as exc:
        print(f"nvtopy: error: {safe_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except NvtopyError as exc:
        print(f"nvtopy: error: {safe_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("NVTOPY_DEBUG"):
            raise
        print(
            f"nvtopy: internal error: {safe_text(f'{type(exc).__name__}: {exc}')} "
            "(please report it; NVTOPY_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _run_and_flush(function: Callable[[], int]) -> int:
    """Run ``function``, then flush stdout here, not at exit.

    At exit Python would print "Exception ignored" for a reader that went away
    (BrokenPipeError: :func:`guarded` ends quietly) or a full disk. A full disk
    while the command writes stdout (``--once > F``) is one line, not a bug report.
    """
    try:
        code = function()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        _discard_stdout()
        raise NvtopyError(f"cannot write {exc.filename or 'standard output'}: {exc.strerror or exc}") from None
    if sys.stdout is None:  # started with stdout closed
        return code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _discard_stdout()
        raise NvtopyError(f"cannot write standard output: {exc.strerror or exc}") from None
    return code


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _discard_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the flush at exit drops what is buffered without a word."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no stdout at all: nothing to flush either
        pass


if __name__ == "__main__":
    sys.exit(main())

"""Command line: ``nvtopy`` (TUI), ``--once`` / ``--json`` snapshots, and the shared GPU options.

Why the lazy imports: ``nvtopy --once --json`` is run from scripts and cron jobs
and must start fast, so neither Textual nor rich is imported unless the chosen
mode draws with them. Every error the user can cause is one line on stderr and
a non-zero exit (2 for bad arguments, 1 for an unusable machine), never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from ._version import __version__
from .errors import NvtopyError, UsageError

if TYPE_CHECKING:
    from .backends.base import Backend
    from .collector import Collector

__all__ = ["build_parser", "main", "open_backend", "resolve_selection"]

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
        help="inject a fault: lost@1, unsupported=fan+power@0, no-process-memory, access-denied, ...",
    )


COMMANDS = {
    "log": ("logger", "log samples as CSV or JSONL (like nvidia-smi --query-gpu --loop)"),
    "record": ("logger", "record snapshots to a file, for 'nvtopy replay'"),
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


def open_backend(args: argparse.Namespace) -> Backend:
    """The backend the options ask for: simulated with --demo, NVML otherwise."""
    demo_options = (
        args.demo_gpus is not None,
        args.demo_model,
        args.demo_fault,
        args.demo_procs != 3,
        args.demo_steady,
    )
    if args.demo or any(demo_options):
        from .backends.sim_faults import parse_fault_specs
        from .backends.simulated import SimulatedBackend

        return SimulatedBackend(
            gpus=4 if args.demo_gpus is None else args.demo_gpus,
            model=args.demo_model or "H100 80GB HBM3",
            seed=args.demo_seed,
            faults=parse_fault_specs(args.demo_fault),
            processes_per_gpu=args.demo_procs,
            steady=args.demo_steady,
            lifetime_scale=0.25,  # jobs come and go within minutes, so a demo shows it
        )
    from .backends.nvml import NvmlBackend

    return NvmlBackend()


def resolve_selection(args: argparse.Namespace, collector: Collector) -> list[int]:
    """Apply --gpus and --only-visible to the GPUs the backend reports; both = intersection."""
    statics = collector.statics()
    indices = [g.index for g in statics]
    if args.gpus is None and not args.only_visible:
        return indices
    from .selection import parse_cuda_visible_devices, resolve_gpu_list

    if args.gpus is not None:
        indices = resolve_gpu_list(args.gpus, statics)
    if args.only_visible:
        visible = parse_cuda_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), statics, os.environ)
        for warning in visible.warnings:
            print(f"nvtopy: warning: {warning}", file=sys.stderr)
        allowed = visible.nvml_indices
        indices = [i for i in indices if i in allowed] if args.gpus is not None else allowed
    return indices


def _run_once(args: argparse.Namespace, backend: Backend) -> int:
    from .collector import Collector

    collector = Collector(backend)
    collector.select(resolve_selection(args, collector))
    snapshot = collector.collect()
    if args.json:
        from .views.json_view import dumps

        sys.stdout.write(dumps(snapshot) + "\n")
    else:
        from .views.text_view import render_snapshot

        render_snapshot(snapshot, sys.stdout, color=not args.no_color, gpu_count=backend.device_count())
    return 0


def _run_interactive(args: argparse.Namespace, backend: Backend) -> int:
    from .collector import Collector
    from .tui.app import NvtopyApp

    collector = Collector(backend)
    collector.select(resolve_selection(args, collector))
    app = NvtopyApp(backend, interval=args.interval, collector=collector, readonly=args.readonly, layout=args.view)
    app.run()
    return 0


def _run_remote(args: argparse.Namespace) -> int:
    from .remote import RemoteHosts

    if args.gpus or args.only_visible or args.demo or args.demo_gpus is not None:
        raise UsageError("--remote shows whole hosts: it cannot be combined with --gpus, --only-visible or --demo")
    urls = [u for u in args.remote.split(",") if u.strip()]
    if not urls:
        raise UsageError("--remote: give at least one URL")
    source = RemoteHosts(urls, interval=max(args.interval, 1.0))
    if args.once:
        snapshot = source.poll_once()
        if args.json:
            from .views.json_view import dumps

            sys.stdout.write(dumps(snapshot) + "\n")
        else:
            from .views.text_view import render_snapshot

            render_snapshot(snapshot, sys.stdout, color=not args.no_color)
        return 0
    from .tui.app import NvtopyApp

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
        if args.remote:
            return _run_remote(args)
        backend = open_backend(args)
        try:
            if args.once:
                return _run_once(args, backend)
            return _run_interactive(args, backend)
        finally:
            backend.close()

    return guarded(run)


def guarded(function: Callable[[], int]) -> int:
    """Run a command; every error the user can cause becomes one line and an exit code."""
    try:
        return function()
    except UsageError as exc:
        print(f"nvtopy: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except NvtopyError as exc:
        print(f"nvtopy: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("NVTOPY_DEBUG"):
            raise
        print(
            f"nvtopy: internal error: {type(exc).__name__}: {exc} "
            "(please report it; NVTOPY_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1
    except BrokenPipeError:
        # The reader (head, less) went away: not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""What every command shares: one-line argparse errors, the interval, the GPU options.

Also, until :mod:`nvtopy.backends.open` takes them, the backend these options
ask for and the GPUs they select.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..sources.collector import Collector

__all__ = [
    "COMMANDS",
    "DEMO_MODEL",
    "add_gpu_options",
    "backend_opener",
    "command_parser",
    "discard_stdout",
    "interval_type",
    "open_backend",
    "resolve_selection",
    "warn_user",
]


MIN_INTERVAL = 0.1


MAX_INTERVAL = 86400.0


class Parser(argparse.ArgumentParser):
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


def command_parser(command: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``nvtopy COMMAND``, with the same one-line errors."""
    return Parser(prog=f"nvtopy {command}", description=description)


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


COMMANDS = {
    "log": ("log", "log samples as CSV or JSONL (like nvidia-smi --query-gpu --loop)"),
    "record": ("log", "record snapshots to a file, for 'nvtopy replay'"),
    "replay": ("replay", "replay a recording in the monitor"),
    "exporter": ("exporter", "serve Prometheus metrics under dcgm-exporter's names"),
}


DEMO_MODEL = "H100 80GB HBM3"


def discard_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the flush at exit drops what is buffered without a word."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no stdout at all: nothing to flush either
        pass

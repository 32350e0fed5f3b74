"""``nvtopy doctor``: check what goes wrong in practice on a GPU machine, and say how to fix it.

The command: its options, the facts gathered within ``--timeout``, the checks
judged (:func:`.checks.diagnose`: the list, in order), the findings printed
(:mod:`.output`). Each check is a pure function over facts
(:mod:`nvtopy.backends.diagnose` gathers them; nothing in doctor imports pynvml
or psutil) that returns findings (:mod:`.findings`): an ``id``, a status
(``ok``, ``warn``, ``fail``, ``skip``), a title, a detail and a fix. The checks
of a GPU's memory and PCIe link are the monitor's health rules
(:mod:`nvtopy.health.verdict`), so doctor and the monitor cannot disagree.

Exit status: 1 when any finding is FAIL, else 0 (WARN alone exits 0), so
``nvtopy doctor || alert`` pages only for what is broken; 2 for a usage error.

Why the driver work runs on a daemon thread with a deadline: when a GPU is in
trouble, ``nvmlInit`` or any call may block for minutes (nvidia-smi hangs too).
Doctor must still answer, and "the driver did not answer within N s" is the
most useful finding it can give then.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ...backends.base import Backend
from ...backends.diagnose import BackendFacts, HostFacts, gather_backend_facts, host_facts, run_with_timeout
from ...backends.open import backend_opener as spec_opener
from .. import options
from .checks import diagnose
from .findings import exit_code
from .output import render_json, render_text, use_color

__all__ = ["Gather", "build_parser", "main", "run"]


def build_parser(command: str = "doctor") -> argparse.ArgumentParser:
    """``nvtopy doctor [--json] [--no-color] [--timeout S] [--demo ...] [--gpus LIST] [--against-nvidia-smi [F]]``."""
    parser = options.command_parser(
        command,
        "Check the NVIDIA driver, the GPUs and this machine for what goes wrong in practice; "
        "print each finding with its fix. Exit status 1 when a check FAILs, 0 otherwise (WARN included).",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes (also: NO_COLOR=1)")
    options.add_timeout_option(parser, "give up on a driver that has not answered after this long: a FAIL finding")
    options.add_gpu_options(parser)
    parser.add_argument(
        "--against-nvidia-smi",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="instead of the checks: compare nvtopy's figures with nvidia-smi's, field by field (FILE: a saved "
        "'nvidia-smi -q -x' or '-q' capture; without it nvidia-smi -q -x is run, within --timeout). Moving values "
        "within a stated tolerance, static ones exactly; exit 1 on a disagreement, 2 on a file that is no capture",
    )
    return parser


# The fact gatherers, replaceable in tests (a hanging driver, a fixed environment).
Gather = Callable[[BackendFacts, Callable[[], Backend]], object]


def run(
    command: str,
    args: argparse.Namespace,
    *,
    gather: Gather | None = None,
    host: HostFacts | None = None,
) -> int:
    """Gather the facts (the driver's on a daemon thread, at most ``--timeout`` s), judge, print; 1 on any FAIL."""
    if getattr(args, "against_nvidia_smi", None) is not None:
        from . import against_smi

        return against_smi.run(args, options.write_utf8)
    spec = options.backend_spec(args, close_at_exit=False)  # usage errors now, before any driver call
    opener = spec_opener(spec)
    host = host if host is not None else host_facts()
    facts = BackendFacts(kind=spec.kind, waiting_for=spec.waiting_for)
    work = gather if gather is not None else gather_backend_facts
    finished = run_with_timeout(lambda: work(facts, opener), args.timeout)
    selected: list[int] | None = None
    if finished and (args.gpus is not None or args.only_visible) and facts.gpus:
        selected = list(options.selection_for(args, [g.static for g in facts.gpus]).indices)
    findings = diagnose(facts, host, finished=finished, timeout_s=args.timeout, selected=selected)
    if args.json:
        options.write_utf8(render_json(findings, facts) + "\n")
    else:
        render_text(findings, facts, sys.stdout, color=use_color(sys.stdout, args.no_color))
    return exit_code(findings)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nvtopy.commands.doctor.command ...``: the command on its own, under the CLI's error policy."""
    from ..dispatch import guarded

    parser = build_parser("doctor")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return guarded(lambda: run("doctor", args))


if __name__ == "__main__":
    sys.exit(main())

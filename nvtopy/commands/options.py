"""What every command shares: one-line argparse errors, ``--interval``, the GPU options, the GPUs they select.

Also what the GPU options ask for: the backend (a spec for the one factory,
:mod:`nvtopy.backends.open`) and the GPUs (:func:`nvtopy.selection.select_gpus`,
whose warnings the CLI prints as one line each on stderr).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ..backends.open import DEMO_GPUS, DEMO_PROCESSES, DEMO_SEED, BackendSpec, nvml_spec, simulated_spec
from ..backends.open import backend_opener as spec_opener
from ..backends.open import open_backend as open_spec
from ..errors import NAME_QUOTE_LIMIT, BackendUnavailableError, did_you_mean, unknown_name
from ..interval import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL, parse_interval
from ..textsafe import quoted

if TYPE_CHECKING:
    from pathlib import Path

    from ..backends.base import Backend
    from ..config import Config
    from ..health.verdict import HealthThresholds
    from ..model import GpuStatic, Snapshot
    from ..selection import Selection
    from ..sources.base import SnapshotSource
    from ..sources.collector import Collector

__all__ = [
    "COMMANDS",
    "DEFAULT_TIMEOUT",
    "INTERNAL_COMMANDS",
    "add_demo_hostname_option",
    "add_gpu_options",
    "add_health_options",
    "add_interval_option",
    "add_timeout_option",
    "backend_opener",
    "backend_spec",
    "command_parser",
    "commands_text",
    "config_file",
    "config_warnings",
    "discard_stdout",
    "health_thresholds",
    "open_backend",
    "open_backend_within",
    "open_selection",
    "release_backend",
    "resolve_selection",
    "unknown_command",
    "user_commands",
    "user_config",
    "warn_user",
]


HELP_WIDTH = 100
"""The widest ``--help`` is drawn, however wide the terminal: longer lines are hard to read."""

_DEFINITION = re.compile(r"^( +\S.*?  +)(\S.*)$")  # "  held       GPU-hours during which ...": a term, its text


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, by its rules, without importing shutil (and bz2, lzma, fnmatch).

    Why: argparse makes a formatter for every ``add_argument`` (to check its metavar), so every
    command, ``--once`` too, asks for the width dozens of times though it draws no help.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with descriptions and epilogs reflowed to the terminal and their lists kept.

    Why: argparse either refills a description into one paragraph (losing a list of
    commands or of definitions) or, raw, leaves lines as written, which wrap mid-word
    on an 80-column terminal. Here each paragraph is refilled, and a line that starts
    with an indented term and two spaces (``  log       log samples ...``) is an item
    whose text wraps under itself. A line that ends with ``:`` ends its paragraph. Lines
    break at spaces only: an option (``--fields``) is never cut at its hyphens.
    """

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        columns = width if width is not None else _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, min(max(columns, 40), HELP_WIDTH))

    def _split_lines(self, text: str, width: int) -> list[str]:
        """An option's help, wrapped at spaces only: ``'--fields help'`` and ``idle-held`` stay whole."""
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        blocks: list[tuple[str, str, list[str]]] = []  # (first line's indent, the next lines', words)
        joins = ""  # what the next line may continue: "item", "paragraph" or nothing
        for line in text.splitlines():
            item = _DEFINITION.match(line)
            indented = line.startswith(" ")
            if item:
                blocks.append((item.group(1), " " * len(item.group(1)), item.group(2).split()))
            elif line.strip() and ((indented and joins == "item") or (not indented and joins == "paragraph")):
                blocks[-1][2].extend(line.split())
            else:  # a blank line, a paragraph's first line, a line of its own (an example: indented, no term)
                lead = line[: len(line) - len(line.lstrip())]
                blocks.append((lead, lead, line.split()))
            if item or (indented and joins == "item"):
                joins = "item"
            elif line.strip() and not indented and not line.rstrip().endswith(":"):
                joins = "paragraph"
            else:
                joins = ""
        lines = []
        for first, rest, words in blocks:
            if not words:
                lines.append("")
                continue
            lines.append(
                textwrap.fill(
                    " ".join(words),
                    width,
                    initial_indent=indent + first,
                    subsequent_indent=indent + rest,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
        return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, and the usage line is short.

    Why: argparse prints the whole usage (ten lines of every flag) before an error, and
    starts ``--help`` with the same ten lines; here the usage is ``nvtopy log [OPTIONS]``
    and the options are listed once, below it. A word or an option argparse does not
    know is named with the closest known ones (``nvtopy lgo``: did you mean 'log'?), as
    is a choice it does not know (``--format jsn``). ``takes_command``: this is the
    parser of ``nvtopy`` itself, whose first word may be a command (:data:`COMMANDS`).
    """

    def __init__(self, *args: Any, takes_command: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.takes_command = takes_command

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # argparse's own signature
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(self._unrecognized(extra[0]))
        return parsed

    def _unrecognized(self, first: str) -> str:
        """What is wrong with the first argument nothing took, in words."""
        if first.startswith("-") and len(first) > 1:
            option = first.split("=", 1)[0]
            known = [name for name in self._option_string_actions if name.startswith("--")]
            return f"unknown option {quoted(option, NAME_QUOTE_LIMIT)}{did_you_mean(option, known, limit=2)}"
        if self.takes_command:
            if first in COMMANDS:
                return f"{first!r} is a command: it comes first (nvtopy {first} [OPTIONS])"
            return unknown_command(first)
        return f"unexpected argument {quoted(first, NAME_QUOTE_LIMIT)}"

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside ``choices``: argparse's check, with the closest choices named."""
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            raise argparse.ArgumentError(action, str(unknown_name("", "choice", str(value), choices)))

    def format_usage(self) -> str:
        self._short_usage()
        return super().format_usage()

    def format_help(self) -> str:
        self._short_usage()
        return super().format_help()

    def _short_usage(self) -> None:
        """``nvtopy log [OPTIONS]``, ``nvtopy report [OPTIONS] [FILE ...]``: the options are listed below it."""
        if self.usage is not None:
            return
        formatter = self._get_formatter()
        words = ["%(prog)s", "[COMMAND]" if self.takes_command else "", "[OPTIONS]"]
        for action in self._actions:
            if not action.option_strings:  # a positional: FILE, [FILE ...]
                words.append(formatter._format_args(action, action.dest.upper()))
        self.usage = " ".join(word for word in words if word)


def _interval(text: str) -> float:
    """``--interval``'s check (:func:`~nvtopy.interval.parse_interval`), its error as argparse shows one."""
    try:
        return parse_interval(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_interval_option(parser: argparse.ArgumentParser, what: str, *, from_config: bool = False) -> None:
    """``--interval SECONDS``, as every command that repeats takes it: one range, one default (:mod:`nvtopy.interval`).

    ``what`` says what the seconds are between ("seconds between samples"). ``from_config``: the
    command reads the config file's ``interval`` (the monitor), so the flag's default is None, "not
    given", and the file's value or the default stands (:func:`user_config`).
    """
    fallback = ", or the config file's" if from_config else ""
    parser.add_argument(
        "--interval",
        type=_interval,
        default=None if from_config else DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"{what} (default {DEFAULT_INTERVAL:g}{fallback}; {MIN_INTERVAL:g} to {MAX_INTERVAL:.0f})",
    )


def whole_number(low: int, high: int, noun: str) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``, else one line naming ``noun`` and the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {noun} {text!r}: not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{noun} {value} is not between {low} and {high}")
        return value

    return parse


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: seconds from ``low`` to ``high`` (NaN and infinities refused), else one line."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number of seconds {text!r}") from None
        if not low <= value <= high:  # NaN compares false: refused too
            raise argparse.ArgumentTypeError(f"{text} is not between {low:g} and {high:.0f} seconds")
        return value

    return parse


_gpu_count = whole_number(0, 256, "GPU count")


def add_gpu_options(parser: argparse.ArgumentParser) -> None:
    """Options every mode shares: which GPUs, which backend."""
    group = parser.add_argument_group("GPU selection")
    group.add_argument(
        "--gpus",
        metavar="LIST",
        help="only these GPUs: comma-separated indices, PCI bus ids (3b:00.0), UUIDs/unique prefixes, "
        "or MIG devices (MIG-<uuid> or a unique prefix, MIG-GPU-<uuid>/<gi>/<ci>): the GPU limited to them",
    )
    group.add_argument(
        "--only-visible",
        action="store_true",
        help="only what CUDA_VISIBLE_DEVICES exposes (CUDA's rules: a process uses at most one MIG device)",
    )
    demo = parser.add_argument_group("simulated GPUs (no NVIDIA driver needed)")
    demo.add_argument("--demo", action="store_true", help="use simulated GPUs instead of NVML")
    demo.add_argument(
        "--demo-gpus", type=_gpu_count, metavar="N", help=f"number of simulated GPUs (default {DEMO_GPUS})"
    )
    demo.add_argument("--demo-model", metavar="NAME", help="simulated GPU model, e.g. 'A100-SXM4-80GB' or 'RTX 4090'")
    demo.add_argument(
        "--demo-seed", type=int, default=DEMO_SEED, metavar="N", help=f"seed of the simulation (default {DEMO_SEED})"
    )
    demo.add_argument(
        "--demo-procs",
        type=_gpu_count,
        metavar="N",
        help=f"process slots per simulated GPU (default {DEMO_PROCESSES})",
    )
    demo.add_argument(
        "--demo-steady", action="store_true", help="every process slot always busy (exact counts, for benchmarks)"
    )
    demo.add_argument(
        "--demo-fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a fault: lost@1, unsupported=fan+power@0, xid=79:30@1, hang=30@2, remapped=0/0/1/0@3, "
        "throttle=0x8@0, idle-held@1, stuck@2, slow=3, ... (README: --demo-fault)",
    )


def _hostname(text: str) -> str:
    """A ``--demo-hostname``: printable, no spaces (a Hostname label that a Prometheus query can match)."""
    if not text or not text.isprintable() or any(c.isspace() for c in text) or len(text) > 253:
        raise argparse.ArgumentTypeError(f"invalid hostname {text!r}")
    return text


def add_demo_hostname_option(parser: argparse.ArgumentParser, why: str) -> None:
    """``--demo-hostname NAME``: the hostname simulated GPUs report (:func:`backend_spec` reads it); ``why``: the
    use named in its help (several exporters of one fleet, several hosts behind one sshd)."""
    parser.add_argument(
        "--demo-hostname",
        type=_hostname,
        metavar="NAME",
        help=f"simulated GPUs: the Hostname they report (default demo-node; {why})",
    )


DEFAULT_TIMEOUT = 5.0
MAX_TIMEOUT = 3600.0


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid timeout {text!r}: give seconds, e.g. 5") from None
    if not 0.1 <= value <= MAX_TIMEOUT:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"timeout must be between 0.1 and {MAX_TIMEOUT:.0f} seconds")
    return value


def add_timeout_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """``--timeout``: how long a command waits for a stuck driver before it marks the GPU and goes on."""
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"{what} (default {DEFAULT_TIMEOUT:g})",
    )


def _positive(unit: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number of {unit} {text!r}") from None
        if not 0 <= value <= 1e6:  # NaN fails this too
            raise argparse.ArgumentTypeError(f"give between 0 and 1000000 {unit}")
        return value

    return parse


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """``--config PATH``: the config file a command reads instead of the usual one (:func:`config_file`)."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="the config file to read (default $NVTOPY_CONFIG, else $XDG_CONFIG_HOME/nvtopy/config.toml, "
        "i.e. ~/.config/nvtopy/config.toml); command-line flags win over it",
    )


def theme_name(text: str) -> str:
    """``--theme``'s check: a Textual theme or "colorblind" (the error names the closest and the known ones)."""
    from ..config import THEMES

    if text not in THEMES:
        raise argparse.ArgumentTypeError(str(unknown_name("", "theme", text, THEMES)))
    return text


THEME_HELP = (
    "colours: a Textual theme (textual-dark, nord, gruvbox, ...) or 'colorblind' (blue/orange, never "
    "red against green); default textual-dark"
)


def add_health_options(parser: argparse.ArgumentParser) -> None:
    """The thresholds of the real-work flags (nvtopy.health.realwork): when a process is idle-held, a GPU hung.

    Also ``--config``: the thresholds have keys in the config file (``[health]``), which these flags override.
    Their defaults are None ("not given"): :func:`health_thresholds` takes the file's value then.
    """
    from ..health.verdict import HealthThresholds

    default = HealthThresholds()
    add_config_option(parser)
    group = parser.add_argument_group("health flags (also [health] in the config file)")
    group.add_argument(
        "--idle-held-after",
        type=_positive("minutes"),
        metavar="MINUTES",
        help="a process holding memory at ~0 %% SM this long is idle-held "
        f"(default {default.idle_held_seconds / 60:g})",
    )
    group.add_argument(
        "--idle-held-memory",
        type=_positive("GiB"),
        metavar="GIB",
        help=f"... if it holds at least this much GPU memory (default {default.idle_held_bytes / 2**30:g})",
    )
    group.add_argument(
        "--hang-after",
        type=_positive("minutes"),
        metavar="MINUTES",
        help="a GPU at >= 95 %% utilisation with under 10 %% of its SMs active (without GPM: under 30 %% of its "
        "power limit) this long is a suspected hang "
        f"(default {default.hang_seconds / 60:g})",
    )


def health_thresholds(args: argparse.Namespace) -> HealthThresholds:
    """The thresholds :func:`add_health_options` asked for: each flag given, else the config file's, else the
    default."""
    from ..health.verdict import HealthThresholds

    config = user_config(args)
    return HealthThresholds(
        idle_held_seconds=config.idle_held_after * 60,
        idle_held_bytes=int(config.idle_held_memory * 2**30),
        hang_seconds=config.hang_after * 60,
    )


HEALTH_FLAGS = ("idle_held_after", "idle_held_memory", "hang_after")


def config_file(args: argparse.Namespace) -> Path | None:
    """The config file this run reads: ``--config``, else ``$NVTOPY_CONFIG``, else the XDG one (None: no home)."""
    from pathlib import Path  # not at the top: --once reads its config during its wait for the driver

    from ..config import config_path

    given = getattr(args, "config", None)
    return Path(given).expanduser() if given else config_path()


def user_config(args: argparse.Namespace, *flags: str) -> Config:
    """The config file's preferences with the flags the user gave (``flags``: the Config fields that have a flag
    in this command besides the health thresholds; a flag left at None was not given).

    The file is read once per run and each of its warnings printed once, one line on stderr (a bad file
    is a warning and the defaults, never an error: see :mod:`nvtopy.config`).
    """
    from ..config import load_config

    loaded = getattr(args, "_config_loaded", None)
    if loaded is None:
        loaded = load_config(getattr(args, "config", None) or None)  # None: $NVTOPY_CONFIG, else the XDG file
        for warning in loaded[1]:
            warn_user(warning)
        args._config_loaded = loaded
    config, _ = loaded
    return config.merged(**{name: getattr(args, name, None) for name in (*HEALTH_FLAGS, *flags)})


def config_warnings(args: argparse.Namespace) -> list[str]:
    """The warnings reading the config file gave (after :func:`user_config`), for the monitor to show too."""
    loaded = getattr(args, "_config_loaded", None)
    return list(loaded[1]) if loaded is not None else []


def open_backend_within(args: argparse.Namespace, timeout: float) -> Backend:
    """:func:`open_backend`, given up after ``timeout`` seconds: a hung ``nvmlInit`` is one line, not a silent wait.

    The open runs on a daemon thread; one that never returns is left behind (a
    thread inside the driver cannot be interrupted) and the process exits without it.
    """
    import threading

    waiting_for = backend_spec(args).waiting_for  # usage errors first, at once
    box: dict[str, Any] = {}

    def open_it() -> None:
        try:
            box["backend"] = open_backend(args)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=open_it, name="nvtopy-open", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise BackendUnavailableError(
            f"{waiting_for} did not answer within {timeout:g} s (nvmlInit is stuck): "
            "check nvidia-smi and dmesg; --timeout sets how long to wait"
        )
    if "error" in box:
        raise box["error"]
    backend: Backend = box["backend"]
    return backend


def release_backend(backend: Backend, collector: Collector | None = None, poller: SnapshotSource | None = None) -> None:
    """At a command's end: stop the event and GPU threads, then close the driver -- unless one of them is
    still inside it (a GPU's call stuck, or the event thread in a wait that outlived its time): closing then
    is undefined and could hang as well, so the backend is abandoned and the driver cleans up at exit.

    The event thread gets one wait's time to end (:data:`~nvtopy.sources.events.WAIT_S`, 0.45 s), as the
    monitor's own poller gives it.
    """
    if poller is not None:
        poller.stop()
        from ..sources.events import WAIT_S

        if not poller.settle(2 * WAIT_S):
            backend.abandon()
            return
    if collector is not None:
        collector.close()
        if collector.busy():
            backend.abandon()
            return
    backend.close()


def read_one_snapshot(args: argparse.Namespace, meanwhile: Callable[[], object] | None = None) -> tuple[Snapshot, int]:
    """One snapshot of the selected GPUs, whatever the driver does, and how many GPUs it has (``--once``,
    ``doctor --against-nvidia-smi``): a GPU stuck in a call is marked after ``--timeout``, not waited for.

    The timeout covers the whole read: opening the driver (a hung ``nvmlInit`` is one
    line and exit 1), each GPU's static fields and its readings; each step waits up to
    it for the GPUs it asks, never again for one already stuck.

    Why in this order: on Hopper the reading waits once for its GPM pair, 105 ms after each
    GPU's first sample, which the static read takes right after the GPU's UUID
    (:mod:`nvtopy.backends.nvml.gpm`). Everything else is done inside that wait: the
    processes' host look-up (:meth:`~nvtopy.sources.collector.Collector.look_up_processes`),
    the GPUs' other readings (GPM is read last: ``ONE_SHOT_LAST``) and ``meanwhile``, the
    caller's own work that needs no driver (``--once`` loads its config file and imports its
    printer). ``meanwhile`` is called exactly once, on this thread: during the GPUs' reads,
    or before an error is raised when they cannot be made (its warnings are not lost).
    """
    pending = [meanwhile] if meanwhile is not None else []

    def run_meanwhile() -> None:
        while pending:
            pending.pop()()

    try:
        backend = open_backend_within(args, args.timeout)
    except BaseException:
        run_meanwhile()
        raise
    backend.one_shot = True  # GPM: wait the 0.1 s its first pair needs rather than print N/A
    from ..sources.collector import Collector  # after the open: the first GPM sample is not kept waiting for it

    collector = Collector(backend, timeline=False)
    try:
        open_selection(args, collector)
        collector.look_up_processes(args.timeout)  # while the GPM pair matures (Collector.look_up_processes)
        snapshot = collector.collect(deadline=args.timeout, meanwhile=run_meanwhile)
        return snapshot, backend.device_count()
    finally:
        run_meanwhile()
        release_backend(backend, collector)


def command_parser(command: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``nvtopy COMMAND``, with the same one-line errors."""
    return Parser(prog=f"nvtopy {command}", description=description)


def backend_spec(args: argparse.Namespace, *, close_at_exit: bool = True) -> BackendSpec:
    """The backend the options ask for: simulated with --demo (or any --demo-* option), NVML otherwise.

    Every usage error (an unknown or ambiguous --demo-model, a bad --demo-fault,
    a GPU the simulation lacks) is raised here, at once, before anything waits for
    a driver. ``close_at_exit`` applies to NVML (see :class:`~nvtopy.backends.nvml.backend.NvmlBackend`).
    """
    demo_options = (
        args.demo_gpus is not None,
        args.demo_model is not None,
        args.demo_fault,
        args.demo_procs not in (None, DEMO_PROCESSES),  # as before: an explicit default alone is no demo
        args.demo_steady,
        getattr(args, "demo_hostname", None) is not None,  # nvtopy exporter's
    )
    if not (args.demo or any(demo_options)):
        return nvml_spec(close_at_exit=close_at_exit)
    return simulated_spec(
        args.demo_gpus,
        args.demo_model,
        args.demo_seed,
        faults=args.demo_fault,
        processes_per_gpu=args.demo_procs,
        steady=args.demo_steady,
        **({"hostname": args.demo_hostname} if getattr(args, "demo_hostname", None) is not None else {}),
    )


def backend_opener(args: argparse.Namespace, *, close_at_exit: bool = True) -> tuple[str, Callable[[], Backend]]:
    """:func:`open_backend` in two steps: check the options now, open the backend later.

    Returns what a slow start waits for ("the NVIDIA driver") and the function
    that opens the backend (``nvmlInit``: as slow as the driver; the monitor
    calls it on its poller thread). Usage errors are raised here (:func:`backend_spec`).
    """
    spec = backend_spec(args, close_at_exit=close_at_exit)
    return spec.waiting_for, spec_opener(spec)


def open_backend(args: argparse.Namespace) -> Backend:
    """The backend the options ask for, opened (the CLI's seam: tests replace it)."""
    return open_spec(backend_spec(args))


def resolve_selection(
    args: argparse.Namespace, collector: Collector, warn: Callable[[str], object] | None = None
) -> Selection:
    """Apply --gpus and --only-visible to the GPUs the backend reports (:func:`~nvtopy.selection.select_gpus`).

    Returns the :class:`~nvtopy.selection.Selection`, which ``collector.select``
    takes as it is: the GPUs and the MIG devices a GPU is limited to (a MIG UUID
    in --gpus, a MIG device in CUDA_VISIBLE_DEVICES). ``warn(text)`` gets each
    warning (default: :func:`warn_user`, one line on stderr at once).
    """
    return selection_for(args, collector.statics(), warn)


def selection_for(
    args: argparse.Namespace, statics: Sequence[GpuStatic], warn: Callable[[str], object] | None = None
) -> Selection:
    """--gpus and --only-visible applied to ``statics``, each warning to ``warn`` (default :func:`warn_user`).

    The one place a command turns its options into a selection: :func:`resolve_selection` for a
    collector's GPUs, ``nvtopy doctor`` for the GPUs it gathered facts of.
    """
    from ..selection import Selection, select_gpus  # the collector imports it anyway: no cost

    if args.gpus is None and not args.only_visible:  # nothing to select: every GPU, whole
        return Selection(tuple(gpu.index for gpu in statics))
    selection = select_gpus(statics, args.gpus, args.only_visible)
    for warning in selection.warnings:
        (warn or warn_user)(warning)
    return selection


def open_selection(args: argparse.Namespace, collector: Collector) -> None:
    """Read the GPUs' static fields and poll only those --gpus and --only-visible select (warnings on stderr).

    The static read waits up to ``--timeout`` (``args.timeout``) for the GPUs: one stuck in
    the driver is selected by what is known of it (its index), never waited on again
    (:meth:`~nvtopy.sources.collector.Collector.read_statics`). ``--once``, ``nvtopy log``
    and the exporter open their GPUs this way; the monitor selects on its poller's thread
    (:func:`resolve_selection`, handed to the poller).
    """
    collector.read_statics(args.timeout)
    collector.select(resolve_selection(args, collector))


def warn_user(text: str) -> None:
    """One warning line on stderr; it may quote outside text (CUDA_VISIBLE_DEVICES), so made safe."""
    from ..textsafe import safe_text

    print(f"nvtopy: warning: {safe_text(text)}", file=sys.stderr)


COMMANDS = {
    "log": ("log", "log samples as CSV or JSONL (like nvidia-smi --query-gpu --loop)"),
    "record": ("log", "record snapshots to a file, for 'nvtopy replay'"),
    "replay": ("replay", "replay a recording in the monitor"),
    "exporter": ("exporter.command", "serve Prometheus metrics under dcgm-exporter's names"),
    "doctor": ("doctor.command", "check the driver, GPUs and setup for common problems, with fixes"),
    "report": ("report", "GPU-hours, energy and peak memory per user, owner, GPU or host"),
    "rules": ("rules", "print Prometheus alerting rules for the exporter's metrics"),
    "watch": ("watch", "print each alert as it fires or clears; wait for free GPUs"),
    "web": ("web.command", "the monitor in a browser, read-only, behind a token"),
    "serve-stdio": ("serve_stdio", "stream snapshots on stdout: the far end of 'nvtopy --ssh' (not run by hand)"),
}
"""``nvtopy COMMAND``: the module that runs it, and what it does in one line (``nvtopy --help``)."""

INTERNAL_COMMANDS = frozenset({"serve-stdio"})
"""Commands a program runs, not a person (``serve-stdio``: the far end of ``nvtopy --ssh``, started over ssh):
run like the others, but left out of ``nvtopy --help``'s list and of the names a mistyped command is matched
against, where they would only be noise to a newcomer (the README names them)."""


def user_commands() -> list[str]:
    """The commands a person runs, in :data:`COMMANDS`' order."""
    return [name for name in COMMANDS if name not in INTERNAL_COMMANDS]


def commands_text() -> str:
    """The commands, one a line with what each does: the top of ``nvtopy --help``, where a newcomer looks."""
    names = user_commands()
    width = max(len(name) for name in names)
    lines = [f"  {name:<{width}}  {COMMANDS[name][1]}" for name in names]
    return "commands ('nvtopy COMMAND --help' shows its options):\n" + "\n".join(lines)


def unknown_command(word: str) -> str:
    """``nvtopy lgo``: the error, with the closest command and all a person runs (there are seven)."""
    return str(unknown_name("", "command", word, user_commands()))


def discard_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the flush at exit drops what is buffered without a word."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no stdout at all: nothing to flush either
        pass


def write_utf8(text: str) -> None:
    """``text`` on stdout as UTF-8 whatever the locale's encoding: JSON is UTF-8 (RFC 8259), and a C locale's
    ASCII stdout would fail on the first GPU name with a non-ASCII letter (``--once --json``, ``doctor --json``).

    A replaced stdout without a byte buffer (tests, embedding) gets the text as it is.
    """
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
        return
    sys.stdout.flush()  # what was written as text first stays first
    buffer.write(text.encode("utf-8"))

"""``nvtopy log`` and ``nvtopy record``: samples to a file, one line at a time.

``log --format csv`` writes one row per GPU per sample (or per process with
``--processes``), the header once; with a ``mig_*`` field, each MIG-enabled
GPU's row is followed by a row per MIG device (:mod:`nvtopy.formats.writers`).
``--format jsonl`` writes one JSON object per snapshot, in the JSON contract's
names (``--once --json``). ``record FILE`` writes full snapshots, processes
included, for ``nvtopy replay``.

Why line by line, flushed: a logger runs for days and gets killed; a killed
logger must lose at most the sample in progress and leave a file every reader
can parse. Ctrl-C and SIGTERM finish the current sample and stop. Only the
field groups the chosen fields need are asked of the driver.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from ..boundedfile import FileRefusedError, open_regular
from ..errors import NvtopyError, UsageError, unknown_name
from ..formats.writers import (
    DEFAULT_GPU_FIELDS,
    DEFAULT_PROCESS_FIELDS,
    GPU_FIELDS,
    MIG_FIELDS,
    PROCESS_FIELDS,
    CsvWriter,
    JsonlWriter,
)
from ..model import ALL_GROUPS, GROUP_OF_FIELD, HEALTH_GROUPS, MIG_GPM_FIELDS, Snapshot
from . import options
from .signals import stop_on_signals

if TYPE_CHECKING:
    from ..sources.collector import Collector
    from ..sources.poller import Poller

__all__ = ["build_parser", "groups_for", "run"]


def groups_for(fmt: str, fields: list[str] | None, processes: bool) -> frozenset[str]:
    """Ask the driver only for what is written: the field groups behind the chosen GPU fields."""
    if fmt == "csv" and processes:
        return frozenset()  # process rows: no GPU field at all
    if fields is None:
        return ALL_GROUPS
    groups = {GROUP_OF_FIELD[f] for f in fields if f in GROUP_OF_FIELD}
    for name in fields:
        groups |= DERIVED_GROUPS.get(name, frozenset())
    return frozenset(groups)


# What the derived health fields are computed from (the verdict reads every health rule's input).
_VERDICT_INPUTS = HEALTH_GROUPS | {"ecc", "throttle", "clocks", "utilization", "power", "power_limit", "temperature"}
DERIVED_GROUPS: dict[str, frozenset[str]] = {
    "health_verdict": _VERDICT_INPUTS,
    "health_findings": _VERDICT_INPUTS,
    "nvlinks_active": frozenset({"nvlink"}),
    "throttle_words": frozenset({"throttle", "clocks"}),
    "idle_held_bytes": frozenset({"utilization", "memory"}),
    "suspected_hang_seconds": frozenset({"utilization", "power", "power_limit", "gpm"}),
    # MIG devices: their memory is read per instance. Every mig_* field asks for it: JSONL writes the devices'
    # objects whole for any of them, and it costs one call per MIG device (none on a GPU without MIG).
    "mig_devices": frozenset({"mig"}),
    **{name: frozenset({"mig"}) for name in MIG_FIELDS},
    # A MIG device's own activity (GPM): read with the instances, from the GPM samples the backend takes.
    **{f"mig_{name}": frozenset({"mig", "gpm"}) for name in MIG_GPM_FIELDS},
}


LIST_FIELDS = ("help", "?")
"""``--fields help`` lists the fields, one a line (``?`` too, as before: unquoted, a shell may expand it)."""


def _listing(processes: bool) -> str:
    """How to list the fields a log of these rows takes (the error cannot: there are 109)."""
    return f"'nvtopy log{' --processes' if processes else ''} --fields help' lists them"


def _parse_fields(
    values: list[str] | None, valid: tuple[str, ...], default: tuple[str, ...], processes: bool = False
) -> list[str]:
    """The fields ``--fields`` names, in order; a usage error names the first unknown one and the closest.

    ``processes``: the rows are processes (CSV ``--processes``), whose fields are not a GPU's: a GPU
    field given for them, or a process field for GPU rows, is said to be one (the closest spelling
    would only mislead then).
    """
    if not values:
        return list(default)
    fields = [f.strip() for value in values for f in value.split(",") if f.strip()]
    if not fields:  # --fields '' or ',,': a log of empty lines is no log
        raise UsageError(f"--fields: no field given; {_listing(processes)}")
    unknown = [f for f in fields if f not in valid]
    if not unknown:
        return fields
    name = unknown[0]
    if processes and name in GPU_FIELDS:
        raise UsageError(f"--fields: {name!r} is a GPU row's field: log GPU rows without --processes")
    if not processes and name in PROCESS_FIELDS:
        raise UsageError(
            f"--fields: {name!r} is a process row's field: 'nvtopy log --processes' writes process rows "
            "(JSONL: each GPU's processes, every field)"
        )
    raise unknown_name("--fields", "field", name, valid, _listing(processes))


def _existing_columns(path: str | None, valid: tuple[str, ...]) -> tuple[str, ...] | None:
    """The header of the CSV file a logger appends to, when every column in it is one of ``valid``; else None.

    Why: without ``--fields`` a logger writes the default columns, and the defaults grow
    between versions (health, then GPM); a logger restarted after an upgrade on its old
    file must go on with that file's columns, or its rows would no longer match the header.
    """
    if path is None:
        return None
    try:  # a FIFO or a terminal (-o /dev/stdout) is no file with a header: never waited on for one
        with open_regular(path) as existing:
            first = existing.readline(1 << 16).decode("utf-8")
    except (FileRefusedError, OSError, UnicodeDecodeError):
        return None
    if not first.endswith("\n"):
        return None  # empty, or no whole header line: a new file for our purpose
    try:
        columns = next(csv.reader([first]), [])
    except csv.Error:
        return None
    return tuple(columns) if columns and all(c in valid for c in columns) else None


def build_parser(command: str) -> argparse.ArgumentParser:
    if command == "record":
        parser = options.command_parser(command, "Record snapshots (processes included) to FILE, for 'nvtopy replay'.")
        parser.add_argument("file", metavar="FILE", help="the recording (JSON lines; appended to if it exists)")
    else:
        parser = options.command_parser(
            command, "Log one row per GPU (or process) per sample as CSV, or one JSON object per snapshot."
        )
        parser.epilog = (
            "examples:\n"
            "  nvtopy log --interval 5 -o gpus.csv\n"
            "  nvtopy log --fields index,temperature_c,power_draw_w,memory_used_bytes\n"
            "  nvtopy log --processes --count 1\n"
            "  nvtopy log --format jsonl --processes -o run.jsonl\n"
            "  nvtopy log --fields help"
        )
        parser.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="csv (default) or jsonl")
        parser.add_argument("--output", "-o", metavar="FILE", help="append to FILE instead of writing to stdout")
        parser.add_argument(
            "--fields",
            action="append",
            metavar="LIST",
            help="comma-separated fields (JSON contract names); '--fields help' lists them (with --processes: "
            "a process row's)",
        )
        parser.add_argument("--processes", action="store_true", help="CSV: one row per process; JSONL: include them")
    options.add_interval_option(parser, "seconds between samples")
    parser.add_argument("--count", type=int, metavar="N", help="stop after N samples (default: until Ctrl-C)")
    options.add_timeout_option(
        parser,
        "seconds the driver may take to open; a GPU whose read misses an interval is marked not responding in "
        "that interval's row",
    )
    options.add_gpu_options(parser)
    options.add_health_options(parser)
    return parser


def _open_output(path: str | None) -> tuple[IO[str], bool]:
    """(stream, is_new): appended to when it exists, so a restarted logger continues its file."""
    if path is None:
        return sys.stdout, True
    try:
        stream = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        return stream, stream.tell() == 0
    except OSError:  # a pipe or a terminal (/dev/stdout): not seekable, always a new stream
        return stream, True


def run(command: str, args: argparse.Namespace) -> int:
    from ..sources.collector import Collector
    from ..sources.poller import Poller
    from ..sources.ticker import Ticker

    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    recording = command == "record"
    processes = recording or args.processes
    writer_fields: list[str] | None
    if recording:
        fmt, writer_fields, groups = "jsonl", None, ALL_GROUPS
    else:
        fmt = args.format
        process_rows = fmt == "csv" and processes
        if args.fields is not None and len(args.fields) == 1 and args.fields[0].strip() in LIST_FIELDS:
            print("\n".join(PROCESS_FIELDS if process_rows else GPU_FIELDS))
            return 0
        if fmt == "csv":
            valid: tuple[str, ...]
            default: tuple[str, ...]
            valid, default = (PROCESS_FIELDS, DEFAULT_PROCESS_FIELDS) if processes else (GPU_FIELDS, DEFAULT_GPU_FIELDS)
            if not args.fields:  # an existing file goes on with its own columns
                default = _existing_columns(args.output, valid) or default
            writer_fields = _parse_fields(args.fields, valid, default, process_rows)
        else:
            writer_fields = _parse_fields(args.fields, GPU_FIELDS, GPU_FIELDS) if args.fields else None
        groups = groups_for(fmt, writer_fields, processes)
    path = args.file if recording else args.output
    where = "standard output" if path is None else path
    backend = options.open_backend_within(args, args.timeout)
    out: IO[str] | None = None
    collector: Collector | None = None
    poller: Poller | None = None
    try:
        out, is_new = _open_output(path)
        collector = Collector(backend, history=1, thresholds=options.health_thresholds(args), timeline=False)
        options.open_selection(args, collector)
        poller = Poller(
            backend,
            interval=args.interval,
            groups=groups,
            processes=processes,
            collector=collector,
            # A row is a measurement: a GPU whose read missed this interval is "not responding" in its row at
            # once, never its last values passed off as fresh until some timeout (the TUI's grace is a display's).
            stall_after=0.0,
        )
        poller.watch_events()
        write: Callable[[Snapshot], None]
        if fmt == "csv":
            assert writer_fields is not None
            write = CsvWriter(out, writer_fields, processes, header=is_new).write
        else:
            write = JsonlWriter(out, writer_fields, processes).write
        written = 0
        ticker = Ticker()  # the sources' own pace: drift compensated, missed ticks skipped
        with stop_on_signals() as stop:
            while not stop.is_set():
                ticker.tick()
                snapshot = poller.poll_once()
                try:
                    write(snapshot)
                except OSError as exc:
                    raise _write_failed(out, where, exc) from None
                written += 1
                if args.count is not None and written >= args.count:
                    break
                stop.wait(ticker.remaining(args.interval))
        if out is not sys.stdout:
            closing, out = out, None
            try:
                closing.close()
            except OSError as exc:
                raise _write_failed(closing, where, exc) from None
        if recording:
            print(f"nvtopy record: {written} snapshots written to {args.file}", file=sys.stderr)
        return 0
    finally:
        if out is not None and out is not sys.stdout:
            with contextlib.suppress(OSError):  # already reported: the write that failed
                out.close()
        options.release_backend(backend, collector, poller)


def _write_failed(out: IO[str], where: str, exc: OSError) -> BaseException:
    """A failed write as one line (a full disk: "cannot write F: No space left on device").

    A reader that went away (``| head``, a FIFO's reader) is no error: BrokenPipeError
    goes on to :func:`nvtopy.commands.dispatch.guarded`, which ends quietly.
    """
    if isinstance(exc, BrokenPipeError):
        return exc
    if out is sys.stdout:
        options.discard_stdout()  # what stays buffered must not fail again at exit
    return NvtopyError(f"cannot write {where}: {exc.strerror or exc}")

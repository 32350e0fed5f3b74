"""``nvtopy report``: GPU-hours held, busy and idle-held, energy and peak memory per user, owner, GPU or host.

From recordings (``nvtopy report FILE...``, written by ``nvtopy record``) or from
a Prometheus server (``nvtopy report --prometheus URL --since 24h``). The sums
are :mod:`nvtopy.accounting.ledger`'s, the same for both; this module reads the
input, and writes the table, CSV or JSON.

Recordings are read line by line, never whole (a day of them is gigabytes): a
line that is not a snapshot is skipped and counted (one warning per file), not
fatal, since a report over a week should not be lost to one damaged line. Files
are read in the order of their first snapshot, so the recordings of one host can
be given in any order.

Exit status: 0 with a report (also one in which no process held a GPU: that is
an answer), 1 when there was nothing to report on (no snapshot in the files, or
in the period; no series on the server, or too little data: one sample of each GPU,
or less than a --step of it) or the input could not be read, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from ..accounting.ledger import (
    DEFINITIONS,
    DIMENSIONS,
    MAX_GPU_WATTS,
    SORT_COLUMNS,
    Ledger,
    Observation,
    Report,
    Row,
    key_columns,
    observations_from_record,
    report_csv,
    report_json,
    sort_column,
    sort_rows,
)
from ..boundedfile import FileRefusedError, open_regular
from ..errors import NvtopyError, UsageError
from ..jsondecode import JsonRefusedError, decode_json
from ..textsafe import safe_text
from . import options

__all__ = ["build_parser", "parse_duration", "read_recording", "run"]

_UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}  # largest first, as they are written
_DURATION_PART = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)([wdhms])")
DURATION_FORMS = "a number and a unit (s, m, h, d, w), or several, largest unit first: 30m, 24h, 7d, 1h30m, 1m30s"
MAX_SINCE = 366 * 86400.0
# A unit in words (``2 days``, ``1 hour 30 minutes``, ``90 Min``): the letter it is written as.
_UNIT_WORD = re.compile(r"(\d[\d.]*)\s*(weeks?|wks?|w|days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b\s*")


def parse_duration(text: str, what: str = "--since") -> float:
    """``30m``, ``24h``, ``7d``, ``1h30m``, ``1m30s`` (units ``w d h m s``) in seconds.

    The whole text is read: parts one after the other, each unit at most once and the
    largest first (as Prometheus writes durations). Why so strict: a parser that stopped
    after the first part would read ``1h30m`` as one hour, a report of the wrong period
    that nothing says is wrong. Anything else is a one-line usage error listing the forms.
    """
    stripped = text.strip()
    units = list(_UNIT_SECONDS)
    parts = []
    position = 0
    while position < len(stripped):
        part = _DURATION_PART.match(stripped, position)
        if part is None:
            break
        parts.append((float(part.group(1)), units.index(part.group(2))))
        position = part.end()
    ranks = [rank for _, rank in parts]
    if not parts or position < len(stripped) or ranks != sorted(set(ranks)):  # more text, a unit again or late
        shown = text if len(text) <= 30 else text[:29] + "…"
        meant = _meant_duration(stripped)
        hint = f"; did you mean {meant!r}?" if meant else ""
        raise UsageError(f"{what}: {shown!r} is not a duration: give {DURATION_FORMS}{hint}")
    seconds = sum(number * _UNIT_SECONDS[units[rank]] for number, rank in parts)
    if not 0 < seconds <= MAX_SINCE:
        raise UsageError(f"{what}: give more than 0 and at most 366d")
    return seconds


def _meant_duration(text: str) -> str | None:
    """The duration ``text`` was meant to be, written as :func:`parse_duration` reads it: ``2 days`` ->
    ``2d``, ``1h 30m`` -> ``1h30m``, ``1H`` -> ``1h``; None when it is no duration in other words either."""
    lowered = text.lower()
    if len(lowered) > 60:
        return None
    written = _UNIT_WORD.sub(lambda m: f"{m.group(1)}{m.group(2)[0]}", lowered)
    if written == text or _UNIT_WORD.sub("", lowered).strip():
        return None  # nothing to rewrite, or words that are no unit ("yesterday", "2 days ago")
    try:
        parse_duration(written)
    except UsageError:
        return None
    return written


def _by(values: list[str] | None) -> tuple[str, ...]:
    """``--by user,host --by gpu`` -> the key columns (one-line error for an unknown key)."""
    names = [n.strip() for value in values or ["user"] for n in value.split(",") if n.strip()]
    return key_columns(names)


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(
        command,
        "Accounting: GPU-hours held, busy and idle-held, energy and peak memory per user, "
        "owner, GPU or host, from recordings (nvtopy record) or a Prometheus server.",
    )
    parser.epilog = (
        f"{DEFINITIONS}\n\n"
        "Exit status: 0 with a report (also when no process held a GPU), 1 when there was nothing to report "
        "on\n(no snapshot in the files or the period, no series on the server or too little data) or the input "
        "could\nnot be read, 2 for a usage error. A line of a recording that is not a snapshot is skipped and counted."
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="recordings: JSON lines written by 'nvtopy record'")
    source = parser.add_argument_group("Prometheus")
    source.add_argument("--prometheus", metavar="URL", help="read the fleet's history from this Prometheus server")
    source.add_argument(
        "--where",
        metavar="MATCHERS",
        help="only series with these labels (PromQL matchers), e.g. 'Hostname=~\"node[1-4]\"'",
    )
    source.add_argument(
        "--ca-file",
        metavar="PEM",
        help="verify an https:// server against the CA certificates in this file instead of the system's",
    )
    source.add_argument(
        "--step",
        metavar="DURATION",
        help="time between the points read (default: the data's span in the period / 1440, at least its scrape "
        "interval, both measured)",
    )
    options.add_timeout_option(source, "seconds each query to the server may take")
    parser.add_argument(
        "--since",
        metavar="DURATION",
        help="only the last DURATION: a number and a unit (s, m, h, d, w), or several, largest first: 30m, 24h, "
        "7d, 1h30m (recordings: default all of them; Prometheus: default 24h)",
    )
    parser.add_argument(
        "--by",
        action="append",
        metavar="KEY",
        help=f"one row per {'|'.join(DIMENSIONS)} (repeat or comma-separate: --by user,host; default user)",
    )
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="default: table")
    parser.add_argument(
        "--sort",
        default="held",
        metavar="COLUMN",
        help=f"sort by a key column or {', '.join(SORT_COLUMNS)} (default held; figures largest first)",
    )
    parser.add_argument("--reverse", action="store_true", help="reverse the order")
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes")
    return parser


# ----------------------------------------------------------------- recordings


MAX_LINE = 64 << 20  # bytes; a longer line is damage (as nvtopy replay reads it)


class _Skipped:
    """The lines of one file that were no snapshot: how many, and the first, for the warning."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def add(self, number: int, why: str) -> None:
        self.count += 1
        if self.first is None:
            self.first = f"line {number}: {why}"


def _observations(raw: bytes) -> list[Observation]:
    """One line's observations; ValueError with a short reason when the line is no snapshot."""
    try:
        data = decode_json(raw)
    except JsonRefusedError as exc:
        if exc.syntax:
            raise ValueError("not JSON" if raw.endswith(b"\n") else "cut short") from None
        raise ValueError(str(exc) if exc.kind == "depth" else "not JSON") from None
    try:
        return observations_from_record(data)
    except (KeyError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as exc:
        raise ValueError(f"not a snapshot ({type(exc).__name__})") from None


def read_recording(path: str, skipped: _Skipped | None = None) -> Iterator[list[Observation]]:
    """The observations of each snapshot of a recording, in file order; a damaged line is skipped and
    counted in ``skipped``.

    Raises :class:`~nvtopy.errors.NvtopyError` (one line) when the file cannot be opened or read.
    """
    skipped = skipped if skipped is not None else _Skipped()
    try:
        handle = open_regular(path)  # a FIFO or a device is refused, never waited on
    except FileRefusedError as exc:
        raise NvtopyError(f"cannot read {path}: {exc}") from None
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE + 1)
            except OSError as exc:
                raise NvtopyError(f"cannot read {path}: {exc.strerror or exc}") from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE:
                skipped.add(number, f"longer than {MAX_LINE >> 20} MiB")
                while raw and not raw.endswith(b"\n"):  # the rest of that line
                    raw = handle.readline(MAX_LINE + 1)
                continue
            if not raw.strip():
                continue
            try:
                yield _observations(raw)
            except ValueError as exc:
                skipped.add(number, str(exc))


def _first_time(path: str) -> float:
    """When the recording's first snapshot was taken (infinity: none), to read files in time order."""
    for observed in read_recording(path):
        if observed:
            return observed[0].timestamp
    return float("inf")


def _report_recordings(args: argparse.Namespace, by: Sequence[str], since: float | None) -> Report:
    ledger = Ledger(by)
    cutoff = None if since is None else time.time() - since
    paths = list(dict.fromkeys(args.files))  # a file given twice is read once (a directory: read_recording says so)
    read = 0
    warnings = []
    damaged = 0
    for path in sorted(paths, key=_first_time):
        skipped = _Skipped()
        for observed in read_recording(path, skipped):
            read += 1
            for observation in observed:
                if cutoff is None or observation.timestamp >= cutoff:
                    ledger.add(observation)
        if skipped.count:
            damaged += skipped.count
            warnings.append(f"{path}: {_lines(skipped.count)} skipped, not snapshots (first at {skipped.first})")
    report = ledger.report()
    if report.observations == 0:  # one line says it all, the damage included
        which = ", ".join(paths)
        also = f" ({_lines(damaged)} skipped, not snapshots)" if damaged else ""
        if read and cutoff is not None:
            raise NvtopyError(f"nothing to report: no snapshot of the last {args.since} in {which}{also}")
        raise NvtopyError(f"nothing to report: no snapshot in {which}{also}")
    for warning in warnings:
        options.warn_user(warning)
    return report


def _lines(count: int) -> str:
    return _plural(count, "line")


# ----------------------------------------------------------------- Prometheus


def _report_prometheus(
    args: argparse.Namespace, by: Sequence[str], since: float | None
) -> tuple[Report, dict[str, Any]]:
    from ..sources.remote.prometheus import PrometheusClient, PrometheusError
    from ..sources.remote.prometheus_accounting import check_points, where_text

    period = since if since is not None else 86400.0
    where = where_text(args.where)
    step = parse_duration(args.step, "--step") if args.step is not None else None
    if step is not None:
        check_points(period, step)
    key_columns(by)  # usage errors before the server is asked anything
    client = PrometheusClient(args.prometheus, timeout=args.timeout, ca_file=args.ca_file)
    shown = getattr(client, "url", args.prometheus)  # the URL without its credentials (user:password@)
    try:
        return _account_prometheus(args, client, shown=shown, by=by, period=period, step=step, where=where)
    except PrometheusError as exc:
        if "larger than" not in str(exc):
            raise
        raise PrometheusError(f"{exc}: use a longer --step, a shorter --since or a narrower --where") from None


def _account_prometheus(
    args: argparse.Namespace,
    client: Any,
    *,
    shown: str,
    by: Sequence[str],
    period: float,
    step: float | None,
    where: str,
) -> tuple[Report, dict[str, Any]]:
    """The report from what the server holds of the period: its data's span and scrape interval first
    (:func:`~nvtopy.sources.remote.prometheus_accounting.data_span`), then the step, then the figures."""
    from ..sources.remote.prometheus_accounting import account, data_span, step_for

    last = f"the last {args.since or '24h'}"
    now = time.time()
    span = data_span(client, start=now - period, end=now, where=where)
    if span is None:
        matching = f" matching {args.where}" if where else ""
        raise NvtopyError(
            f"nothing to report: {shown} has no GPU series (DCGM_FI_DEV_*, nvtopy_process_*){matching} in {last}"
        )
    if span.interval is None:
        raise NvtopyError(
            f"nothing to report: too little data: {shown} holds one sample of each GPU in {last} "
            f"(at {_clock(span.last)}); a report needs two, a scrape interval apart"
        )
    held = span.last - span.earliest - span.resolution  # first to last sample, at least
    if step is None:
        step = step_for(span, period)
    elif step > max(held, span.interval):
        raise NvtopyError(
            f"nothing to report: too little data for --step {args.step}: {shown} holds "
            f"{_seconds(span.seconds)} of data in {last} (a sample every {span.interval:.3g} s); "
            f"give a shorter --step (at least {span.interval:.3g}s)"
        )
    end = _align(now, step)
    start = max(end - period, _align(span.earliest, step))  # a young server's data: not a day of empty points
    report = account(client, by=by, start=start, end=end, step=step, where=where)
    if report.observations <= report.gpus:  # no GPU observed twice: no interval, every figure would be 0
        raise NvtopyError(
            f"nothing to report: too little data: {shown} holds {_seconds(span.seconds)} of data in {last}, "
            f"one point of each GPU at a step of {step:g} s"
        )
    if span.earliest > now - period + step:  # the server's data is younger than the period: said, not hidden
        young = (
            f"{shown} holds {_seconds(span.seconds)} of data of {last}: from {_clock(span.earliest)}, "
            f"a sample every {span.interval:.3g} s"
        )
        report = dataclasses.replace(report, notes=(young, *report.notes))
    extra = {"prometheus": shown, "step_s": step, "scrape_interval_s": round(span.interval, 3)}
    return report, {**extra, "queries": client.queries}


def _clock(timestamp: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(timestamp))


def _seconds(seconds: float) -> str:
    """A span of data in words: ``10 s``, ``25 min``, ``7.5 h``, ``3.0 d``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _align(value: float, step: float) -> float:
    """``value`` rounded down to a multiple of ``step``: the same period gives the same points."""
    return (value // step) * step


# ----------------------------------------------------------------- output


def _hours(value: float) -> str:
    return f"{value:.2f}"


def _cells(report: Report, row: Row, label: str | None = None) -> list[str]:
    """A table row: key cells (safe for the terminal), then the figures in their header's unit."""
    if label is not None:
        keys = [label] + [""] * (len(report.columns) - 1)
    else:
        keys = [str(v) if isinstance(v, int) else safe_text(v) for v in row.key]
    energy = "N/A" if row.energy_kwh is None else f"{row.energy_kwh:.3f}"
    memory = "N/A" if row.peak_memory_bytes is None else f"{row.peak_memory_bytes / 2**30:.1f}"
    return [
        *keys,
        str(row.gpus),
        _hours(row.held_gpu_hours),
        _hours(row.busy_gpu_hours),
        _hours(row.idle_held_gpu_hours),
        energy,
        memory,
    ]


TABLE_FIGURES = ("GPUS", "HELD GPU-h", "BUSY GPU-h", "IDLE-HELD GPU-h", "ENERGY kWh", "PEAK MEM GiB")


def _stamp(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def render_table(report: Report, rows: Sequence[Row], source: str, out: IO[str], *, color: bool) -> None:
    """The report as an aligned table, the total last, notes under it; colour only on a terminal."""
    from ..render.cells import DIM
    from ..render.terminal import color_allowed
    from ..render.text import RESET, STYLES
    from ..render.units import width_of

    tty = out.isatty()
    color = color and tty and color_allowed()  # neither NO_COLOR nor TERM=dumb
    assert report.start is not None and report.end is not None
    hours = (report.end - report.start) / 3600
    title = (
        f"nvtopy report by {', '.join(report.columns)}: {_stamp(report.start)} to {_stamp(report.end)} "
        f"({hours:.1f} h), {report.gpus} GPU{'s' if report.gpus != 1 else ''}, {safe_text(source)}"
    )
    lines = [f"{STYLES['bold']}{title}{RESET}" if color else title]
    if not rows:
        lines.append("No GPU was held by a process in this period.")
    else:
        headers = [c.upper() for c in report.columns] + list(TABLE_FIGURES)
        body = [_cells(report, r) for r in rows]
        total = _cells(report, report.total, "TOTAL")
        widths = [max(width_of(cells[i]) for cells in (headers, total, *body)) for i in range(len(headers))]
        keys = len(report.columns)
        max_width = shutil.get_terminal_size((160, 40)).columns if tty else None

        def line(cells: list[str]) -> str:
            parts = []
            for i, text in enumerate(cells):
                limit = widths[i]
                if max_width is not None and i < keys:  # a hostile 200-character user name: clipped
                    limit = min(limit, max(12, max_width // 3))
                    if width_of(text) > limit:
                        text = text[: limit - 1] + "…"
                pad = " " * max(0, limit - width_of(text))
                parts.append(text + pad if i < keys else pad + text)
            return "  ".join(parts).rstrip()

        header = line(headers)
        lines.append(f"{STYLES['bold']}{header}{RESET}" if color else header)
        lines.append("─" * width_of(header))
        lines.extend(line(cells) for cells in body)
        lines.append("─" * width_of(header))
        lines.append(line(total))
    notes = _notes(report)
    lines.extend(f"{STYLES[DIM]}{n}{RESET}" if color else n for n in notes)
    out.write("\n".join(lines) + "\n")


def _notes(report: Report) -> list[str]:
    notes = []
    if report.gaps:
        notes.append(
            f"{report.gaps} gap{'s' if report.gaps != 1 else ''} between observations "
            f"({report.gap_gpu_hours:.2f} GPU-h) not counted: nothing was recorded then"
        )
    if report.out_of_order:
        notes.append(f"{report.out_of_order} observations older than others of their GPU skipped (overlapping inputs)")
    for name, count in report.skipped:
        notes.append(_SKIPPED_NOTES[name](count))
    notes.extend(safe_text(n) for n in report.notes)
    return notes


_KW = f"{MAX_GPU_WATTS / 1000:g} kW"
_SKIPPED_NOTES: dict[str, Callable[[int], str]] = {
    "energy_blank": lambda n: (
        f"energy counter: {_plural(n, 'reading')} skipped, no value "
        "(DCGM's blank, 9223372036854775792 and above; NVML's N/A; negative)"
    ),
    "energy_reset": lambda n: (
        f"energy counter: {_plural(n, 'reset')} (it went down: the driver reloaded), power x time counted instead"
    ),
    "energy_implausible": lambda n: (
        f"energy counter: {_plural(n, 'increment')} skipped, more than {_KW} over the interval "
        "(no GPU draws that), power x time counted instead"
    ),
    "power": lambda n: f"power: {_plural(n, 'reading')} skipped, negative or above {_KW}",
    "activity": lambda n: f"activity: {_plural(n, 'reading')} skipped, outside 0-100 % (neither busy nor idle)",
}
"""The note for each kind of reading the ledger skipped (:data:`~nvtopy.accounting.ledger.SKIPPED_READINGS`)."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def run(command: str, args: argparse.Namespace) -> int:
    by = _by(args.by)
    since = parse_duration(args.since) if args.since is not None else None
    sort_column(args.sort, by)  # a bad column is an error before anything is read
    if args.prometheus and args.files:
        raise UsageError("give recordings (FILE ...) or --prometheus URL, not both")
    if not args.prometheus:
        if not args.files:
            raise UsageError("give recordings (FILE ...) or --prometheus URL")
        if args.where is not None or args.step is not None or args.ca_file is not None:
            raise UsageError("--where, --step and --ca-file apply to --prometheus only")
        report = _report_recordings(args, by, since)
        count = len(set(args.files))
        source_text = f"{report.observations} observations from {count} recording{'s' if count != 1 else ''}"
        source: dict[str, Any] = {"files": list(dict.fromkeys(args.files))}
    else:
        report, extra = _report_prometheus(args, by, since)
        source_text = f"Prometheus {extra['prometheus']}, a point every {extra['step_s']:g} s"
        source = extra
    rows = sort_rows(report, args.sort, reverse=args.reverse)
    if args.format == "json":
        sys.stdout.write(report_json(report, rows, source) + "\n")
    elif args.format == "csv":
        sys.stdout.write(report_csv(report, rows))
    else:
        render_table(report, rows, source_text, sys.stdout, color=not args.no_color)
    return 0

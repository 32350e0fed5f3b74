"""nvidia-smi's CSV queries over a stream: the remote loop that prints them, and the parser of what it prints.

Why: ``nvtopy --ssh`` shows a host where nvtopy is not installed through the one tool
every NVIDIA driver ships, ``nvidia-smi``. :func:`loop_command` is the command the
transport hands to ``ssh host``; it prints, every interval, one *cycle*: the
``--query-gpu`` CSV and the ``--query-compute-apps`` CSV between markers.
:class:`SmiCycleReader` is fed the stream's lines and returns each complete cycle,
parsed by :func:`parse_cycle` into the model's types (:class:`~nvtopy.model.GpuStatic`,
:class:`~nvtopy.model.GpuSample`, :class:`~nvtopy.model.GpuProcess`), so the views need
nothing of their own for such a host.

An old nvidia-smi rejects the whole query when one field is unknown to it (``Field
"x" is not a valid field to query.``), so the loop asks for :data:`GPU_FIELDS` and,
where that fails and :data:`BASIC_GPU_FIELDS` (what every driver since about R384
knows) succeeds, keeps to the basic set; the cycle says which (:attr:`SmiCycle.mode`)
and what that mode cannot show (:attr:`SmiCycle.missing`). nvidia-smi's own words
(the driver is not loaded, no devices, an unknown field) are in the stream too, and
become :attr:`SmiCycle.error`: one line, made safe for a terminal.

Everything read is outside text from another machine: lines, fields, GPUs
(:data:`MAX_GPUS_PER_HOST`), processes (:data:`MAX_PROCESSES_PER_HOST`) and text are
bounded, as for ``--remote``; a value nvidia-smi did not give (``[N/A]``,
``[Not Supported]``, ``[GPU is lost]``, blank, unparsable, NaN, huge, negative) is
``None`` with its :class:`~nvtopy.model.Reason` in ``unavailable``, never 0. Process
names are kept as read (cut to :data:`MAX_COMMAND`): the views escape them where they
write (:mod:`nvtopy.textsafe`). Units are the model's: MiB -> bytes, W, MHz, °C, %.

Known limits of the CSV queries (nvidia-smi has no field for them): the slowdown and
shutdown temperatures, energy, PCIe and NVLink throughput, graphics processes, MIG
instances and which instance a process runs on (``--query-compute-apps`` names the
parent GPU), and everything the far host's ``/proc`` would tell (user, CPU, host memory).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..interval import valid_interval
from ..model import (
    GpuProcess,
    GpuSample,
    GpuStatic,
    ProcessType,
    Reason,
    decode_throttle_reasons,
    freeze,
)
from ..textsafe import excerpt
from .nvidia_smi import na_reason, normal_bus_id, smi_flag
from .prometheus.parse import MAX_COMMAND, MAX_GPU_INDEX, MAX_GPUS_PER_HOST, MAX_LABEL, MAX_PID, MAX_PROCESSES_PER_HOST

__all__ = [
    "APP_FIELDS",
    "BASIC_GPU_FIELDS",
    "GPU_FIELDS",
    "MARKER",
    "MAX_CYCLE_LINES",
    "MAX_LINE",
    "MISSING",
    "SmiCycle",
    "SmiCycleReader",
    "loop_command",
    "loop_script",
    "parse_cycle",
]

# --------------------------------------------------------------------- the queries

BASIC_GPU_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
    "memory.total",
    "memory.used",
    "memory.free",
    "power.draw",
    "power.limit",
    "fan.speed",
    "pstate",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "name",  # last: the one free-text field, so a comma in it cannot shift the others
)
"""What every nvidia-smi since about R384 answers (telegraf's and gpustat's queries of that era ask these)."""

GPU_FIELDS: tuple[str, ...] = (
    # What the GPU is held to, where the driver has it: power.limit is the one software requested (nvtopy's
    # power limit is the enforced one, as over NVML).
    *("enforced.power.limit" if name == "power.limit" else name for name in BASIC_GPU_FIELDS[:-1]),
    "serial",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "memory.reserved",  # R510+
    "utilization.encoder",
    "utilization.decoder",
    "persistence_mode",
    "compute_mode",
    "compute_cap",  # R510+
    "driver_model.current",  # WDDM / TCC on Windows, [N/A] on Linux
    "ecc.mode.current",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.sbe",
    "retired_pages.dbe",
    "retired_pages.pending",
    "remapped_rows.correctable",  # R460+
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_throttle_reasons.active",  # R535+ calls it clocks_event_reasons.active and keeps this name (R590: both)
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "mig.mode.current",  # R450+
    "mig.mode.pending",
    "name",
)
"""Every ``--query-gpu`` field nvtopy's GPU panels can use, by the names R590's ``--help-query-gpu`` lists."""

APP_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_memory", "process_name")
"""``--query-compute-apps``: the process name last, as the one free-text field (a path may hold ", ")."""

MARKER = "#nvtopy-smi"
"""What starts each line the loop itself prints (the rest of the stream is nvidia-smi's)."""

MAX_LINE = 8192
"""Characters kept of a line (a full GPU row is about 400; a process row holds a path)."""
MAX_CYCLE_LINES = MAX_GPUS_PER_HOST + MAX_PROCESSES_PER_HOST + 32
"""Lines one cycle keeps at most: every GPU and process row and a few lines of nvidia-smi's words (more: counted)."""
_MAX_NUMBER = 24  # digits before the point: more is no reading (the largest, bytes, has 20)

# --------------------------------------------------------------------- the loop on the far side


def loop_script(interval: float) -> str:
    """The POSIX sh loop (one line, for ``sh -c``): every ``interval`` seconds, one cycle of the queries.

    A cycle is::

        #nvtopy-smi cycle
        #nvtopy-smi gpu full|basic <lines> <exit status>
        <that many lines: nvidia-smi --query-gpu's CSV, or what it said instead (2>&1)>
        #nvtopy-smi apps <lines> <exit status>
        <that many lines: --query-compute-apps's CSV, or what it said>
        #nvtopy-smi end

    Why a loop with markers and not ``nvidia-smi -l N``: a cycle must be delimited. With
    ``-l``, the compute-apps query prints nothing at all while no process runs, so "no
    processes" and "not printed yet" read the same, and two ``-l`` loops (GPUs, processes)
    would run out of step with nothing to pair their readings; nor could ``-l`` fall back to
    the basic fields, or report an exit status. Why line counts in the headers: a process
    name is free text and may hold a newline followed by ``#nvtopy-smi end``; the reader
    takes the announced number of lines as data without looking at them, so no process can
    end a cycle early or forge one. The full query is tried first; once it fails where the
    basic one succeeds (an older driver), the loop keeps to the basic one.

    ``sleep`` is POSIX only for whole seconds: where a fraction is refused, it sleeps 1 s.
    """
    if not isinstance(interval, (int, float)) or not valid_interval(interval):
        raise ValueError(f"interval must be a number of seconds nvtopy takes, not {interval!r}")
    seconds = f"{interval:.3f}".rstrip("0").rstrip(".")
    full = ",".join(GPU_FIELDS)
    basic = ",".join(BASIC_GPU_FIELDS)
    smi = "nvidia-smi --format=csv,noheader,nounits"
    script = (
        # e SECTION TEXT STATUS: the header with TEXT's line count and STATUS, then TEXT.
        'e() { if [ -n "$2" ]; then n=$(printf "%s\\n" "$2" | wc -l); else n=0; fi; '
        f'printf "{MARKER} %s %d %d\\n" "$1" $n "$3"; '
        'if [ -n "$2" ]; then printf "%s\\n" "$2"; fi; }; '
        "m=full; "
        "while :; do "
        f'printf "%s\\n" "{MARKER} cycle"; '
        'if [ "$m" = full ]; then '
        f"o=$({smi} --query-gpu={full} 2>&1); r=$?; "
        f'if [ "$r" -ne 0 ]; then b=$({smi} --query-gpu={basic} 2>&1) && {{ m=basic; o=$b; r=0; }}; fi; '
        f"else o=$({smi} --query-gpu={basic} 2>&1); r=$?; fi; "
        'e "gpu $m" "$o" "$r"; '
        f"a=$({smi} --query-compute-apps={','.join(APP_FIELDS)} 2>&1); "
        'e apps "$a" "$?"; '
        f'printf "%s\\n" "{MARKER} end"; '
        f"sleep {seconds} 2>/dev/null || sleep 1; "
        "done"
    )
    assert not any(c in script for c in ("'", "!", "\n", "\\\\")), "see loop_command"
    return script


def loop_command(interval: float) -> str:
    """The command for ``ssh host '<this>'``: :func:`loop_script` run by ``sh``, whatever the login shell is.

    The far side's login shell may be bash, dash, zsh, busybox's ash, fish or tcsh; only
    ``exec sh -c '...'`` means the same to all of them. The script is one line (csh allows
    no newline within quotes) with no ``'`` (it needs no escaping), no ``!`` (csh expands it
    even within quotes) and no double backslash (fish reads one within single quotes).
    """
    return f"exec sh -c '{loop_script(interval)}'"


# --------------------------------------------------------------------- what a cycle becomes


@dataclass(frozen=True, slots=True)
class SmiCycle:
    """One cycle of the loop, parsed: the host's GPUs and their compute processes as nvidia-smi saw them."""

    gpus: tuple[tuple[GpuStatic, GpuSample], ...] = ()  # by nvidia-smi's order; GpuStatic.index = its index
    processes: dict[int, tuple[GpuProcess, ...]] = field(default_factory=dict, hash=False)  # by GPU index
    mode: str = "full"  # "full" or "basic": which field set nvidia-smi answered
    missing: tuple[str, ...] = ()  # short words: what this mode cannot show
    error: str | None = None  # what nvidia-smi (or the stream) said instead of CSV: one safe line
    driver_version: str | None = None
    processes_unavailable: Reason | None = None  # the process list itself is unknown (its query failed)
    dropped: int = 0  # lines or rows that were not shown: malformed, duplicate, beyond a bound


_MISSING_ALWAYS: tuple[str, ...] = (
    "Xid events",
    "health beyond ECC and row remapping (Xid, NVLink, PCIe replays)",
    "process user, CPU and host memory",
    "graphics processes",
    "GPM activity",
    "PCIe and NVLink throughput",
    "energy",
    "temperature thresholds",
    "MIG instances",
    "history from before nvtopy connected",
)
_MISSING_BASIC: tuple[str, ...] = (
    "ECC",
    "throttle reasons",
    "memory health (remapped rows, retired pages)",
    "PCIe link",
    "encoder and decoder",
    "reserved memory",
    "MIG mode",
    "persistence and compute mode",
)
MISSING: Mapping[str, tuple[str, ...]] = {"full": _MISSING_ALWAYS, "basic": _MISSING_BASIC + _MISSING_ALWAYS}
"""What each mode cannot show, in short words for the host's line."""

# CSV field -> (where: "static" or "sample", model field, how to read it)
_FIELDS: dict[str, tuple[str, str, str]] = {
    "uuid": ("static", "uuid", "text"),
    "name": ("static", "name", "text"),
    "serial": ("static", "serial", "text"),
    "pci.bus_id": ("static", "bus_id", "bus"),
    "memory.total": ("static", "memory_total_bytes", "mib"),
    "power.default_limit": ("static", "power_default_limit_w", "float"),
    "power.min_limit": ("static", "power_min_limit_w", "float"),
    "power.max_limit": ("static", "power_max_limit_w", "float"),
    "clocks.max.sm": ("static", "clock_sm_max_mhz", "int"),
    "clocks.max.mem": ("static", "clock_mem_max_mhz", "int"),
    "compute_cap": ("static", "compute_capability", "text"),
    "driver_model.current": ("static", "driver_model", "text"),
    "mig.mode.current": ("static", "mig_mode", "flag"),
    "mig.mode.pending": ("static", "mig_mode_pending", "flag"),
    "pcie.link.gen.max": ("static", "pcie_link_gen_max", "int"),
    "pcie.link.width.max": ("static", "pcie_link_width_max", "int"),
    "temperature.gpu": ("sample", "temperature_c", "int"),
    "utilization.gpu": ("sample", "utilization_gpu_percent", "int"),
    "utilization.memory": ("sample", "utilization_memory_percent", "int"),
    "utilization.encoder": ("sample", "encoder_percent", "int"),
    "utilization.decoder": ("sample", "decoder_percent", "int"),
    "memory.used": ("sample", "memory_used_bytes", "mib"),
    "memory.free": ("sample", "memory_free_bytes", "mib"),
    "memory.reserved": ("sample", "memory_reserved_bytes", "mib"),
    "power.draw": ("sample", "power_draw_w", "float"),
    "power.limit": ("sample", "power_limit_w", "float"),
    "enforced.power.limit": ("sample", "power_limit_w", "float"),
    "fan.speed": ("sample", "fan_percent", "int"),
    "pstate": ("sample", "pstate", "pstate"),
    "clocks.sm": ("sample", "clock_sm_mhz", "int"),
    "clocks.mem": ("sample", "clock_mem_mhz", "int"),
    "persistence_mode": ("sample", "persistence_mode", "flag"),
    "compute_mode": ("sample", "compute_mode", "text"),
    "ecc.mode.current": ("sample", "ecc_mode", "flag"),
    "ecc.errors.corrected.volatile.total": ("sample", "ecc_corrected_volatile", "int"),
    "ecc.errors.uncorrected.volatile.total": ("sample", "ecc_uncorrected_volatile", "int"),
    "ecc.errors.corrected.aggregate.total": ("sample", "ecc_corrected_aggregate", "int"),
    "ecc.errors.uncorrected.aggregate.total": ("sample", "ecc_uncorrected_aggregate", "int"),
    "retired_pages.sbe": ("sample", "retired_pages_sbe", "int"),
    "retired_pages.dbe": ("sample", "retired_pages_dbe", "int"),
    "retired_pages.pending": ("sample", "retired_pages_pending", "flag"),
    "remapped_rows.correctable": ("sample", "remapped_rows_corrected", "int"),
    "remapped_rows.uncorrectable": ("sample", "remapped_rows_uncorrected", "int"),
    "remapped_rows.pending": ("sample", "remapped_rows_pending", "flag"),
    "remapped_rows.failure": ("sample", "remapped_rows_failure", "flag"),
    "clocks_throttle_reasons.active": ("sample", "throttle_reasons", "mask"),
    "pcie.link.gen.current": ("sample", "pcie_link_gen", "int"),
    "pcie.link.width.current": ("sample", "pcie_link_width", "int"),
}
_FIELDS_OF_MODE: dict[str, tuple[str, ...]] = {"full": GPU_FIELDS, "basic": BASIC_GPU_FIELDS}

# A number, and the unit nvidia-smi prints where ``nounits`` is not given (the captures' CSV has them).
_NUMBER = re.compile(r"^([-+]?(\d+)(?:\.\d+)?)(?: ?(?:MiB|W|MHz|%|C))?$")
_NOT_A_NUMBER = re.compile(r"^[-+]?(nan|inf|infinity)$", re.IGNORECASE)
_PSTATE = re.compile(r"^P(\d{1,3})$")
_MASK = re.compile(r"^0x([0-9a-fA-F]{1,16})$")
_INDEX = re.compile(r"^\d{1,6}$")
_MIB = 1 << 20

Value = int | float | str | bool | tuple[str, ...] | None


def _read(raw: str, kind: str) -> tuple[Value, Reason | None]:
    """One CSV value as the model has it, or ``None`` and why."""
    text = raw.strip()
    if not text:
        return None, Reason.NOT_AVAILABLE
    reason = na_reason(text)
    if reason is not None:
        return None, reason
    if kind == "text":
        return text[:MAX_LABEL], None
    if kind == "bus":
        return normal_bus_id(text[:MAX_LABEL]), None
    if kind == "flag":
        flag = smi_flag(text)
        return (None, Reason.UNKNOWN) if flag is None else (flag, None)
    if kind == "pstate":
        match = _PSTATE.match(text)
        return (int(match.group(1)), None) if match else (None, Reason.UNKNOWN)  # P32 and up: the model's range
    if kind == "mask":
        match = _MASK.match(text)
        return (decode_throttle_reasons(int(match.group(1), 16)), None) if match else (None, Reason.UNKNOWN)
    match = _NUMBER.match(text) if len(text) <= 2 * _MAX_NUMBER else None
    if match is None:
        numeric = _NOT_A_NUMBER.match(text) or re.match(r"^[-+]?\d[\d.]*$", text)
        return None, Reason.OUT_OF_RANGE if numeric else Reason.UNKNOWN
    if len(match.group(2)) > _MAX_NUMBER:
        return None, Reason.OUT_OF_RANGE
    number = float(match.group(1))  # finite: at most 24 digits before the point
    if kind == "mib":
        number *= _MIB
    if kind == "float":
        return number, None
    return math.floor(number + 0.5), None  # the model's range check follows (negative, huge -> out of range)


def _split(line: str, count: int) -> list[str] | None:
    """The ``count`` values of a CSV row (the last one keeps any further commas), or None: not such a row."""
    parts = line.split(",", count - 1)
    return parts if len(parts) == count else None


def _gpu(values: list[str], fields: Sequence[str], now: float) -> tuple[GpuStatic, GpuSample, str | None] | None:
    """One GPU row; None where its index is not one (the row is no GPU)."""
    raw = dict(zip(fields, values, strict=True))
    index_text = raw["index"].strip()
    if not _INDEX.match(index_text) or int(index_text) > MAX_GPU_INDEX:
        return None
    static: dict[str, Value] = {}
    sample: dict[str, Value] = {}
    static_why: dict[str, Reason] = {}
    sample_why: dict[str, Reason] = {}
    for name in fields:
        spec = _FIELDS.get(name)
        if spec is None:
            continue
        where, key, kind = spec
        value, reason = _read(raw[name], kind)
        values_of, why_of = (static, static_why) if where == "static" else (sample, sample_why)
        values_of[key] = value
        if reason is not None:
            why_of[key] = reason
    lost = Reason.LOST in static_why.values() or Reason.LOST in sample_why.values()
    gpu_static = GpuStatic(index=int(index_text), unavailable=freeze(static_why), **static)  # type: ignore[arg-type]
    gpu_sample = GpuSample(timestamp=now, lost=lost, unavailable=freeze(sample_why), **sample)  # type: ignore[arg-type]
    driver, _ = _read(raw.get("driver_version", ""), "text")
    return gpu_static, gpu_sample, driver if isinstance(driver, str) else None


def _process(values: list[str], index: int, uuid: str) -> GpuProcess | None:
    """One compute-apps row on GPU ``index``; None where its pid is not one."""
    raw = dict(zip(APP_FIELDS, values, strict=True))
    pid_text = raw["pid"].strip()
    if not re.fullmatch(r"\d{1,10}", pid_text):
        return None
    pid = int(pid_text)
    if not 0 < pid <= MAX_PID:
        return None
    why: dict[str, Reason] = dict.fromkeys(("user", "cpu_percent", "host_memory_bytes"), Reason.NOT_SUPPORTED)
    memory, reason = _read(raw["used_memory"], "mib")
    if reason is not None:
        why["gpu_memory_bytes"] = reason
    text = raw["process_name"].strip()[:MAX_COMMAND]
    command: str | None = text
    name: str | None = re.split(r"[/\\]", text)[-1][:MAX_LABEL] or text[:MAX_LABEL]  # the executable's base name
    name_reason = na_reason(text) if text else Reason.NOT_AVAILABLE
    if name_reason is not None:
        name = command = None
        why["name"] = why["command"] = name_reason
    return GpuProcess(
        gpu_index=index,
        gpu_uuid=uuid,
        pid=pid,
        type=ProcessType.COMPUTE,
        gpu_memory_bytes=memory,  # type: ignore[arg-type]
        name=name,
        command=command,
        unavailable=freeze(why),
    )


# --------------------------------------------------------------------- framing

_SECTION_LINES: dict[str, int] = {"gpu": MAX_GPUS_PER_HOST + 16, "apps": MAX_CYCLE_LINES - MAX_GPUS_PER_HOST - 16}
"""Lines kept of each section: every row a host may have, and a few of nvidia-smi's words; the rest are counted."""
_MAX_COUNT_DIGITS = 7  # a section header's line count: more is no header the loop wrote


class _Framing:
    """One cycle being read, line by line: the loop's markers, and the data lines each header announced.

    One framing for :func:`parse_cycle` and :class:`SmiCycleReader`. A header's count of
    data lines is taken as said, so a marker-like line inside data (a process name) is data;
    a section keeps at most :data:`_SECTION_LINES` of them, so memory is bounded whatever
    the host sends, and lines beyond are counted (:attr:`dropped`).
    """

    __slots__ = ("dropped", "ended", "left", "malformed", "mode", "section", "sections", "status")

    def __init__(self) -> None:
        self.left = 0  # data lines still owed to the last header
        self.section = ""
        self.sections: dict[str, list[str]] = {}
        self.status: dict[str, int | None] = {}
        self.mode = "basic"
        self.ended = False
        self.malformed = False
        self.dropped = 0

    def add(self, line: str) -> bool:
        """Take one line (cut to :data:`MAX_LINE`); True when it is the end marker."""
        line = line[:MAX_LINE].rstrip("\r\n")
        if self.left > 0:
            self.left -= 1
            kept = self.sections[self.section]
            if len(kept) < _SECTION_LINES[self.section]:
                kept.append(line)
            else:
                self.dropped += 1
            return False
        if not line.startswith(MARKER + " "):
            self.dropped += bool(line.strip())  # outside any section: a shell's warning, garbage
            return False
        words = line[len(MARKER) + 1 :].split()
        if words == ["end"]:
            self.ended = True
            return True
        if (words[:1] == ["gpu"] and len(words) == 4) or (words[:1] == ["apps"] and len(words) == 3):
            section, count, status = words[0], words[-2], words[-1]
            if section == "gpu":
                self.malformed |= words[1] not in _FIELDS_OF_MODE
                self.mode = words[1] if words[1] in _FIELDS_OF_MODE else self.mode
            valid = count.isdigit() and len(count) <= _MAX_COUNT_DIGITS
            self.malformed |= not valid
            self.left = int(count) if valid else 0
            self.section = section
            self.sections[section] = []
            self.status[section] = int(status) if status.isdigit() and len(status) <= 3 else None
        elif words != ["cycle"]:
            self.malformed = True
        return False


def _said(lines: Sequence[str], status: int | None, what: str) -> str:
    """What nvidia-smi said instead of CSV, as one safe line."""
    for line in lines:
        if line.strip():
            return excerpt(line.strip(), 200)
    return f"{what} exited with status {status}" if status else f"{what} printed nothing"


def parse_cycle(lines: Sequence[str], now: float) -> SmiCycle:
    """One cycle's lines (from ``#nvtopy-smi cycle`` to ``#nvtopy-smi end``) as GPUs and processes at ``now``.

    Pure and bounded: each line is cut to :data:`MAX_LINE` characters, and each section
    keeps the lines its rows can need (the rest are counted in ``dropped``). A cycle without
    its end marker, or with a header the loop did not write, is not parsed: nothing is
    shown, and ``error`` says why.
    """
    framing = _Framing()
    for line in lines:
        if framing.add(line):
            break
    return _parsed(framing, now)


def _parsed(framing: _Framing, now: float) -> SmiCycle:
    mode, sections, status, dropped = framing.mode, framing.sections, framing.status, framing.dropped
    missing = MISSING[mode]
    if not framing.ended or "gpu" not in sections:
        return SmiCycle(mode=mode, missing=missing, error="an incomplete cycle (no end marker)", dropped=dropped)
    if framing.malformed:
        return SmiCycle(mode=mode, missing=missing, error="a malformed cycle (a header nvtopy did not write)")

    fields = _FIELDS_OF_MODE[mode]
    gpus: list[tuple[GpuStatic, GpuSample]] = []
    seen: set[int] = set()
    other: list[str] = []  # lines that are no GPU row: nvidia-smi's words, or garbage
    driver: str | None = None
    for line in sections["gpu"]:
        values = _split(line, len(fields))
        parsed = _gpu(values, fields, now) if values is not None else None
        if parsed is None or parsed[0].index in seen or len(gpus) >= MAX_GPUS_PER_HOST:
            other.append(line)
            continue
        gpu_static, gpu_sample, gpu_driver = parsed
        seen.add(gpu_static.index)
        gpus.append((gpu_static, gpu_sample))
        driver = driver or gpu_driver
    error: str | None = None
    gpu_status = status.get("gpu")
    if not gpus and (gpu_status or any(line.strip() for line in other)):
        error = _said(other, gpu_status, "nvidia-smi")
    elif gpus:
        dropped += sum(1 for line in other if line.strip())
        # Words among the rows (no comma: no row of any shape), as nvidia-smi prints of a GPU it cannot read
        said = [line for line in other if line.strip() and "," not in line]
        error = _said(said, None, "nvidia-smi") if said else None

    by_uuid = {static.uuid: static.index for static, _ in gpus if static.uuid}
    processes: dict[int, list[GpuProcess]] = {static.index: [] for static, _ in gpus}
    processes_unavailable: Reason | None = None
    app_lines = sections.get("apps")
    app_status = status.get("apps")
    rows = 0
    positions: dict[tuple[int, int], int] = {}  # (GPU, pid) -> its place in processes[GPU]
    bad: list[str] = []  # lines that are no CSV row: nvidia-smi's words instead of a list
    for line in app_lines or ():
        if not line.strip():
            continue
        values = _split(line, len(APP_FIELDS))
        if values is None:
            bad.append(line)
            continue
        index = by_uuid.get(values[0].strip())  # a GPU not shown (beyond the bound, or a bad row): not shown either
        process = _process(values, index, values[0].strip()) if index is not None else None
        if process is None or rows >= MAX_PROCESSES_PER_HOST:
            dropped += 1
            continue
        rows += 1
        listed = processes[process.gpu_index]
        twin = positions.setdefault((process.gpu_index, process.pid), len(listed))
        if twin == len(listed):
            listed.append(process)
        else:  # one pid, several contexts on one GPU: one row, their memory summed
            listed[twin] = _merged(listed[twin], process)
    if app_lines is None or app_status or (bad and not rows):
        processes_unavailable = Reason.UNKNOWN
        if error is None and gpus:
            error = "processes: " + _said(bad, app_status, "nvidia-smi --query-compute-apps")
        processes = {index: [] for index in processes}
    else:
        dropped += len(bad)
    return SmiCycle(
        gpus=tuple(gpus),
        processes={index: tuple(listed) for index, listed in processes.items()},
        mode=mode,
        missing=missing,
        error=error,
        driver_version=driver,
        processes_unavailable=processes_unavailable,
        dropped=dropped,
    )


def _merged(first: GpuProcess, second: GpuProcess) -> GpuProcess:
    a, b = first.gpu_memory_bytes, second.gpu_memory_bytes
    if a is None or b is None:
        return first
    return GpuProcess(
        gpu_index=first.gpu_index,
        gpu_uuid=first.gpu_uuid,
        pid=first.pid,
        type=first.type,
        gpu_memory_bytes=a + b,
        name=first.name,
        command=first.command,
        unavailable=first.unavailable,
    )


class SmiCycleReader:
    """Fed the loop's output line by line; returns each complete cycle, parsed, at its end marker.

    Bounded whatever the host sends: a cycle keeps at most the lines its rows can need
    (:class:`_Framing`); lines outside a cycle (a login banner, a shell's warning) are
    counted in :attr:`noise`, and a cycle that a new one interrupts in :attr:`incomplete`.
    """

    __slots__ = ("_clock", "_cycle", "incomplete", "noise")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._cycle: _Framing | None = None  # None: outside a cycle
        self.noise = 0
        self.incomplete = 0

    def feed(self, line: str, now: float | None = None) -> SmiCycle | None:
        """Take one line (its end of line optional); the parsed cycle when ``line`` ends one, else None."""
        cycle = self._cycle
        if (cycle is None or cycle.left == 0) and line[:MAX_LINE].rstrip("\r\n") == f"{MARKER} cycle":
            self.incomplete += cycle is not None
            self._cycle = _Framing()
            return None
        if cycle is None:
            self.noise += 1
            return None
        if not cycle.add(line):
            return None
        self._cycle = None
        return _parsed(cycle, self._clock() if now is None else now)

"""``nvtopy --once``: a snapshot as two aligned tables (GPUs, then their processes).

Why not rich: a one-shot command is measured in milliseconds, and importing
rich and laying out its tables cost more than collecting the snapshot (see
benchmarks/README.md). Columns here are measured once and padded with plain
string operations; colour is a handful of ANSI codes, written only to a
terminal and never with ``--no-color``, ``NO_COLOR`` or ``TERM=dumb``, so piped output can be grepped, diffed
and pasted into issues. Every cell and the header line go through
:func:`~nvtopy.textsafe.safe_text` (commands, user names, GPU names, host names,
driver versions, a remote host's error): outside text cannot move the cursor,
retitle the terminal or restyle anything. The words and colour category of
every cell come from :mod:`nvtopy.render.cells`, the functions the TUI draws
its cells with, so both views agree on thresholds and words.

Health: the last column of each GPU's line is its verdict with its first
reason (``WARN HW slowdown: SM at 45 % of max``), or ``not responding (12 s)``
for a GPU whose driver call is stuck (its last values stay on the line). Being
last, it is the column a terminal clips, so the table stays as wide as the
fixed columns. Below the tables, each GPU that is not OK gets its findings, one
a line with its fix, and its last Xid events (time, number, meaning). A process
flagged idle-held or suspected-hang says so in a Flags column, present only
when some process has a flag.

The real work: SM Act, Tensor and DRAM columns (GPM, Hopper and newer) follow
Util. Where they are N/A a note under the table says why, once per reason
("GPUs 0, 1: SM, tensor and DRAM activity N/A: GPM needs Hopper or newer"), and
a GPU busy with little work (high utilisation, few SMs active) gets a line in
words: a pipe carries no colour.

MIG: as nvidia-smi does, the MIG instances get a table of their own right
after the GPUs, grouped by GPU in GPU order: each instance's ``GPU/GI/CI``
label, profile, memory used/total, SMs, processes, its own SM, tensor and DRAM
activity (where some instance reports it, or why not) and UUID. Notes under it say
once that the driver reports no utilisation under MIG (the Util column's N/A)
and which GPUs change MIG mode at their next reset. The process table gets a
MIG column (``1/2/0``) while some GPU has instances. Without MIG the output is
as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO

from ..formats.timestamps import iso_timestamp
from ..health.xid import describe_xid
from ..model import GpuEvent, GpuProcess, GpuState, MigState, Severity, Snapshot
from ..textsafe import safe_text
from .cells import (
    ACTIVITY_WORDS,
    ALERT,
    BAD,
    DIM,
    GOOD,
    HOT,
    MIG_UTILIZATION_NOTE,
    NO_FRAMEBUFFER_NOTE,
    PLAIN,
    PROCESS_CELL_KEYS,
    REMOTE,
    WARN,
    Cell,
    activity_cell,
    activity_reason,
    ecc_cell,
    finding_cell,
    gpu_little_work,
    health_summary_cell,
    host_label,
    lost_cell,
    memory_cell,
    memory_percent_text,
    mig_activity_cell,
    mig_hides_utilization,
    mig_memory_cell,
    mig_mode_cell,
    mig_processes_cell,
    mig_profile_cell,
    mig_sm_cell,
    mig_uuid_cell,
    name_cell,
    no_framebuffer,
    note_cell,
    percent_cell,
    power_cell,
    process_cells,
    process_flags_cell,
    process_instance_cell,
    pstate_cell,
    sm_active_cell,
    stalled_text,
    temperature_cell,
    throttle_cell,
    verdict_cell,
)
from .header import host_usage_parts, plain
from .processes import host_cell, host_labels
from .terminal import ascii_drawing, color_allowed, dumb_terminal
from .units import NA, width_of

__all__ = [
    "ACTIVITY_COLUMNS",
    "GPU_COLUMNS",
    "MIG_COLUMNS",
    "PROCESS_COLUMNS",
    "activity_notes",
    "gpu_row",
    "health_cell",
    "health_lines",
    "host_notes",
    "mig_notes",
    "mig_row",
    "platform_notes",
    "process_row",
    "render_snapshot",
]

RESET = "\x1b[0m"
# ANSI codes of the style categories of render/cells.py (the TUI maps the same categories), and "bold" for titles.
STYLES = {
    "bold": "\x1b[1m",
    DIM: "\x1b[2m",
    GOOD: "\x1b[32m",
    WARN: "\x1b[33m",
    HOT: "\x1b[1;31m",
    ALERT: "\x1b[1;37;41m",
    BAD: "\x1b[31m",
    REMOTE: "\x1b[35m",
}


def _clip(text: str, width: int) -> str:
    if width_of(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        size = width_of(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


class _Table:
    """Columns of cells, aligned; in a terminal too narrow for them, the columns of ``drops`` are left out (the
    first named first) and the last column is clipped to the terminal width.

    Why: a table wider than the terminal wraps every row onto two lines (the GPU table is about 130 cells
    with GPM, an 80-column terminal is common); a pipe (``max_width`` None) always gets every column whole.
    """

    def __init__(self, headers: Sequence[tuple[str, str]], drops: Sequence[str] = (), last_keeps: int = 12) -> None:
        self.headers = headers  # (title, "<" or ">")
        self.rows: list[list[Cell]] = []
        self.drops = drops
        self.last_keeps = last_keeps  # cells of the last column (a health reason, a command) kept before the drops
        self.dropped: list[str] = []  # the titles the last render left out

    def add(self, *cells: Cell | str) -> None:
        """A row; every cell's text is made safe for the terminal here, whatever it holds."""
        self.rows.append(
            [(safe_text(cell[0]), cell[1]) if isinstance(cell, tuple) else (safe_text(cell), "") for cell in cells]
        )

    def render(self, color: bool, max_width: int | None) -> list[str]:
        widths = [width_of(title) for title, _ in self.headers]
        for row in self.rows:
            for i, (text, _) in enumerate(row):
                widths[i] = max(widths[i], width_of(text))
        keep = list(range(len(widths)))
        self.dropped = []
        if max_width is not None:
            last = len(widths) - 1
            least = max(width_of(self.headers[-1][0]), min(widths[-1], self.last_keeps))
            titles = [title for title, _ in self.headers]
            for title in self.drops:
                if sum(widths[i] + 2 for i in keep[:-1]) + least <= max_width:
                    break
                if title in titles and titles.index(title) != last:
                    keep.remove(titles.index(title))
                    self.dropped.append(title)
            fixed = sum(widths[i] + 2 for i in keep[:-1])
            widths[-1] = max(width_of(self.headers[-1][0]), min(widths[-1], max_width - fixed))
        headers = [self.headers[i] for i in keep]
        shown = [widths[i] for i in keep]
        lines = [self._line([(t, "bold") for t, _ in headers], headers, shown, color)]
        lines.append("─" * (sum(shown) + 2 * (len(shown) - 1)))
        lines.extend(self._line([row[i] for i in keep], headers, shown, color) for row in self.rows)
        return lines

    @staticmethod
    def _line(cells: Sequence[Cell], headers: Sequence[tuple[str, str]], widths: list[int], color: bool) -> str:
        parts = []
        last = len(cells) - 1
        for i, ((text, style), (_, align)) in enumerate(zip(cells, headers, strict=True)):
            text = _clip(text, widths[i])
            pad = " " * (widths[i] - width_of(text))
            if i == last and align == "<":
                pad = ""  # no trailing spaces
            body = pad + text if align == ">" else text + pad
            if color and style:
                body = f"{STYLES[style]}{body}{RESET}" if align == ">" else f"{STYLES[style]}{text}{RESET}{pad}"
            parts.append(body)
        return "  ".join(parts).rstrip()


ACTIVITY_COLUMNS: tuple[tuple[str, str], ...] = (("SM Act", ">"), ("Tensor", ">"), ("DRAM", ">"))
"""The real work, from GPM (Hopper and newer): SM active, tensor pipes active, DRAM bandwidth used, in %."""

GPU_COLUMNS: tuple[tuple[str, str], ...] = (
    ("GPU", ">"),
    ("Name", "<"),
    ("Bus", "<"),
    ("Temp", ">"),
    ("Fan", ">"),
    ("Util", ">"),
    *ACTIVITY_COLUMNS,
    ("Memory", ">"),
    ("Power", ">"),
    ("P", "<"),
    ("ECC", ">"),
    ("Throttle", "<"),
    ("Health", "<"),
)


GPU_DROPS = ("Bus", "Throttle", "Fan", "ECC", "P", "DRAM", "Tensor", "Temp", "Power", "SM Act")
"""The GPU table's columns a narrow terminal leaves out, the first named first (GPU, Name, Util, Memory and
Health stay)."""


def _name(gpu: GpuState) -> Cell:
    static = gpu.static
    host = host_label(static)
    prefix = "" if host is None else host + " "
    if gpu.note:
        text, category = note_cell(gpu)
        return (prefix + text, category)
    text, category = name_cell(static)
    if gpu.lost:
        word, category = lost_cell()
        return (f"{prefix}{text} [{word}]", category)
    return (prefix + text, category)


def health_cell(gpu: GpuState) -> Cell:
    """The Health column: the verdict and its first reason; a stuck GPU says so, with for how long.

    A line that is no GPU's reading (an unreachable host, a note) has no health to show: N/A.
    """
    if gpu.note:
        return (NA, DIM)
    stalled = stalled_text(gpu)
    if stalled is not None:
        verdict, _ = verdict_cell(gpu)
        return (f"{verdict} {stalled}", ALERT)
    return health_summary_cell(gpu)


def gpu_row(gpu: GpuState) -> list[Cell]:
    """The cells of one GPU (the order of :data:`GPU_COLUMNS`): the words and categories the TUI shows too."""
    sample = gpu.sample
    memory, category = memory_cell(gpu)
    percent = memory_percent_text(gpu)
    throttle = throttle_cell(sample)
    return [
        (str(gpu.index), PLAIN),
        _name(gpu),
        (safe_text(gpu.static.short_bus_id), PLAIN) if gpu.static.short_bus_id else (NA, DIM),
        temperature_cell(gpu),
        percent_cell(sample.fan_percent),
        percent_cell(sample.utilization_gpu_percent),
        sm_active_cell(sample),
        activity_cell(sample.tensor_active_percent),
        activity_cell(sample.dram_active_percent),
        (memory if percent is None else f"{memory} ({percent})", category),
        power_cell(sample),
        pstate_cell(sample),
        ecc_cell(sample),
        throttle if throttle[0] else ("-", PLAIN),
        health_cell(gpu),
    ]


def _gpu_table(snapshot: Snapshot) -> _Table | None:
    """The GPUs that have readings, one row each; None when none has (every line is a note: :func:`host_notes`)."""
    gpus = [gpu for gpu in snapshot.gpus if not gpu.note]
    if not gpus:
        return None
    table = _Table(GPU_COLUMNS, GPU_DROPS)
    for gpu in gpus:
        table.add(*gpu_row(gpu))
    return table


def host_notes(snapshot: Snapshot) -> list[Cell]:
    """The sentences that stand for a host's readings (``--remote``, ``--prometheus``: why a host could not be
    read, or a remark on one that was), each on its own line: in a row, a sentence is no GPU's name, and one
    long error stretched every column of the table to its width."""
    notes: list[Cell] = []
    for gpu in snapshot.gpus:
        if gpu.note:
            text, category = note_cell(gpu)
            host = host_label(gpu.static)
            notes.append((text if host is None else f"{host}: {text}", category))
    return notes


MIG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("MIG", "<"),
    ("Profile", "<"),
    ("Memory", ">"),
    ("SMs", ">"),
    ("Procs", ">"),
    *ACTIVITY_COLUMNS,
    ("UUID", "<"),
)
"""The MIG table's columns; the activity ones only where some instance says something of its activity
(:func:`_mig_activity_known`)."""
_MIG_ACTIVITY = ("sm_active_percent", "tensor_active_percent", "dram_active_percent")


MIG_DROPS = ("UUID", "DRAM", "Tensor", "SMs", "SM Act")
"""The MIG table's columns a narrow terminal leaves out, the first named first."""


def mig_row(gpu: GpuState, state: MigState, *, activity: bool = True) -> list[Cell]:
    """The cells of one MIG instance (the order of :data:`MIG_COLUMNS`, without the activity columns unless
    ``activity``): the words the TUI's instance lines show."""
    memory, category = mig_memory_cell(state)
    percent = state.memory_used_percent
    cells = [
        (state.label, PLAIN),
        mig_profile_cell(state.instance),
        (memory if percent is None else f"{memory} ({percent:.0f}%)", category),
        mig_sm_cell(state.instance),
        mig_processes_cell(gpu, state),
    ]
    if activity:
        cells.extend(mig_activity_cell(state.usage, name) for name in _MIG_ACTIVITY)
    return [*cells, mig_uuid_cell(state.instance)]


def _mig_activity_known(states: Sequence[MigState]) -> bool:
    """Whether some instance has an activity figure, or a reason for its absence (not supported before Hopper,
    no permission): the columns say N/A then, and a note why. A source without the fields (a recording made
    before them) gets no empty columns."""
    for state in states:
        usage = state.usage
        if usage is not None and (usage.sm_active_percent is not None or "sm_active_percent" in usage.unavailable):
            return True
    return False


def _mig_table(snapshot: Snapshot) -> _Table | None:
    """Every MIG instance, GPU by GPU; None when no GPU has one."""
    pairs = [(gpu, state) for gpu in snapshot.gpus if not gpu.note for state in gpu.mig]
    if not pairs:
        return None
    activity = _mig_activity_known([state for _, state in pairs])
    titles = {title for title, _ in ACTIVITY_COLUMNS}
    table = _Table([column for column in MIG_COLUMNS if activity or column[0] not in titles], MIG_DROPS)
    for gpu, state in pairs:
        table.add(*mig_row(gpu, state, activity=activity))
    return table


def _gpu_list(indices: Sequence[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(str(i) for i in indices)


def mig_notes(snapshot: Snapshot) -> list[Cell]:
    """What the MIG table cannot say, each once: how to read a label, that utilisation is not reported under
    MIG (the Util column's N/A), a MIG GPU without instances, and mode changes waiting for a reset."""
    notes: list[Cell] = []
    if any(gpu.mig for gpu in snapshot.gpus if not gpu.note):
        notes.append(("MIG: GPU/GI/CI = GPU, GPU instance, compute instance (as in the MIG process column)", DIM))
    hidden = [gpu.index for gpu in snapshot.gpus if not gpu.note and mig_hides_utilization(gpu)]
    if hidden:
        notes.append((f"{_gpu_list(hidden)}: {MIG_UTILIZATION_NOTE} (Util N/A); memory is, per instance", DIM))
    for gpu in snapshot.gpus:
        if gpu.note:
            continue
        mode = mig_mode_cell(gpu.static)
        if mode is not None and mode[1] == WARN:  # "MIG on after reset": say what it is until then
            now = "on" if gpu.static.mig_mode else "off"
            notes.append((f"GPU {gpu.index}: {mode[0]} (MIG {now} until the next GPU reset)", WARN))
        elif gpu.static.mig_mode and not gpu.static.mig_instances:
            notes.append((f"GPU {gpu.index}: MIG on, no instance configured", DIM))
    return notes


def _activity_missing(gpu: GpuState) -> bool:
    """Whether the GPU's SM, tensor and DRAM columns are all N/A (its reason is then said once, below)."""
    sample = gpu.sample
    return all(v is None for v in (sample.sm_active_percent, sample.tensor_active_percent, sample.dram_active_percent))


def platform_notes(snapshot: Snapshot) -> list[Cell]:
    """Why a platform's figures are N/A, once: ``GPUs 0, 1: memory N/A: unified memory: NVML reports ...``;
    a vGPU guest and a Windows WDDM driver, whose per-process or sensor figures are N/A for that reason."""
    shown = [gpu for gpu in snapshot.gpus if not gpu.note and not gpu.lost]
    notes: list[Cell] = []
    gpus = [gpu.index for gpu in shown if no_framebuffer(gpu)]
    if gpus:
        notes.append((f"{_gpu_list(gpus)}: memory {NA}: {NO_FRAMEBUFFER_NOTE}", DIM))
    gpus = [gpu.index for gpu in shown if gpu.static.virtualization_mode == "vgpu"]
    if gpus:
        notes.append((f"{_gpu_list(gpus)}: a vGPU guest: the host owns the sensors, most figures are {NA}", DIM))
    gpus = [gpu.index for gpu in shown if gpu.static.driver_model == "WDDM"]
    if gpus:
        notes.append((f"{_gpu_list(gpus)}: Windows WDDM driver: per-process GPU memory is {NA}", DIM))
    return notes


def activity_notes(snapshot: Snapshot) -> list[Cell]:
    """What the SM Act, Tensor and DRAM columns cannot say: why they are N/A, once per reason
    (``GPUs 0, 1: SM, tensor and DRAM activity N/A: GPM needs Hopper or newer``), and each GPU
    that is busy with little work (a stuck collective, a starved input pipeline), in words,
    for a pipe where the warning colour does not reach."""
    gpus = [gpu for gpu in snapshot.gpus if not gpu.note and not gpu.lost]
    by_reason: dict[str, list[int]] = {}
    for gpu in gpus:
        if _activity_missing(gpu):
            by_reason.setdefault(activity_reason(gpu.sample.why("sm_active_percent")), []).append(gpu.index)
    notes: list[Cell] = [
        (f"{_gpu_list(indices)}: SM, tensor and DRAM activity {NA}: {reason}", DIM)
        for reason, indices in by_reason.items()
    ]
    for gpu in gpus:
        if gpu_little_work(gpu.sample):
            sample = gpu.sample
            busy = sample.utilization_gpu_percent
            busy_text = f"{busy}% utilisation" if busy is not None else f"{sample.graphics_active_percent:.0f}% busy"
            notes.append(
                (f"GPU {gpu.index}: {ACTIVITY_WORDS}: {busy_text}, {sample.sm_active_percent:.0f}% SM active", WARN)
            )
    return notes


# (title, alignment, key of render.processes.COLUMNS)
PROCESS_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("GPU", ">", "gpu"),
    ("PID", ">", "pid"),
    ("Type", "<", "type"),
    ("User", "<", "user"),
    ("Owner", "<", "owner"),
    ("GPU Mem", ">", "gpu_memory"),
    ("SM%", ">", "sm"),
    ("CPU%", ">", "cpu"),
    ("Host Mem", ">", "host_memory"),
    ("Time", ">", "time"),
    ("Command", "<", "command"),
)


PROCESS_DROPS = ("Type", "Host Mem", "Time", "Owner", "CPU%", "SM%", "MIG")
"""The process table's columns a narrow terminal leaves out, the first named first (GPU, Host, PID, User,
GPU Mem, Flags and Command stay)."""


def process_row(process: GpuProcess, me: str | None) -> list[Cell]:
    """The cells of one process (the order of :data:`PROCESS_COLUMNS`), from the TUI's own cell function."""
    cells = dict(zip(PROCESS_CELL_KEYS, process_cells(process, me), strict=True))
    return [cells[key] for _, _, key in PROCESS_COLUMNS]


def _process_table(snapshot: Snapshot) -> _Table:
    """The process table; a Flags column (``idle-held 12 min``, ``hang?``) before Command when a process has one,
    a MIG column (``1/2/0``) after GPU when some GPU has MIG instances, and a Host column (``node2/3``: the
    host and the GPU's index there) right after GPU when the GPUs are other hosts' (``--remote``).

    Why only then: flags are rare, MIG is rarer, and an empty column would cost every table its width.
    """
    flagged = any(process.flags for process in snapshot.processes)
    mig = any(gpu.static.mig_instances for gpu in snapshot.gpus)
    hosts = host_labels(snapshot.gpus)
    headers = [(title, align) for title, align, _ in PROCESS_COLUMNS]
    if flagged:
        headers.insert(-1, ("Flags", "<"))
    if mig:
        headers.insert(1, ("MIG", "<"))
    if hosts is not None:
        headers.insert(1, ("Host", "<"))
    table = _Table(headers, PROCESS_DROPS, last_keeps=30)  # a command's first words tell one job from another
    me = snapshot.host.user
    for gpu in snapshot.gpus:
        for process in gpu.processes:
            row = process_row(process, me)
            if flagged:
                row.insert(-1, process_flags_cell(process))
            if mig:
                row.insert(1, process_instance_cell(process))
            if hosts is not None:
                row.insert(1, host_cell(process, hosts))
            table.add(*row)
    return table


EVENTS_SHOWN = 3  # the last Xid events listed per GPU below the tables (the JSON has them all)


def _event_line(event: GpuEvent) -> str:
    """``Xid 79 at 2026-11-24 19:40:46: GPU has fallen off the bus`` (local time, to the second)."""
    when = iso_timestamp(event.timestamp)[:19].replace("T", " ")
    if event.xid is None:
        return f"{safe_text(event.kind)} at {when}"
    return f"Xid {event.xid} at {when}: {describe_xid(event.xid).meaning}"


def health_lines(gpu: GpuState) -> list[Cell]:
    """What is wrong with a GPU that is not OK: a title, its findings with their fixes, its last Xid events.

    Nothing for a healthy GPU that answers (the table's Health column says OK), nor for a
    line that is no GPU's reading (a note about a host).
    """
    health = gpu.health
    if gpu.note or (health.verdict is Severity.OK and health.responding):
        return []
    verdict, category = verdict_cell(gpu)
    host = host_label(gpu.static)
    title = f"GPU {gpu.index}" + ("" if host is None else f" ({host})") + f": {verdict}"
    stalled = stalled_text(gpu)
    lines: list[Cell] = [(title + ("" if stalled is None else f", {stalled}"), category)]
    lines.extend((f"  {text}", finding) for text, finding in map(finding_cell, health.findings))
    events = [e for e in health.events if e.kind == "xid" or e.xid is not None][-EVENTS_SHOWN:]
    lines.extend((f"  {_event_line(event)}", DIM) for event in events)
    return lines


def _styled(text: str, style: str, color: bool) -> str:
    return f"{STYLES[style]}{text}{RESET}" if color and style else text


def _left_out(table: _Table, width: int | None, color: bool) -> list[str]:
    """The line under a table a narrow terminal made leave columns out, naming them (none when it left out none)."""
    if not table.dropped:
        return []
    note = f"(not shown in {width} columns: {', '.join(table.dropped)}; a pipe gets every column)"
    if width is not None and width_of(note) > width:
        note = f"(not shown in {width} columns: {', '.join(table.dropped)})"
    return [_styled(_clip(note, width) if width is not None else note, DIM, color)]


def render_snapshot(snapshot: Snapshot, out: IO[str], *, color: bool, gpu_count: int | None = None) -> None:
    """Write ``snapshot``; ``gpu_count`` (GPUs on the machine) tells "none found" from "none selected".

    Colour is used only when asked for, ``out`` is a terminal, ``NO_COLOR`` is not set and the terminal
    is not a dumb one (:func:`~nvtopy.render.terminal.color_allowed`); the command column is clipped to the
    terminal's width there, and left whole in a pipe. A dumb terminal gets its rules and symbols in ASCII.
    """
    tty = out.isatty()
    color = color and tty and color_allowed()
    if tty:  # shutil (with bz2, lzma and fnmatch) imported only for a terminal: a pipe is never clipped
        import shutil

    max_width = shutil.get_terminal_size((160, 40)).columns if tty else None
    host = snapshot.host
    header = f"{host.hostname}  driver {host.driver_version or NA}  CUDA {host.cuda_driver_version or NA}"
    header = safe_text(header) + f"  {iso_timestamp(snapshot.timestamp)}"
    lines = [f"{STYLES['bold']}{header}{RESET}" if color else header]
    if host.backend != "nvml":
        backend = safe_text(host.backend)
        lines[0] += f"  {STYLES[REMOTE]}[{backend}]{RESET}" if color else f"  [{backend}]"
    if not snapshot.gpus:
        lines.append("No NVIDIA GPU found." if gpu_count == 0 else "No GPUs selected.")
    else:
        table = _gpu_table(snapshot)
        if table is not None:
            lines.extend(table.render(color, max_width))
            lines.extend(_left_out(table, max_width, color))
        lines.extend(_styled(text, style, color) for text, style in host_notes(snapshot))
        lines.extend(_styled(text, style, color) for text, style in activity_notes(snapshot))
        lines.extend(_styled(text, style, color) for text, style in platform_notes(snapshot))
        mig = _mig_table(snapshot)
        if mig is not None:
            lines.append("")
            lines.extend(mig.render(color, max_width))
            lines.extend(_left_out(mig, max_width, color))
        lines.extend(_styled(text, style, color) for text, style in mig_notes(snapshot))
        lines.append("")
        if any(g.processes for g in snapshot.gpus):
            processes = _process_table(snapshot)
            lines.extend(processes.render(color, max_width))
            lines.extend(_left_out(processes, max_width, color))
        else:
            lines.append("No GPU processes.")
        for gpu in snapshot.gpus:
            notes = []
            if gpu.processes_unavailable is not None:
                notes.append(f"GPU {gpu.index}: process list unavailable ({gpu.processes_unavailable})")
            if gpu.processes_hint:
                notes.append(f"GPU {gpu.index}: {safe_text(gpu.processes_hint)}")
            lines.extend(f"{STYLES[DIM]}{note}{RESET}" if color else note for note in notes)
        health = [cell for gpu in snapshot.gpus for cell in health_lines(gpu)]
        if health:
            lines.append("")
            lines.extend(f"{STYLES[style]}{text}{RESET}" if color and style else text for text, style in health)
        if snapshot.host_usage is not None:
            # The host's CPU, load, memory and swap, as the monitor's host line, without its bars (a pipe greps
            # figures). Last, so a script reading the tables by position is unaffected; absent where the source
            # has no such data (other hosts, an older recording).
            lines.append("")
            lines.append(plain(host_usage_parts(snapshot.host_usage, max_width or 160, bars=False)))
    text = "\n".join(lines) + "\n"
    out.write(ascii_drawing(text) if tty and dumb_terminal() else text)  # a dumb terminal: the rules in ASCII too

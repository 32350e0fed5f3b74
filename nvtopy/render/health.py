"""A GPU's health in full, as lines: what the TUI's health screen shows.

Why a renderer of its own: the panels have room for one verdict and one
reason; a user asking "why WARN?" or "is this board dying?" needs the evidence
-- every finding with its fix, the Xid timeline, the memory, PCIe and NVLink
readings, throttling, idle-held memory and a suspected hang. Pure functions
from a :class:`~nvtopy.model.GpuState` to :class:`~nvtopy.render.styled.Line`
objects (no Textual here), so they can be tested without a terminal and drawn
by any view.

Every missing reading says N/A *and why* (the reason the driver gave, from
``sample.unavailable``): "N/A (not supported)" tells a user to stop looking,
"N/A (no permission)" to run as root. Text from outside (finding sentences a
recording carries, the events note, NVLink peers, user names, commands) goes
through :func:`~nvtopy.textsafe.safe_text` before it becomes a line.

The Work section has the real work too (GPM: SM active, tensor, DRAM,
occupancy), the evidence beside a suspected hang: "busy, little work" when a
busy GPU's SMs barely work.

A MIG-enabled GPU (or one whose MIG mode changes at its next reset) ends with a
MIG section: the mode, and each instance with its profile, memory, SMs,
processes and UUID -- what an Xid event's "(MIG GI 1 CI 0)" refers to.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ..health.xid import describe_xid
from ..model import GpuEvent, GpuProcess, GpuSample, GpuState, NvLink, Severity, Snapshot
from ..textsafe import safe_text
from .cells import (
    ACTIVITY_WORDS,
    ALERT,
    BAD,
    DIM,
    MIG_UTILIZATION_NOTE,
    PLAIN,
    REMOTE,
    RICH_STYLES,
    SEVERITY_CATEGORY,
    WARN,
    activity_cell,
    activity_reason,
    finding_cell,
    gpu_little_work,
    health_summary_cell,
    host_label,
    mig_activity_cell,
    mig_activity_shown,
    mig_hides_utilization,
    mig_memory_cell,
    mig_mode_cell,
    mig_processes_cell,
    mig_profile_cell,
    mig_sm_cell,
    mig_uuid_cell,
    note_cell,
    process_flags_cell,
    sm_active_cell,
    stalled_text,
    verdict_cell,
)
from .styled import Line
from .units import NA, fmt_age, fmt_bytes, fmt_rate, short_name

__all__ = [
    "LABEL_WIDTH",
    "gpu_health_lines",
    "health_counts",
    "health_lines",
    "health_sections",
    "overview_line",
    "reading",
]

LABEL_WIDTH = 17
"""Cells of a reading's label ("Remapped rows"), so the values line up in a column."""
_INDENT = "    "
_SUB = "      "
NOT_REPORTED = "not reported"
"""The reason shown for a missing reading the source gave no reason for (a recording, a peer, a simulation)."""


def _style(category: str) -> str:
    return RICH_STYLES[category]


def _why(sample: GpuSample, name: str) -> str:
    """``N/A (not supported)``: a missing reading with the driver's reason (or that nothing was read)."""
    reason = sample.why(name)
    return f"{NA} ({reason if reason is not None else NOT_REPORTED})"


def reading(sample: GpuSample, name: str, *, alarm: str = WARN) -> tuple[str, str]:
    """One reading as (words, category): a count, yes/no, or N/A with its reason (dim).

    A count above zero and a ``True`` flag take ``alarm``'s category: every reading
    drawn here is one where more is worse (errors, pending resets, failures).
    """
    value = getattr(sample, name)
    if value is None:
        return (_why(sample, name), DIM)
    if isinstance(value, bool):
        return ("yes", alarm) if value else ("no", PLAIN)
    return (str(value), alarm if value else PLAIN)


Piece = tuple[str, str] | Line
"""One value of a health row: (words, category), or a line already styled."""


def _row(label: str, *values: Piece) -> Line:
    """An indented reading: its label in a column, then values separated by " · "."""
    line = Line(_INDENT).add(label.ljust(LABEL_WIDTH), "bold")
    for i, value in enumerate(values):
        if i:
            line.add(" · ", "dim")
        if isinstance(value, Line):
            line.extend(value)
        else:
            text, category = value
            line.add(text, _style(category))
    return line


def _labelled(
    sample: GpuSample, pairs: Sequence[tuple[str, str]], *, alarms: dict[str, str] | None = None
) -> list[Piece]:
    """``corrected 0 · uncorrected 2``; one N/A with its reason when every field of the group is missing."""
    names = [name for _, name in pairs]
    if all(getattr(sample, name) is None for name in names):
        reasons = {sample.why(name) for name in names}
        if len(reasons) == 1:
            return [(_why(sample, names[0]), DIM)]
    values: list[Piece] = []
    for label, name in pairs:
        text, category = reading(sample, name, alarm=(alarms or {}).get(name, WARN))
        values.append(Line(f"{label} ", "dim").add(text, _style(category)))
    return values


def _heading(gpu: GpuState) -> Line:
    """``GPU 0  FAIL  H100 80GB HBM3 · 18:00.0 · GPU-b756f5a9-…``: which GPU, and its verdict first."""
    static = gpu.static
    verdict, category = verdict_cell(gpu)
    label = "HOST " if gpu.stands_for_host else f"GPU {static.index} "  # a fleet's line for a host: no GPU index
    line = Line(label, "bold reverse").add(" ").add(f" {verdict} ", _style(category)).add(" ")
    if static.host is not None:
        line.add(f" {host_label(static)}", _style(REMOTE))
    line.add(f" {short_name(static.name)}", "bold")
    if static.short_bus_id:
        line.add(f" · {safe_text(static.short_bus_id)}", "dim")
    if static.uuid:
        line.add(f" · {safe_text(static.uuid)}", "dim")
    return line


def overview_line(gpu: GpuState) -> Line:
    """One GPU in one line: ``GPU 1  WARN  PCIe link Gen3 x8, the GPU can do Gen5 x16 (+2)``; a remote GPU's
    host and index there after its verdict (``GPU 9  OK    node01/1  H100 80GB HBM3 · 2A:00.0``), as every view
    of a fleet names them."""
    verdict, category = verdict_cell(gpu)
    label = "  host   " if gpu.stands_for_host else f"  GPU {gpu.static.index:<3}"  # a host's line: no GPU index
    line = Line(label, "bold").add(f"{verdict:<4}", _style(category)).add("  ")
    if gpu.static.host is not None:
        line.add(f"{host_label(gpu.static)}  ", _style(REMOTE))
    stalled = stalled_text(gpu)
    if stalled is not None:
        return line.add(stalled, _style(ALERT))
    if gpu.note:
        text, note_category = note_cell(gpu)
        return line.add(text, _style(note_category))
    summary, _ = health_summary_cell(gpu)
    reason = summary.partition(" ")[2]
    if reason:
        return line.add(reason, _style(category))
    name = short_name(gpu.static.name) + (f" · {safe_text(gpu.static.short_bus_id)}" if gpu.static.short_bus_id else "")
    return line.add(name, "dim")


def _findings(gpu: GpuState) -> list[Line]:
    health = gpu.health
    lines = []
    stalled = stalled_text(gpu)
    if stalled is not None:
        if not any(finding.code == "not-responding" for finding in health.findings):
            lines.append(Line(_INDENT).add(stalled, _style(ALERT)))
        lines.append(Line(_INDENT + "the readings below are the last ones read before the driver got stuck", "dim"))
    if not health.findings:
        lines.append(
            Line(_INDENT).add("OK", _style(SEVERITY_CATEGORY[Severity.OK])).add("  nothing wrong found", "dim")
        )
        return lines
    for finding in health.findings:
        text, category = finding_cell(finding, with_action=False)
        word = finding.severity.value
        lines.append(Line(_INDENT).add(f"{word:<4}", _style(SEVERITY_CATEGORY[finding.severity])).add("  " + text))
        if finding.action:
            lines.append(Line(_INDENT + "      ").add("fix: ", "dim").add(safe_text(finding.action), _style(category)))
    return lines


def _event_line(event: GpuEvent, now: float | None) -> list[Line]:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.timestamp))
    line = Line(_INDENT).add(stamp)
    if now is not None:
        line.add(f" ({fmt_age(now - event.timestamp)} ago)".ljust(15), "dim")
    if event.xid is None:
        line.add(f"  {safe_text(event.kind)}", "bold")
        return [line]
    info = describe_xid(event.xid)
    line.add(f"  Xid {event.xid:<4}", _style(SEVERITY_CATEGORY[info.severity]))
    line.add(f" {info.meaning}")
    if event.gpu_instance_id is not None or event.compute_instance_id is not None:
        gi = NA if event.gpu_instance_id is None else event.gpu_instance_id
        ci = NA if event.compute_instance_id is None else event.compute_instance_id
        line.add(f"  (MIG GI {gi} CI {ci})", "dim")
    action = Line(_INDENT + " " * 21).add("fix: ", "dim").add(info.action)
    return [line, action]


def _events(gpu: GpuState, now: float | None) -> list[Line]:
    health = gpu.health
    counts = " · ".join(f"Xid {xid} x{count}" for xid, count in health.xid_counts)
    title = Line("  Xid events", "bold")
    if counts:
        title.add(f"  since nvtopy started: {counts}", "dim")
    elif health.events:
        title.add("  newest first", "dim")
    lines = [title]
    if not health.events:
        if health.events_note:
            lines.append(Line(_INDENT).add(f"not watched: {safe_text(health.events_note)}", "dim"))
        else:
            lines.append(Line(_INDENT).add("none since nvtopy started", "dim"))
        return lines
    for event in reversed(health.events):
        lines.extend(_event_line(event, now))
    return lines


def _memory(gpu: GpuState) -> list[Line]:
    sample = gpu.sample
    ecc_rows: list[Line] = []
    if sample.ecc_mode is None:
        ecc_rows.append(_row("ECC", (_why(sample, "ecc_mode"), DIM)))
    elif not sample.ecc_mode:
        ecc_rows.append(_row("ECC", ("off", PLAIN)))
    else:
        ecc_rows.append(_row("ECC", ("on", PLAIN)))
        # Volatile: since the driver loaded; aggregate: the board's lifetime (as nvidia-smi -q names them).
        for scope in ("volatile", "aggregate"):
            counts = _labelled(
                sample,
                (("corrected", f"ecc_corrected_{scope}"), ("uncorrected", f"ecc_uncorrected_{scope}")),
                alarms={f"ecc_corrected_{scope}": PLAIN},
            )
            ecc_rows.append(_row(f"ECC {scope}", *counts))
    rows = _labelled(
        sample,
        (
            ("corrected", "remapped_rows_corrected"),
            ("uncorrected", "remapped_rows_uncorrected"),
            ("pending", "remapped_rows_pending"),
            ("failure", "remapped_rows_failure"),
        ),
        alarms={"remapped_rows_failure": ALERT, "remapped_rows_corrected": PLAIN},
    )
    pages = _labelled(
        sample,
        (
            ("single-bit", "retired_pages_sbe"),
            ("double-bit", "retired_pages_dbe"),
            ("pending", "retired_pages_pending"),
        ),
    )
    return [
        Line("  Memory", "bold"),
        *ecc_rows,
        _row("Remapped rows", *rows),
        _row("Retired pages", *pages),
    ]


def _pcie(gpu: GpuState) -> list[Line]:
    sample, static = gpu.sample, gpu.static
    gen, width = sample.pcie_link_gen, sample.pcie_link_width
    link: list[Piece] = []
    if gen is None and width is None:
        link = [(_why(sample, "pcie_link_gen"), DIM)]
    else:
        now = f"Gen{NA if gen is None else gen} x{NA if width is None else width}"
        downgraded = any(f.code == "pcie-downgrade" for f in gpu.health.findings)
        link = [(now, WARN if downgraded else PLAIN)]
        gen_max, width_max = static.pcie_link_gen_max, static.pcie_link_width_max
        if gen_max is None and width_max is None:
            link.append((f"max {_static_why(gpu, 'pcie_link_gen_max')}", DIM))
        else:
            link.append((f"max Gen{NA if gen_max is None else gen_max} x{NA if width_max is None else width_max}", DIM))
        if downgraded:
            link.append(("downgraded", WARN))
        elif gen is not None and gen_max is not None and gen < gen_max:
            link.append(("trained down while idle (normal)", DIM))
    rates = [_direction(sample, "RX", "pcie_rx_bytes_per_s"), _direction(sample, "TX", "pcie_tx_bytes_per_s")]
    growing = any(f.code == "pcie-replays" for f in gpu.health.findings)
    replay: list[Piece] = [reading(sample, "pcie_replay_counter", alarm=PLAIN)]
    if sample.pcie_replay_counter is not None:
        replay = [(str(sample.pcie_replay_counter), WARN if growing else PLAIN)]
        replay.append(("growing" if growing else "since the driver loaded", WARN if growing else DIM))
    return [Line("  PCIe", "bold"), _row("Link", *link), _row("Throughput", *rates), _row("Replays", *replay)]


def _direction(sample: GpuSample, word: str, name: str) -> tuple[str, str]:
    value = getattr(sample, name)
    return (f"{word} {fmt_rate(value)}", PLAIN) if value is not None else (f"{word} {_why(sample, name)}", DIM)


def _static_why(gpu: GpuState, name: str) -> str:
    reason = gpu.static.unavailable.get(name)
    return f"{NA} ({reason if reason is not None else NOT_REPORTED})"


def _nvlink(gpu: GpuState) -> list[Line]:
    sample = gpu.sample
    links = sample.nvlinks
    title = Line("  NVLink", "bold")
    if links is None:
        return [title, _row("Links", (_why(sample, "nvlinks"), DIM))]
    if not links:
        return [title, _row("Links", ("none on this board", DIM))]
    up = sum(1 for link in links if link.active)
    summary = [
        (f"{up}/{len(links)} up", WARN if up < len(links) else PLAIN),
        (f"RX {fmt_rate(sample.nvlink_rx_bytes_per_s)}", PLAIN),
        (f"TX {fmt_rate(sample.nvlink_tx_bytes_per_s)}", PLAIN),
    ]
    growing = {n for f in gpu.health.findings if f.code == "nvlink-errors" for n in _numbers(f.text)}
    lines = [title, _row("Links", *summary)]
    # Only the links worth a look get a row: 18 rows of "up" pushed the other GPUs away.
    bad = [link for link in links if link.active is not True or link.link in growing or link.errors]
    if not bad:
        lines.append(Line(_INDENT + " " * LABEL_WIDTH).add("every link up, no errors", "dim"))
        return lines
    lines.append(
        Line(_INDENT + "link  state  ver  " + "RX".rjust(11) + "  " + "TX".rjust(11) + "  errors  remote", "dim")
    )
    lines.extend(_link_line(link, link.link in growing) for link in bad)
    if len(bad) < len(links):
        lines.append(Line(_INDENT + f"the other {len(links) - len(bad)} up, no errors", "dim"))
    return lines


def _numbers(text: str) -> set[int]:
    """Link numbers a finding names ("NVLink errors growing on link 3, 7")."""
    return {int(word) for word in text.replace(",", " ").split() if word.isdigit()}


def _link_line(link: NvLink, growing: bool) -> Line:
    state = NA if link.active is None else "up" if link.active else "down"
    line = Line(_INDENT).add(f"{link.link:<4}  ")
    line.add(f"{state:<5}", _style(DIM if link.active is None else PLAIN if link.active else WARN)).add("  ")
    line.add(f"{NA if link.version is None else link.version:<3}  ")
    line.add(f"{fmt_rate(link.rx_bytes_per_s):>11}  {fmt_rate(link.tx_bytes_per_s):>11}  ")
    errors = NA if link.errors is None else str(link.errors)
    line.add(f"{errors:>6}", _style(WARN if growing else DIM if link.errors is None else PLAIN)).add("  ")
    return line.add(safe_text(link.remote) if link.remote else NA, "" if link.remote else "dim")


_ACTIVITY_READINGS = (
    ("tensor", "tensor_active_percent"),
    ("DRAM", "dram_active_percent"),
    ("occupancy", "sm_occupancy_percent"),
)


def _real_work(sample: GpuSample) -> list[Line]:
    """``SM active 52% · tensor 26% · DRAM 31% · occupancy 20%`` from GPM, with "busy, little work" when a busy
    GPU's SMs barely work (the evidence beside a suspected hang); N/A with its reason before Hopper."""
    names = ("sm_active_percent", *(name for _, name in _ACTIVITY_READINGS))
    if all(getattr(sample, name) is None for name in names):
        return [Line(f"{NA} ({activity_reason(sample.why('sm_active_percent'))})", _style(DIM))]
    text, category = sm_active_cell(sample)
    values = [Line("SM active ", "dim").add(text, _style(category))]
    for label, name in _ACTIVITY_READINGS:
        text, category = activity_cell(getattr(sample, name))
        values.append(Line(f"{label} ", "dim").add(text, _style(category)))
    if gpu_little_work(sample):
        values.append(Line(f"{ACTIVITY_WORDS}: a stuck collective or a starved input?", _style(WARN)))
    return values


def _hang_words(sample: GpuSample, seconds: float) -> str:
    """How long the GPU has looked hung, naming the evidence the health layer judged it by: its idle SMs
    where GPM measures them (Hopper and newer), its low power elsewhere."""
    sm = sample.sm_active_percent
    if sm is None:
        return f"busy at low power for {fmt_age(seconds)}: a deadlocked collective?"
    active = f"{sm:.0f}" if sm >= 0.5 or sm == 0 else "<1"  # never a 0 that is not
    return f"busy with {active} % of SMs active for {fmt_age(seconds)}: a deadlocked collective?"


def _work(gpu: GpuState) -> list[Line]:
    """Throttling in words, the real work (GPM), memory held by idle processes, a suspected hang, and the
    flagged processes."""
    health, sample = gpu.health, gpu.sample
    if health.throttle is not None:
        harmful = any(f.code == "throttle" for f in health.findings)
        throttle = (safe_text(health.throttle), WARN if harmful else PLAIN)
    elif sample.throttle_reasons is None:
        throttle = (_why(sample, "throttle_reasons"), DIM)
    else:
        throttle = ("none", DIM)
    if health.idle_held_bytes:
        idle = (f"{fmt_bytes(health.idle_held_bytes)} held by processes that compute nothing", WARN)
    else:
        idle = ("none", DIM)
    if health.suspected_hang_seconds is not None:
        hang = (_hang_words(sample, health.suspected_hang_seconds), WARN)
    else:
        hang = ("no", DIM)
    lines = [
        Line("  Work", "bold"),
        _row("Throttling", throttle),
        _row("Real work", *_real_work(sample)),
        _row("Idle-held memory", idle),
        _row("Suspected hang", hang),
    ]
    flagged = [p for p in gpu.processes if p.flags]
    if flagged:
        lines.append(Line(_INDENT + "flagged processes:", "dim"))
        lines.extend(_process_line(p) for p in flagged)
    return lines


def _process_line(process: GpuProcess) -> Line:
    flags, category = process_flags_cell(process)
    user = "?" if process.foreign else safe_text(process.user) if process.user else NA
    line = Line(_SUB).add(f"pid {process.pid:<8}").add(f"{user:<10} ", "dim")
    line.add(f"{fmt_bytes(process.gpu_memory_bytes):>8}  ").add(flags, _style(category))
    return line.add("  " + (safe_text(process.command) if process.command else NA), "dim")


def _mig(gpu: GpuState) -> list[Line]:
    """The MIG mode and each instance (label, profile, memory, SMs, processes, SM and tensor activity where
    GPM measures them, UUID); nothing when MIG is off."""
    mode = mig_mode_cell(gpu.static)
    if mode is None:
        return []
    text, category = mode
    if category == PLAIN:
        text = f"on · {len(gpu.static.mig_instances)} instances"
    lines = [Line("  MIG", "bold"), _row("Mode", (text, category))]
    if mig_hides_utilization(gpu):
        lines.append(Line(_INDENT + MIG_UTILIZATION_NOTE, "dim"))
    activity = mig_activity_shown(gpu)
    for state in gpu.mig:
        line = Line(_SUB).add(f"{state.label:<8}", "bold").add(f"{mig_profile_cell(state.instance)[0]:<11}")
        memory, memory_category = mig_memory_cell(state)
        line.add(f"{memory:>14}", _style(memory_category)).add(f"  {mig_sm_cell(state.instance)[0]:>3} SMs", "dim")
        line.add(f"  {mig_processes_cell(gpu, state)[0]:>3} procs", "dim")
        if activity:
            for label, name in (("SM", "sm_active_percent"), ("TNS", "tensor_active_percent")):
                text, category = mig_activity_cell(state.usage, name)
                line.add(f"  {label} ", "dim").add(f"{text:>4}", _style(category))
        lines.append(line.add("  " + mig_uuid_cell(state.instance)[0], "dim"))
    return lines


def gpu_health_lines(gpu: GpuState, now: float | None = None) -> list[Line]:
    """Everything known about one GPU's health, as lines of any length (a view wraps or cuts them).

    ``now``: the snapshot's time, for the events' ages (None: no ages).
    """
    lines = [_heading(gpu)]
    if gpu.note:  # a remote host that could not be read: nothing else is known
        text, category = note_cell(gpu)
        return [*lines, Line(_INDENT).add(text, _style(category))]
    lines.extend(_findings(gpu))
    if gpu.lost:
        lines.append(Line(_INDENT + "the GPU is lost: the readings below are the last ones it gave", _style(BAD)))
    lines.extend(_events(gpu, now))
    lines.extend(_memory(gpu))
    lines.extend(_pcie(gpu))
    lines.extend(_nvlink(gpu))
    lines.extend(_work(gpu))
    lines.extend(_mig(gpu))
    return lines


def health_counts(gpus: Iterable[GpuState]) -> dict[Severity, int]:
    """How many GPUs have each verdict (a not-responding GPU counts as it is: FAIL); a line that is no reading
    (a fleet's note: an unreachable host, a stale one) has none and is not counted."""
    counts = dict.fromkeys(Severity, 0)
    for gpu in gpus:
        if not gpu.note:
            counts[gpu.health.verdict] += 1
    return counts


def health_sections(snapshot: Snapshot, gpus: Sequence[GpuState] | None = None) -> tuple[list[Line], list[list[Line]]]:
    """The overview (a line a GPU: which section to look at) and one section per GPU of ``gpus`` (default:
    every GPU of ``snapshot``): a view lays the sections out one under the other, or side by side where the
    width allows."""
    shown = snapshot.gpus if gpus is None else gpus
    if not shown:
        return [Line("No GPUs to show", "dim")], []
    overview = [Line("Overview", "bold underline"), *(overview_line(gpu) for gpu in shown)]
    return overview, [gpu_health_lines(gpu, snapshot.timestamp) for gpu in shown]


def health_lines(snapshot: Snapshot, gpus: Sequence[GpuState] | None = None) -> list[Line]:
    """The health of ``gpus`` (default: every GPU of ``snapshot``): an overview, one line a GPU, then a
    section per GPU, a blank line between (the overview tells which section to scroll to)."""
    overview, sections = health_sections(snapshot, gpus)
    lines = list(overview)
    for section in sections:
        lines.append(Line())
        lines.extend(section)
    return lines

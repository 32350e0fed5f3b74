"""The words and colours of every cell, decided once for the text view and the TUI.

Why one module: ``nvtopy --once`` and the TUI show the same GPUs and processes,
and a user who reads both must see the same word ("Off", "N/A", "LOST") in the
same colour for the same reason (a temperature at the GPU's own slowdown
threshold is an alert in both). Each function here returns a :data:`Cell`:
its text and a style *category* -- what the colour means, not which colour.
:mod:`nvtopy.render.text` maps categories to ANSI codes, and
:mod:`nvtopy.render.gpu` and the TUI's process table map them to rich styles
(:data:`RICH_STYLES`). Layout stays with each view: padding, separators, bars,
the "/87" limit after a temperature, bold for emphasis.

No rich and no Textual here: ``--once`` imports this and must stay fast.
Outside text (names, commands, users, notes, host names, a recording's
throttle reasons) is made safe here with :func:`~nvtopy.textsafe.safe_text`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from ..columns import TABLE_COLUMNS
from ..model import (
    Finding,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    MigInstance,
    MigState,
    MigUsage,
    OwnerKind,
    ProcessOwner,
    Reason,
    Severity,
)
from ..textsafe import safe_text
from .units import NA, fmt_age, fmt_bytes, fmt_celsius, fmt_duration, fmt_pstate, short_name

__all__ = [
    "ACTIVITY_WORDS",
    "ALERT",
    "BAD",
    "CATEGORIES",
    "DIM",
    "FINDING_CATEGORY",
    "GOOD",
    "GPM_NOT_SUPPORTED",
    "GPM_NOT_SUPPORTED_SHORT",
    "GROUP_FOLDED",
    "GROUP_UNFOLDED",
    "HOT",
    "MIG_UTILIZATION_NOTE",
    "NOT_VISIBLE",
    "NO_FRAMEBUFFER_NOTE",
    "PALETTES",
    "PLAIN",
    "PROCESS_CELL_KEYS",
    "REMOTE",
    "RICH_STYLES",
    "SEVERITY_CATEGORY",
    "WARN",
    "Cell",
    "activity_cell",
    "activity_reason",
    "activity_shown",
    "ecc_cell",
    "finding_cell",
    "gpu_little_work",
    "group_cells",
    "group_instance_cell",
    "health_summary_cell",
    "host_label",
    "is_mine",
    "little_work",
    "load_category",
    "lost_cell",
    "memory_cell",
    "memory_percent_text",
    "mig_activity_cell",
    "mig_activity_shown",
    "mig_hides_utilization",
    "mig_memory_cell",
    "mig_mode_cell",
    "mig_processes_cell",
    "mig_profile_cell",
    "mig_sm_cell",
    "mig_uuid_cell",
    "name_cell",
    "no_framebuffer",
    "note_cell",
    "owner_cell",
    "owner_label_shown",
    "percent_cell",
    "plural",
    "power_cell",
    "process_cells",
    "process_flags_cell",
    "process_instance_cell",
    "pstate_cell",
    "short_cgroup",
    "sm_active_cell",
    "stalled_text",
    "temperature_cell",
    "throttle_cell",
    "throttle_labels",
    "use_palette",
    "verdict_cell",
]

Cell = tuple[str, str]  # (text, style category)

# Style categories: what a colour means. Every view maps each of them.
PLAIN = ""  # an ordinary value
DIM = "dim"  # a missing value (N/A), another user's name, secondary text
GOOD = "good"  # comfortably within the GPU's limits
WARN = "warn"  # worth a look: getting warm, clocks held back, a note about a host that answered
HOT = "hot"  # close to a limit, or an error message
ALERT = "alert"  # act now: at the slowdown temperature, uncorrected ECC errors, a lost GPU
BAD = "bad"  # something gone wrong in a row: a defunct process, a lost GPU's details
REMOTE = "remote"  # another host's name (nvtopy --remote)
CATEGORIES = (PLAIN, DIM, GOOD, WARN, HOT, ALERT, BAD, REMOTE)

# The rich style of each category (the TUI and the GPU panels); text.py has the ANSI codes.
# Read at drawing time, never copied: :func:`use_palette` swaps the values in place.
RICH_STYLES: dict[str, str] = {
    PLAIN: "",
    DIM: "dim",
    GOOD: "green",
    WARN: "yellow",
    HOT: "bold red",
    ALERT: "bold white on red",
    BAD: "red",
    REMOTE: "magenta",
}

# The TUI's palettes. "colorblind": Okabe and Ito's colour-blind-safe colours -- OK in sky blue, a warning in
# orange, an alert in vermillion (never green against red); what tells them apart survives every kind of
# colour blindness, and bold and the background keep the alerts apart in grey too. "monochrome": no colour at
# all (NO_COLOR, TERM=dumb), each state by an attribute every terminal has and by its words -- an alert in
# reverse video, a warning, an error or a lost GPU's details in bold, OK plain.
PALETTES: dict[str, dict[str, str]] = {
    "default": dict(RICH_STYLES),
    "colorblind": {
        PLAIN: "",
        DIM: "dim",
        GOOD: "#56B4E9",
        WARN: "#E69F00",
        HOT: "bold #D55E00",
        ALERT: "bold white on #D55E00",
        BAD: "#D55E00",
        REMOTE: "#CC79A7",
    },
    "monochrome": {
        PLAIN: "",
        DIM: "dim",
        GOOD: "",
        WARN: "bold",
        HOT: "bold",
        ALERT: "bold reverse",
        BAD: "bold",
        REMOTE: "bold",
    },
}


def use_palette(name: str) -> None:
    """Draw the categories in palette ``name`` ("default", "colorblind" or "monochrome"; anything else: "default")
    from now on.

    One palette per process (the TUI's theme): the views read :data:`RICH_STYLES` each time they draw, and a
    view that caches drawn lines redraws them when the theme changes.
    """
    RICH_STYLES.update(PALETTES.get(name, PALETTES["default"]))


# Temperature bands below the GPU's own slowdown threshold (°C).
TEMPERATURE_HOT_MARGIN = 5  # the driver is about to slow the clocks down
TEMPERATURE_WARM_MARGIN = 15  # warm: worth watching under load

_MISSING: Cell = (NA, DIM)

# What every view says of a pid NVML lists that this PID namespace has no process for (``GpuProcess.foreign``):
# a container without the host's PID namespace, a captured machine. Its row is kept, never signalled.
NOT_VISIBLE = "not visible from this PID namespace"

_THROTTLE_LABELS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal",
    "sw_thermal_slowdown": "thermal",
    "hw_power_brake_slowdown": "power brake",
    "sync_boost": "sync boost",
    "applications_clocks_setting": "app clocks",
    "display_clock_setting": "display clocks",
}


def load_category(fraction: float) -> str:
    """How full a bar is (memory, power against its cap)."""
    return GOOD if fraction < 0.7 else WARN if fraction < 0.9 else HOT


def temperature_category(celsius: int, slowdown: int | None) -> str:
    """Against the GPU's own slowdown threshold: 80 °C is fine on one board and throttling on another."""
    if slowdown is None:
        return PLAIN
    if celsius >= slowdown:
        return ALERT
    if celsius >= slowdown - TEMPERATURE_HOT_MARGIN:
        return HOT
    if celsius >= slowdown - TEMPERATURE_WARM_MARGIN:
        return WARN
    return GOOD


def temperature_cell(gpu: GpuState) -> Cell:
    value = gpu.sample.temperature_c
    if value is None:
        return _MISSING
    return (fmt_celsius(value), temperature_category(value, gpu.static.temperature_slowdown_c))


def percent_cell(value: float | None) -> Cell:
    """Fan, utilisation: ``"37%"``."""
    return _MISSING if value is None else (f"{value:.0f}%", PLAIN)


def pstate_cell(sample: GpuSample) -> Cell:
    return _MISSING if sample.pstate is None else (fmt_pstate(sample.pstate), PLAIN)


def memory_cell(gpu: GpuState) -> Cell:
    """``"79.6GiB/80.0GiB"``; the used part N/A (dim) when the driver did not say."""
    used, total = gpu.sample.memory_used_bytes, gpu.static.memory_total_bytes
    if used is None and total is None:
        return _MISSING
    return (f"{fmt_bytes(used)}/{fmt_bytes(total)}", DIM if used is None else PLAIN)


def used_of_total(used: int | None, total: int | None) -> str:
    """``"20.3/39.8GiB"``: one unit when both share it (a MIG instance's line is narrow), else ``"32MiB/9.8GiB"``."""
    used_text, total_text = fmt_bytes(used), fmt_bytes(total)
    unit = total_text.lstrip("0123456789.")
    if used is not None and unit and used_text.endswith(unit) and total is not None:
        return f"{used_text[: -len(unit)]}/{total_text}"
    return f"{used_text}/{total_text}"


def memory_percent_text(gpu: GpuState) -> str | None:
    percent = gpu.memory_used_percent
    return None if percent is None else f"{percent:.0f}%"


def power_cell(sample: GpuSample) -> Cell:
    """Draw against the enforced cap: ``"350/700W"``; ``"350W"`` when the cap is unknown."""
    draw, cap = sample.power_draw_w, sample.power_limit_w
    if draw is None and cap is None:
        return _MISSING
    if cap is None:
        return (f"{draw:.0f}W", PLAIN)
    return (f"{NA if draw is None else f'{draw:.0f}'}/{cap:.0f}W", DIM if draw is None else PLAIN)


def ecc_cell(sample: GpuSample) -> Cell:
    """ECC mode, or the volatile uncorrected error count when ECC is on (as nvidia-smi's ECC column)."""
    if sample.ecc_mode is None:
        return _MISSING
    if not sample.ecc_mode:
        return ("Off", PLAIN)
    errors = sample.ecc_uncorrected_volatile
    if errors is None:
        return ("On", PLAIN)
    return (str(errors), ALERT if errors else PLAIN)


def throttle_labels(sample: GpuSample) -> list[str] | None:
    """Why the clocks are held back, in words (``None``: unknown). GPU idle is normal and not listed."""
    if sample.throttle_reasons is None:
        return None
    reasons = set(sample.throttle_reasons) - {"gpu_idle"}
    if "hw_thermal_slowdown" in reasons:
        reasons.discard("sw_thermal_slowdown")  # one thermal warning is enough; the HW one is the serious one
    labels = [label for name, label in _THROTTLE_LABELS.items() if name in reasons]
    return labels + sorted(safe_text(r) for r in reasons if r not in _THROTTLE_LABELS)  # a recording's or a peer's


def throttle_cell(sample: GpuSample) -> Cell:
    """``("power cap, HW thermal", WARN)``; ``("", PLAIN)`` when nothing holds the clocks back."""
    labels = throttle_labels(sample)
    if labels is None:
        return _MISSING
    return (", ".join(labels), WARN) if labels else ("", PLAIN)


def host_label(static: GpuStatic) -> str | None:
    """``"node7/1"``: a remote host's GPU, by its host and its own index there (``None``: a local GPU)."""
    if static.host is None:
        return None
    return safe_text(static.host) + ("" if static.host_index is None else f"/{static.host_index}")


def name_cell(static: GpuStatic) -> Cell:
    """The short model name; ``"N/A (no permission)"`` when the driver would not say."""
    if static.name:
        return (short_name(static.name), PLAIN)
    reason = static.unavailable.get("name")
    return (NA if reason is None else f"{NA} ({reason})", DIM)


def note_cell(gpu: GpuState) -> Cell:
    """A sentence shown instead of a GPU's values: an error for a host that could not be read,
    a warning for one that answered with a remark (e.g. its GPUs were capped)."""
    return (safe_text(gpu.note), HOT if gpu.lost else WARN)


def lost_cell() -> Cell:
    """The word for a GPU that fell off the bus or stopped answering."""
    return ("LOST", ALERT)


# ----------------------------------------------------------------- real work (GPM)

GPM_NOT_SUPPORTED = "GPM needs Hopper or newer"
"""Why SM, tensor and DRAM activity are N/A on a board before Hopper: said once, never drawn as 0."""
GPM_NOT_SUPPORTED_SHORT = "pre-Hopper"
"""The same reason where a panel has no room for the sentence."""
_GPM_REASONS = {
    Reason.NOT_SUPPORTED: GPM_NOT_SUPPORTED,
    Reason.NO_PERMISSION: "no permission to read GPM",
}
LITTLE_WORK_BUSY = 80.0
"""Utilisation (%) from which a GPU counts as busy for :func:`little_work`."""
LITTLE_WORK_SM = 20.0
"""SM active (%) under which a busy GPU does little real work (a stuck collective, a data-starved loop)."""
ACTIVITY_WORDS = "busy, little work"
"""What a busy GPU whose SMs barely work is called, in every view."""


def activity_reason(reason: Reason | None) -> str:
    """Why GPM figures are missing, in words: "GPM needs Hopper or newer", "no permission to read GPM", ..."""
    if reason is None:
        return "not reported"
    return _GPM_REASONS.get(reason, str(reason))


def activity_shown(sample: GpuSample) -> bool:
    """Whether the GPU has GPM figures to draw: some value, or a reason worth its own line (no permission,
    not measured yet). Not on a board without GPM (one short N/A says so) nor from a source without the fields."""
    if sample.sm_active_percent is not None or sample.tensor_active_percent is not None:
        return True
    if sample.dram_active_percent is not None:
        return True
    reason = sample.why("sm_active_percent")
    return reason is not None and reason is not Reason.NOT_SUPPORTED


def mig_activity_shown(gpu: GpuState) -> bool:
    """Whether the GPU's MIG instances get SM/tensor figures: some instance has one, or a reason other than
    "not supported" (a board without GPM says it once for the whole GPU)."""
    for state in gpu.mig:
        usage = state.usage
        if usage is None:
            continue
        if usage.sm_active_percent is not None or usage.tensor_active_percent is not None:
            return True
        reason = usage.unavailable.get("sm_active_percent")
        if reason is not None and reason is not Reason.NOT_SUPPORTED:
            return True
    return False


def activity_cell(value: float | None) -> Cell:
    """One GPM percentage, ``"52%"``; a missing one is N/A (dim), never 0."""
    return _MISSING if value is None else (f"{value:.0f}%", PLAIN)


def _busy(sample: GpuSample) -> float | None:
    """How busy the driver says the GPU is: its utilisation, else GPM's graphics-engine activity (under MIG)."""
    if sample.utilization_gpu_percent is not None:
        return float(sample.utilization_gpu_percent)
    return sample.graphics_active_percent


def little_work(busy: float | None, sm_active: float | None) -> bool:
    """A GPU (or MIG instance) at high utilisation whose SMs barely work: "100 % busy" that is a spin.

    Utilisation only says a kernel was resident; SM active says how many SMs did
    something. A deadlocked NCCL collective or a data-starved input pipeline shows
    the first without the second.
    """
    return busy is not None and sm_active is not None and busy >= LITTLE_WORK_BUSY and sm_active < LITTLE_WORK_SM


def gpu_little_work(sample: GpuSample) -> bool:
    """:func:`little_work` for a whole GPU (its utilisation, or its graphics activity where MIG hides that)."""
    return little_work(_busy(sample), sample.sm_active_percent)


def sm_active_cell(sample: GpuSample) -> Cell:
    """SM active, ``"52%"``; in the warning colour on a busy GPU that does little work (:func:`little_work`)."""
    text, category = activity_cell(sample.sm_active_percent)
    return (text, WARN) if gpu_little_work(sample) else (text, category)


def mig_activity_cell(usage: MigUsage | None, name: str) -> Cell:
    """An instance's own GPM figure (``"sm_active_percent"``): ``"45%"``, or N/A (dim); its SM active in the
    warning colour when the instance is busy and does little work."""
    if usage is None:
        return _MISSING
    text, category = activity_cell(getattr(usage, name))
    if name == "sm_active_percent" and little_work(usage.graphics_active_percent, usage.sm_active_percent):
        return (text, WARN)
    return (text, category)


# ----------------------------------------------------------------- MIG

MIG_UTILIZATION_NOTE = "utilisation is not reported under MIG"
"""Said once per MIG-enabled GPU where its utilisation would be: the driver reports none (NotSupported),
and an N/A or an empty chart alone reads as an idle GPU."""


def mig_hides_utilization(gpu: GpuState) -> bool:
    """Whether the GPU's utilisation is missing because MIG is on (views explain it once instead of N/A)."""
    return bool(gpu.static.mig_mode) and gpu.sample.utilization_gpu_percent is None and not gpu.lost


def mig_mode_cell(static: GpuStatic) -> Cell | None:
    """``("MIG", PLAIN)`` on a MIG-enabled GPU; ``("MIG on after reset", WARN)`` when an admin switched the mode
    and the GPU waits for a reset (nothing changes until then); ``None`` when MIG is off and stays off."""
    if static.mig_pending_change:
        return (f"MIG {'on' if static.mig_mode_pending else 'off'} after reset", WARN)
    return ("MIG", PLAIN) if static.mig_mode else None


def mig_profile_cell(instance: MigInstance) -> Cell:
    """``3g.40gb``: the driver's name for the instance's size (outside text, made safe here)."""
    return (safe_text(instance.profile), PLAIN) if instance.profile else _MISSING


def mig_memory_cell(state: MigState) -> Cell:
    """``"20.3/39.8GiB"``: the instance's memory in use of its own; the used part N/A (dim) when not read."""
    used, total = state.memory_used_bytes, state.memory_total_bytes
    if used is None and total is None:
        return _MISSING
    return (used_of_total(used, total), DIM if used is None else PLAIN)


def mig_sm_cell(instance: MigInstance) -> Cell:
    """The streaming multiprocessors the instance computes with, as a bare number (views add "SMs")."""
    return _MISSING if instance.sm_count is None else (str(instance.sm_count), PLAIN)


def mig_processes_cell(gpu: GpuState, state: MigState) -> Cell:
    """How many processes run on the instance; N/A when the GPU's process list could not be read."""
    if gpu.processes_unavailable is not None:
        return _MISSING
    count = len(state.processes)
    return (str(count), PLAIN if count else DIM)


def mig_uuid_cell(instance: MigInstance) -> Cell:
    """``MIG-...``: what CUDA_VISIBLE_DEVICES takes (outside text, made safe here)."""
    return (safe_text(instance.uuid), DIM) if instance.uuid else _MISSING


def process_instance_cell(process: GpuProcess) -> Cell:
    """The MIG column: ``1/2/0`` (GPU/GI/CI) for a process on a MIG instance, a dim ``-`` on a whole GPU."""
    label = process.instance_label
    return ("-", DIM) if label is None else (label, PLAIN)


# ----------------------------------------------------------------- health

SEVERITY_CATEGORY: dict[Severity, str] = {Severity.OK: GOOD, Severity.WARN: WARN, Severity.FAIL: ALERT}
"""A verdict's colour meaning: the one map from health to colour, for every view (the panels, ``--once``, the
health screen and the header's counts; the palette then picks the colour, so "colorblind" recolours them all)."""

FINDING_CATEGORY: dict[Severity, str] = {**SEVERITY_CATEGORY, Severity.FAIL: HOT}
"""A finding's colour meaning, in a list of findings: as its verdict's, but a FAIL in red, not white on red (a
page where every FAIL line shouts cannot be read). ``nvtopy doctor``'s status words and the findings' sentences."""


def stalled_text(gpu: GpuState) -> str | None:
    """``"not responding (12 s)"`` for a GPU whose driver call is stuck; None when it answers."""
    health = gpu.health
    if health.responding:
        return None
    return f"not responding ({fmt_age(health.stalled_seconds or 0.0)})"


def verdict_cell(gpu: GpuState) -> Cell:
    """The GPU's one health verdict: ``("OK", GOOD)``, ``("WARN", WARN)``, ``("FAIL", ALERT)``; ``("N/A", DIM)``
    for a line that is no reading (a fleet's host it cannot read, a stale host's GPU): never OK unread."""
    if gpu.note:
        return (NA, DIM)
    verdict = gpu.health.verdict
    return (verdict.value, SEVERITY_CATEGORY[verdict])


def finding_cell(finding: Finding, *, with_action: bool = True) -> Cell:
    """One reason for a verdict as a sentence, with its fix: ``"row remapping failed: replace the board"``."""
    text = safe_text(finding.text)
    if with_action and finding.action:
        text += f" -> {safe_text(finding.action)}"
    return (text, FINDING_CATEGORY[finding.severity])


def health_summary_cell(gpu: GpuState) -> Cell:
    """The verdict with its first reason, for one line: ``"WARN HW slowdown: SM at 45 % of max (+1)"``."""
    verdict, category = verdict_cell(gpu)
    findings = gpu.health.findings
    if not findings:
        return (verdict, category)
    more = f" (+{len(findings) - 1})" if len(findings) > 1 else ""
    return (f"{verdict} {safe_text(findings[0].text)}{more}", category)


PROCESS_FLAG_WORDS = {"idle-held": "idle-held", "suspected-hang": "hang?"}


def process_flags_cell(process: GpuProcess) -> Cell:
    """``("idle-held 12m", WARN)`` for a process that holds memory and computes nothing; ``("", PLAIN)`` else."""
    if not process.flags:
        return ("", PLAIN)
    words = []
    for flag in process.flags:
        word = PROCESS_FLAG_WORDS.get(flag, safe_text(flag))
        if flag == "idle-held" and process.idle_seconds is not None:
            word += f" {fmt_age(process.idle_seconds)}"
        words.append(word)
    return (", ".join(words), WARN)


# ----------------------------------------------------------------- processes


def is_mine(process: GpuProcess, me: str | None) -> bool:
    """A process of the user nvtopy runs as (never one not visible from this PID namespace: its owner is unknown)."""
    return not process.foreign and process.user == me


# The columns process_cells returns, in order: those every table has (nvtopy.columns; HOST, MIG and FLAGS have
# cells of their own).
PROCESS_CELL_KEYS = tuple(c.key for c in TABLE_COLUMNS if c.shown_when is None)


def _value(text: str | None) -> Cell:
    return _MISSING if text is None else (text, PLAIN)


OWNER_MAX = 48  # characters of an owner's label, in every view

# A hash in a cgroup path: 12 hex digits or more (a container id), or a UUID (systemd escapes its "-" as "_").
_HASH = re.compile(r"[0-9a-fA-F]{8}(?:[-_][0-9a-fA-F]{4}){3}[-_][0-9a-fA-F]{12}|[0-9a-fA-F]{12,}")
HASH_SHOWN = 8
"""Hex digits a hash keeps in a short owner label (``64a1d6e2…``): enough to tell two apart on one node."""
# Leaves that say where in its cgroup a process sits, not whose it is: the component above names the owner.
_GENERIC_LEAVES = frozenset({"init.scope", "init", "payload", "leaf", "system", "tasks", "app", "container"})


def _short_hashes(component: str) -> str:
    return _HASH.sub(lambda match: match.group()[:HASH_SHOWN] + "…", component)


def short_cgroup(path: str) -> str:
    """A raw cgroup path as an OWNER cell shows it: ``/process_api/64a1d6e2f0...`` is ``process_api/64a1d6e2…``.

    Why: a process in a cgroup no rule recognises (kind ``cgroup``) is named by its path, and such paths
    are mostly hashes; the column has room for a name. The last meaningful component is kept, its hashes
    cut to :data:`HASH_SHOWN` digits; a leaf that is only a hash or says where in the cgroup the process
    sits (``init.scope``, ``payload``) keeps its parent before it. The full path is in the process screen.
    """
    parts = [_short_hashes(part) for part in path.split("/") if part]
    if not parts:
        return path or "/"
    last = parts[-1]
    vague = last.lower() in _GENERIC_LEAVES or (last.endswith("…") and len(last) == HASH_SHOWN + 1)
    if vague and len(parts) > 1:
        return f"{parts[-2]}/{last}"
    return last


def owner_label_shown(owner: ProcessOwner) -> str:
    """An owner's words in an OWNER cell, unescaped: its label, a raw cgroup path short (:func:`short_cgroup`)."""
    if owner.kind is OwnerKind.CGROUP and owner.cgroup:
        return short_cgroup(owner.cgroup)
    return owner.label


def owner_cell(process: GpuProcess) -> Cell:
    """Who the process runs under, by its short label: ``web-1``, ``ns/pod``, ``slurm 1234.0``, ``nginx``.

    ``"-"`` (dim) for a plain host process (no container, job or service); N/A (dim)
    when unknown (not resolved, or a pid not visible from this PID namespace). The names come
    from the runtime's files or the process's environment: outside text, made safe here. A raw
    cgroup path is shown short (:func:`short_cgroup`).
    """
    owner = process.owner
    if owner is None:
        return _MISSING
    cell = _owner_cells.get(owner)
    if cell is None:
        if len(_owner_cells) >= MOST_OWNER_CELLS:
            _owner_cells.clear()
        cell = _owner_cells[owner] = _owner_cell(owner)
    return cell


MOST_OWNER_CELLS = 1024
"""Owners whose OWNER cell is kept (a bound: a node has a few dozen); past it the cells start afresh."""
_owner_cells: dict[ProcessOwner, Cell] = {}
"""Each owner's cell, made once: a raw cgroup path is cut with a regular expression (about 5 us), and every visible
row's cells are made again each second (its TIME moves); a process table has few owners for many rows."""


def _owner_cell(owner: ProcessOwner) -> Cell:
    if owner.kind is OwnerKind.HOST:
        return ("-", DIM)
    label = safe_text(owner_label_shown(owner))  # both views cut a long one the same way
    return (label if len(label) <= OWNER_MAX else label[: OWNER_MAX - 1] + "…", PLAIN)


def process_cells(process: GpuProcess, me: str | None) -> tuple[Cell, ...]:
    """Every column of a process row (the order of :data:`PROCESS_CELL_KEYS`): text and category.

    The user is dim when it is not you: your processes stand out, and other
    users' figures stay readable (on a shared node they are what you look for).
    SM and CPU are bare numbers: the column titles say "%". Untrusted text
    (user, command) is made safe here.
    """
    if process.foreign:
        user: Cell = ("?", DIM)
        command: Cell = (f"({NOT_VISIBLE})", DIM)
    else:
        user = (safe_text(process.user), PLAIN if is_mine(process, me) else DIM) if process.user else _MISSING
        if process.command:
            command = (safe_text(process.command), PLAIN)
        else:
            command = (f"{NA} ({process.unavailable.get('command', '?')})", DIM)
        if process.status == "zombie":
            command = (f"{command[0]} <defunct>", BAD)
    return (
        (str(process.gpu_index), PLAIN),
        (str(process.pid), PLAIN),
        user,
        owner_cell(process),
        (process.type.value, PLAIN),
        _value(None if process.gpu_memory_bytes is None else fmt_bytes(process.gpu_memory_bytes)),
        _value(None if process.sm_percent is None else str(process.sm_percent)),
        _value(None if process.cpu_percent is None else f"{process.cpu_percent:.1f}"),
        _value(None if process.host_memory_bytes is None else fmt_bytes(process.host_memory_bytes)),
        _value(None if process.running_seconds is None else fmt_duration(process.running_seconds)),
        command,
    )


def plural(count: int, noun: str) -> str:
    """``1 thread``, ``2 threads``, ``2 processes``: a count with its noun, in every view (never "1 threads")."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}{'es' if noun.endswith('s') else 's'}"


GROUP_FOLDED, GROUP_UNFOLDED = "▸", "▾"
"""The sign before a group's name: its processes are hidden under it, or listed under it."""


class GroupRow(Protocol):
    """What a group-by row's cells read (``render.processes.ProcessGroup``; a protocol: processes imports cells)."""

    @property
    def mode(self) -> str: ...

    @property
    def value(self) -> str | int | None: ...

    @property
    def label(self) -> str: ...

    @property
    def members(self) -> Sequence[GpuProcess]: ...

    @property
    def gpus(self) -> Sequence[int]: ...

    @property
    def processes(self) -> int: ...

    @property
    def gpu_memory_bytes(self) -> int | None: ...

    @property
    def sm_percent(self) -> int | None: ...

    @property
    def cpu_percent(self) -> float | None: ...

    @property
    def host_memory_bytes(self) -> int | None: ...

    @property
    def running_seconds(self) -> float | None: ...


def group_cells(group: GroupRow, me: str | None, *, unfolded: bool = False) -> tuple[Cell, ...]:
    """Every column of a group row (group-by; ``group`` is a :class:`~nvtopy.render.processes.ProcessGroup`).

    GPU: its GPUs; PID: how many processes (``(3)``); USER and OWNER: the shared one,
    else how many; the figures are its totals (TIME: the longest; SM%: the average per GPU,
    :attr:`~nvtopy.render.processes.ProcessGroup.sm_percent`); COMMAND says what the group is,
    after :data:`GROUP_FOLDED` (``unfolded``: :data:`GROUP_UNFOLDED`, its processes are listed
    under it). Names are outside text, made safe here.
    """
    members = group.members
    users = {"?" if p.foreign else p.user for p in members}
    if len(users) == 1:
        (name,) = users
        user: Cell = (safe_text(name), PLAIN if name == me else DIM) if name else _MISSING
    else:
        user = (plural(len(users), "user"), DIM)
    owners = {owner_cell(p) for p in members}
    owner = next(iter(owners)) if len(owners) == 1 else (plural(len(owners), "owner"), DIM)
    types = {p.type.value for p in members}
    kind = (types.pop(), PLAIN) if len(types) == 1 else ("*", PLAIN)
    if group.value is None and group.mode == "host":
        label = group.label  # "this host": the local machine's processes, beside other hosts' (--remote)
    elif group.value is None:
        label = f"{NA} {group.mode}"
    elif group.mode == "gpu":
        label = f"GPU {group.value}"
    elif group.mode == "owner" and group.value == "-":
        label = "host (no container, job or service)"
    else:
        label = safe_text(str(group.value))
    sign = GROUP_UNFOLDED if unfolded else GROUP_FOLDED
    command = f"{sign} {label}: {plural(group.processes, 'process')}"  # the header says what it is grouped by
    if group.mode != "gpu":
        command += f" on {plural(len(group.gpus), 'GPU')}"
    return (
        (",".join(str(i) for i in group.gpus), PLAIN),
        (f"({group.processes})", PLAIN),
        user,
        owner,
        kind,
        _value(None if group.gpu_memory_bytes is None else fmt_bytes(group.gpu_memory_bytes)),
        _value(None if group.sm_percent is None else str(group.sm_percent)),
        _value(None if group.cpu_percent is None else f"{group.cpu_percent:.1f}"),
        _value(None if group.host_memory_bytes is None else fmt_bytes(group.host_memory_bytes)),
        _value(None if group.running_seconds is None else fmt_duration(group.running_seconds)),
        (command, PLAIN),
    )


def group_instance_cell(group: GroupRow) -> Cell:
    """A group's MIG column: the instance its processes share, a dim ``-`` when none is on MIG, else how many."""
    labels = {p.instance_label for p in group.members}
    if len(labels) == 1:
        return process_instance_cell(group.members[0])
    return (f"{len(labels - {None})} inst", DIM)


NO_FRAMEBUFFER_NOTE = "unified memory: NVML reports no framebuffer (the processes' memory is still shown)"


def no_framebuffer(gpu: GpuState) -> bool:
    """Whether the driver reports no framebuffer memory at all (GB10 / DGX Spark: CPU and GPU share memory).

    NotSupported for the total is what unified-memory machines answer (nvtop#449, nvitop#195); a
    board with a framebuffer always reports it, so the N/A gets its reason in words, not a 0.
    """
    return gpu.static.memory_total_bytes is None and gpu.static.unavailable.get("memory_total_bytes") is (
        Reason.NOT_SUPPORTED
    )

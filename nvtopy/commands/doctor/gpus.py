"""Doctor's checks of each GPU's state, on the monitor's own rules (:mod:`nvtopy.health.verdict`).

Why on the health rules: the monitor's verdict and doctor both say whether a
board's memory or link is in trouble; with one rule each (the thresholds, the
decision and the words of the problem), they cannot disagree. Doctor adds what
a one-shot check can say on top: why it matters (``detail``) and the command
that fixes it (``fix``), and OK findings for what is fine ("a lower PCIe
generation at idle is normal").

Persistence mode, MIG instances, whether Xid events can be watched and the
accounting mode are doctor's alone: the monitor has no verdict about them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...backends.diagnose import GpuFacts
from ...health.verdict import memory_findings, pcie_downgrade, pcie_link
from .findings import DoctorFinding, Status, gpu_label, gpu_list

__all__ = [
    "check_accounting",
    "check_memory_health",
    "check_mig",
    "check_pcie_link",
    "check_persistence",
    "check_xid_events",
]


# --------------------------------------------------------------------- 2. persistence mode


def check_persistence(gpus: Sequence[GpuFacts]) -> DoctorFinding:
    """Check 2: persistence mode off on a GPU means its state is torn down whenever no program holds it."""
    off = [g.static.index for g in gpus if g.sample.persistence_mode is False]
    on = [g.static.index for g in gpus if g.sample.persistence_mode is True]
    if off:
        return DoctorFinding(
            "persistence-mode",
            Status.WARN,
            f"Persistence mode is off on {gpu_list(off)}",
            "The driver tears the GPU's state down when the last program exits and rebuilds it at the next "
            "start: the first NVML or CUDA call then takes seconds (slow nvidia-smi, slow job starts).",
            "sudo nvidia-smi -pm 1 (until reboot), or enable the daemon: "
            "sudo systemctl enable --now nvidia-persistenced",
            tuple(off),
        )
    if not on:
        return DoctorFinding("persistence-mode", Status.SKIP, "Persistence mode not reported (Linux only)")
    return DoctorFinding("persistence-mode", Status.OK, f"Persistence mode is on ({gpu_list(on)})", gpus=tuple(on))


# --------------------------------------------------------------------- 7. MIG


def check_mig(gpus: Sequence[GpuFacts]) -> list[DoctorFinding]:
    """Check 7: MIG enabled with no GPU instance: CUDA sees no device on that GPU."""
    findings = [
        DoctorFinding(
            "mig",
            Status.FAIL,
            f"{gpu_label(g.static)}: MIG is enabled but has no GPU instance",
            "CUDA sees no device on a MIG GPU without instances (or none is visible to this process): "
            "programs fail with 'no CUDA-capable device'.",
            f"create instances: sudo nvidia-smi mig -i {g.static.index} -cgi PROFILES -C (profiles: nvidia-smi mig "
            f"-lgip), or turn MIG off: sudo nvidia-smi -i {g.static.index} -mig 0",
            (g.static.index,),
        )
        for g in gpus
        if g.static.mig_mode is True and not g.static.mig_devices
    ]
    if findings:
        return findings
    mig = [g for g in gpus if g.static.mig_mode is True]
    if mig:
        parts = ", ".join(f"GPU {g.static.index}: {len(g.static.mig_devices)}" for g in mig)
        return [
            DoctorFinding(
                "mig", Status.OK, f"MIG instances in place ({parts})", gpus=tuple(g.static.index for g in mig)
            )
        ]
    return [DoctorFinding("mig", Status.OK, "MIG is off (or not supported) on every GPU")]


# --------------------------------------------------------------------- 8. memory health


# Doctor's words on top of each memory rule (the health finding's ``code``): why it matters, and the fix for
# GPU ``{index}``. The problem itself -- whether, how bad, in what words -- is the rule's.
_MEMORY_ADVICE: Mapping[str, tuple[str | None, str]] = {
    "remap-failure": (
        "A memory bank ran out of spare rows for uncorrectable errors: the board meets NVIDIA's RMA criteria.",
        "drain the node; run NVIDIA's field diagnostic and replace the board (RMA)",
    ),
    "retired-limit": (None, "drain the node; replace the board (RMA)"),
    "remap-pending": (
        "Running work is unaffected.",
        "when the GPU is idle: sudo nvidia-smi -r -i {index} (or reboot)",
    ),
    "retire-pending": (
        "Retirement takes effect when the driver reloads or the GPU resets.",
        "when the GPU is idle: sudo nvidia-smi -r -i {index}, or reload the driver",
    ),
    "ecc-uncorrected": (
        "The application that hit an error was stopped; a row or page that keeps failing is remapped or retired.",
        "watch the remapped rows and retired pages: nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT -i {index}",
    ),
}


def check_memory_health(gpus: Sequence[GpuFacts]) -> list[DoctorFinding]:
    """Check 8: the monitor's memory rules (:func:`nvtopy.health.verdict.memory_findings`), with doctor's fixes.

    Row remapping failed or the page retirement limit reached: FAIL (replace the
    board); a reset pending for remapped rows or retired pages, uncorrectable ECC
    errors since the driver loaded: WARN. Worst first on each GPU.
    """
    key = "memory-health"
    findings: list[DoctorFinding] = []
    known = 0
    for gpu in gpus:
        sample, index, label = gpu.sample, gpu.static.index, gpu_label(gpu.static)
        fields = (sample.remapped_rows_failure, sample.remapped_rows_pending, sample.retired_pages_pending)
        known += any(value is not None for value in fields)
        worst_first = sorted(memory_findings(sample), key=lambda f: -f.severity.rank)  # stable within a severity
        for rule in worst_first:
            advice = _MEMORY_ADVICE.get(rule.code)  # a rule doctor has no words for yet: the monitor's fix
            detail, fix = (advice[0], advice[1].format(index=index)) if advice else (None, rule.action)
            title = f"{label}: {rule.text}"
            findings.append(DoctorFinding(key, Status.of(rule.severity), title, detail, fix, (index,)))
    if findings:
        return findings
    if not known:
        return [
            DoctorFinding(
                key,
                Status.SKIP,
                "Row remapping and page retirement not reported",
                "Row remapping exists from Ampere on, page retirement up to Turing (with ECC on).",
            )
        ]
    return [DoctorFinding(key, Status.OK, "No memory repair pending and no remapping failure")]


# --------------------------------------------------------------------- 9. PCIe link


_PCIE_FIX = (
    "reseat the board; check that the slot is x16 electrically, the riser and the BIOS PCIe settings "
    "(nvidia-smi -q -d PCIE shows the link)"
)


def check_pcie_link(gpus: Sequence[GpuFacts]) -> list[DoctorFinding]:
    """Check 9: the monitor's link rule (:func:`nvtopy.health.verdict.pcie_downgrade`), with doctor's fix.

    A link narrower than its maximum, or slower while the GPU is busy: WARN (a
    narrower link does not recover at load). Links train down to a lower
    generation at idle to save power: that is normal, and said to be (an OK
    finding), so nobody reseats a healthy board.
    """
    key = "pcie-link"
    findings: list[DoctorFinding] = []
    known = 0
    for gpu in gpus:
        static, index = gpu.static, gpu.static.index
        link = pcie_link(static, gpu.sample)
        if None in (link.gen, link.gen_max) and None in (link.width, link.width_max):
            continue
        known += 1
        label = gpu_label(static)
        downgrade = pcie_downgrade(link)
        if downgrade is not None:
            busy_and_slower = link.slower and link.busy
            why = f"busy at {link.utilization} %" if busy_and_slower else "the width does not change with load"
            findings.append(
                DoctorFinding(
                    key,
                    Status.of(downgrade.severity),
                    f"{label}: {downgrade.text}",
                    f"A downgraded link ({why}) cuts host-GPU bandwidth: data loading and copies slow down.",
                    _PCIE_FIX,
                    (index,),
                )
            )
        elif link.slower:
            state = f"while idle ({link.utilization} %)" if link.utilization is not None else "(load unknown)"
            findings.append(
                DoctorFinding(
                    key,
                    Status.OK,
                    f"{label}: PCIe Gen{link.gen} {state}, the GPU can do Gen{link.gen_max}",
                    "Links train down to a lower generation at idle to save power: this is normal. "
                    "It is a problem only if it stays low under load.",
                    None,
                    (index,),
                )
            )
    if findings:
        return findings
    if not known:
        return [DoctorFinding(key, Status.SKIP, "PCIe link generation and width not reported")]
    return [DoctorFinding(key, Status.OK, "PCIe links at their maximum width and generation")]


# --------------------------------------------------------------------- 10. events and accounting


def check_xid_events(notes: Mapping[int | None, str] | None, device_count: int | None = None) -> DoctorFinding:
    """Check 10a: whether Xid errors can be watched (the backend's event stream says why not, per GPU or for all)."""
    key = "xid-events"
    if notes is None:
        return DoctorFinding(key, Status.SKIP, "Xid events not checked: the driver did not get that far")
    if device_count == 0:
        return DoctorFinding(key, Status.SKIP, "Xid events not checked: no GPU")
    if not notes:
        return DoctorFinding(key, Status.OK, "Xid events can be watched on every GPU")
    every = notes.get(None)
    per_gpu = sorted((index, note) for index, note in notes.items() if index is not None)
    if every is not None:
        title, said = "Xid events cannot be watched", every
    else:
        title = f"Xid events cannot be watched on {gpu_list([index for index, _ in per_gpu])}"
        said = "; ".join(f"GPU {index}: {note}" for index, note in per_gpu)
    return DoctorFinding(
        key,
        Status.WARN,
        title,
        f"{said}. Xid errors (the first sign of a failing GPU) are not seen as they happen; the kernel log still "
        "has them.",
        _events_fix(said),
        tuple(index for index, _ in per_gpu),
    )


def _events_fix(notes: str) -> str:
    """The fix for events that cannot be watched, by why: nothing to change where the GPU cannot report them."""
    watch = "watch the kernel log instead (sudo dmesg -w | grep -i xid)"
    lowered = notes.lower()
    if "permission" in lowered:
        return f"run nvtopy as root, or {watch}"
    if "not supported" in lowered:
        return f"nothing to change on this GPU or driver: {watch}"
    return watch


def check_accounting(gpus: Sequence[GpuFacts], foreign_pids: bool = False) -> DoctorFinding:
    """Check 10b: the accounting mode: not permitted (WARN), off (WARN in a container, where nvtopy matches
    host pids by their accounting start time; else the default, OK), not supported (SKIP)."""
    key = "accounting"
    states: dict[str, list[int]] = {}
    for gpu in gpus:
        if gpu.accounting is not None:
            states.setdefault(gpu.accounting, []).append(gpu.static.index)
    if not states:
        return DoctorFinding(key, Status.SKIP, "Accounting mode not reported by this backend")
    enable = "sudo nvidia-smi -am 1 (on the host; until reboot)"
    if "no_permission" in states:
        gpus_ = states["no_permission"]
        return DoctorFinding(
            key,
            Status.WARN,
            f"Accounting mode cannot be read on {gpu_list(gpus_)}: no permission",
            "Per-process accounting (GPU time, peak memory, start times) is not available to this user.",
            "run nvtopy as root",
            tuple(gpus_),
        )
    if "disabled" in states:
        gpus_ = states["disabled"]
        if foreign_pids:
            return DoctorFinding(
                key,
                Status.WARN,
                f"Accounting is off on {gpu_list(gpus_)}",
                "In a container nvtopy matches host pids to local processes by their accounting start time; "
                "without it fewer GPU processes can be named.",
                enable,
                tuple(gpus_),
            )
        return DoctorFinding(
            key,
            Status.OK,
            f"Accounting is off on {gpu_list(gpus_)} (the default)",
            "Turn it on to keep per-process GPU time and peak memory, also after a process ends.",
            enable,
            tuple(gpus_),
        )
    if set(states) <= {"not_supported", "lost", "unknown"}:
        return DoctorFinding(key, Status.SKIP, "Accounting is not supported on these GPUs")
    return DoctorFinding(key, Status.OK, f"Accounting is on ({gpu_list(states.get('enabled', []))})")

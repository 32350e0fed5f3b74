"""One verdict per GPU -- OK, WARN or FAIL -- and the findings behind it.

Why one function: the panel title, the compact line, ``--once``, JSON, CSV,
the exporter's ``nvtopy_gpu_health`` and ``nvtopy doctor`` all say whether a
GPU is healthy; computed once here (by the collector, per snapshot), no two
views can disagree. The rules and their thresholds follow NVIDIA's own
guidance (``shared/docs/cluster-notes.md``: the Xid catalogue, "GPU Memory
Error Management", "Dynamic Page Retirement"):

- FAIL: the GPU is lost or not responding; row remapping failed; page
  retirement reached its limit; an Xid that needs a reset, a reboot or a
  support case, in the last ``xid_window_s`` (counted whole by
  :mod:`.xid_window`, never from the bounded timeline shown).
- WARN: a reset is pending (rows remapped, pages retired); uncorrectable ECC
  errors since the driver loaded; a PCIe link below its maximum (width always;
  generation only while the GPU works: links train down at idle, which is
  normal); a growing PCIe replay counter or NVLink error counter; an inactive
  NVLink; harmful throttling; a temperature at the slowdown threshold; an
  application Xid; idle-held processes; a suspected hang.

Findings are ordered worst first, so the first one is what a one-line view shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..model import Finding, GpuEvent, GpuHealth, GpuSample, GpuStatic, Severity
from ..records import dataclass
from .throttle import summarize_throttle
from .xid import describe_xid
from .xid_window import XID_WINDOW_S, XidCount

__all__ = [
    "BUSY_UTILIZATION",
    "MAX_XID_FINDINGS",
    "RETIRED_PAGES_LIMIT",
    "HealthInputs",
    "HealthThresholds",
    "PcieLink",
    "assess",
    "memory_findings",
    "pcie_downgrade",
    "pcie_link",
    "worst",
]

_Add = Callable[[Finding], None]  # ``findings.append``, as the rule helpers take it

RETIRED_PAGES_LIMIT = 64
"""Pages a pre-Ampere GPU can retire (NVIDIA: "a maximum of 64 retirements for the frame buffer")."""

BUSY_UTILIZATION = 10
"""Utilisation (%) above which a PCIe link below its maximum generation is a downgrade, not power saving."""

MAX_XID_FINDINGS = 8
"""Xid numbers with a finding of their own; the rest of the window's Xids share one (of their worst severity)."""


@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """The knobs of the real-work flags and of how long an Xid counts. Defaults from the issue."""

    idle_held_bytes: int = 1 << 30  # a process holding at least this much GPU memory ...
    idle_held_seconds: float = 600.0  # ... at ~0 % SM for this long is "idle-held"
    idle_sm_percent: int = 1  # "~0 %": at most this
    hang_utilization_percent: int = 95  # a GPU this busy ...
    hang_sm_active_percent: float = 10.0  # ... with under this % of its SMs active (GPM: Hopper and newer) ...
    hang_power_share: float = 0.30  # ... or, where SM activity is N/A, below this share of its power limit ...
    hang_seconds: float = 300.0  # ... for this long is a "suspected hang" (a deadlocked collective)
    xid_window_s: float = XID_WINDOW_S  # an Xid weighs on the verdict this long after it arrived (its counts too)
    counter_window_s: float = 600.0  # a counter (PCIe replays, NVLink errors) that grew within this is flagged


@dataclass(frozen=True, slots=True)
class HealthInputs:
    """What the rules need beyond the GPU's own readings: time-dependent facts the collector tracks."""

    now: float
    events: tuple[GpuEvent, ...] = ()  # the timeline shown (bounded): evidence, not what the verdict counts
    xid_counts: tuple[tuple[int, int], ...] = ()
    # The Xids within ``xid_window_s`` counted whole (health.xid_window.XidWindow.recent), newest first:
    # what the Xid findings and the verdict come from.
    recent_xids: tuple[XidCount, ...] = ()
    events_note: str | None = None
    responding: bool = True
    stalled_seconds: float | None = None
    replay_growth: int | None = None  # PCIe replays added within the counter window (None: unknown)
    nvlink_error_growth: tuple[int, ...] = ()  # links whose error counter grew within the window
    idle_held_bytes: int | None = None
    idle_held_processes: int = 0
    suspected_hang_seconds: float | None = None


def assess(
    static: GpuStatic, sample: GpuSample, inputs: HealthInputs, thresholds: HealthThresholds | None = None
) -> GpuHealth:
    """The GPU's verdict and findings from its readings and the tracked facts (see the module docstring)."""
    limits = thresholds or HealthThresholds()
    findings: list[Finding] = []
    add = findings.append
    fail, warn = Severity.FAIL, Severity.WARN

    if not inputs.responding:
        seconds = int(inputs.stalled_seconds or 0)
        add(
            Finding(
                fail,
                "not-responding",
                f"not responding ({seconds} s): a driver call on this GPU is stuck",
                "look for Xid errors in dmesg; a GPU reset or a reboot may be needed",
            )
        )
    if sample.lost:
        add(Finding(fail, "lost", "lost: the GPU stopped answering", "check dmesg for Xid 79; reboot the node"))

    _xid_findings([entry for entry in inputs.recent_xids if inputs.now - entry.newest <= limits.xid_window_s], add)
    findings += memory_findings(sample)
    downgrade = pcie_downgrade(pcie_link(static, sample))
    if downgrade is not None:
        add(downgrade)
    _link_findings(sample, inputs, add)

    throttle = summarize_throttle(sample.throttle_reasons, sample.clock_sm_mhz, static.clock_sm_max_mhz)
    if throttle is not None and throttle.harmful:
        add(Finding(warn, "throttle", throttle.text, "check cooling, airflow and the power supply"))
    temperature, slowdown = sample.temperature_c, static.temperature_slowdown_c
    if temperature is not None and slowdown and temperature >= slowdown:
        add(
            Finding(
                warn,
                "temperature",
                f"at {temperature} °C, its slowdown threshold is {slowdown} °C",
                "check cooling and airflow",
            )
        )
    if inputs.idle_held_processes:
        count = inputs.idle_held_processes
        held = (inputs.idle_held_bytes or 0) / 2**30
        add(
            Finding(
                warn,
                "idle-held",
                f"{count} process{'es' if count != 1 else ''} hold{'' if count != 1 else 's'} {held:.1f} GiB "
                f"and compute{'' if count != 1 else 's'} nothing",
                "ask the owner to release the GPU",
            )
        )
    if inputs.suspected_hang_seconds is not None:
        add(Finding(warn, "suspected-hang", _hang_text(sample, inputs.suspected_hang_seconds), _HANG_ACTION))

    findings.sort(key=lambda f: -f.severity.rank)  # stable: rule order within a severity
    verdict = findings[0].severity if findings else Severity.OK
    return GpuHealth(
        verdict=verdict,
        findings=tuple(findings),
        events=inputs.events,
        xid_counts=inputs.xid_counts,
        events_note=inputs.events_note,
        responding=inputs.responding,
        stalled_seconds=inputs.stalled_seconds,
        throttle=None if throttle is None else throttle.text,
        idle_held_bytes=inputs.idle_held_bytes,
        suspected_hang_seconds=inputs.suspected_hang_seconds,
    )


_HANG_ACTION = "check the job's logs; py-spy dump its processes"


def _hang_text(sample: GpuSample, seconds: float) -> str:
    """The suspected hang in words, naming its evidence: SM activity where the sample has it, else power.

    As :func:`nvtopy.health.realwork.looks_hung` decides: "busy at 100 % with 3 % of SMs active for
    5 min" where GPM measures SM activity, "busy at low power for 5 min" elsewhere.
    """
    minutes = int(seconds // 60)
    sm = sample.sm_active_percent
    if sm is None:
        return f"busy at low power for {minutes} min: a deadlocked collective?"
    util = sample.utilization_gpu_percent
    busy = "busy" if util is None else f"busy at {util} %"
    active = f"{sm:.0f} %" if sm >= 0.5 or sm == 0 else "<1 %"  # never a 0 that is not
    return f"{busy} with {active} of SMs active for {minutes} min: a deadlocked collective?"


def _xid_findings(recent: Sequence[XidCount], add: _Add) -> None:
    """One finding per Xid number within the window, worst then most recent first, with its count there.

    Past :data:`MAX_XID_FINDINGS` numbers (and for the numbers the window counts together), one
    finding says how many more events came, at the worst severity among them: the verdict never
    loses an Xid, and a storm of distinct numbers does not become a page of findings.
    """
    ranked = sorted(recent, key=lambda entry: -entry.severity.rank)  # stable: most recent first within a severity
    numbered = [entry for entry in ranked if entry.xid is not None]
    for entry in numbered[:MAX_XID_FINDINGS]:
        info = describe_xid(entry.xid)  # type: ignore[arg-type]  # numbered: never None
        times = f" x{entry.count}" if entry.count > 1 else ""
        add(Finding(entry.severity, "xid", f"Xid {entry.xid}{times}: {info.meaning}", info.action))
    rest = numbered[MAX_XID_FINDINGS:] + [entry for entry in ranked if entry.xid is None]
    if rest:
        events = sum(entry.count for entry in rest)
        add(
            Finding(
                worst([entry.severity for entry in rest]),
                "xid",
                f"{events} more Xid event{'s' if events != 1 else ''} of other numbers",
                "see the Xid timeline and dmesg (NVRM: Xid) for each",
            )
        )


def memory_findings(sample: GpuSample) -> list[Finding]:
    """The memory rules: row remapping failed or page retirement at its limit (FAIL); a reset pending for
    remapped rows or retired pages, uncorrectable ECC errors since the driver loaded (WARN). In rule order.

    Public because ``nvtopy doctor`` judges memory with these same rules and words (adding its fixes):
    the monitor and doctor cannot disagree about a board.
    """
    findings: list[Finding] = []
    add = findings.append
    fail, warn = Severity.FAIL, Severity.WARN
    if sample.remapped_rows_failure:
        add(Finding(fail, "remap-failure", "row remapping failed", "replace the board (RMA)"))
    if sample.remapped_rows_pending:
        add(
            Finding(
                warn,
                "remap-pending",
                "reset pending: rows were remapped and take effect at the next GPU reset",
                "reset the GPU when it is idle (nvidia-smi -r)",
            )
        )
    retired = (sample.retired_pages_sbe or 0) + (sample.retired_pages_dbe or 0)
    if retired >= RETIRED_PAGES_LIMIT:
        add(Finding(fail, "retired-limit", f"{retired} pages retired: the limit is reached", "replace the board (RMA)"))
    if sample.retired_pages_pending:
        add(
            Finding(
                warn,
                "retire-pending",
                "reset pending: pages wait to be retired",
                "reload the driver or reset the GPU when it is idle",
            )
        )
    errors = sample.ecc_uncorrected_volatile
    if errors:
        add(
            Finding(
                warn,
                "ecc-uncorrected",
                f"{errors} uncorrectable ECC error{'s' if errors != 1 else ''} since the driver loaded",
                "the application hit was stopped; watch the remapped rows",
            )
        )
    return findings


@dataclass(frozen=True, slots=True)
class PcieLink:
    """A GPU's PCIe link beside its maximum, and whether the GPU is busy: what the downgrade rule decides on."""

    gen: int | None
    width: int | None
    gen_max: int | None
    width_max: int | None
    utilization: int | None  # the GPU's utilisation (%), None where unknown (a MIG-enabled GPU)

    @property
    def narrow(self) -> bool:
        """Fewer lanes than the GPU can use: a width does not train down at idle, so always a downgrade."""
        return self.width is not None and self.width_max is not None and self.width < self.width_max

    @property
    def slower(self) -> bool:
        """A lower generation than the GPU can do, whatever the load (at idle: power saving, normal)."""
        return self.gen is not None and self.gen_max is not None and self.gen < self.gen_max

    @property
    def busy(self) -> bool:
        """At least :data:`BUSY_UTILIZATION` % utilisation: a lower generation now is a downgrade."""
        return self.utilization is not None and self.utilization >= BUSY_UTILIZATION

    @property
    def downgraded(self) -> bool:
        """The rule: narrower than its maximum, or slower while busy."""
        return self.narrow or (self.slower and self.busy)


def pcie_link(static: GpuStatic, sample: GpuSample) -> PcieLink:
    """The GPU's link as the downgrade rule reads it."""
    return PcieLink(
        sample.pcie_link_gen,
        sample.pcie_link_width,
        static.pcie_link_gen_max,
        static.pcie_link_width_max,
        sample.utilization_gpu_percent,
    )


def pcie_downgrade(link: PcieLink) -> Finding | None:
    """The WARN for a downgraded link (:attr:`PcieLink.downgraded`), None for a link that is not.

    Public because ``nvtopy doctor`` judges the link with this same rule and words (adding its fixes).
    """
    if not link.downgraded:
        return None
    return Finding(
        Severity.WARN,
        "pcie-downgrade",
        f"PCIe link {_pcie_link(link.gen, link.width)}, the GPU can do {_pcie_link(link.gen_max, link.width_max)}",
        "reseat the board; check the slot, riser and BIOS PCIe settings",
    )


def _link_findings(sample: GpuSample, inputs: HealthInputs, add: _Add) -> None:
    """The link rules that need time (a growing counter) or more than PCIe: replays, NVLink."""
    warn = Severity.WARN
    if inputs.replay_growth:
        add(
            Finding(
                warn,
                "pcie-replays",
                f"PCIe replay counter growing (+{inputs.replay_growth} recently)",
                "a marginal link: reseat the board, check the riser",
            )
        )
    links = sample.nvlinks or ()
    down = [link.link for link in links if link.active is False]
    if down:
        names = ", ".join(str(n) for n in down)
        add(
            Finding(
                warn,
                "nvlink-down",
                f"NVLink {names} inactive ({len(links) - len(down)}/{len(links)} up)",
                "check the fabric (nvidia-smi nvlink -s); reset the GPU",
            )
        )
    if inputs.nvlink_error_growth:
        names = ", ".join(str(n) for n in inputs.nvlink_error_growth)
        add(
            Finding(
                warn,
                "nvlink-errors",
                f"NVLink errors growing on link {names}",
                "check the fabric (nvidia-smi nvlink -e); reseat or replace the cable/board",
            )
        )


def _pcie_link(gen: int | None, width: int | None) -> str:
    """``Gen4 x16``; a part that could not be read is left out (never ``GenNone``)."""
    parts = ([f"Gen{gen}"] if gen is not None else []) + ([f"x{width}"] if width is not None else [])
    return " ".join(parts) or "unknown"


def worst(verdicts: Sequence[Severity]) -> Severity:
    """The worst of several verdicts (OK for none)."""
    return max(verdicts, key=lambda v: v.rank, default=Severity.OK)

"""The alert rules: the one home of what nvtopy alerts on, for one machine and for a fleet.

Why one catalog for two engines: a fleet's Prometheus (``nvtopy rules`` writes these rules as
PromQL, :mod:`nvtopy.formats.prometheus.rules`) and an engine on one machine (evaluating the
same rules on snapshots) must agree on what an alert means, how bad it is, what to do and after
how long it fires; written twice, the two would drift. So each rule is one frozen
:class:`AlertRule` here, in words and numbers only, and each engine says how *it* evaluates it
(PromQL over the exporter's series; the model's fields).

Templates (``summary``, ``description``, ``action``) are plain text with ``{name}``
placeholders from :data:`PLACEHOLDERS` -- what an alert is about (``{gpu}``, ``{host}``,
``{pid}``...), its value (``{value}``, in the rule's :attr:`AlertRule.value_unit`), and the
rule's own thresholds by name (``{margin_c}``). An engine fills them its way: Python's
``str.format_map`` on a machine, Go templates (``{{ $labels.gpu }}``) in Prometheus.
:func:`placeholders` lists those of a template; a test checks every template against its
rule's :attr:`~AlertRule.subject`.

Xid: the meaning and action of each Xid are :mod:`nvtopy.health.xid`'s (NVIDIA's catalogue, one
home); the rule ``gpu-xid`` says ``{xid_meaning}`` and ``{xid_action}``, and each Xid's own
severity (:func:`xid_severity`: one the application caused is a warning, one that needs a reset
or a reboot is critical) decides the alert's.

Where each rule makes sense (:attr:`AlertRule.local`, :attr:`AlertRule.fleet`): "a GPU became
free" and "my process ended" are for someone at one machine; "the exporter is down" only for
the Prometheus that scrapes it; the GPU faults for both.
"""

from __future__ import annotations

import enum
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..health.xid import XID_CATALOGUE, describe_xid
from ..model import Severity

__all__ = [
    "CATALOG",
    "PLACEHOLDERS",
    "RULES_BY_ID",
    "SUBJECT_PLACEHOLDERS",
    "AlertRule",
    "AlertSeverity",
    "Subject",
    "Threshold",
    "ValueUnit",
    "critical_xids",
    "format_value",
    "placeholders",
    "rule",
    "with_overrides",
    "xid_severity",
]


class AlertSeverity(str, enum.Enum):
    """How bad: the ``severity`` label Alertmanager routes on (Prometheus's usual two)."""

    WARNING = "warning"  # someone should look today
    CRITICAL = "critical"  # the GPU (or the view of it) is broken now: drain, reset, reboot

    def __str__(self) -> str:
        return self.value


class Subject(str, enum.Enum):
    """What one alert is about: which placeholders it has, and what a firing instance is keyed by."""

    GPU = "gpu"  # one GPU of one host
    PROCESS = "process"  # one process on one GPU
    XID = "xid"  # one Xid number on one GPU
    EXPORTER = "exporter"  # one scrape target (fleet only)
    HOST = "host"  # one host of a fleet view that cannot be read (--ssh, --remote, --prometheus; local only)


class ValueUnit(str, enum.Enum):
    """How ``{value}`` is written: the unit of the figure the rule compares."""

    NONE = "none"  # the rule has no meaningful value; a template must not say {value}
    CELSIUS = "celsius"  # a whole number of degrees
    SECONDS = "seconds"  # a duration, written for people ("1h 5m")
    COUNT = "count"  # a whole number


@dataclass(frozen=True, slots=True)
class Threshold:
    """One tunable number of a rule: its name (a placeholder too), default, unit, and what it does."""

    name: str
    value: float
    unit: str
    help: str


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alert rule, in words and numbers: what both engines evaluate, and what the alert says.

    ``for_s``: how long the condition must hold before the alert fires (Prometheus's ``for``);
    ``clear_s``: how long it must have been clear before it can fire again, and ``cooldown_s``
    the least time between two firings (the engine on one machine; Prometheus's own resolve and
    Alertmanager's ``repeat_interval`` play that part in a fleet).
    """

    id: str  # stable, kebab-case: config keys, the `nvtopy_rule` label, --for RULE=...
    alert: str  # Prometheus's alertname (CamelCase)
    title: str  # a few words, for lists and the alerts screen
    severity: AlertSeverity  # gpu-xid: the worst; each Xid's own is xid_severity()
    subject: Subject
    summary: str  # one line: what happened, where
    description: str  # what it means
    action: str  # what to do
    for_s: float
    clear_s: float = 60.0
    cooldown_s: float = 300.0
    thresholds: tuple[Threshold, ...] = ()
    value_unit: ValueUnit = ValueUnit.NONE
    local: bool = True  # makes sense on one machine (nvtopy watch, the TUI)
    fleet: bool = True  # makes sense in Prometheus (nvtopy rules)

    def threshold(self, name: str) -> float:
        """The value of the threshold ``name``; KeyError for a name the rule does not have."""
        for threshold in self.thresholds:
            if threshold.name == name:
                return threshold.value
        raise KeyError(f"{self.id} has no threshold {name!r}")

    def render(self, template: str, fills: Mapping[str, str]) -> str:
        """``template`` (one of this rule's) filled with ``fills`` and the rule's thresholds: the words on one machine.

        ``fills`` gives the subject's placeholders (:data:`SUBJECT_PLACEHOLDERS`) and ``value`` as
        text, written for the rule's :attr:`value_unit`; a placeholder not given is a KeyError.
        """
        return template.format_map({**self.threshold_values, **fills})

    @property
    def threshold_values(self) -> dict[str, str]:
        """Each threshold's value as a template writes it (``5``, ``0.5``): placeholders both engines fill alike."""
        return {t.name: f"{t.value:g}" for t in self.thresholds}


# Placeholders by what they name. An engine fills each one it can; a template uses only its subject's.
_GPU = ("host", "gpu", "model", "uuid")
SUBJECT_PLACEHOLDERS: dict[Subject, tuple[str, ...]] = {
    Subject.GPU: _GPU,
    Subject.PROCESS: (*_GPU, "pid", "user", "command"),
    Subject.XID: (*_GPU, "xid", "xid_meaning", "xid_action"),
    Subject.EXPORTER: ("host", "job"),
    Subject.HOST: ("host", "reason"),
}
PLACEHOLDERS: dict[str, str] = {
    "host": "the host's name (in Prometheus: the host label, else the scrape target)",
    "gpu": "the GPU's index on its host",
    "model": "the GPU's model name",
    "uuid": "the GPU's UUID",
    "pid": "the process id",
    "user": "the process's user",
    "command": "the process's command line (cut short)",
    "xid": "the Xid number",
    "xid_meaning": "what the Xid means (nvtopy.health.xid)",
    "xid_action": "what to do about the Xid (nvtopy.health.xid)",
    "job": "Prometheus's scrape job",
    "reason": "why a fleet view cannot read the host: its own words (ssh's, the exporter's, the server's), cut short",
    "value": "the figure the rule compares, in the rule's value_unit",
}
"""Every placeholder a template may use, and what it is; a rule's thresholds are placeholders too."""


def placeholders(template: str) -> set[str]:
    """The ``{names}`` a template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _t(name: str, value: float, unit: str, help_: str) -> Threshold:
    return Threshold(name, value, unit, help_)


_W, _C = AlertSeverity.WARNING, AlertSeverity.CRITICAL
_MIN, _HOUR = 60.0, 3600.0

CATALOG: tuple[AlertRule, ...] = (
    AlertRule(
        "gpu-xid",
        "NvtopyGpuXid",
        "Xid error",
        _C,
        Subject.XID,
        "Xid {xid} on GPU {gpu} of {host}: {xid_meaning}",
        "The driver reported Xid {xid} ({xid_meaning}) on GPU {gpu} ({model}, {uuid}) of {host}.",
        "{xid_action}.",
        for_s=0.0,
        thresholds=(_t("window_s", 10 * _MIN, "s", "an Xid is alerted on for this long after it came"),),
    ),
    AlertRule(
        "gpu-remap-pending",
        "NvtopyGpuRemapPending",
        "memory row remapping pending",
        _W,
        Subject.GPU,
        "GPU {gpu} of {host} needs a reset: a memory row remapping is pending",
        "An uncorrectable memory error was found on GPU {gpu} ({model}, {uuid}) of {host}; the spare row "
        "that replaces the bad one is used only after the GPU is reset.",
        "Drain the GPU's jobs, then reset it (nvidia-smi -r -i {gpu}) or reboot the node.",
        for_s=0.0,
    ),
    AlertRule(
        "gpu-remap-failed",
        "NvtopyGpuRemapFailed",
        "memory row remapping failed",
        _C,
        Subject.GPU,
        "GPU {gpu} of {host} has a bad memory row it could not remap",
        "GPU {gpu} ({model}, {uuid}) of {host} found an uncorrectable memory error and had no spare row "
        "left to replace it: the bad memory stays in use.",
        "Drain the node and take the GPU out of service; contact your vendor: the board may need replacing.",
        for_s=0.0,
    ),
    AlertRule(
        "gpu-not-responding",
        "NvtopyGpuNotResponding",
        "GPU not responding",
        _C,
        Subject.GPU,
        "GPU {gpu} of {host} does not respond: a driver call has hung for {value}",
        "A driver call to GPU {gpu} ({model}, {uuid}) of {host} has not returned: the GPU or its driver hangs, "
        "and its figures are stale.",
        "Look for Xids in the kernel log (dmesg); if it persists, drain the node and reset the GPU or reboot.",
        for_s=1 * _MIN,
        value_unit=ValueUnit.SECONDS,
    ),
    AlertRule(
        "gpu-lost",
        "NvtopyGpuLost",
        "GPU lost",
        _C,
        Subject.GPU,
        "GPU {gpu} of {host} fell off the bus",
        "The driver lost GPU {gpu} ({model}, {uuid}) of {host} (GPU is lost, as after Xid 79): nothing runs on it.",
        "Drain the node and reboot it; if it happens again, check the GPU's power, cooling and slot.",
        for_s=0.0,
    ),
    AlertRule(
        "gpu-idle-held",
        "NvtopyGpuIdleHeld",
        "GPU memory idle-held",
        _W,
        Subject.PROCESS,
        "Process {pid} of {user} has held GPU {gpu} of {host} without computing for {value}",
        "Process {pid} ({command}) of {user} holds memory on GPU {gpu} of {host} while computing nothing "
        "(about 0 % SM) for at least {idle_minutes} minutes: a forgotten notebook or a finished job.",
        "Ask {user} to free the GPU (end the process or release its memory).",
        for_s=0.0,
        thresholds=(_t("idle_minutes", 30.0, "min", "how long a process holds memory at ~0 % SM"),),
        value_unit=ValueUnit.SECONDS,
    ),
    AlertRule(
        "gpu-suspected-hang",
        "NvtopyGpuSuspectedHang",
        "suspected hang",
        _W,
        Subject.GPU,
        "GPU {gpu} of {host} looks busy but computes nothing, for {value}",
        "GPU {gpu} ({model}, {uuid}) of {host} is at full utilisation with its SMs idle (without GPM: at low "
        "power): what a deadlocked collective (NCCL) or a spinning kernel looks like.",
        "Check the job's logs; if it makes no progress, end it and restart from its last checkpoint.",
        for_s=0.0,
        value_unit=ValueUnit.SECONDS,
    ),
    AlertRule(
        "gpu-temperature-near-slowdown",
        "NvtopyGpuTemperatureNearSlowdown",
        "temperature near slowdown",
        _W,
        Subject.GPU,
        "GPU {gpu} of {host} is at {value} °C, within {margin_c} °C of its slowdown temperature",
        "GPU {gpu} ({model}, {uuid}) of {host} is close to the temperature at which it slows its clocks down "
        "(that model's own threshold, not a fixed number).",
        "Check the node's cooling: fans, air flow, inlet temperature, blocked or failed fans.",
        for_s=5 * _MIN,
        thresholds=(_t("margin_c", 5.0, "°C", "fire within this many degrees of the GPU's slowdown threshold"),),
        value_unit=ValueUnit.CELSIUS,
    ),
    AlertRule(
        "gpu-power-capped",
        "NvtopyGpuPowerCapped",
        "held at the power limit",
        _W,
        Subject.GPU,
        "GPU {gpu} of {host} runs slower: it is held at its power limit",
        "GPU {gpu} ({model}, {uuid}) of {host} lowers its clocks to stay under its power limit (software power "
        "cap) or because the system asked it to brake (power brake): its jobs run slower than they could.",
        "If its power limit was lowered (nvidia-smi -q -d POWER), raise it back; a power brake points at the "
        "node's power supply.",
        for_s=15 * _MIN,
    ),
    AlertRule(
        "gpu-health-worse",
        "NvtopyGpuHealthWorse",
        "health verdict worse",
        _C,
        Subject.GPU,
        "GPU {gpu} of {host} is unhealthy: health verdict {value} (1 WARN, 2 FAIL)",
        "nvtopy's health verdict of GPU {gpu} ({model}, {uuid}) of {host} is at least {verdict_rank} "
        "(1 WARN, 2 FAIL: an Xid that needs a reset, uncorrectable ECC errors, a failed remapping, a lost GPU...).",
        "Run nvtopy doctor (or nvtopy --once) on {host} to see why, and follow its fix.",
        for_s=1 * _MIN,
        value_unit=ValueUnit.COUNT,
        thresholds=(
            _t("verdict_rank", float(Severity.FAIL.rank), "rank", "fire at this verdict or worse: 1 WARN, 2 FAIL"),
        ),
    ),
    AlertRule(
        "gpu-free",
        "NvtopyGpuFree",
        "GPU free",
        _W,
        Subject.GPU,
        "GPU {gpu} of {host} is free",
        "GPU {gpu} ({model}) of {host} has no processes and under {memory_mib} MiB of its memory used.",
        "Start your job on it (CUDA_VISIBLE_DEVICES={gpu}).",
        for_s=30.0,
        thresholds=(_t("memory_mib", 512.0, "MiB", "at most this much memory used counts as free"),),
        fleet=False,  # a fleet's scheduler hands out GPUs; this is for someone waiting at one machine
    ),
    AlertRule(
        "process-ended",
        "NvtopyProcessEnded",
        "process ended",
        _W,
        Subject.PROCESS,
        "Process {pid} ({command}) on GPU {gpu} of {host} ended",
        "Process {pid} of {user} ({command}) no longer runs on GPU {gpu} of {host}.",
        "Look at its output.",
        for_s=0.0,
        fleet=False,  # "my job finished": for its owner at one machine
    ),
    AlertRule(
        "host-unreachable",
        "NvtopyHostUnreachable",
        "host unreachable",
        _C,
        Subject.HOST,
        "{host} cannot be read: {reason}",
        "A fleet view (--ssh, --remote, --prometheus) cannot read {host} ({reason}): its GPUs' figures and alerts "
        "are missing, whatever their state. This says nothing about its GPUs: a host that cannot be read is not "
        "a GPU that fell off the bus.",
        "Check that {host} is up and reachable from here (with --ssh: ssh {host} true), and that nvtopy, its "
        "exporter or nvidia-smi runs there.",
        for_s=2 * _MIN,
        fleet=False,  # a fleet's Prometheus says it as exporter-down (up == 0)
    ),
    AlertRule(
        "exporter-down",
        "NvtopyExporterDown",
        "exporter down",
        _C,
        Subject.EXPORTER,
        "Prometheus cannot scrape {host} (job {job})",
        "The GPU exporter on {host} does not answer Prometheus's scrapes: its GPUs' figures and alerts are "
        "missing, whatever their state.",
        "Check that the node is up and the exporter runs (systemctl status, its log); then the network between.",
        for_s=2 * _MIN,
        local=False,
    ),
    AlertRule(
        "exporter-stale",
        "NvtopyExporterStale",
        "exporter stale",
        _W,
        Subject.EXPORTER,
        "The GPU exporter on {host} serves old figures",
        "The exporter on {host} answers, but no GPU answered it recently (a driver that hangs on every GPU): "
        "what it serves is stale.",
        "Look for Xids and hung tasks in the node's kernel log (dmesg); drain the node and reboot if the driver hangs.",
        for_s=1 * _MIN,
        local=False,
    ),
)
"""Every rule, in the order ``nvtopy rules`` writes them and a list shows them."""

RULES_BY_ID: dict[str, AlertRule] = {r.id: r for r in CATALOG}


def rule(rule_id: str) -> AlertRule:
    """The rule named ``rule_id``; KeyError for one that does not exist."""
    return RULES_BY_ID[rule_id]


def with_overrides(
    base: AlertRule, *, for_s: float | None = None, thresholds: Mapping[str, float] | None = None
) -> AlertRule:
    """``base`` with another ``for`` and other threshold values (a config file's, a command line's).

    A threshold the rule does not have is a KeyError (a caller turns it into a usage error); a
    value that is not a finite, non-negative number is a ValueError: an alert rule never runs on NaN.
    """
    changes = dict(thresholds or {})
    for name, value in [("for", for_s), *changes.items()]:
        if value is not None and not (value >= 0 and value != float("inf")):  # False for NaN
            raise ValueError(f"{base.id}: {name} must be a finite number >= 0, not {value!r}")
    unknown = set(changes) - {t.name for t in base.thresholds}
    if unknown:
        raise KeyError(f"{base.id} has no threshold {sorted(unknown)[0]!r}")
    updated = tuple(replace(t, value=float(changes[t.name])) if t.name in changes else t for t in base.thresholds)
    return replace(base, for_s=base.for_s if for_s is None else float(for_s), thresholds=updated)


_SEVERITY_OF = {Severity.OK: AlertSeverity.WARNING, Severity.WARN: AlertSeverity.WARNING, Severity.FAIL: _C}


def xid_severity(xid: int) -> AlertSeverity:
    """An Xid's alert severity, from :mod:`nvtopy.health.xid`: critical when it needs a reset or a reboot."""
    return _SEVERITY_OF[describe_xid(xid).severity]


def critical_xids() -> tuple[int, ...]:
    """The catalogued Xids whose alert is critical, ascending (an unknown Xid is a warning)."""
    return tuple(sorted(x for x in XID_CATALOGUE if xid_severity(x) is AlertSeverity.CRITICAL))


def format_value(unit: ValueUnit, value: float) -> str:
    """``{value}`` in words, as Prometheus's templates write it (``printf "%.0f"``, ``humanizeDuration``).

    So an alert on one machine and the same alert from Prometheus read alike. A figure that is not
    finite is ``N/A``, never a number.
    """
    if not math.isfinite(value):
        return "N/A"
    if unit is ValueUnit.SECONDS:
        return _duration_words(value)
    return f"{value:.0f}"


def _duration_words(seconds: float) -> str:
    """Prometheus's ``humanizeDuration``: ``1h 5m 0s``, ``40m 0s``, ``30s``, ``250ms``."""
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{sign}{seconds * 1000:.4g}ms"
    whole = int(seconds)
    days, hours, minutes, secs = whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60
    if days:
        return f"{sign}{days}d {hours}h {minutes}m {secs}s"
    if hours:
        return f"{sign}{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{sign}{minutes}m {secs}s"
    return f"{sign}{seconds:.4g}s"

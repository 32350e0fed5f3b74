"""The alert catalog as a Prometheus rule file: PromQL over the exporter's series, Go templates, YAML.

What each rule *means* is :mod:`nvtopy.alerts.catalog`'s; this module says how Prometheus
evaluates it on the series ``nvtopy exporter`` serves (:mod:`.series`, :mod:`nvtopy.formats.dcgm`),
under a :class:`~nvtopy.formats.dcgm_naming.Naming`: a rule on a renamed dcgm field uses the name
the exporter writes (``DCGM_FI_DEV_ROW_REMAP_FAILED`` under dcgm-4.9), and ``{host}`` reads the
naming's host label (``Hostname`` or ``hostname``), the scrape target where a series has none.

Xid: PromQL cannot look a meaning up in a table, and an alert's labels must say how bad it is,
so ``gpu-xid`` becomes two rules with one alert name, ``NvtopyGpuXid``: the Xids
:mod:`nvtopy.health.xid` calls failures (a reset, a reboot or a support case) with
``severity="critical"``, every other Xid with ``severity="warning"`` -- Alertmanager routes
them apart with no regex of its own. The meaning and the action are written into the
annotations by a Go template ``if``-chain generated from the same catalogue (one home: a
new entry there is a new branch here). Each Xid is read from ``nvtopy_xid_events_total{xid}``
(a counter per Xid; a series that first appears counts too), and from dcgm-exporter's
``DCGM_FI_DEV_XID_ERRORS{err_code}`` (the last Xid, labelled with it since dcgm-exporter 3.3.6:
a series new in the window) for GPUs
that no nvtopy exporter serves, so a fleet with both exporters gets each Xid once.

YAML without a YAML library: every string is written double-quoted with JSON's escapes (a
subset of YAML's double-quoted ones) and keys plain, in block style -- readable, and parsed
the same by every YAML reader (promtool's included).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...alerts.catalog import (
    CATALOG,
    AlertRule,
    AlertSeverity,
    Subject,
    ValueUnit,
    critical_xids,
    placeholders,
)
from ...health.xid import XID_CATALOGUE
from ..dcgm_naming import Naming

__all__ = [
    "DEFAULT_JOB",
    "GROUP_EXPORTER",
    "GROUP_GPU",
    "alerting_rules",
    "format_duration",
    "go_template",
    "parse_duration",
    "rule_file",
    "rule_file_text",
    "yaml_text",
]

DEFAULT_JOB = "nvtopy"
"""The scrape job ``up`` is watched in (the README's example for ``nvtopy rules`` names it so); ``--job`` changes it."""
GROUP_GPU = "nvtopy-gpu"
GROUP_EXPORTER = "nvtopy-exporter"
RUNBOOK = "nvtopy README, section 'Alerts for a fleet: nvtopy rules'"

# ---- durations -------------------------------------------------------------------------------------

_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?")
MAX_DURATION_S = 7 * 24 * 3600.0
"""A ``for`` longer than a week is a mistake, not a rule (Prometheus forgets pending alerts on restart)."""


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``1h30m``, ``500ms`` or plain seconds (``90``, ``0.5``) -> seconds; ValueError if not.

    Bounded: negative, not finite or over :data:`MAX_DURATION_S` is an error, not a rule that never fires.
    """
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        found = _DURATION.fullmatch(text)
        if not text or found is None or not any(found.groups()):
            raise ValueError(f"not a duration: {text[:40]!r} (e.g. 30s, 5m, 1h)") from None
        hours, minutes, secs, millis = (int(group or 0) for group in found.groups())
        seconds = hours * 3600.0 + minutes * 60.0 + secs + millis / 1000.0
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_DURATION_S):
        raise ValueError(f"a duration must be from 0 to {MAX_DURATION_S / 86400:g} days, not {text[:40]!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds as Prometheus writes a duration: ``0s``, ``90s``, ``5m``, ``2h``, ``1500ms``."""
    millis = round(seconds * 1000)
    if millis % 1000:
        return f"{millis}ms"
    whole = millis // 1000
    if whole and whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole and whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


# ---- templates -------------------------------------------------------------------------------------

_VALUE = {
    ValueUnit.CELSIUS: '{{ printf "%.0f" $value }}',
    ValueUnit.SECONDS: "{{ humanizeDuration $value }}",
    ValueUnit.COUNT: '{{ printf "%.0f" $value }}',
}


def _xid_chain(attribute: str, unknown: str, xids: Sequence[int]) -> str:
    """A Go template that writes the catalogue's ``attribute`` (meaning, action) of ``$labels.xid``, one of ``xids``."""
    branches = [
        f'{{{{ {"if" if i == 0 else "else if"} eq $labels.xid "{xid}" }}}}{getattr(XID_CATALOGUE[xid], attribute)}'
        for i, xid in enumerate(xids)
    ]
    return "".join(branches) + f"{{{{ else }}}}{unknown}{{{{ end }}}}"


def _label(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def go_template(template: str, rule: AlertRule, naming: Naming, xids: Sequence[int] = ()) -> str:
    """A catalog template (``{gpu}``...) as Prometheus's Go template for this rule under ``naming``.

    ``xids``: the catalogued Xids an alert of this rule can carry (``{xid_meaning}`` branches on them).
    """
    host = f"{{{{ with $labels.{naming.host_label} }}}}{{{{ . }}}}{{{{ else }}}}{{{{ $labels.instance }}}}{{{{ end }}}}"
    fills: dict[str, str] = {
        "host": host,
        "gpu": _label("gpu"),
        "model": _label("modelName"),
        "uuid": _label("UUID"),
        "pid": _label("pid"),
        "user": _label("user"),
        "command": _label("command"),
        "xid": _label("xid"),
        "xid_meaning": _xid_chain("meaning", "unknown Xid", xids),
        "xid_action": _xid_chain("action", "look it up in NVIDIA's Xid catalogue", xids),
        "job": _label("job"),
        **rule.threshold_values,
    }
    if rule.value_unit is not ValueUnit.NONE:
        fills["value"] = _VALUE[rule.value_unit]
    unknown = placeholders(template) - set(fills)
    if unknown:
        raise KeyError(f"{rule.id}: no Prometheus value for {sorted(unknown)}")
    if "{{" in template or "}}" in template:
        raise ValueError(f"{rule.id}: a template holds Go template braces")
    return template.format_map(fills)


# ---- expressions -----------------------------------------------------------------------------------


def _xid_expressions(rule: AlertRule, naming: Naming) -> list[tuple[str, AlertSeverity, tuple[int, ...]]]:
    """``gpu-xid``: (expression, severity, catalogued Xids) for the critical Xids, then for every other Xid."""
    window = format_duration(rule.threshold("window_s"))
    critical_ones = critical_xids()
    others = tuple(sorted(set(XID_CATALOGUE) - set(critical_ones)))
    critical = "|".join(str(x) for x in critical_ones)
    dcgm = naming.name("DCGM_FI_DEV_XID_ERRORS")
    out = []
    for severity, op, xids in ((AlertSeverity.CRITICAL, "=~", critical_ones), (AlertSeverity.WARNING, "!~", others)):
        counted = f'nvtopy_xid_events_total{{xid{op}"{critical}"}}'
        last = f'{dcgm}{{err_code!="",err_code!="0",err_code{op}"{critical}"}}'
        out.append(
            (
                # a count that grew in the window, or a series (an Xid number) new in it
                f"(increase({counted}[{window}]) > 0 or ({counted} unless {counted} offset {window}))"
                # dcgm-exporter's GPUs only: its last Xid became this one in the window (err_code labels
                # the series, so a new Xid is a new series)
                f' or (label_replace({last} unless {last} offset {window}, "xid", "$1", "err_code", "(.*)")'
                " unless on(UUID) nvtopy_gpu_health)",
                severity,
                xids,
            )
        )
    return out


def _expressions(rule: AlertRule, naming: Naming, job: str) -> list[tuple[str, AlertSeverity, tuple[int, ...]]]:
    """The PromQL of ``rule`` under ``naming``: (expression, severity, Xids named) per Prometheus rule."""
    n = naming.name
    job_matcher = f"job=~{json.dumps(job)}"
    t = rule.threshold
    throttle = n("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
    one: dict[str, Callable[[], str]] = {
        "gpu-remap-pending": lambda: f"{n('DCGM_FI_DEV_ROW_REMAP_PENDING')} == 1",
        "gpu-remap-failed": lambda: f"{n('DCGM_FI_DEV_ROW_REMAP_FAILURE')} == 1",
        "gpu-not-responding": lambda: (
            "(nvtopy_gpu_stalled_seconds and nvtopy_gpu_responding == 0) or nvtopy_gpu_responding == 0"
        ),
        "gpu-lost": lambda: "nvtopy_gpu_lost == 1",
        "gpu-idle-held": lambda: f"nvtopy_process_idle_held_seconds >= {t('idle_minutes') * 60:g}",
        "gpu-suspected-hang": lambda: "nvtopy_gpu_suspected_hang_seconds > 0",
        "gpu-temperature-near-slowdown": lambda: (
            f"{n('DCGM_FI_DEV_GPU_TEMP')} >= {n('DCGM_FI_DEV_SLOWDOWN_TEMP')} - {t('margin_c'):g}"
        ),
        # NVML's clock-event bits: 0x4 software power cap, 0x80 hardware power brake (PromQL has no bit operators)
        "gpu-power-capped": lambda: f"floor({throttle} / 4) % 2 == 1 or floor({throttle} / 128) % 2 == 1",
        "gpu-health-worse": lambda: f"nvtopy_gpu_health >= {t('verdict_rank'):g}",
        "exporter-down": lambda: f"up{{{job_matcher}}} == 0",
        "exporter-stale": lambda: f"nvtopy_exporter_ready{{{job_matcher}}} == 0",
    }
    if rule.id == "gpu-xid":
        return _xid_expressions(rule, naming)
    if rule.id not in one:
        raise KeyError(f"{rule.id}: no PromQL for this rule")
    return [(one[rule.id](), rule.severity, ())]


def alerting_rules(
    rules: Sequence[AlertRule], naming: Naming, *, job: str = DEFAULT_JOB, runbook_url: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``rules`` (those for a fleet) as Prometheus alerting rules, by group: GPU rules, exporter rules."""
    groups: dict[str, list[dict[str, Any]]] = {GROUP_GPU: [], GROUP_EXPORTER: []}
    for rule in rules:
        if not rule.fleet:
            continue
        group = GROUP_EXPORTER if rule.subject is Subject.EXPORTER else GROUP_GPU
        for expr, severity, xids in _expressions(rule, naming, job):
            annotations = {
                "summary": go_template(rule.summary, rule, naming, xids),
                "description": go_template(f"{rule.description} What to do: {rule.action}", rule, naming, xids),
                "action": go_template(rule.action, rule, naming, xids),
            }
            if runbook_url:
                annotations["runbook_url"] = f"{runbook_url}#{rule.id}"
            else:
                annotations["runbook"] = f"{RUNBOOK}: {rule.alert} ({rule.id})"
            groups[group].append(
                {
                    "alert": rule.alert,
                    "expr": expr,
                    "for": format_duration(rule.for_s),
                    "labels": {"severity": severity.value, "nvtopy_rule": rule.id},
                    "annotations": annotations,
                }
            )
    return groups


def rule_file(
    naming: Naming,
    rules: Sequence[AlertRule] = CATALOG,
    *,
    job: str = DEFAULT_JOB,
    runbook_url: str | None = None,
    evaluation_interval: float | None = None,
) -> dict[str, Any]:
    """A rule file's content (``groups: [...]``): what promtool and Prometheus read."""
    groups = []
    for name, entries in alerting_rules(rules, naming, job=job, runbook_url=runbook_url).items():
        if not entries:
            continue
        group: dict[str, Any] = {"name": name}
        if evaluation_interval is not None:
            group["interval"] = format_duration(evaluation_interval)
        group["rules"] = entries
        groups.append(group)
    return {"groups": groups}


def rule_file_text(naming: Naming, rules: Sequence[AlertRule] = CATALOG, *, header: str = "", **options: Any) -> str:
    """The rule file as YAML, with ``header`` as comment lines on top."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comments + yaml_text(rule_file(naming, rules, **options))


# ---- YAML ------------------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}  # keys another YAML would read as values
# YAML's printable characters (1.2, 5.1) that JSON leaves raw with ensure_ascii=False; anything else is escaped.
_NOT_PRINTABLE = re.compile("[\x7f-\x84\x86-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"no YAML for {value!r}")
        return repr(value)
    if isinstance(value, str):
        quoted = json.dumps(value, ensure_ascii=False)
        return json.dumps(value) if _NOT_PRINTABLE.search(quoted) else quoted
    raise TypeError(f"no YAML for {type(value).__name__}")


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a YAML key must be text, not {type(key).__name__}")
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _YAML_WORDS else _scalar(key)


def _lines(value: object, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return [pad + "{}"]
        out = []
        for key, item in value.items():
            if isinstance(item, (Mapping, list, tuple)) and item:
                out.append(f"{pad}{_key(key)}:")
                out += _lines(item, indent + 2)
            else:
                out.append(f"{pad}{_key(key)}: {_lines(item, 0)[0]}")
        return out
    if isinstance(value, (list, tuple)):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            inner = _lines(item, indent + 2)
            out.append(f"{pad}- {inner[0].lstrip()}")
            out += inner[1:]
        return out
    return [pad + _scalar(value)]


def yaml_text(value: object) -> str:
    """``value`` (mappings with text keys, lists, text, numbers, booleans) as block-style YAML.

    Strings are always double-quoted (JSON's escapes are YAML's too), so no word is read as
    another type (``no``, ``1e3``, ``null``) and no character needs YAML's rules to be known.
    """
    return "\n".join(_lines(value, 0)) + "\n"

"""``nvtopy rules``: Prometheus alerting rules for the exporter's series, on stdout.

The rules are :mod:`nvtopy.alerts.catalog`'s (what each alert means and what to do), written by
:mod:`nvtopy.formats.prometheus.rules` under the naming the exporters speak (``--names``, as
``nvtopy exporter --names``): a rule must query the names the exporter writes. ``--for`` and
``--threshold`` change a rule's numbers without editing the file (``--for 0s`` for a test
Prometheus, ``--threshold gpu-idle-held.idle_minutes=60`` for a patient team); ``--list`` says
which rules there are. Reads no GPU: it only writes text, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import re

from .._version import __version__
from ..alerts.catalog import CATALOG, RULES_BY_ID, AlertRule, with_overrides
from ..errors import UsageError, unknown_name
from ..formats.dcgm_naming import DEFAULT_NAMING, NAMINGS
from ..formats.prometheus.rules import DEFAULT_JOB, format_duration, parse_duration, rule_file_text
from . import options

__all__ = ["build_parser", "run"]

MAX_OVERRIDES = 64
"""--for and --threshold values taken at most: more is a script gone wrong, not a rule file."""


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(
        command, "Print Prometheus alerting rules (YAML) for nvtopy's exporter: load them into Prometheus."
    )
    parser.add_argument(
        "--names",
        choices=tuple(NAMINGS),
        default=DEFAULT_NAMING,
        metavar="|".join(NAMINGS),
        help=f"the metric names the exporters serve, as 'nvtopy exporter --names' (default {DEFAULT_NAMING})",
    )
    parser.add_argument(
        "--job",
        default=DEFAULT_JOB,
        metavar="REGEX",
        help=f"the scrape job(s) of the exporters, for exporter-down and exporter-stale (default {DEFAULT_JOB})",
    )
    parser.add_argument(
        "--for",
        dest="for_",
        action="append",
        default=[],
        metavar="[RULE=]DURATION",
        help="how long a condition must hold before it fires: every rule's (--for 0s), or one rule's "
        "(--for gpu-not-responding=5m); repeatable",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="RULE.NAME=VALUE",
        help="a rule's threshold, e.g. gpu-temperature-near-slowdown.margin_c=3 (--list names them); repeatable",
    )
    parser.add_argument(
        "--evaluation-interval",
        metavar="DURATION",
        help="the rule groups' own evaluation interval (default: Prometheus's global one)",
    )
    parser.add_argument("--runbook-url", metavar="URL", help="link each alert to URL#RULE (annotation runbook_url)")
    parser.add_argument("--list", action="store_true", help="list the rules, their defaults and thresholds; no YAML")
    return parser


def _duration(option: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _rule_id(option: str, name: str) -> str:
    if name not in RULES_BY_ID:
        raise unknown_name(option, "rule", name, list(RULES_BY_ID))
    return name


def _overridden(args: argparse.Namespace) -> list[AlertRule]:
    """The catalog with --for and --threshold applied; a bad one is a UsageError naming it."""
    if len(args.for_) + len(args.threshold) > MAX_OVERRIDES:
        raise UsageError(f"--for and --threshold: at most {MAX_OVERRIDES} in all")
    every_for: float | None = None
    fors: dict[str, float] = {}
    for value in args.for_:
        name, sep, duration = value.rpartition("=")
        if sep:
            fors[_rule_id("--for", name)] = _duration("--for", duration)
        else:
            every_for = _duration("--for", value)
    thresholds: dict[str, dict[str, float]] = {}
    for value in args.threshold:
        target, sep, number = value.partition("=")
        rule_id, dot, key = target.partition(".")
        if not (sep and dot and key):
            raise UsageError(f"--threshold: give RULE.NAME=VALUE, e.g. gpu-idle-held.idle_minutes=60, not {value!r}")
        known = RULES_BY_ID.get(_rule_id("--threshold", rule_id))
        assert known is not None
        if key not in {t.name for t in known.thresholds}:
            names = [t.name for t in known.thresholds]
            raise (
                unknown_name("--threshold", f"threshold of {rule_id}", key, names)
                if names
                else UsageError(f"--threshold: {rule_id} has no thresholds")
            )
        try:
            thresholds.setdefault(rule_id, {})[key] = float(number)
        except ValueError:
            raise UsageError(f"--threshold: {target} must be a number, not {number[:40]!r}") from None
    out = []
    for rule in CATALOG:
        for_s = fors.get(rule.id, every_for)
        try:
            out.append(with_overrides(rule, for_s=for_s, thresholds=thresholds.get(rule.id)))
        except ValueError as exc:
            raise UsageError(f"--threshold: {exc}") from None
    return out


def _listing(rules: list[AlertRule]) -> str:
    lines = []
    for rule in rules:
        where = "+".join(w for w, on in (("fleet", rule.fleet), ("local", rule.local)) if on)
        for_ = format_duration(rule.for_s)
        lines.append(f"{rule.id:<30} {rule.alert:<33} {rule.severity.value:<8} for {for_:<5} {where}")
        for t in rule.thresholds:
            lines.append(f"    {rule.id}.{t.name}={t.value:g} ({t.unit}): {t.help}")
    return "\n".join(lines) + "\n"


def run(command: str, args: argparse.Namespace) -> int:
    """The rule file (or, with --list, the rules) on stdout."""
    rules = _overridden(args)
    try:
        re.compile(args.job)
    except re.error as exc:
        raise UsageError(f"--job: not a regular expression: {exc}") from None
    if args.list:
        options.write_utf8(_listing(rules))
        return 0
    interval = None
    if args.evaluation_interval is not None:
        interval = _duration("--evaluation-interval", args.evaluation_interval)
    if interval == 0:
        raise UsageError("--evaluation-interval must be more than 0")
    header = (
        f"Prometheus alerting rules for nvtopy's exporter (names: {args.names}), by nvtopy {__version__}.\n"
        f"Made with: nvtopy rules --names {args.names}. Load it with rule_files: in prometheus.yml;\n"
        "check it with: promtool check rules FILE. What each alert means: the README, 'Alerts for a fleet'."
    )
    text = rule_file_text(
        NAMINGS[args.names],
        rules,
        header=header,
        job=args.job,
        runbook_url=args.runbook_url,
        evaluation_interval=interval,
    )
    options.write_utf8(text)
    return 0

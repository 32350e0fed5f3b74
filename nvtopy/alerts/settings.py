"""The local alert rules as this user set them: the catalog's rules with the ``[alerts]`` table applied.

Why apart from :mod:`nvtopy.config`: the config module is core and cannot know the rules (they
live in :mod:`.catalog`, above it). So ``config.py`` only checks the table's *shape* and keeps
each rule's table as read (``Config.alerts_rules``), and this module checks what only the
catalog can say: that a rule exists and is a local one, that a threshold is one of its own,
that a number is a number. A bad entry is one line naming its key
(``alerts.gpu-free.memory_mib: must be a number >= 0 (not 'lots')``), raised as a
:class:`AlertConfigError`, a usage error: an alerting service that silently dropped a rule
the user configured would be worse than one that does not start.

A rule's table (``[alerts.RULE]``)::

    enabled = false              # the rule is not evaluated at all
    for = 60                     # seconds the condition must hold before it fires
    clear = 30                   # seconds it must be clear before a firing alert clears
    cooldown = 600               # least seconds between two firings of the same instance
    memory_mib = 1024            # a threshold of the rule, by its name (``nvtopy rules --list``)
    gpus = [0, "GPU-8f2c"]       # scope: these GPUs only (indices, UUIDs or UUID prefixes)
    users = ["alice"]            # scope: these users' processes (``"*"``: everyone's)
    owners = ["slurm 1234"]      # scope: processes of these owners (container, pod, Slurm job...)

Durations may also be written ``"90s"``, ``"5m"``, ``"1h"``. Names in ``users`` and ``owners``
may use shell wildcards (``"team-*"``). On a GPU rule, ``users`` and ``owners`` keep the GPU
in scope while one of its processes matches (``gpu-free`` has no processes, so it takes
neither). ``process-ended`` watches only the current user's processes unless ``users`` says
otherwise: on a shared machine, everyone's finished jobs would be noise.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError, unknown_name
from ..textsafe import quoted
from .catalog import CATALOG, RULES_BY_ID, AlertRule, with_overrides

__all__ = [
    "ANY",
    "LOCAL_RULES",
    "RULE_KEYS",
    "SCOPE_KEYS",
    "AlertConfigError",
    "AlertSettings",
    "RuleSettings",
    "alert_settings",
    "parse_duration_setting",
]

LOCAL_RULES: tuple[AlertRule, ...] = tuple(r for r in CATALOG if r.local)
"""The rules an engine on one machine evaluates, in the catalog's order."""

ANY = "*"
"""In ``users`` (or ``owners``): every user. ``process-ended``'s way out of "only mine"."""

RULE_KEYS = ("enabled", "for", "clear", "cooldown")
SCOPE_KEYS = ("gpus", "users", "owners")
MAX_SCOPE_ENTRIES = 1024
MAX_DURATION_S = 7 * 86400.0  # a week: longer is a typo (and keeps every sum of times finite)
_GPU_ONLY = ("gpu-free",)  # rules whose subject has no processes: users/owners cannot scope them
_HOST_RULES = ("host-unreachable",)  # about a host, not its GPUs or processes: nothing to scope them by


class AlertConfigError(UsageError):
    """A bad ``[alerts]`` entry: ``str()`` is one line naming the key."""


@dataclass(frozen=True, slots=True)
class RuleSettings:
    """One local rule as configured: the rule (its numbers overridden), whether it runs, and its scope.

    A scope of ``None`` is no restriction, except :attr:`users` of ``process-ended``, whose
    ``None`` means "the current user only" (see :meth:`watches_user`).
    """

    rule: AlertRule
    enabled: bool = True
    gpus: tuple[str, ...] | None = None  # indices as text, UUIDs, UUID prefixes
    users: tuple[str, ...] | None = None
    owners: tuple[str, ...] | None = None

    @property
    def id(self) -> str:
        return self.rule.id


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """Every local rule's settings (in the catalog's order), and the channels as written (parsed in notify/)."""

    rules: tuple[RuleSettings, ...] = tuple(RuleSettings(r) for r in LOCAL_RULES)
    channels: tuple[str, ...] = ()

    def get(self, rule_id: str) -> RuleSettings:
        """The settings of ``rule_id``; KeyError for a rule that is not a local one."""
        for settings in self.rules:
            if settings.id == rule_id:
                return settings
        raise KeyError(rule_id)

    def only(self, rule_id: str, **changes: Any) -> AlertSettings:
        """Just ``rule_id`` enabled, its rule changed by ``changes`` (``for_s``, ``clear_s``, ``cooldown_s``).

        What ``nvtopy watch --once-free`` evaluates: the user's gpu-free rule (threshold, scope), its own settle time.
        """
        rules = []
        for settings in self.rules:
            if settings.id == rule_id:
                rules.append(dataclasses.replace(settings, rule=dataclasses.replace(settings.rule, **changes)))
            else:
                rules.append(dataclasses.replace(settings, enabled=False))
        return dataclasses.replace(self, rules=tuple(rules))


def alert_settings(
    rules: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Any]] = (), channels: Sequence[str] = ()
) -> AlertSettings:
    """The local rules with the config's ``[alerts.RULE]`` tables applied; AlertConfigError naming a bad key.

    ``rules``: rule id -> its table, as :mod:`nvtopy.config` keeps them (nested (key, value) pairs are
    taken too). No table at all: the built-ins.
    """
    tables = {rule_id: _as_dict(table) for rule_id, table in _items(rules)}
    for rule_id in tables:
        if rule_id not in RULES_BY_ID:
            raise AlertConfigError(_unknown(f"alerts.{rule_id}", "rule", rule_id, [r.id for r in LOCAL_RULES]))
        if not RULES_BY_ID[rule_id].local:
            raise AlertConfigError(f"alerts.{rule_id}: a fleet-only rule (nvtopy rules); nothing evaluates it here")
    out = []
    for base in LOCAL_RULES:
        table = tables.get(base.id)
        out.append(RuleSettings(base) if table is None else _rule_settings(base, table))
    return AlertSettings(tuple(out), tuple(channels))


def _items(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    return [(str(k), v) for k, v in value]


def _as_dict(table: Any) -> dict[str, Any]:
    """A rule's table: a mapping, or the (key, value) pairs config.py froze it into (arrays as tuples)."""
    if isinstance(table, Mapping):
        return dict(table)
    if isinstance(table, tuple) and all(isinstance(i, tuple) and len(i) == 2 for i in table):
        return dict(table)
    raise AlertConfigError("alerts: each rule's entry must be a table ([alerts.gpu-free])")


def _rule_settings(base: AlertRule, table: Mapping[str, Any]) -> RuleSettings:
    where = f"alerts.{base.id}"
    names = [t.name for t in base.thresholds]
    thresholds: dict[str, float] = {}
    times: dict[str, float] = {}
    enabled = True
    scope: dict[str, tuple[str, ...]] = {}
    for key, value in table.items():
        at = f"{where}.{key}"
        if key == "enabled":
            if not isinstance(value, bool):
                raise AlertConfigError(f"{at}: must be true or false{_got(value)}")
            enabled = value
        elif key in ("for", "clear", "cooldown"):
            times[key] = _duration(at, value)
        elif key in SCOPE_KEYS:
            if base.id in _HOST_RULES:
                raise AlertConfigError(f"{at}: {base.id} is about hosts, not GPUs or processes: it takes no {key}")
            if key != "gpus" and base.id in _GPU_ONLY:
                raise AlertConfigError(f"{at}: {base.id} is about GPUs with no processes; scope it with gpus")
            scope[key] = _scope(at, key, value)
        elif key in names:
            number = _number(value)
            if number is None or number < 0 or number > 1e9:
                raise AlertConfigError(f"{at}: must be a number from 0 to 1e9{_got(value)}")
            thresholds[key] = number
        else:
            known = [*RULE_KEYS, *names, *SCOPE_KEYS]
            raise AlertConfigError(_unknown(at, "key", key, known))
    rule = with_overrides(base, for_s=times.get("for"), thresholds=thresholds)
    rule = dataclasses.replace(
        rule, clear_s=times.get("clear", rule.clear_s), cooldown_s=times.get("cooldown", rule.cooldown_s)
    )
    return RuleSettings(rule, enabled, scope.get("gpus"), scope.get("users"), scope.get("owners"))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration_setting(value: Any) -> float:
    """Seconds from a number (seconds) or text (``"90s"``, ``"5m"``, ``"1.5h"``, ``"250ms"``); ValueError otherwise."""
    number = _number(value)
    if number is None and isinstance(value, str) and len(value) <= 40:
        found = _DURATION.match(value)
        if found is not None:
            number = float(found.group(1)) * _UNIT_S[found.group(2)]
    if number is None or not 0 <= number <= MAX_DURATION_S:
        raise ValueError(f'must be seconds from 0 to {MAX_DURATION_S:.0f} (or "90s", "5m", "1h"){_got(value)}')
    return number


def _duration(at: str, value: Any) -> float:
    try:
        return parse_duration_setting(value)
    except ValueError as exc:
        raise AlertConfigError(f"{at}: {exc}") from None


def _scope(at: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str | int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or len(value) > MAX_SCOPE_ENTRIES:
        raise AlertConfigError(f"{at}: must be an array of at most {MAX_SCOPE_ENTRIES} names{_got(value)}")
    entries = []
    for item in value:
        if key == "gpus" and isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 1 << 20:
            entries.append(str(item))
        elif isinstance(item, str) and item.strip() and len(item) <= 256 and item.isprintable():
            entries.append(item.strip())
        else:
            what = "a GPU index or UUID" if key == "gpus" else "a name"
            raise AlertConfigError(f"{at}: each entry must be {what}{_got(item)}")
    return tuple(entries)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _got(value: Any) -> str:
    if isinstance(value, bool):
        return f" (not {'true' if value else 'false'})"
    if isinstance(value, str):
        return f" (not {quoted(value, 40)})"
    if isinstance(value, int | float):
        return f" (not {repr(value)[:40]})"
    return " (not an array)" if isinstance(value, list | tuple) else " (not a table)"


def _unknown(at: str, what: str, name: str, known: Sequence[str]) -> str:
    return str(unknown_name(at, what, name, known))

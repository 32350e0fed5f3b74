"""The user's preferences: ``config.toml`` in the XDG config directory, read, checked, printed, updated.

Where: ``$NVTOPY_CONFIG`` if set, else ``$XDG_CONFIG_HOME/nvtopy/config.toml``
(``~/.config/nvtopy/config.toml`` when ``XDG_CONFIG_HOME`` is unset or not an
absolute path, as the XDG spec says); ``nvtopy --config PATH`` wins over both.

What: :class:`Config` (every key, its default). Command-line flags win over
the file: the commands merge only the flags the user actually gave
(:meth:`Config.merged`). A file that cannot be read, is not TOML, or holds a
bad value is never fatal: :func:`load_config` returns the defaults -- for the
whole file, not only for the bad key, so a half-applied file never surprises --
and one warning line naming the file, the line and the key (``config.toml line
7: 'interval': must be a number from 0.1 to 86400; using defaults``). An
unknown key (a typo, or a key of a newer nvtopy) is ignored: the rest of the
file applies. However many problems a file has, they are **one** line (the
first few in full, then how many more): one warning on stderr, one notification
in the monitor, whatever the file holds.

Whatever the file is, reading it never stops nvtopy: only a regular file of at
most :data:`MAX_FILE_BYTES` is read (a FIFO, ``/dev/zero`` or a huge file is a
warning: :mod:`nvtopy.boundedfile`), TOML nested too deeply for the parser, or
an integer too long for Python or too large for a float, is a bad file or a bad
value like any other, and the work is linear in the file's size (each key's line
is looked up in an index made in one pass).

Why pure (no Textual, no rich, nothing but the standard library): every command
reads it (the health thresholds apply to ``log`` and the exporter too) and
``nvtopy --once --json`` must start fast. The names it checks against
(Textual's themes, the health defaults) are restated here and kept equal to
their owners by tests; the process table's columns are read from their one
list, :mod:`nvtopy.columns` (standard library and the model only).

The column chooser remembers its choice with :func:`save_columns`: it rewrites
the ``columns = [...]`` entry only (inserting it if missing) and keeps every
other line, comment included; it refuses to touch a file that is not valid TOML
and checks its own edit before writing it (atomically, beside the file).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .boundedfile import FileMissingError, FileRefusedError, read_bounded
from .columns import COLUMN_IDS
from .interval import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL, valid_interval
from .records import dataclass
from .textsafe import quoted

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CHART_WINDOWS",
    "COLORBLIND_THEME",
    "DEFAULT_EXPORTER_NAMES",
    "DEFAULT_THEME",
    "EXPORTER_NAMES",
    "GROUP_BY",
    "THEMES",
    "VIEWS",
    "Config",
    "ConfigWriteError",
    "config_path",
    "load_config",
    "parse_config",
    "parse_sort",
    "save_columns",
    "to_toml",
]

MAX_THRESHOLD = 1e6  # the health flags' range, as on the command line (options._positive)

VIEWS = ("auto", "full", "compact")
GROUP_BY = ("none", "user", "owner", "gpu", "host")
CHART_WINDOWS = ("1m", "10m", "1h", "24h")
SORT_DIRECTIONS = ("asc", "desc")
DEFAULT_THEME = "textual-dark"
COLORBLIND_THEME = "colorblind"
# Textual 8's built-in themes (tests/core/test_config.py keeps this equal to textual.theme.BUILTIN_THEMES), then ours.
TEXTUAL_THEMES = (
    "textual-dark",
    "textual-light",
    "nord",
    "gruvbox",
    "catppuccin-mocha",
    "dracula",
    "tokyo-night",
    "monokai",
    "flexoki",
    "catppuccin-latte",
    "catppuccin-frappe",
    "catppuccin-macchiato",
    "solarized-light",
    "solarized-dark",
    "rose-pine",
    "rose-pine-moon",
    "rose-pine-dawn",
    "atom-one-dark",
    "atom-one-light",
    "ansi-dark",
    "ansi-light",
)
THEMES = (*TEXTUAL_THEMES, COLORBLIND_THEME)
# [exporter] names: the metric namings ``nvtopy exporter`` writes (tests/core/test_config.py keeps these equal to
# nvtopy.formats.dcgm_naming.NAMINGS and DEFAULT_NAMING, their owner).
EXPORTER_NAMES = ("dcgm-legacy", "dcgm-4.9")
DEFAULT_EXPORTER_NAMES = "dcgm-legacy"

FILE_NAME = "config.toml"
ENV_PATH = "NVTOPY_CONFIG"
MAX_FILE_BYTES = 1 << 20  # a config file is a few hundred bytes; a larger one is not one
MAX_PROBLEMS_SHOWN = 5  # in the one warning line about a file; the rest are counted


@dataclass(frozen=True, slots=True)
class Config:
    """Every preference and its default. Health thresholds in the command line's units (minutes, GiB)."""

    interval: float = DEFAULT_INTERVAL  # seconds between refreshes of the monitor
    view: str = "auto"  # GPU panels: auto, full, compact
    columns: tuple[str, ...] = COLUMN_IDS  # the process table's columns, in order; those left out are hidden
    sort: str = "gpu"  # a column, optionally followed by " asc" or " desc" (default: the column's own direction)
    group_by: str = "none"  # none, user, owner, gpu, host
    theme: str = DEFAULT_THEME  # a Textual theme, or "colorblind"
    chart_window: str | None = None  # 1m, 10m, 1h, 24h; None: the monitor's own default
    idle_held_after: float = 10.0  # [health] minutes at ~0 % SM before a process holding memory is idle-held
    idle_held_memory: float = 1.0  # [health] GiB a process must hold to be idle-held
    hang_after: float = 5.0  # [health] minutes busy with idle SMs before a GPU is a suspected hang
    exporter_names: str = DEFAULT_EXPORTER_NAMES  # [exporter] names: the metric names nvtopy exporter writes
    exporter_self_metrics: bool = False  # [exporter] self_metrics: nvtopy exporter serves its own nvtopy_exporter_*
    ssh_program: str = "ssh"  # [ssh] program: the ssh client nvtopy --ssh runs (a wrapper, e.g. tsh ssh)
    ssh_config: str | None = None  # [ssh] config: its config file (ssh -F); None: the user's own
    ssh_options: tuple[str, ...] = ()  # [ssh] options: "Key=Value" options for it (ssh -o)
    ssh_remote_nvtopy: str | None = None  # [ssh] remote_nvtopy: nvtopy on the far hosts, when not on their PATH
    ssh_connect_timeout: float = 10.0  # [ssh] connect_timeout: seconds a host has to begin its stream
    ssh_groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # [ssh.groups] name = ["host", ...]: --ssh @name
    # [alerts.RULE] tables as read, frozen: (rule id, ((key, value), ...)), arrays as tuples. Only their shape is
    # checked here; nvtopy.alerts.settings checks rule ids, thresholds and scopes against the alert catalog.
    alerts_rules: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    # [alerts] channels: as written (nvtopy.notify parses them); None: not set (a command's own default, e.g.
    # nvtopy watch's desktop notifications), () set empty (none at all)
    alerts_channels: tuple[str, ...] | None = None

    def merged(self, **flags: Any) -> Config:
        """This config with the flags the user gave (a None value is a flag not given: the file's value stays)."""
        given = {name: value for name, value in flags.items() if value is not None}
        return dataclasses.replace(self, **given) if given else self

    @property
    def group_mode(self) -> str | None:
        """``group_by`` as the app names it: None for "none"."""
        return None if self.group_by == "none" else self.group_by


# key in the file -> (Config field, check). [health] keys are named "health.<key>", [exporter] keys "exporter.<key>".
TOP_LEVEL_KEYS = ("interval", "view", "columns", "sort", "group_by", "theme", "chart_window")
HEALTH_KEYS = ("idle_held_after", "idle_held_memory", "hang_after")
EXPORTER_KEYS = ("names", "self_metrics")  # [exporter] key -> Config field "exporter_<key>"
SSH_KEYS = ("program", "config", "options", "remote_nvtopy", "connect_timeout", "groups")  # -> "ssh_<key>"
MAX_SSH_GROUP_HOSTS = 1024  # hosts in one [ssh.groups] entry, as many as --ssh watches
MAX_ALERT_CHANNELS = 64  # [alerts] channels: more is a file gone wrong
MAX_ALERT_ENTRIES = 1024  # values in one [alerts.RULE] array (a scope's GPUs, users, owners)


class ConfigWriteError(Exception):
    """The column choice could not be written; ``str()`` is one line for the user."""


# ----------------------------------------------------------------- where


def config_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: ``$NVTOPY_CONFIG``, else the XDG one; None when there is no home to find it in."""
    from pathlib import Path  # not at the top: load_config needs only the name (--once never imports pathlib)

    where = _config_file(environ)
    return None if where is None else Path(where)


def _config_file(environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`config_path` as a string, with :mod:`os.path` (pathlib and what it imports cost ~5 ms)."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_PATH)
    if explicit:
        return os.path.expanduser(explicit)
    base = env.get("XDG_CONFIG_HOME", "")
    if base and os.path.isabs(base):
        return os.path.join(base, "nvtopy", FILE_NAME)
    home = env.get("HOME")
    if not home:
        home = os.path.expanduser("~")  # the passwd entry's home
        if home.startswith("~"):  # no HOME and no passwd entry: no config
            return None
    return os.path.join(home, ".config", "nvtopy", FILE_NAME)


# ----------------------------------------------------------------- reading


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Config, list[str]]:
    """The config of ``path`` (default :func:`config_path`), and warning lines (without ``nvtopy: warning:``).

    A missing default file is no warning (most users have none); a missing file
    named by ``--config`` or ``$NVTOPY_CONFIG`` is. Never raises for anything in
    or about the file.
    """
    env = os.environ if environ is None else environ
    explicit = path is not None or bool(env.get(ENV_PATH))
    where = os.path.expanduser(os.fspath(path)) if path is not None else _config_file(env)
    if where is None:
        return Config(), []
    try:
        data = read_bounded(where, MAX_FILE_BYTES)  # a FIFO, a device or a huge file: refused, never read
    except FileMissingError:
        return Config(), ([f"config file {where}: no such file; using defaults"] if explicit else [])
    except FileRefusedError as exc:
        return Config(), [f"config file {where}: {exc}; using defaults"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return Config(), [f"{where} line {line}: not UTF-8 text; using defaults"]
    return parse_config(text, str(where))


def _toml() -> Any:
    """tomllib (Python 3.11+); None on an older Python (the config file is then ignored, with a warning)."""
    try:
        return importlib.import_module("tomllib")  # by name: the type checker reads this as Python 3.10 too
    except ModuleNotFoundError:  # Python 3.10
        return None


# The patterns of this module are strings, compiled (and cached) by re at their first use: a run that reads
# no config file (most --once runs) compiles none of them.
_DECODE_POSITION = r"\s*\(at line (\d+), column (\d+)\)\s*$"


def parse_config(text: str, name: str = FILE_NAME) -> tuple[Config, list[str]]:
    """``text`` (a config file's contents; ``name`` for messages) checked: the config and at most one warning line.

    Any bad value: every default. Unknown keys: ignored. Every problem is in the one line (the first
    :data:`MAX_PROBLEMS_SHOWN` of them in full, by line), whatever the text holds.
    """
    toml = _toml()
    if toml is None:
        return Config(), [f"{name}: reading it needs Python 3.11 or newer; using defaults"]
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(_DECODE_POSITION, message)
        if found is not None:
            problem = message[: found.start()]
            where = f"{name} line {found.group(1)}"
            problem = f"{problem[:1].lower()}{problem[1:]} (column {found.group(2)})"
        else:  # "(at end of document)" and the like
            where, problem = name, message[:1].lower() + message[1:]
        return Config(), [f"{where}: not valid TOML: {problem}; using defaults"]
    except RecursionError:  # arrays or inline tables nested deeper than the parser recurses
        return Config(), [f"{name}: not valid TOML: nested too deeply; using defaults"]
    except ValueError as exc:  # an integer longer than Python converts (int_max_str_digits)
        problem = " ".join(str(exc).split(":")[0].split())[:80]
        return Config(), [f"{name}: not valid TOML: {problem[:1].lower()}{problem[1:]}; using defaults"]
    problems: list[_Problem] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        try:
            if key == "health":
                if not isinstance(value, dict):
                    raise _BadValueError("health", "must be a table ([health])")
                for sub, threshold in value.items():
                    if sub not in HEALTH_KEYS:
                        problems.append(_Problem(f"health.{sub}", None))
                        continue
                    unit = "GiB" if sub == "idle_held_memory" else "minutes"
                    try:
                        values[sub] = _check_threshold(f"health.{sub}", threshold, unit)
                    except _BadValueError as bad:
                        problems.append(_Problem(bad.key, bad.problem))
            elif key == "exporter":
                if not isinstance(value, dict):
                    raise _BadValueError("exporter", "must be a table ([exporter])")
                for sub, setting in value.items():
                    if sub not in EXPORTER_KEYS:
                        problems.append(_Problem(f"exporter.{sub}", None))
                        continue
                    try:
                        values[f"exporter_{sub}"] = _EXPORTER_CHECKS[sub](setting)
                    except _BadValueError as bad:
                        problems.append(_Problem(bad.key, bad.problem))
            elif key == "ssh":
                if not isinstance(value, dict):
                    raise _BadValueError("ssh", "must be a table ([ssh])")
                for sub, setting in value.items():
                    if sub not in SSH_KEYS:
                        problems.append(_Problem(f"ssh.{sub}", None))
                        continue
                    try:
                        values[f"ssh_{sub}"] = _SSH_CHECKS[sub](setting)
                    except _BadValueError as bad:
                        problems.append(_Problem(bad.key, bad.problem))
            elif key == "alerts":
                values.update(_check_alerts(value))
            elif key in TOP_LEVEL_KEYS:
                values[key] = _CHECKS[key](value)
            else:
                problems.append(_Problem(key, None))
        except _BadValueError as bad:
            problems.append(_Problem(bad.key, bad.problem))
    if not problems:
        return Config(**values), []
    any_bad = any(problem.problem is not None for problem in problems)
    return (Config() if any_bad else Config(**values)), [_one_line(name, text, problems, any_bad)]


@dataclass(frozen=True, slots=True)
class _Problem:
    """One key's problem: ``problem`` is what is wrong with its value; None for an unknown key (ignored)."""

    key: str
    problem: str | None


class _BadValueError(Exception):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


_KNOWN = f"known: {', '.join((*TOP_LEVEL_KEYS, 'health', 'exporter', 'ssh', 'alerts'))}"
_KNOWN_IN = {
    "health": f"known: {', '.join(HEALTH_KEYS)}",
    "exporter": f"known: {', '.join(EXPORTER_KEYS)}",
    "ssh": f"known: {', '.join(SSH_KEYS)}",
}


def _said(problem: _Problem, *, alone: bool) -> str:
    """A problem as the warning says it (without where); ``alone``: the file's only one, with the known keys."""
    if problem.problem is not None:
        return f"'{problem.key}': {problem.problem}"
    table, dot, _ = problem.key.partition(".")
    known = f" ({_KNOWN_IN.get(table, _KNOWN) if dot else _KNOWN})" if alone else ""
    return f"unknown key '{problem.key[:80]}' ignored{known}"


def _one_line(name: str, text: str, problems: list[_Problem], bad: bool) -> str:
    """Every problem of a file in one warning line, by line: the first few in full, then how many more."""
    lines = _KeyLines(text)
    located = sorted(
        ((lines.find(p.key), n, p) for n, p in enumerate(problems)),
        key=lambda item: (item[0] is None, item[0] or 0, item[1]),
    )
    tail = "; using defaults" if bad else ""
    if len(located) == 1:
        line, _, problem = located[0]
        where = name if line is None else f"{name} line {line}"
        return f"{where}: {_said(problem, alone=True)}{tail}"
    shown = [
        (f"line {line}: " if line is not None else "") + _said(problem, alone=False)
        for line, _, problem in located[:MAX_PROBLEMS_SHOWN]
    ]
    more = len(located) - len(shown)
    if more:
        shown.append(f"and {more} more")
    unknown = any(p.problem is None for p in problems)
    tables = (
        f"in [health]: {', '.join(HEALTH_KEYS)}; in [exporter]: {', '.join(EXPORTER_KEYS)}; "
        f"in [ssh]: {', '.join(SSH_KEYS)}; in [alerts]: channels and a table per rule"
    )
    known = f" ({_KNOWN}; {tables})" if unknown else ""
    return f"{name}: {len(located)} problems: {'; '.join(shown)}{known}{tail}"


def _number(value: Any) -> float | None:
    """A TOML integer or float as a float; None for anything else (a bool is no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float (1e309): outside every range
        return None
    return None if math.isnan(number) else number


def _check_interval(value: Any) -> float:
    number = _number(value)
    if number is None or not valid_interval(number):
        raise _BadValueError("interval", f"must be a number from {MIN_INTERVAL:g} to {MAX_INTERVAL:.0f} (seconds)")
    return number


def _check_threshold(key: str, value: Any, unit: str) -> float:
    number = _number(value)
    if number is None or not 0 <= number <= MAX_THRESHOLD:
        raise _BadValueError(key, f"must be a number of {unit} from 0 to {MAX_THRESHOLD:.0f}")
    return number


def _one_of(key: str, choices: Sequence[str]) -> Any:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise _BadValueError(key, f"must be one of {', '.join(choices)}" + _got(value))
        return value

    return check


def _flag(key: str) -> Any:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise _BadValueError(key, "must be true or false" + _got(value))
        return value

    return check


def _described(value: Any) -> str:
    """The bad value, short, for the message: ``'fast'`` (quoted as every outside text is), ``12``, ``an array``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quoted(value, 40)
    if isinstance(value, int | float):
        return repr(value)[:40]
    kinds: dict[type, str] = {list: "an array", dict: "a table"}
    return kinds.get(type(value), type(value).__name__)


def _got(value: Any) -> str:
    return f" (not {_described(value)})"


def _check_theme(value: Any) -> str:
    if not isinstance(value, str) or value not in THEMES:
        raise _BadValueError("theme", f"unknown theme {_described(value)} (known: {', '.join(THEMES)})")
    return value


def _check_columns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _BadValueError(
            "columns", f'must be a list of column names, e.g. ["pid", "gpu_memory", "command"]{_got(value)}'
        )
    if not value:
        raise _BadValueError("columns", "must name at least one column")
    seen: set[str] = set()
    for item in value:
        if item not in COLUMN_IDS:
            raise _BadValueError("columns", f"unknown column {item[:40]!r} (known: {', '.join(COLUMN_IDS)})")
        if item in seen:
            raise _BadValueError("columns", f"{item!r} is listed twice")
        seen.add(item)
    return tuple(value)


def parse_sort(text: str) -> tuple[str, bool | None]:
    """``"gpu_memory desc"`` -> ("gpu_memory", True): the column and whether descending (None: its own way).

    Raises ValueError with the problem in words.
    """
    words = text.split()
    if not 1 <= len(words) <= 2:
        raise ValueError('must be a column, optionally followed by asc or desc, e.g. "gpu_memory desc"')
    column = words[0]
    if column not in COLUMN_IDS:
        raise ValueError(f"unknown column {column[:40]!r} (known: {', '.join(COLUMN_IDS)})")
    if len(words) == 1:
        return column, None
    if words[1] not in SORT_DIRECTIONS:
        raise ValueError(f"the direction must be asc or desc (not {words[1][:20]!r})")
    return column, words[1] == "desc"


def _check_sort(value: Any) -> str:
    if not isinstance(value, str):
        raise _BadValueError(
            "sort", f'must be a column, optionally followed by asc or desc, e.g. "gpu_memory desc"{_got(value)}'
        )
    try:
        column, descending = parse_sort(value)
    except ValueError as exc:
        raise _BadValueError("sort", str(exc)) from None
    return column if descending is None else f"{column} {'desc' if descending else 'asc'}"


_CHECKS = {
    "interval": _check_interval,
    "view": _one_of("view", VIEWS),
    "columns": _check_columns,
    "sort": _check_sort,
    "group_by": _one_of("group_by", GROUP_BY),
    "theme": _check_theme,
    "chart_window": _one_of("chart_window", CHART_WINDOWS),
}
_EXPORTER_CHECKS = {"names": _one_of("exporter.names", EXPORTER_NAMES), "self_metrics": _flag("exporter.self_metrics")}

_SSH_GROUP_NAME = r"[A-Za-z0-9_-]{1,64}"


def _text(key: str, limit: int = 4096) -> Any:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip() or len(value) > limit or "\0" in value:
            raise _BadValueError(key, f"must be a non-empty string of at most {limit} characters" + _got(value))
        return value

    return check


def ssh_option_ok(option: object) -> bool:
    """An ssh option as ``ssh -o`` takes it: ``Key=Value`` (never another flag), bounded: the config file and CLI."""
    return isinstance(option, str) and "=" in option and not option.startswith("-") and len(option) <= 1024


def _check_ssh_options(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > 64:
        raise _BadValueError("ssh.options", 'must be an array of "Key=Value" ssh options' + _got(value))
    for option in value:
        if not ssh_option_ok(option):
            raise _BadValueError("ssh.options", f'each must be "Key=Value", e.g. "ProxyJump=bastion"{_got(option)}')
    return tuple(value)


def _check_connect_timeout(value: Any) -> float:
    number = _number(value)
    if number is None or not 1 <= number <= 300:
        raise _BadValueError("ssh.connect_timeout", "must be a number of seconds from 1 to 300" + _got(value))
    return number


def _check_ssh_groups(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise _BadValueError("ssh.groups", 'must be a table ([ssh.groups] lab = ["gpu1", "gpu2"])' + _got(value))
    groups = []
    for name, hosts in value.items():
        key = f"ssh.groups.{name}"
        if not re.fullmatch(_SSH_GROUP_NAME, name):
            raise _BadValueError(key, "a group's name is letters, digits, _ and - (at most 64)")
        if not isinstance(hosts, list) or len(hosts) > MAX_SSH_GROUP_HOSTS:
            raise _BadValueError(key, f"must be an array of at most {MAX_SSH_GROUP_HOSTS} hosts" + _got(hosts))
        for host in hosts:
            if not isinstance(host, str) or not host.strip() or len(host) > 255:
                raise _BadValueError(key, 'each host must be a string, "[user@]host[:port]" or "@group"' + _got(host))
        groups.append((name, tuple(hosts)))
    return tuple(groups)


_SSH_CHECKS = {
    "program": _text("ssh.program"),
    "config": _text("ssh.config"),
    "options": _check_ssh_options,
    "remote_nvtopy": _text("ssh.remote_nvtopy"),
    "connect_timeout": _check_connect_timeout,
    "groups": _check_ssh_groups,
}


def _check_alerts(value: Any) -> dict[str, Any]:
    """``[alerts]``: ``channels`` (strings, kept raw) and one table per rule, kept as read (frozen).

    Only the shape: which rules exist and what their keys mean is :mod:`nvtopy.alerts.settings`'s to check
    (this module cannot know the catalog). A rule table holds TOML values and arrays of them, no deeper.
    """
    if not isinstance(value, dict):
        raise _BadValueError("alerts", "must be a table ([alerts])" + _got(value))
    out: dict[str, Any] = {}
    rules: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    for name, setting in value.items():
        key = f"alerts.{name}"
        if name == "channels":
            if not isinstance(setting, list) or len(setting) > MAX_ALERT_CHANNELS:
                raise _BadValueError(key, f"must be an array of at most {MAX_ALERT_CHANNELS} strings" + _got(setting))
            for channel in setting:
                if not isinstance(channel, str) or not channel.strip() or len(channel) > 4096 or "\0" in channel:
                    raise _BadValueError(key, "each must be a non-empty string (a channel)" + _got(channel))
            out["alerts_channels"] = tuple(setting)
            continue
        if not isinstance(setting, dict):
            raise _BadValueError(key, "must be a table of a rule's settings ([alerts.gpu-free])" + _got(setting))
        entries: list[tuple[str, Any]] = []
        for sub, item in setting.items():
            if isinstance(item, list):
                if len(item) > MAX_ALERT_ENTRIES or not all(_alert_scalar(v) for v in item):
                    raise _BadValueError(
                        f"{key}.{sub}", f"must be an array of at most {MAX_ALERT_ENTRIES} numbers or strings"
                    )
                item = tuple(item)
            elif not _alert_scalar(item):
                raise _BadValueError(f"{key}.{sub}", "must be a number, a string, true or false, or an array of them")
            entries.append((sub, item))
        rules.append((name, tuple(entries)))
    if rules:
        out["alerts_rules"] = tuple(rules)
    return out


def _alert_scalar(value: Any) -> bool:
    """A value a rule's setting may have: a string (bounded), a bool, an int or a finite float."""
    if isinstance(value, str):
        return len(value) <= 4096
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, bool | int)


# ----------------------------------------------------------------- where a key is, for messages

# No lazy group before optional blanks: a line of a million blanks (in a multi-line string) would take hours.
_HEADER = r"""^\s*\[\[?([^\[\]#]*)\]\]?\s*(?:#.*)?$"""
_BARE_OR_QUOTED = r"""(?:{name}|"{name}"|'{name}')"""


_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')"""
_KEY = rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*="


class _KeyLines:
    """Finds the line (1-based) where a key is set: ``interval`` at the top level, ``health.hang_after`` in
    ``[health]`` (or as a dotted key at the top level), ``health`` where its table starts. Good enough for
    messages; None when not found.

    Why an index made in one pass: a file of 20,000 unknown keys looked up one by one, each a scan of
    every line, took minutes; this is linear in the file.
    """

    def __init__(self, text: str) -> None:
        self._first: dict[str, int] = {}
        section: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), start=1):
            found = re.match(_HEADER, line)
            if found is not None:
                section = tuple(_unquoted(found.group(1)))
                self._first.setdefault(".".join(section), number)
                continue
            key = re.match(_KEY, line)
            if key is not None:
                self._first.setdefault(".".join((*section, *_unquoted(key.group(1)))), number)

    def find(self, dotted: str) -> int | None:
        return self._first.get(dotted)


def _unquoted(key: str) -> list[str]:
    """``health . "hang_after"`` -> ["health", "hang_after"] (quotes dropped, escapes left as written)."""
    return [part.strip("\"'") for part in re.findall(_KEY_PART, key)]


# ----------------------------------------------------------------- printing


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


_COMMENTS = {
    "interval": f"seconds between refreshes, {MIN_INTERVAL:g} to {MAX_INTERVAL:.0f}",
    "view": "GPU panels: " + ", ".join(VIEWS),
    "columns": "process table columns, in order; left out: hidden (" + ", ".join(COLUMN_IDS) + ")",
    "sort": 'a column, optionally followed by "asc" or "desc"',
    "group_by": ", ".join(GROUP_BY),
    "theme": 'a Textual theme, or "colorblind"',
    "chart_window": ", ".join(CHART_WINDOWS),
    "idle_held_after": "minutes at ~0 % SM before a process holding memory is idle-held",
    "idle_held_memory": "GiB of GPU memory a process must hold to be idle-held",
    "hang_after": "minutes busy with idle SMs before a GPU is a suspected hang",
    "exporter_names": "metric names nvtopy exporter writes: dcgm-legacy (dcgm-exporter up to 4.8, what Grafana "
    "dashboard 12239 reads) or dcgm-4.9 (4.9's names and units)",
    "exporter_self_metrics": "nvtopy exporter also serves its own nvtopy_exporter_* series (--self-metrics)",
    "ssh_program": "the ssh client nvtopy --ssh runs (the system's OpenSSH, or a wrapper taking its options)",
    "ssh_config": "the ssh client's config file (ssh -F; --ssh-config); not set: your own ~/.ssh/config",
    "ssh_options": 'ssh options for every host (ssh -o; --ssh-option), e.g. ["ProxyJump=bastion"]',
    "ssh_remote_nvtopy": "nvtopy on the far hosts, when it is not on the PATH of a non-interactive ssh session",
    "ssh_connect_timeout": "seconds a host has to begin its stream before it is marked lost and asked again",
    "ssh_groups": 'host groups for --ssh @name: [ssh.groups] lab = ["gpu1", "alice@gpu2:2222"]',
    "alerts": "alert rules (nvtopy watch; 'nvtopy rules --list' names them): [alerts.RULE] enabled, for, clear, "
    "cooldown, its thresholds, gpus, users, owners",
}
_BARE_KEY = r"[A-Za-z0-9_-]+"


def _toml_key(key: str) -> str:
    return key if re.fullmatch(_BARE_KEY, key) else _toml_value(key)


def to_toml(config: Config, header: Sequence[str] = (), channel_text: Callable[[str], str] | None = None) -> str:
    """``config`` as a config file (every key, with a comment), after ``header`` comment lines.

    ``[alerts] channels`` may hold secrets (a webhook's token): written only through ``channel_text``
    (the notify layer's redaction), else counted in a comment, never printed as they are.
    """
    out = [f"# {line}" for line in header]
    if out:
        out.append("")
    for key in TOP_LEVEL_KEYS:
        value = getattr(config, key)
        out.append(f"# {_COMMENTS[key]}")
        out.append(
            f"{key} = {_toml_value(value)}" if value is not None else f"# {key}: not set (the monitor's default)"
        )
    out.append("")
    out.append("[health]")
    for key in HEALTH_KEYS:
        out.append(f"# {_COMMENTS[key]}")
        out.append(f"{key} = {_toml_value(getattr(config, key))}")
    out.append("")
    out.append("[exporter]")
    for key in EXPORTER_KEYS:
        out.append(f"# {_COMMENTS[f'exporter_{key}']}")
        out.append(f"{key} = {_toml_value(getattr(config, f'exporter_{key}'))}")
    out.append("")
    out.append("[ssh]")
    for key in SSH_KEYS[:-1]:
        value = getattr(config, f"ssh_{key}")
        out.append(f"# {_COMMENTS[f'ssh_{key}']}")
        out.append(f"{key} = {_toml_value(value)}" if value is not None else f"# {key}: not set")
    out.append("")
    out.append(f"# {_COMMENTS['ssh_groups']}")
    out.append("[ssh.groups]")
    for name, hosts in config.ssh_groups:
        out.append(f"{name} = {_toml_value(hosts)}")
    out.append("")
    out.append(f"# {_COMMENTS['alerts']}")
    out.append("[alerts]")
    channels = config.alerts_channels
    if channels is None:
        out.append("# channels: not set (nvtopy watch: the desktop's notifications where a session bus exists)")
    elif channel_text is not None or not channels:
        out.append(f"channels = {_toml_value(tuple(map(channel_text or str, channels)))}")
    else:
        out.append(f"# channels: {len(channels)} set in the file, not printed (a channel's URL may hold a secret)")
    for rule_id, settings in config.alerts_rules:
        out.append(f"[alerts.{_toml_key(rule_id)}]")
        out.extend(f"{_toml_key(key)} = {_toml_value(value)}" for key, value in settings)
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------- remembering the columns


def save_columns(path: str | os.PathLike[str], columns: Sequence[str] | None) -> None:
    """Set ``columns = [...]`` in the config file at ``path`` (created if missing), keeping everything else;
    ``None`` (the defaults) removes the entry, so the file follows the defaults of later versions.

    Raises :class:`ConfigWriteError` (one line) when the file cannot be read or
    written (a read-only directory), is not valid TOML, or the edit would not
    read back as exactly ``columns`` -- the file is then left as it was.
    """
    columns = None if columns is None else list(columns)
    unknown = [] if columns is None else [c for c in columns if c not in COLUMN_IDS]
    if unknown or columns == []:
        raise ConfigWriteError(f"not a column list: {columns!r}")
    from pathlib import Path

    target = Path(os.path.realpath(Path(path).expanduser()))  # a symlinked dotfile stays a symlink
    try:
        text = read_bounded(target, MAX_FILE_BYTES).decode("utf-8")  # never a FIFO waited on by the app
    except FileMissingError:
        text = ""
    except FileRefusedError as exc:
        raise ConfigWriteError(f"{target}: {exc}") from None  # "cannot read it (...)", "not a regular file (...)"
    except UnicodeDecodeError:
        raise ConfigWriteError(f"{target}: not UTF-8 text") from None
    toml = _toml()
    if toml is None:
        raise ConfigWriteError("writing the config needs Python 3.11 or newer")
    try:
        toml.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError, an integer too long, nesting too deep
        raise ConfigWriteError(f"{target} is not valid TOML: fix it first (nvtopy left it as it is)") from None
    updated = _set_top_level(text, "columns", None if columns is None else _toml_value(columns))
    try:
        check = toml.loads(updated).get("columns")
    except (ValueError, RecursionError):
        check = None
    if check != columns:
        raise ConfigWriteError(f"cannot update 'columns' in {target} safely: edit it by hand")
    _write_atomically(target, updated)


def _write_atomically(target: Path, text: str) -> None:
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.exists() else None
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise ConfigWriteError(f"cannot write {target}: {exc.strerror or exc}") from None


def _set_top_level(text: str, key: str, value: str | None) -> str:
    """``text`` with the top-level ``key = ...`` (one line or a multi-line array) replaced, or inserted before
    the first table (at the end when there is none); ``value`` None: removed."""
    lines = text.splitlines(keepends=True)
    entry = "" if value is None else f"{key} = {value}\n"
    assignment = re.compile(rf"^\s*{_BARE_OR_QUOTED.format(name=re.escape(key))}\s*=")
    for number, line in enumerate(lines):
        if re.match(_HEADER, line):
            break
        if assignment.match(line):
            end = _value_end(lines, number)
            return "".join([*lines[:number], entry, *lines[end + 1 :]])
    else:
        number = len(lines)
    if value is None:  # nothing to remove
        return text
    before = lines[:number]
    if before and not before[-1].endswith("\n"):
        before[-1] += "\n"
    after = lines[number:]
    spacer = ["\n"] if after else []
    return "".join([*before, entry, *spacer, *after])


def _value_end(lines: list[str], start: int) -> int:
    """The index of the last line of the value that begins on ``lines[start]`` (brackets balanced, strings and
    comments skipped)."""
    depth = 0
    for index in range(start, len(lines)):
        line = lines[index]
        position = line.index("=") + 1 if index == start else 0
        quote = ""
        while position < len(line):
            char = line[position]
            if quote:
                if char == "\\" and quote == '"':
                    position += 1
                elif char == quote:
                    quote = ""
            elif char in "\"'":
                quote = char
            elif char == "#":
                break
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
            position += 1
        if depth <= 0:
            return index
    return len(lines) - 1

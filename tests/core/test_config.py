"""The config file: where it is, what it may say, what a bad one does, flags over it, --print-config, NO_COLOR.

The conftest gives every test an empty XDG config directory of its own, so a
developer's ~/.config/nvtopy never leaks in.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

from nvtopy.columns import COLUMN_IDS, TABLE_COLUMNS
from nvtopy.commands import dispatch, log, options
from nvtopy.config import (
    DEFAULT_EXPORTER_NAMES,
    EXPORTER_NAMES,
    GROUP_BY,
    THEMES,
    Config,
    ConfigWriteError,
    config_path,
    load_config,
    parse_config,
    parse_sort,
    save_columns,
    to_toml,
)

from ..builders import run_nvtopy
from .test_bounded_files import call_within, release_fifo

NAME = "config.toml"


def warning_of(text: str) -> str:
    """The one warning ``text`` gives (and it gives the defaults)."""
    config, warnings = parse_config(text, NAME)
    assert config == Config(), "a bad file: every default"
    assert len(warnings) == 1, warnings
    return warnings[0]


# --------------------------------------------------------------------------- a good file


def test_a_full_file_sets_every_key():
    text = """
# my nvtopy
interval = 0.5
view = "compact"
columns = ["pid", "gpu_memory", "command"]
sort = "gpu_memory desc"
group_by = "user"
theme = "colorblind"
chart_window = "1h"

[health]
idle_held_after = 30
idle_held_memory = 2.5
hang_after = 2

[exporter]
names = "dcgm-4.9"
self_metrics = true
"""
    config, warnings = parse_config(text)
    assert warnings == []
    assert config == Config(
        interval=0.5,
        view="compact",
        columns=("pid", "gpu_memory", "command"),
        sort="gpu_memory desc",
        group_by="user",
        theme="colorblind",
        chart_window="1h",
        idle_held_after=30.0,
        idle_held_memory=2.5,
        hang_after=2.0,
        exporter_names="dcgm-4.9",
        exporter_self_metrics=True,
    )
    assert config.group_mode == "user"


def test_an_empty_file_is_the_defaults():
    assert parse_config("", NAME) == (Config(), [])
    assert parse_config("# nothing yet\n\n", NAME) == (Config(), [])


def test_integers_are_numbers_and_sort_words_are_normalised():
    config, warnings = parse_config('interval = 2\nsort = "pid   asc"\n[health]\nhang_after = 0\n')
    assert warnings == []
    assert config.interval == 2.0 and isinstance(config.interval, float)
    assert config.sort == "pid asc"
    assert config.hang_after == 0.0


@pytest.mark.parametrize(
    ("text", "column", "descending"),
    [("gpu_memory", "gpu_memory", None), ("pid desc", "pid", True), ("time asc", "time", False)],
)
def test_parse_sort(text, column, descending):
    assert parse_sort(text) == (column, descending)


# --------------------------------------------------------------------------- bad values: one line, key and line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '# c\n\ninterval = "fast"\n',
            "config.toml line 3: 'interval': must be a number from 0.1 to 86400 (seconds); using defaults",
        ),
        (
            "interval = 0\n",
            "config.toml line 1: 'interval': must be a number from 0.1 to 86400 (seconds); using defaults",
        ),
        (
            "view = 'auto'\ninterval = true\n",
            "config.toml line 2: 'interval': must be a number from 0.1 to 86400 (seconds); using defaults",
        ),
        (
            "interval = nan\n",
            "config.toml line 1: 'interval': must be a number from 0.1 to 86400 (seconds); using defaults",
        ),
        (
            'view = "big"\n',
            "config.toml line 1: 'view': must be one of auto, full, compact (not 'big'); using defaults",
        ),
        (
            "interval = 1\n  view = 3\n",
            "config.toml line 2: 'view': must be one of auto, full, compact (not 3); using defaults",
        ),
        (
            'columns = "pid"\n',
            'config.toml line 1: \'columns\': must be a list of column names, e.g. ["pid", "gpu_memory", '
            "\"command\"] (not 'pid'); using defaults",
        ),
        (
            'columns = ["pid", "nope"]\n',
            "config.toml line 1: 'columns': unknown column 'nope' (known: "
            + ", ".join(COLUMN_IDS)
            + "); using defaults",
        ),
        (
            'columns = [\n  "pid",\n  "pid",\n]\n',
            "config.toml line 1: 'columns': 'pid' is listed twice; using defaults",
        ),
        ("columns = []\n", "config.toml line 1: 'columns': must name at least one column; using defaults"),
        (
            'sort = "memory"\n',
            "config.toml line 1: 'sort': unknown column 'memory' (known: "
            + ", ".join(COLUMN_IDS)
            + "); using defaults",
        ),
        (
            'sort = "pid up"\n',
            "config.toml line 1: 'sort': the direction must be asc or desc (not 'up'); using defaults",
        ),
        (
            'sort = "pid desc now"\n',
            "config.toml line 1: 'sort': must be a column, optionally followed by asc or desc, "
            'e.g. "gpu_memory desc"; using defaults',
        ),
        (
            'group_by = "team"\n',
            "config.toml line 1: 'group_by': must be one of none, user, owner, gpu, host (not 'team'); using defaults",
        ),
        (
            'theme = "neon"\n',
            "config.toml line 1: 'theme': unknown theme 'neon' (known: " + ", ".join(THEMES) + "); using defaults",
        ),
        (
            'chart_window = "2h"\n',
            "config.toml line 1: 'chart_window': must be one of 1m, 10m, 1h, 24h (not '2h'); using defaults",
        ),
        ("health = 3\n", "config.toml line 1: 'health': must be a table ([health]); using defaults"),
        (
            "[health]\nhang_after = -1\n",
            "config.toml line 2: 'health.hang_after': must be a number of minutes from 0 to 1000000; using defaults",
        ),
        (
            "view = 'full'\n\n[health]\n# GiB\nidle_held_memory = \"lots\"\n",
            "config.toml line 5: 'health.idle_held_memory': must be a number of GiB from 0 to 1000000; using defaults",
        ),
        (
            "health.idle_held_after = 1e7\n",
            "config.toml line 1: 'health.idle_held_after': must be a number of minutes from 0 to 1000000; "
            "using defaults",
        ),
        ("exporter = 3\n", "config.toml line 1: 'exporter': must be a table ([exporter]); using defaults"),
        (
            'interval = 2\n[exporter]\nnames = "dcgm-5"\n',
            "config.toml line 3: 'exporter.names': must be one of dcgm-legacy, dcgm-4.9 (not 'dcgm-5'); using defaults",
        ),
        (
            "exporter.self_metrics = 1\n",
            "config.toml line 1: 'exporter.self_metrics': must be true or false (not 1); using defaults",
        ),
        (
            "exporter.names = 4.9\n",
            "config.toml line 1: 'exporter.names': must be one of dcgm-legacy, dcgm-4.9 (not 4.9); using defaults",
        ),
    ],
    ids=lambda value: value[:30] if isinstance(value, str) else value,
)
def test_a_bad_value_is_one_line_with_its_line_and_key(text, message):
    assert warning_of(text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interval = 1\nview = \n", "config.toml line 2: not valid TOML: invalid value (column 8); using defaults"),
        ("[health\nhang_after = 1\n", "config.toml line 1: not valid TOML: expected ']' at the end of a table "),
        ("interval = 1\ninterval = 2\n", "config.toml line 2: not valid TOML: cannot overwrite a value (column 13)"),
        ("columns = [1,\n", "config.toml: not valid TOML: "),
    ],
)
def test_bad_toml_is_one_line_with_its_line(text, message):
    warning = warning_of(text)
    assert warning.startswith(message) and warning.endswith("; using defaults"), warning
    assert "\n" not in warning


def test_every_bad_value_is_in_one_line_and_nothing_of_the_file_applies():
    config, warnings = parse_config('interval = 2\nview = "big"\nsort = "up"\n', NAME)
    assert config == Config()
    assert warnings == [
        "config.toml: 2 problems: line 2: 'view': must be one of auto, full, compact (not 'big'); "
        "line 3: 'sort': unknown column 'up' (known: " + ", ".join(COLUMN_IDS) + "); using defaults"
    ]


def test_unknown_keys_are_named_in_one_line_and_the_rest_applies():
    config, warnings = parse_config("interval = 2\nintervall = 3\n\n[health]\nhang_after = 1\nhang = 4\n", NAME)
    assert config == Config(interval=2.0, hang_after=1.0)
    assert warnings == [
        "config.toml: 2 problems: line 2: unknown key 'intervall' ignored; line 6: unknown key 'health.hang' ignored "
        "(known: interval, view, columns, sort, group_by, theme, chart_window, health, exporter, ssh, alerts; "
        "in [health]: idle_held_after, idle_held_memory, hang_after; in [exporter]: names, self_metrics; "
        "in [ssh]: program, config, options, remote_nvtopy, connect_timeout, groups; "
        "in [alerts]: channels and a table per rule)"
    ]
    config, warnings = parse_config("interval = 2\nintervall = 3\n", NAME)
    assert config == Config(interval=2.0)
    assert warnings == [
        "config.toml line 2: unknown key 'intervall' ignored (known: interval, view, columns, sort, group_by, "
        "theme, chart_window, health, exporter, ssh, alerts)"
    ]
    config, warnings = parse_config('[exporter]\nnames = "dcgm-4.9"\nname = "x"\n', NAME)
    assert config == Config(exporter_names="dcgm-4.9")
    assert warnings == ["config.toml line 3: unknown key 'exporter.name' ignored (known: names, self_metrics)"]


def test_a_thousand_problems_are_one_bounded_line_by_line_number():
    """One warning (one stderr line, one notification in the monitor), the first few in full, then a count."""
    text = "".join(f"key{n} = {n}\n" for n in range(999)) + 'view = "big"\n'
    config, warnings = parse_config(text, NAME)
    assert config == Config() and len(warnings) == 1
    line = warnings[0]
    assert line.startswith("config.toml: 1000 problems: line 1: unknown key 'key0' ignored; line 2: unknown key 'key1'")
    assert "; and 995 more (known: " in line and line.endswith("; using defaults")
    assert "key5'" not in line and len(line) < 600


def test_many_unknown_keys_take_linear_time():
    """Each key's line was found by a scan of the whole file: 20,000 keys took minutes, now a fraction of a second."""
    text = (
        "".join(f"key{n} = {n}\n" for n in range(20_000)) + "[health]\n" + "".join(f"h{n} = 1\n" for n in range(5000))
    )
    started = time.process_time()
    _, warnings = parse_config(text, NAME)
    assert time.process_time() - started < 5.0  # about 0.15 s of CPU; 20,000 scans of 25,000 lines took minutes
    assert warnings[0].startswith("config.toml: 25000 problems: line 1: unknown key 'key0' ignored;")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("interval = " + "[" * 5000 + "]" * 5000 + "\n", "config.toml: not valid TOML: nested too deeply"),
        ("columns = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "config.toml: not valid TOML: nested too deeply"),
        ("interval = " + "7" * 5000 + "\n", "config.toml: not valid TOML: exceeds the limit (4300 digits)"),
        (
            "interval = 1" + "0" * 400 + "\n",
            "config.toml line 1: 'interval': must be a number from 0.1 to 86400 (seconds)",
        ),
        (
            "[health]\nhang_after = -1" + "0" * 400 + "\n",
            "config.toml line 2: 'health.hang_after': must be a number of minutes from 0 to 1000000",
        ),
    ],
    ids=["arrays-5000-deep", "tables-3000-deep", "5000-digits", "1e400", "-1e400"],
)
def test_deep_nesting_and_huge_integers_are_a_bad_file_not_a_crash(text, said):
    """Each raised RecursionError, ValueError or OverflowError out of every command (an exporter would crash-loop)."""
    warning = warning_of(text)
    assert warning.startswith(said) and warning.endswith("; using defaults"), warning


# --------------------------------------------------------------------------- the file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_where_the_file_is():
    assert config_path({"HOME": "/home/a"}) == Path("/home/a/.config/nvtopy/config.toml")
    assert config_path({"HOME": "/home/a", "XDG_CONFIG_HOME": "/xdg"}) == Path("/xdg/nvtopy/config.toml")
    # A relative XDG_CONFIG_HOME is invalid (XDG spec): ignored.
    assert config_path({"HOME": "/home/a", "XDG_CONFIG_HOME": "rel"}) == Path("/home/a/.config/nvtopy/config.toml")
    assert config_path({"HOME": "/home/a", "XDG_CONFIG_HOME": "/xdg", "NVTOPY_CONFIG": "/etc/n.toml"}) == Path(
        "/etc/n.toml"
    )


def test_a_missing_file_is_the_defaults_without_a_word(tmp_path):
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)}) == (Config(), [])


def test_a_missing_file_someone_named_is_a_warning(tmp_path):
    missing = tmp_path / "nope.toml"
    assert load_config(missing) == (Config(), [f"config file {missing}: no such file; using defaults"])
    env = {"NVTOPY_CONFIG": str(missing)}
    assert load_config(None, env) == (Config(), [f"config file {missing}: no such file; using defaults"])


def test_the_xdg_file_is_read(tmp_path):
    write(tmp_path / "nvtopy" / "config.toml", 'view = "full"\n')
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)}) == (Config(view="full"), [])


def test_a_directory_or_binary_file_is_a_warning(tmp_path):
    (tmp_path / "dir.toml").mkdir()
    assert load_config(tmp_path / "dir.toml")[1] == [
        f"config file {tmp_path / 'dir.toml'}: is a directory; using defaults"
    ]
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"interval = 1\n# \xff\xfe\n")
    assert load_config(binary) == (Config(), [f"{binary} line 2: not UTF-8 text; using defaults"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_a_warning(tmp_path):
    secret = write(tmp_path / "c.toml", "interval = 2\n")
    secret.chmod(0)
    config, warnings = load_config(secret)
    assert config == Config()
    assert warnings == [f"config file {secret}: cannot read it (Permission denied); using defaults"]


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path):
    """open() of a FIFO blocks until someone writes: every command hung before its first line."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    try:
        loaded = call_within(lambda: load_config(fifo))
        saved = call_within(lambda: save_columns(fifo, ["pid"]))  # the column chooser, on the app's thread
    finally:
        release_fifo(fifo)
    assert loaded == (Config(), [f"config file {fifo}: not a regular file (a FIFO); using defaults"])
    assert isinstance(saved, ConfigWriteError) and str(saved) == f"{fifo}: not a regular file (a FIFO)"


def test_a_device_or_a_file_over_the_cap_is_a_warning(tmp_path):
    device = tmp_path / "device.toml"
    device.symlink_to(os.devnull)
    assert load_config(device) == (
        Config(),
        [f"config file {device}: not a regular file (a character device); using defaults"],
    )
    huge = write(tmp_path / "huge.toml", 'view = "full"\n' + "#" * (1 << 20) + "\n")
    assert load_config(huge) == (Config(), [f"config file {huge}: larger than 1 MiB; using defaults"])


def test_a_config_linked_to_dev_zero_is_one_warning_not_the_oom_killer(tmp_path, nvtopy_cmd):
    """Read whole, /dev/zero grew the process by 0.5 GB/s; here under a 1 GiB address-space limit, to end either way."""
    import resource

    link = tmp_path / "config.toml"
    link.symlink_to("/dev/zero")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    result = subprocess.run(
        [*nvtopy_cmd, "--config", str(link), "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )
    assert (result.returncode, result.stderr) == (
        0,
        f"nvtopy: warning: config file {link}: not a regular file (a character device); using defaults\n",
    )


# --------------------------------------------------------------------------- the names agree with their owners


def test_names_agree_with_textual_the_cli_and_the_health_rules():
    from textual.theme import BUILTIN_THEMES

    from nvtopy.formats.dcgm_naming import DEFAULT_NAMING, NAMINGS
    from nvtopy.health.verdict import HealthThresholds
    from nvtopy.render.processes import GROUP_MODES
    from nvtopy.tui.gpu_view import MODES

    assert (*BUILTIN_THEMES, "colorblind") == THEMES
    defaults, health = Config(), HealthThresholds()
    assert defaults.idle_held_after * 60 == health.idle_held_seconds
    assert defaults.idle_held_memory * 2**30 == health.idle_held_bytes
    assert defaults.hang_after * 60 == health.hang_seconds
    assert defaults.columns == COLUMN_IDS == tuple(c.key for c in TABLE_COLUMNS)
    assert [None if g == "none" else g for g in GROUP_BY] == list(GROUP_MODES)
    assert set(MODES) == {"auto", "full", "compact"}
    assert tuple(NAMINGS) == EXPORTER_NAMES and DEFAULT_EXPORTER_NAMES == DEFAULT_NAMING == Config().exporter_names


# --------------------------------------------------------------------------- flags win; --print-config


def printed_config(capsys, *argv: str) -> tuple[dict, str, str]:
    assert dispatch.main(["--print-config", *argv]) == 0
    out, err = capsys.readouterr()
    return tomllib.loads(out), out, err


def test_print_config_round_trips(capsys):
    data, out, err = printed_config(capsys)
    assert err == ""
    assert parse_config(out) == (Config(), [])
    assert data["interval"] == 1.0 and data["columns"] == list(COLUMN_IDS)
    assert data["health"] == {"idle_held_after": 10.0, "idle_held_memory": 1.0, "hang_after": 5.0}
    assert data["exporter"] == {"names": "dcgm-legacy", "self_metrics": False}
    assert "does not exist: the defaults" in out


def test_flags_win_over_the_file_and_the_file_over_the_defaults(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    write(
        tmp_path / "nvtopy" / "config.toml",
        'interval = 2\nview = "compact"\ntheme = "nord"\nsort = "pid desc"\n'
        "[health]\nhang_after = 3\nidle_held_after = 20\n",
    )
    data, out, _ = printed_config(capsys, "--interval", "0.5", "--hang-after", "7", "--theme", "colorblind")
    assert data["interval"] == 0.5  # flag
    assert data["view"] == "compact"  # file
    assert data["theme"] == "colorblind"  # flag
    assert data["sort"] == "pid desc"  # file (no flag)
    assert data["health"] == {"hang_after": 7.0, "idle_held_after": 20.0, "idle_held_memory": 1.0}
    assert f"read from {tmp_path / 'nvtopy' / 'config.toml'}" in out
    config, warnings = parse_config(out)
    assert warnings == [] and config.interval == 0.5 and config.hang_after == 7.0


def test_config_flag_and_env_choose_the_file(capsys, tmp_path, monkeypatch):
    chosen = write(tmp_path / "mine.toml", 'view = "full"\n')
    other = write(tmp_path / "env.toml", 'view = "compact"\n')
    monkeypatch.setenv("NVTOPY_CONFIG", str(other))
    assert printed_config(capsys)[0]["view"] == "compact"
    assert printed_config(capsys, "--config", str(chosen))[0]["view"] == "full"


def test_a_bad_file_is_a_warning_and_nvtopy_goes_on(capsys, tmp_path):
    path = write(tmp_path / "bad.toml", '# mine\ninterval = 2\nview = "wide"\n')
    data, _, err = printed_config(capsys, "--config", str(path))
    assert data["interval"] == 1.0 and data["view"] == "auto"
    assert err == (
        f"nvtopy: warning: {path} line 3: 'view': must be one of auto, full, compact (not 'wide'); using defaults\n"
    )


def test_health_thresholds_come_from_the_file_unless_flagged(tmp_path, monkeypatch):
    """log and the exporter read [health] too (options.health_thresholds); the flags still win."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    write(tmp_path / "nvtopy" / "config.toml", "[health]\nhang_after = 2\nidle_held_memory = 4\n")
    parser = log.build_parser("log")
    thresholds = options.health_thresholds(parser.parse_args([]))
    assert (thresholds.hang_seconds, thresholds.idle_held_bytes, thresholds.idle_held_seconds) == (120, 4 << 30, 600)
    flagged = options.health_thresholds(parser.parse_args(["--hang-after", "7", "--idle-held-after", "1"]))
    assert (flagged.hang_seconds, flagged.idle_held_bytes, flagged.idle_held_seconds) == (420, 4 << 30, 60)


def test_the_exporters_names_come_from_the_file_unless_flagged(tmp_path, monkeypatch):
    """``[exporter] names``; ``nvtopy exporter --names`` wins; neither: dcgm-legacy."""
    from nvtopy.commands.exporter import command

    parser = command.build_parser("exporter")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert options.user_config(parser.parse_args([]), "exporter_names").exporter_names == "dcgm-legacy"
    write(tmp_path / "nvtopy" / "config.toml", '[exporter]\nnames = "dcgm-4.9"\n')
    assert options.user_config(parser.parse_args([]), "exporter_names").exporter_names == "dcgm-4.9"
    flagged = parser.parse_args(["--names", "dcgm-legacy"])
    assert options.user_config(flagged, "exporter_names").exporter_names == "dcgm-legacy"


def test_the_exporters_self_metrics_come_from_the_file_or_the_flag(tmp_path, monkeypatch):
    """``[exporter] self_metrics = true`` turns them on as ``--self-metrics`` does; neither: off."""
    from nvtopy.commands.exporter import command

    parser = command.build_parser("exporter")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    fields = ("exporter_names", "exporter_self_metrics")
    assert options.user_config(parser.parse_args([]), *fields).exporter_self_metrics is False
    assert options.user_config(parser.parse_args(["--self-metrics"]), *fields).exporter_self_metrics is True
    write(tmp_path / "nvtopy" / "config.toml", "[exporter]\nself_metrics = true\n")
    assert options.user_config(parser.parse_args([]), *fields).exporter_self_metrics is True


def test_a_bad_names_flag_is_a_one_line_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        dispatch.main(["exporter", "--names", "dcgm-5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nvtopy exporter: error: argument --names: unknown choice 'dcgm-5'")
    assert "(known: dcgm-legacy, dcgm-4.9)" in err and len(err.splitlines()) == 1


def test_the_file_is_read_once_and_its_warning_printed_once(capsys, tmp_path):
    path = write(tmp_path / "c.toml", "colour = 1\n")
    args = log.build_parser("log").parse_args(["--config", str(path)])
    for _ in range(3):
        options.health_thresholds(args)
    assert capsys.readouterr().err.count("unknown key 'colour'") == 1


def test_a_bad_file_never_gives_a_traceback(tmp_path, nvtopy_cmd):
    path = write(tmp_path / "c.toml", "interval = [1, 2\nview = \x01\n")
    env = {**os.environ, "NVTOPY_CONFIG": str(path)}
    result = run_nvtopy("--print-config", env=env, timeout=60)
    assert result.returncode == 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nvtopy: warning: {path} line ") and "using defaults" in lines[0]


def test_bad_theme_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        dispatch.main(["--theme", "neon"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nvtopy: error: argument --theme: unknown theme 'neon' (known: textual-dark,")
    assert len(err.splitlines()) == 1


def test_to_toml_reads_back_any_config():
    config = Config(
        interval=86400.0,
        columns=("command", "pid"),
        sort="time asc",
        chart_window="24h",
        hang_after=0.5,
        exporter_names="dcgm-4.9",
        ssh_program="tsh",
        ssh_config="~/.ssh/lab config",
        ssh_options=("ProxyJump=bastion", "Compression=yes"),
        ssh_remote_nvtopy="/opt/venv/bin/nvtopy",
        ssh_connect_timeout=3.5,
        ssh_groups=(("lab", ("gpu1", "alice@gpu2:2222")), ("all", ("@lab", "gpu9"))),
    )
    assert parse_config(to_toml(config, ("a header",))) == (config, [])


def test_the_ssh_table_is_read_and_each_bad_value_named():
    text = (
        '[ssh]\nprogram = "tsh"\noptions = ["ProxyJump=bastion"]\nconnect_timeout = 5\n'
        '[ssh.groups]\nlab = ["gpu1", "gpu2"]\ndgx = ["@lab", "dgx1:2222"]\n'
    )
    config, warnings = parse_config(text, NAME)
    assert warnings == []
    assert config.ssh_program == "tsh" and config.ssh_options == ("ProxyJump=bastion",)
    assert config.ssh_connect_timeout == 5.0
    assert dict(config.ssh_groups) == {"lab": ("gpu1", "gpu2"), "dgx": ("@lab", "dgx1:2222")}
    for bad, said in [
        ('[ssh]\noptions = ["-oProxyCommand=x"]\n', "'ssh.options': each must be \"Key=Value\""),
        ('[ssh]\noptions = "ProxyJump=x"\n', "'ssh.options': must be an array"),
        ("[ssh]\nconnect_timeout = 0\n", "'ssh.connect_timeout': must be a number of seconds from 1 to 300"),
        ('[ssh]\nprogram = ""\n', "'ssh.program': must be a non-empty string"),
        ('[ssh.groups]\n"a b" = ["x"]\n', "'ssh.groups.a b': a group's name is letters, digits, _ and -"),
        ("[ssh.groups]\nlab = [1]\n", "'ssh.groups.lab': each host must be a string"),
        ('ssh = "x"\n', "'ssh': must be a table ([ssh])"),
    ]:
        config, warnings = parse_config(bad, NAME)
        assert config == Config() and len(warnings) == 1 and said in warnings[0], (bad, warnings)
    config, warnings = parse_config('[ssh]\nprogam = "x"\n', NAME)
    assert config == Config()
    assert warnings == [
        "config.toml line 2: unknown key 'ssh.progam' ignored "
        "(known: program, config, options, remote_nvtopy, connect_timeout, groups)"
    ]


# --------------------------------------------------------------------------- remembering the columns


def test_save_columns_creates_the_file_and_its_directory(tmp_path):
    path = tmp_path / "new" / "nvtopy" / "config.toml"
    save_columns(path, ["pid", "command"])
    assert load_config(path) == (Config(columns=("pid", "command")), [])


def test_save_columns_keeps_everything_else(tmp_path):
    original = (
        "# my settings\n"
        "interval = 2  # seconds\n"
        "columns = [\n"
        '    "gpu",  # first\n'
        '    "pid",\n'
        "]\n"
        'theme = "nord"\n'
        "\n"
        "[health]\n"
        "hang_after = 3\n"
    )
    path = write(tmp_path / "config.toml", original)
    save_columns(path, ["command", "pid"])
    text = path.read_text()
    assert text == original.replace(
        'columns = [\n    "gpu",  # first\n    "pid",\n]\n', 'columns = ["command", "pid"]\n'
    )
    assert load_config(path) == (Config(interval=2.0, columns=("command", "pid"), theme="nord", hang_after=3.0), [])


def test_save_columns_inserts_before_the_first_table(tmp_path):
    path = write(tmp_path / "config.toml", "interval = 2\n[health]\nhang_after = 3")
    save_columns(path, ["pid"])
    assert path.read_text() == 'interval = 2\ncolumns = ["pid"]\n\n[health]\nhang_after = 3'
    assert load_config(path)[0] == Config(interval=2.0, columns=("pid",), hang_after=3.0)
    no_newline = write(tmp_path / "other.toml", "interval = 2")
    save_columns(no_newline, ["pid"])
    assert no_newline.read_text() == 'interval = 2\ncolumns = ["pid"]\n'


def test_save_columns_refuses_a_file_that_is_not_toml(tmp_path):
    path = write(tmp_path / "config.toml", "interval = = 2\n")
    with pytest.raises(ConfigWriteError, match="is not valid TOML: fix it first"):
        save_columns(path, ["pid"])
    assert path.read_text() == "interval = = 2\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_save_columns_in_a_read_only_directory_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ConfigWriteError) as error:
            save_columns(locked / "nvtopy" / "config.toml", ["pid"])
    finally:
        locked.chmod(0o700)
    assert str(error.value) == f"cannot write {locked / 'nvtopy' / 'config.toml'}: Permission denied"


def test_save_columns_where_it_cannot_write_is_one_line(tmp_path):
    """A path under a file (as unwritable for root as a read-only home is for a user)."""
    blocker = write(tmp_path / "nvtopy", "a file, not a directory\n")
    with pytest.raises(ConfigWriteError) as error:
        save_columns(blocker / "config.toml", ["pid"])
    assert str(error.value) == f"{blocker / 'config.toml'}: cannot read it (Not a directory)"
    assert blocker.read_text() == "a file, not a directory\n"


def test_save_columns_follows_a_symlink(tmp_path):
    real = write(tmp_path / "dotfiles" / "nvtopy.toml", "interval = 2\n")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    save_columns(link, ["pid"])
    assert link.is_symlink()
    assert load_config(real)[0] == Config(interval=2.0, columns=("pid",))


# --------------------------------------------------------------------------- NO_COLOR in --once


def _once_text(color: bool) -> str:
    from nvtopy.backends.simulated.backend import SimulatedBackend
    from nvtopy.render.text import render_snapshot
    from nvtopy.sources.collector import Collector

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    backend = SimulatedBackend(gpus=2, seed=1, clock=lambda: 1_795_000_000.0, viewer="alice")
    try:
        snapshot = Collector(backend).collect()
    finally:
        backend.close()
    out = Terminal()
    render_snapshot(snapshot, out, color=color)
    return out.getvalue()


def test_no_color_turns_the_colour_of_once_off(monkeypatch):
    assert "\x1b[" in _once_text(color=True), "a terminal gets colour"
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b" not in _once_text(color=True)
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: set but empty is not set
    assert "\x1b[" in _once_text(color=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pty")
def test_no_color_in_once_on_a_real_terminal(nvtopy_cmd):
    def run_on_a_pty(extra_env: dict[str, str]) -> bytes:
        leader, follower = pty.openpty()
        env = {**os.environ, **extra_env, "COLUMNS": "200"}
        process = subprocess.Popen(
            [*nvtopy_cmd, "--demo", "--demo-gpus", "2", "--once"], stdout=follower, stderr=follower, env=env
        )
        os.close(follower)
        output = b""
        while True:
            ready, _, _ = select.select([leader], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            output += chunk
        process.wait(timeout=30)
        os.close(leader)
        assert process.returncode == 0, output
        return output

    assert b"\x1b[" in run_on_a_pty({})
    plain = run_on_a_pty({"NO_COLOR": "1"})
    assert b"\x1b" not in plain and b"GPU" in plain


# --------------------------------------------------------------------------- the interval: one home


def test_the_config_file_takes_exactly_the_intervals_the_command_line_takes(tmp_path):
    from nvtopy.interval import MAX_INTERVAL, MIN_INTERVAL, parse_interval

    for seconds in (MIN_INTERVAL, 1, MAX_INTERVAL, MIN_INTERVAL / 2, MAX_INTERVAL + 1):
        config, warnings = parse_config(f"interval = {seconds!r}\n", NAME)
        try:
            taken = parse_interval(repr(seconds))
        except ValueError:
            assert warnings and config == Config(), seconds
        else:
            assert (config.interval, warnings) == (taken, []), seconds


def test_the_interval_s_limits_default_and_rules_have_one_definition():
    """``nvtopy/interval.py`` defines them; every other module imports them (they were written in three places)."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "nvtopy"
    names = ("MIN_INTERVAL", "MAX_INTERVAL", "DEFAULT_INTERVAL", "REMOTE_MIN_INTERVAL", "STALE_INTERVALS")
    defined = re.compile(rf"^\s*({'|'.join(names)})\s*(:[^=]*)?=", re.MULTILINE)
    homes = {
        (match.group(1), str(path.relative_to(package)))
        for path in package.rglob("*.py")
        for match in defined.finditer(path.read_text(encoding="utf-8"))
    }
    assert homes == {(name, "interval.py") for name in names}

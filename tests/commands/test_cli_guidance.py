"""The command line guides a newcomer: a short usage, the commands first, and for a name it does not
know, the closest ones and where the rest are listed (issue 24: ``nvtopy lgo``, ``log --fields foo``)."""

from __future__ import annotations

import pytest

from nvtopy.commands import dispatch
from nvtopy.commands.options import COMMANDS, user_commands
from nvtopy.commands.report import DURATION_FORMS, parse_duration
from nvtopy.errors import UsageError
from nvtopy.formats.writers import GPU_FIELDS, PROCESS_FIELDS

from ..builders import run_nvtopy


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``nvtopy ARGV`` in this process: (exit status, stdout, stderr), argparse's exits included."""
    try:
        code = dispatch.main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def columns_80(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal of 80 columns, as argparse reads it (COLUMNS)."""
    monkeypatch.setenv("COLUMNS", "80")


# ------------------------------------------------------------------ --help


def test_help_says_nvtopy_command_and_lists_the_commands_at_the_top(columns_80, capsys):
    code, out, _ = cli(["--help"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "usage: nvtopy [COMMAND] [OPTIONS]"
    top = lines[:18]
    for name in user_commands():  # serve-stdio is run by nvtopy --ssh, not by a person: not listed
        purpose = COMMANDS[name][1]
        assert any(line.split() == [name, *purpose.split()] for line in top), f"{name} not in the first lines"
    assert top.index("options:") > max(i for i, line in enumerate(top) if line.startswith("  report ")), (
        "the commands come before the options"
    )
    assert max(len(line) for line in lines) <= 80, "read at 80 columns without a wrapped line"


def test_nvtopy_help_is_the_help_and_help_command_is_the_commands(columns_80, capsys):
    code, out, _ = cli(["help"], capsys)
    assert code == 0 and out.startswith("usage: nvtopy [COMMAND] [OPTIONS]\n")
    code, out, _ = cli(["help", "report"], capsys)
    assert code == 0 and out.startswith("usage: nvtopy report [OPTIONS] [FILE ...]\n")


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("log", "nvtopy log [OPTIONS]"),
        ("record", "nvtopy record [OPTIONS] FILE"),
        ("replay", "nvtopy replay [OPTIONS] FILE"),
        ("exporter", "nvtopy exporter [OPTIONS]"),
        ("doctor", "nvtopy doctor [OPTIONS]"),
        ("report", "nvtopy report [OPTIONS] [FILE ...]"),
    ],
)
def test_each_command_help_reads_at_80_columns(columns_80, capsys, command, usage):
    code, out, _ = cli([command, "--help"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"usage: {usage}", "the options are listed below, once"
    too_wide = [line for line in lines if len(line) > 80]
    assert not too_wide, too_wide
    cut = [line for line in lines if line.rstrip().endswith("-")]
    assert not cut, f"a word or an option cut at a hyphen: {cut}"


# ------------------------------------------------------------------ an unknown command or option


@pytest.mark.parametrize(
    ("argv", "word", "meant"),
    [
        (["lgo"], "lgo", "log"),
        (["recrod", "run.jsonl"], "recrod", "record"),
        (["Report"], "Report", "report"),
        (["help", "lgo"], "lgo", "log"),
    ],
)
def test_an_unknown_command_names_the_closest_and_all_of_them(capsys, argv, word, meant):
    code, out, err = cli(argv, capsys)
    line = one_error_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"nvtopy: error: unknown command {word!r}; did you mean {meant!r}? (known: ")
    assert all(name in line for name in user_commands())


def test_an_unknown_command_as_a_user_meets_it():
    result = run_nvtopy("lgo", timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert "did you mean 'log'?" in one_error_line(result.stderr)


def test_a_word_nothing_is_close_to_still_lists_the_commands(capsys):
    code, _, err = cli(["top"], capsys)
    line = one_error_line(err)
    assert (
        code == 2
        and "unknown command 'top' (known: log, record, replay, exporter, doctor, report, rules, watch, web)" in line
    )
    assert "did you mean" not in line


def test_a_command_after_the_options_is_said_to_come_first(capsys):
    code, _, err = cli(["--demo", "log"], capsys)
    assert code == 2 and "'log' is a command: it comes first (nvtopy log [OPTIONS])" in one_error_line(err)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--onse"], "unknown option '--onse'; did you mean '--once'"),
        (["log", "--feilds", "index"], "unknown option '--feilds'; did you mean '--fields'"),
        (["report", "--sicne=1h", "x"], "unknown option '--sicne'; did you mean '--since'"),
        (["log", "extra"], "nvtopy log: error: unexpected argument 'extra'"),
        (
            ["log", "--format", "jsn"],
            "argument --format: unknown choice 'jsn'; did you mean 'jsonl'? (known: csv, jsonl)",
        ),
        (["--view", "ful"], "argument --view: unknown choice 'ful'; did you mean 'full'?"),
    ],
)
def test_an_unknown_option_or_choice_names_the_closest(capsys, argv, fragment):
    code, _, err = cli(argv, capsys)
    assert code == 2 and fragment in one_error_line(err)


# ------------------------------------------------------------------ names from a fixed list


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["log", "--fields", "index,tempertaure_c"],
            "--fields: unknown field 'tempertaure_c'; did you mean 'temperature_c'",
        ),
        (["log", "--fields", "temperature.gpu"], "did you mean 'temperature_c'"),  # nvidia-smi's name
        (["log", "--processes", "--fields", "cmd"], "--fields: unknown field 'cmd'; did you mean 'command'?"),
        (
            ["report", "--by", "usr", "x"],
            "--by: unknown key 'usr'; did you mean 'user'? (known: user, owner, gpu, host)",
        ),
        (["report", "--sort", "bsy", "x"], "--sort: unknown column 'bsy'; did you mean 'busy'? (known: user, held,"),
        (["--demo", "--once", "--demo-fault", "lots@1"], "--demo-fault: unknown fault 'lots'; did you mean 'lost'?"),
        (
            ["--demo", "--once", "--demo-fault", "unsupported=temp"],
            "unknown field group 'temp'; did you mean 'temperature'?",
        ),
        (["--theme", "nrod"], "argument --theme: unknown theme 'nrod'; did you mean 'nord'? (known: textual-dark,"),
    ],
)
def test_a_name_from_a_fixed_list_gets_the_closest(capsys, argv, fragment):
    code, out, err = cli(argv, capsys)
    assert code == 2 and out == ""
    assert fragment in one_error_line(err)


@pytest.mark.parametrize(("processes", "known"), [([], GPU_FIELDS), (["--processes"], PROCESS_FIELDS)])
def test_an_unknown_field_never_lists_all_of_them_but_says_how(capsys, processes, known):
    from nvtopy.errors import INLINE_NAMES

    assert len(known) > INLINE_NAMES
    code, _, err = cli(["log", *processes, "--fields", "foo"], capsys)
    line = one_error_line(err)
    listing = f"'nvtopy log{' --processes' if processes else ''} --fields help' lists them"
    assert code == 2 and line == f"nvtopy: error: --fields: unknown field 'foo' ({len(known)} fields: {listing})"


def test_a_field_of_the_other_rows_is_said_to_be_one(capsys):
    code, _, err = cli(["log", "--fields", "index,pid"], capsys)
    assert code == 2 and "--fields: 'pid' is a process row's field: 'nvtopy log --processes'" in one_error_line(err)
    code, _, err = cli(["log", "--processes", "--fields", "temperature_c"], capsys)
    assert code == 2
    assert "--fields: 'temperature_c' is a GPU row's field: log GPU rows without --processes" in one_error_line(err)


def test_close_names():
    from nvtopy.errors import close_names

    assert close_names("lgo", list(COMMANDS)) == ["log"]
    assert close_names("User", ["user", "owner", "gpu", "host"]) == ["user"]
    for smi, ours in [
        ("temperature.gpu", "temperature_c"),
        ("utilization.gpu", "utilization_gpu_percent"),
        ("memory.used", "memory_used_bytes"),
        ("power.draw", "power_draw_w"),
        ("fan.speed", "fan_percent"),
        ("pci.bus_id", "bus_id"),
    ]:
        assert close_names(smi, GPU_FIELDS)[0] == ours, smi
    assert len(close_names("power", GPU_FIELDS)) == 3, "at most three"
    assert close_names("xyz", GPU_FIELDS) == [] and close_names("", GPU_FIELDS) == []


def test_unknown_name_writes_a_short_list_out_and_cuts_a_long_name():
    from nvtopy.errors import unknown_name

    short = ["user", "owner", "gpu", "host"]
    assert str(unknown_name("--by", "key", "pod", short)) == "--by: unknown key 'pod' (known: user, owner, gpu, host)"
    error = unknown_name("--fields", "field", "x" * 5000, GPU_FIELDS, "'nvtopy log --fields help' lists them")
    assert isinstance(error, UsageError) and error.exit_code == 2
    assert len(str(error)) < 150 and "…" in str(error)


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["--since", "2 days"], "'2d'"),
        (["--since", "1 hour 30 minutes"], "'1h30m'"),
        (["--since", "1h 30m"], "'1h30m'"),
        (["--since", "2", "days"], None),  # unquoted: '2' alone, a number without its unit
        (["--since", "yesterday"], None),
    ],
)
def test_report_since_shows_the_accepted_forms_and_the_one_meant(capsys, argv, meant):
    code, out, err = cli(["report", *argv, "/nonexistent.jsonl"], capsys)
    line = one_error_line(err)
    assert code == 2 and out == ""
    assert f"is not a duration: give {DURATION_FORMS}" in line
    assert line.endswith(f"; did you mean {meant}?" if meant else DURATION_FORMS)


def test_a_duration_meant_is_one_parse_duration_reads():
    with pytest.raises(UsageError, match=r"did you mean '1\.5h'\?$"):
        parse_duration("1.5 hours")
    with pytest.raises(UsageError, match=r"did you mean '1h'\?$"):
        parse_duration("1H")
    with pytest.raises(UsageError) as caught:
        parse_duration("2 days ago")
    assert "did you mean" not in str(caught.value)
    assert parse_duration("1h30m") == 5400


@pytest.mark.parametrize(
    "argv",
    [["\x1b]0;owned\x07"], ["log", "--format", "\x1b[2J"], ["--\x1b[31mred"], ["log", "--fields", "\u202eevil"]],
    ids=["command", "choice", "option", "field"],
)
def test_a_name_quoted_back_cannot_drive_the_terminal(capsys, argv):
    code, _, err = cli(argv, capsys)
    assert code == 2
    line = one_error_line(err)
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line

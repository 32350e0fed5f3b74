"""The command line guides a newcomer: a short usage, the commands first, and for a name it does not
know, the closest ones and where the rest are listed (issue 24: ``nvtopy lgo``, ``log --fields foo``)."""

from __future__ import annotations

import sys

import pytest

from nvtopy.commands import dispatch
from nvtopy.commands.options import COMMANDS
from nvtopy.errors import UsageError
from nvtopy.formats.writers import GPU_FIELDS, PROCESS_FIELDS

NVTOPY = [sys.executable, "-m", "nvtopy"]


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

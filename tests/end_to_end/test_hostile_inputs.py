"""One bad input, one line: readers that go away, full disks, absurd numbers, empty field lists.

Each case runs the real command line in a subprocess, as a script or a shell
would, and checks what the user sees: the exit status and at most one line on
stderr -- never the last-resort "internal error" handler, never a traceback or
Python's "Exception ignored" at exit.

A reader that goes away (``nvtopy ... | head -1``) is no error: nvtopy exits 0
without a word, as it would have had the reader read everything (not 141, the
shell's code for a death by SIGPIPE: Python ignores SIGPIPE, and a pipeline
under ``set -o pipefail`` should not fail because ``head`` had enough).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ..builders import NVTOPY, gpu_process
from ..builders import run_nvtopy as run

HUGE = "9" * 5000  # more digits than Python's int() accepts (4,300)


def assert_one_line_error(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert len(lines[0]) < 1000, "a 5,000-character entry is cut in the message"
    return lines[0]


# ----------------------------------------------------------------- a reader that goes away


def pipeline(args: list[str], reader: list[str]) -> tuple[int, str, bytes]:
    """``nvtopy ARGS | READER``: (nvtopy's exit status, its stderr, what the reader printed)."""
    writer = subprocess.Popen([*NVTOPY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.Popen(reader, stdin=writer.stdout, stdout=subprocess.PIPE)
    assert writer.stdout is not None
    writer.stdout.close()  # only the reader holds the pipe: when it exits, the writer's next write fails
    shown, _ = head.communicate(timeout=60)
    _, errors = writer.communicate(timeout=60)
    return writer.returncode, errors.decode("utf-8", "replace"), shown


ONCE_TEXT = ["--demo", "--demo-gpus", "64", "--demo-procs", "30", "--once"]  # larger than a pipe holds
ONCE_JSON = ["--demo", "--demo-gpus", "64", "--once", "--json"]
READERS_GO_AWAY = [
    # a logger writes one flushed sample every 0.2 s: head is gone before the second
    (["log", "--demo", "--count", "5", "--interval", "0.2"], ["head", "-1"]),
    (["log", "--demo", "--count", "4", "--interval", "0.2", "--format", "jsonl"], ["head", "-c", "10"]),
    (["record", "/dev/stdout", "--demo", "--count", "4", "--interval", "0.2"], ["head", "-1"]),
    # one snapshot of 64 GPUs is larger than a pipe holds (64 KiB): the write fails mid-way
    (ONCE_TEXT, ["head", "-1"]),
    (ONCE_JSON, ["head", "-c", "10"]),
]


@pytest.mark.parametrize(("args", "reader"), READERS_GO_AWAY, ids=lambda v: " ".join(v)[:40])
def test_a_reader_that_goes_away_ends_it_quietly(args, reader):
    code, errors, shown = pipeline(args, reader)
    assert shown, "the reader got its line"
    assert code == 0, errors
    assert errors == "" or errors.startswith("nvtopy record:"), errors  # no "internal error", no "Exception ignored"


def writing_to_a_gone_reader(args: list[str]) -> subprocess.CompletedProcess:
    """``nvtopy ARGS`` writing into a pipe whose reader has already exited: every write fails (EPIPE).

    Deterministic where ``| head`` is not: a single large write that the reader
    leaves half-read may end without an error (a partial write), depending on timing
    and the kernel.
    """
    read_end, write_end = os.pipe()
    with subprocess.Popen(["head", "-c", "0"], stdin=read_end) as reader:
        reader.wait(timeout=30)
    os.close(read_end)
    try:
        return subprocess.run([*NVTOPY, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        ["log", "--demo", "--count", "3", "--interval", "0.1"],
        ["log", "--demo", "--count", "2", "--interval", "0.1", "--format", "jsonl", "--processes"],
        ["record", "/dev/stdout", "--demo", "--count", "2", "--interval", "0.1"],
        ["--demo", "--once"],
        ["--demo", "--once", "--json"],
        ONCE_JSON,
        ["log", "--fields", "?"],
    ],
    ids=lambda v: " ".join(v)[:40],
)
def test_a_reader_gone_before_the_first_write_ends_it_quietly(args):
    result = writing_to_a_gone_reader(args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "no internal error, no 'Exception ignored' at exit"


# ----------------------------------------------------------------- a full disk


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize(
    "args",
    [
        ["log", "--demo", "--count", "2", "--interval", "0.1", "--output", "/dev/full"],
        ["log", "--demo", "--count", "2", "--interval", "0.1", "--format", "jsonl", "-o", "/dev/full"],
        ["log", "--demo", "--count", "2", "--interval", "0.1", "--processes", "--output", "/dev/full"],
        ["record", "/dev/full", "--demo", "--count", "2", "--interval", "0.1"],
    ],
)
def test_a_full_disk_is_one_line_exit_1(args):
    line = assert_one_line_error(run(*args), 1)
    assert line == "nvtopy: error: cannot write /dev/full: No space left on device"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize(
    "args",
    [
        ["log", "--demo", "--count", "2", "--interval", "0.1"],
        ["--demo", "--once"],  # small: buffered, fails in the flush at the end
        ["--demo", "--demo-gpus", "64", "--once", "--json"],  # large: fails in the write itself
    ],
)
def test_a_full_disk_on_stdout_is_one_line_exit_1(args):
    with open("/dev/full", "w") as full:
        result = subprocess.run([*NVTOPY, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    line = assert_one_line_error(result, 1)
    assert line == "nvtopy: error: cannot write standard output: No space left on device"


# ----------------------------------------------------------------- absurd numbers


@pytest.mark.parametrize(
    "gpus",
    [
        HUGE,  # int() would raise ValueError: more than 4,300 digits
        "-" + HUGE,
        "0," + HUGE,
        "0" * 4999 + "7",  # index 7: there are 4
        "²",  # str.isdigit() says yes, int() says no
        "\u0661",  # an Arabic-Indic one: int() takes it, no index is written so
    ],
    ids=lambda v: repr(v[:12]) + f"...({len(v)})",
)
def test_gpus_with_absurd_numbers_is_one_line_exit_2(gpus):
    line = assert_one_line_error(run("--demo", "--once", "--json", "--gpus", gpus), 2)
    assert "no GPU matches" in line


def test_gpus_with_leading_zeros_is_still_an_index():
    result = run("--demo", "--once", "--json", "--gpus", "0" * 4999 + "2")
    assert result.returncode == 0, result.stderr
    assert '"index": 2' in result.stdout and '"index": 0' not in result.stdout


@pytest.mark.parametrize(
    ("visible", "shown"),
    [
        (HUGE, []),  # out of range: CUDA exposes nothing
        ("0," + HUGE, [0]),  # the out-of-range entry ends the list
        ("3," + HUGE + ",1", [3]),
        ("-" + HUGE, []),
        ("0" * 5000 + "1", [1]),
        ("-0", [0]),
        ("+1", [1]),
        (" 1", [1]),
        ("2,²", [2]),
    ],
    ids=lambda v: repr(v[:12]) + f"...({len(v)})" if isinstance(v, str) else str(v),
)
def test_cuda_visible_devices_with_absurd_numbers_follows_cuda(visible, shown):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible}
    result = run("--demo", "--once", "--json", "--only-visible", env=env)
    assert result.returncode == 0, result.stderr
    assert "internal error" not in result.stderr
    assert [g["index"] for g in json.loads(result.stdout)["gpus"]] == shown


# ----------------------------------------------------------------- empty field lists


@pytest.mark.parametrize(
    "args",
    [
        ["--fields", ""],
        ["--fields", ",,"],
        ["--fields", " , "],
        ["--format", "jsonl", "--fields", ""],
        ["--processes", "--fields", ","],
    ],
)
def test_empty_field_list_is_a_usage_error(args):
    line = assert_one_line_error(run("log", "--demo", "--count", "1", *args), 2)
    assert "--fields" in line


def test_the_compute_filter_keeps_mps_clients():
    from nvtopy.model import GpuProcess, ProcessType
    from nvtopy.render.processes import ProcessFilter

    def proc(kind: ProcessType) -> GpuProcess:
        return gpu_process(0, 10, bare=True, type=kind)

    compute, graphics = ProcessFilter(process_type="C"), ProcessFilter(process_type="G")
    assert compute.matches(proc(ProcessType.MPS), None)
    assert not graphics.matches(proc(ProcessType.MPS), None)
    assert compute.matches(proc(ProcessType.BOTH), None) and graphics.matches(proc(ProcessType.BOTH), None)
    assert not compute.matches(proc(ProcessType.GRAPHICS), None)

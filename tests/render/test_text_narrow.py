"""``nvtopy --once`` in a terminal narrower than its tables: columns left out in a fixed order, never a wrapped row.

Why: with GPM the GPU table is about 130 cells wide; in an 80-column terminal every row wrapped onto two lines
(the header scrolled away on 24 rows). A terminal now gets the columns that fit, the least needed left out
first, and a line naming what was left out; a pipe always gets every column whole (scripts read it).
"""

from __future__ import annotations

import io
import re

import pytest

from nvtopy.render.text import GPU_DROPS, PROCESS_DROPS, render_snapshot
from nvtopy.render.units import width_of

from ..builders import gpu_process, gpu_sample, gpu_state, snapshot_of

GPM = {"sm_active_percent": 57.0, "tensor_active_percent": 21.0, "dram_active_percent": 33.0}
ALWAYS = ("GPU", "Name", "Util", "Memory", "Health")  # the GPU table's columns no width leaves out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _snapshot():
    gpus = []
    for index in range(4):
        processes = [
            gpu_process(index, 4000 + 10 * index + n, command=f"python train.py --rank {n} --config big.yaml")
            for n in range(2)
        ]
        gpus.append(gpu_state(index, *processes, sample=gpu_sample(**GPM)))
    return snapshot_of(*gpus)


def _render(monkeypatch, columns: int | None) -> str:
    out: io.StringIO
    if columns is None:
        out = io.StringIO()  # a pipe
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
        out = _Terminal()
    render_snapshot(_snapshot(), out, color=False)
    return out.getvalue()


def _has(header: str, title: str) -> bool:
    """Whether a table's header line has the column ``title`` (a whole word: ``P`` is not ``Power``'s)."""
    return re.search(rf"(?<!\S){re.escape(title)}(?!\S)", header) is not None


def _table(text: str, first: str) -> list[str]:
    """A table's lines: its header (starting with ``first``), its rule, its rows, up to the blank line or note."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next((i for i in range(start + 2, len(lines)) if not lines[i] or lines[i].startswith("(")), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("columns", [72, 80, 90, 100, 110, 120, 132, 160, 200])
def test_no_table_line_is_wider_than_the_terminal_and_the_columns_go_in_their_order(monkeypatch, columns):
    text = _render(monkeypatch, columns)
    gpu_lines = _table(text, "GPU  Name")
    process_lines = _table(text, "GPU   PID")
    for line in gpu_lines + process_lines:
        assert width_of(line) <= columns, (columns, line)
    header = gpu_lines[0]
    assert all(_has(header, title) for title in ALWAYS), header
    left_out = [title for title in GPU_DROPS if not _has(header, title)]
    assert left_out == list(GPU_DROPS[: len(left_out)]), "the first named go first"
    if left_out:
        said = f"(not shown in {columns} columns: {', '.join(left_out)})"
        note = next(line for line in text.splitlines() if line.startswith(f"(not shown in {columns} columns: Bus"))
        long = said[:-1] + "; a pipe gets every column)"
        assert note in (said, long) or (note.endswith("…") and said.startswith(note[:-1])), note  # cut to fit
    process_headers = process_lines[0]
    drops = [title for title in PROCESS_DROPS if title != "MIG"]  # no MIG column here
    gone = [title for title in drops if not _has(process_headers, title)]
    assert gone == drops[: len(gone)]
    assert "Command" in process_headers and "python train.py" in process_lines[2]


def test_eighty_columns_keep_what_matters_and_a_pipe_keeps_every_column(monkeypatch):
    narrow = _render(monkeypatch, 80)
    headers = _table(narrow, "GPU  Name")[0]
    assert not _has(headers, "Bus") and not _has(headers, "Throttle")
    for title in ("Temp", "Util", "SM Act", "Memory", "Power", "Health"):
        assert _has(headers, title), title
    piped = _render(monkeypatch, None)
    assert "not shown" not in piped
    for title in GPU_DROPS:
        assert _has(_table(piped, "GPU  Name")[0], title), title
    for title in PROCESS_DROPS:
        assert title == "MIG" or _has(_table(piped, "GPU   PID")[0], title), title
    assert "python train.py --rank 1 --config big.yaml" in piped, "a pipe's commands are whole"


def test_a_wide_terminal_leaves_nothing_out(monkeypatch):
    assert "not shown" not in _render(monkeypatch, 200)

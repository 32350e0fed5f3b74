"""The text view (``nvtopy --once``) and the TUI say the same thing about the same GPU or process.

Both draw their cells with nvtopy.render.cells; these tests do not call those
functions to get the expected answer. They draw each hostile or edge state
through each view's own code path -- the text view's rows and its ANSI output,
the TUI's GPU panel, title and compact line, and its process table widget --
and compare what came out: the same words, and the same style category (what a
colour means: dim, warn, alert, ...). A view that gets its own threshold or
word again disagrees with the other one here.
"""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from textual.app import App

from nvtopy.model import (
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HostInfo,
    OwnerKind,
    ProcessOwner,
    ProcessType,
    Reason,
    Snapshot,
)
from nvtopy.render import cells
from nvtopy.render.gpu import compact_line, panel_lines, panel_title
from nvtopy.render.processes import SortOrder
from nvtopy.render.styled import Line, style
from nvtopy.render.text import GPU_COLUMNS, PROCESS_COLUMNS, STYLES, gpu_row, process_row, render_snapshot
from nvtopy.tui.process_table import ProcessTable

from ..builders import gpu_process, gpu_sample, gpu_state

GIB = 2**30
SLOWDOWN = 87

# Each category's TUI style, back to the category; bold is the TUI's emphasis of a plain value (a title, P-state).
TUI_CATEGORY = {style(cells.RICH_STYLES[category]): category for category in cells.CATEGORIES}
TUI_CATEGORY[style("bold")] = cells.PLAIN
ANSI_CATEGORY = {STYLES[category]: category for category in cells.CATEGORIES if category}


def tui_category(piece_style) -> str:
    """The category a TUI style draws; a style of the view's own (a bar, a border) is named as itself."""
    return TUI_CATEGORY.get(piece_style, f"not a category: {piece_style}")


# --------------------------------------------------------------------------- GPU states

BASE_STATIC = GpuStatic(
    0,
    uuid="GPU-0",
    name="NVIDIA H100 80GB HBM3",
    bus_id="00000000:3B:00.0",
    memory_total_bytes=80 * GIB,
    temperature_slowdown_c=SLOWDOWN,
    temperature_shutdown_c=92,
)
BASE = {
    "memory_used_bytes": 40 * GIB,
    "utilization_gpu_percent": 83,
    "utilization_memory_percent": 41,
    "temperature_c": 61,
    "fan_percent": 37,
    "power_draw_w": 350.0,
    "power_limit_w": 700.0,
    "pstate": 2,
    "clock_sm_mhz": 1980,
    "clock_mem_mhz": 2619,
    "ecc_mode": True,
    "ecc_uncorrected_volatile": 0,
    "throttle_reasons": ("gpu_idle",),
}


def gpu(static: dict | None = None, **sample) -> GpuState:
    """GPU 0 as BASE_STATIC and BASE read it at time 1, with these static fields and readings changed."""
    static_ = dataclasses.replace(BASE_STATIC, **(static or {}))
    return gpu_state(0, static=static_, sample=gpu_sample(1.0, bare=True, **{**BASE, **sample}))


GPU_CASES: dict[str, GpuState] = {
    "base": gpu(),
    # Temperature against the GPU's own slowdown threshold, at and around every band's edge.
    **{f"temp {delta:+d}": gpu(temperature_c=SLOWDOWN + delta) for delta in (-40, -16, -15, -6, -5, -1, 0, 3)},
    "temp, no threshold": gpu({"temperature_slowdown_c": None}, temperature_c=95),
    "temp N/A": gpu(temperature_c=None),
    "fan N/A": gpu(fan_percent=None),
    "util N/A": gpu(utilization_gpu_percent=None),
    "util 100": gpu(utilization_gpu_percent=100),
    "pstate N/A": gpu(pstate=None),
    "power draw N/A": gpu(power_draw_w=None),
    "power cap N/A": gpu(power_limit_w=None),
    "power N/A": gpu(power_draw_w=None, power_limit_w=None),
    "memory used N/A": gpu(memory_used_bytes=None),
    "memory total N/A": gpu({"memory_total_bytes": None}),
    "memory full": gpu(memory_used_bytes=80 * GIB),
    "ECC N/A": gpu(ecc_mode=None, ecc_uncorrected_volatile=None),
    "ECC off": gpu(ecc_mode=False, ecc_uncorrected_volatile=None),
    "ECC on, no count": gpu(ecc_uncorrected_volatile=None),
    "ECC errors": gpu(ecc_uncorrected_volatile=3),
    "throttle N/A": gpu(throttle_reasons=None),
    "throttle none": gpu(throttle_reasons=()),
    "throttle power cap": gpu(throttle_reasons=("gpu_idle", "sw_power_cap")),
    "throttle thermal": gpu(throttle_reasons=("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown")),
    "throttle unknown": gpu(throttle_reasons=("0x8000", "odd\x1b[2J")),
    "name no permission": gpu({"name": None, "unavailable": {"name": Reason.NO_PERMISSION}}),
    "name N/A": gpu({"name": None}),
    "name hostile": gpu({"name": "NVIDIA \x1b]0;pwned\x07H100"}),
    "remote": gpu({"host": "node7", "host_index": 1}),
}

# Columns the TUI's full panel shows, and those its compact line shows (as the same piece).
PANEL_FIELDS = ("Name", "Temp", "Fan", "Util", "Memory", "Power", "P", "ECC", "Throttle")
COMPACT_FIELDS = ("Temp", "Util", "P")


def text_cells(state: GpuState) -> dict[str, tuple[str, str]]:
    return {title: cell for (title, _), cell in zip(GPU_COLUMNS, gpu_row(state), strict=True)}


def pieces(*lines: Line) -> list[tuple[str, str]]:
    """(text, category) of every piece the TUI draws."""
    return [(text, tui_category(piece_style)) for line in lines for text, piece_style in line.parts]


def _match(field: str, text: str, piece: str) -> bool:
    piece = piece.strip()
    if field == "Throttle":
        return piece == f"⚠ {text}"
    if field == "Memory":
        return piece == text.split(" (", maxsplit=1)[0]  # the text view adds "(50%)"; the panel draws the share apart
    return piece == text


def tui_matches(field: str, text: str, drawn: list[tuple[str, str]]) -> list[str]:
    return [category for piece, category in drawn if _match(field, text, piece)]


@pytest.mark.parametrize("case", list(GPU_CASES))
def test_gpu_cells_agree(case):
    state = GPU_CASES[case]
    row = text_cells(state)
    panel = pieces(panel_title(state), *panel_lines(state, 140))
    compact = pieces(compact_line(state, 200))
    for field in PANEL_FIELDS:
        text, category = row[field]
        if field == "Name" and state.static.host is not None:
            label = cells.host_label(state.static)
            assert text.startswith(f"{label} "), (case, text)
            assert any(piece.strip() == label for piece, _ in panel), "the same host label in the title"
            text = text[len(label) + 1 :]
        if field == "Throttle" and (text == "-" or category == cells.DIM):
            # Nothing holds the clocks back, or the driver did not say: the panel shows no warning.
            assert not any("⚠" in piece for piece, _ in panel + compact), (case, panel)
            continue
        found = tui_matches(field, text, panel)
        assert found, f"{case}: the panel does not show the text view's {field} {text!r}: {panel}"
        assert set(found) == {category}, f"{case}: {field} {text!r} is {category!r} as text, {found} in the TUI"
        if field in COMPACT_FIELDS:
            found = tui_matches(field, text, compact)
            assert found, f"{case}: the compact line does not show {field} {text!r}: {compact}"
            assert set(found) == {category}, f"{case}: {field} {text!r} is {category!r} as text, {found} compact"
    # The compact line's markers follow the same categories: a warning sign when clocks are held back,
    # an alert when ECC counts uncorrected errors.
    warn = row["Throttle"][1] == cells.WARN
    assert (" ⚠", cells.WARN) in compact if warn else not any("⚠" in p for p, _ in compact)
    alert = row["ECC"][1] == cells.ALERT
    assert ((" ECC!", cells.ALERT) in compact) is alert


def test_gpu_words_and_bands():
    """The words and bands both views now share (the old text view said "Off" and had no hot band)."""
    expected = {
        "temp -40": ("47°C", cells.GOOD),
        "temp -16": ("71°C", cells.GOOD),
        "temp -15": ("72°C", cells.WARN),
        "temp -6": ("81°C", cells.WARN),
        "temp -5": ("82°C", cells.HOT),
        "temp -1": ("86°C", cells.HOT),
        "temp +0": ("87°C", cells.ALERT),
        "temp +3": ("90°C", cells.ALERT),
        "temp, no threshold": ("95°C", cells.PLAIN),
        "temp N/A": ("N/A", cells.DIM),
    }
    for case, cell in expected.items():
        assert text_cells(GPU_CASES[case])["Temp"] == cell, case
    ecc = {
        "ECC N/A": ("N/A", cells.DIM),
        "ECC off": ("Off", ""),
        "ECC on, no count": ("On", ""),
        "ECC errors": ("3", "alert"),
    }
    for case, cell in ecc.items():
        assert text_cells(GPU_CASES[case])["ECC"] == cell, case
    assert text_cells(GPU_CASES["throttle thermal"])["Throttle"] == ("HW slowdown, HW thermal", cells.WARN)
    assert text_cells(GPU_CASES["power cap N/A"])["Power"] == ("350W", cells.PLAIN)
    assert text_cells(GPU_CASES["name no permission"])["Name"] == ("N/A (no permission)", cells.DIM)


@pytest.mark.parametrize("margin", [(5, 15), (2, 30)])
def test_both_views_follow_one_temperature_threshold(monkeypatch, margin):
    """Moving the shared bands moves both views: neither keeps a threshold of its own."""
    hot, warm = margin
    monkeypatch.setattr(cells, "TEMPERATURE_HOT_MARGIN", hot)
    monkeypatch.setattr(cells, "TEMPERATURE_WARM_MARGIN", warm)
    for delta, category in ((-warm - 1, cells.GOOD), (-warm, cells.WARN), (-hot, cells.HOT), (0, cells.ALERT)):
        state = gpu(temperature_c=SLOWDOWN + delta)
        text = f"{SLOWDOWN + delta}°C"
        assert text_cells(state)["Temp"] == (text, category)
        assert tui_matches("Temp", text, pieces(*panel_lines(state, 140))) == [category]
        assert tui_matches("Temp", text, pieces(compact_line(state, 200))) == [category]


def _lost(**static) -> GpuState:
    return gpu_state(0, static=dataclasses.replace(BASE_STATIC, **static), sample=gpu_sample(1.0, bare=True, lost=True))


@pytest.mark.parametrize(
    "state",
    [
        _lost(),
        _lost(name=None),
        GpuState(GpuStatic(2, host="node9"), GpuSample(1.0, lost=True), note="node9: connection refused"),
        GpuState(GpuStatic(2, host="node9", host_index=0), GpuSample(1.0), note="node9: 8 more GPUs not shown"),
        GpuState(GpuStatic(2, host="peer\x1b]0;x\x07"), GpuSample(1.0, lost=True), note="bad \x1b[2J reply"),
    ],
    ids=["lost", "lost, no name", "unreachable host", "capped host", "hostile note"],
)
def test_lost_and_noted_gpus_agree(state):
    text, category = text_cells(state)["Name"]
    panel = pieces(*panel_lines(state, 140))
    compact = pieces(compact_line(state, 200))
    if state.note:
        note = next(piece for piece, _ in panel if piece.strip())
        assert text.endswith(note) and text.startswith(cells.host_label(state.static)), (text, note)
        assert [c for p, c in panel if p == note] == [category], "the panel's note has the text view's category"
        assert [c for p, c in compact if p == note] == [category], "and so has the compact line's"
        assert category == (cells.HOT if state.lost else cells.WARN), (
            "an error is hot; a remark about a host, a warning"
        )
        return
    assert "LOST" in text, text
    lost_panel = [c for p, c in panel if "LOST" in p]
    lost_compact = [c for p, c in compact if "LOST" in p]
    assert lost_panel == [category] and lost_compact == [category], (category, panel, compact)
    assert category == cells.ALERT


# --------------------------------------------------------------------------- the text view's ANSI output

SGR = re.compile(r"(\x1b\[[0-9;]*m)([^\x1b]*)\x1b\[0m")


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    """render_snapshot clips to the terminal's width: pin it (160, its fallback), so no runner's width decides."""
    monkeypatch.setenv("COLUMNS", "160")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def ansi_runs(snapshot: Snapshot) -> set[tuple[str, str]]:
    """(category, text) of every coloured run ``render_snapshot`` writes to a terminal."""
    out = _Terminal()
    render_snapshot(snapshot, out, color=True)
    return {(ANSI_CATEGORY.get(code, code), text.strip()) for code, text in SGR.findall(out.getvalue())}


def test_the_text_view_writes_the_categories_of_its_rows():
    states = tuple(GPU_CASES.values())
    snapshot = Snapshot(1.0, HostInfo("h", "550", "12.4", user="alice"), states)
    runs = ansi_runs(snapshot)
    for state in states:
        for text, category in gpu_row(state):
            if category:
                assert (category, text) in runs, (text, category)


# --------------------------------------------------------------------------- processes

ME = "alice"


def proc(pid: int, **changes) -> GpuProcess:
    """My ``python train.py`` on GPU 0, an hour in: 3 GiB, 41 % SM, 98.5 % CPU, 2 GiB of host memory."""
    return gpu_process(0, pid, **{"gpu_uuid": "GPU-0", "gpu_memory_bytes": 3 * GIB, "sm_percent": 41, "user": ME,
                                  "command": "python train.py", "cpu_percent": 98.5, "host_memory_bytes": 2 * GIB,
                                  "create_time": 100.0, "running_seconds": 3725.0, **changes})  # fmt: skip


NO_PERMISSION = {"user": Reason.NO_PERMISSION, "command": Reason.NO_PERMISSION}
PROCESS_CASES: dict[str, GpuProcess] = {
    "mine": proc(101),
    "another user's": proc(102, user="bob"),
    "zombie": proc(103, status="zombie"),
    "another user's zombie": proc(104, user="bob", status="zombie"),
    "foreign pid namespace": proc(
        105, user=None, command=None, cpu_percent=None, host_memory_bytes=None, running_seconds=None, foreign=True
    ),
    "no permission": proc(
        106, user=None, command=None, cpu_percent=None, host_memory_bytes=None, unavailable=NO_PERMISSION
    ),
    "vanished (no host facts)": proc(
        107, user=None, command=None, cpu_percent=None, host_memory_bytes=None, running_seconds=None, status="unknown"
    ),
    "N/A memory and SM": proc(108, gpu_memory_bytes=None, sm_percent=None, type=ProcessType.BOTH),
    "MPS client": proc(109, type=ProcessType.MPS, cpu_percent=1234.5),
    "hostile": proc(110, user="ev\x1b[8mil", command="rm \x1b]0;x\x07 -rf"),
    "in a pod": proc(111, owner=ProcessOwner(OwnerKind.KUBERNETES, namespace="ml", pod="trainer-0")),
    "plain host process": proc(112, owner=ProcessOwner(OwnerKind.HOST)),
    "hostile owner": proc(113, owner=ProcessOwner(OwnerKind.DOCKER, name="[b]x\x1b]0;y\x07")),
}
SENTINEL = proc(1, gpu_index=3)  # row 0 carries the cursor (reverse video): the cases come after it


class _TableApp(App):
    def compose(self):
        yield ProcessTable(id="table")


def _segments_by_cell(strip, placed) -> dict[str, tuple[str, set]]:
    """Each column's text and the categories of its segments, from one drawn row."""
    spans = []
    x = 0
    for segment in strip:
        spans.append((x, segment.text, segment.style))
        x += len(segment.text)
    out = {}
    for column in placed:
        start, end = column.x, column.x + column.width
        text = "".join(
            t[max(0, start - x0) : max(0, end - x0)] for x0, t, _ in spans if x0 < end and x0 + len(t) > start
        )
        styles = {s for x0, t, s in spans if x0 < end and x0 + len(t) > start}
        out[column.column.key] = (text.strip(), {tui_category(None if s == style("") or not s else s) for s in styles})
    return out


async def test_process_cells_agree():
    rows = [SENTINEL, *PROCESS_CASES.values()]
    app = _TableApp()
    async with app.run_test(size=(220, len(rows) + 4)) as pilot:
        table = app.query_one(ProcessTable)
        table.set_rows(rows, me=ME, tags=frozenset(), order=SortOrder())
        await pilot.pause()
        placed = table._layout(table._width)
        assert {p.column.key for p in placed} == {key for _, _, key in PROCESS_COLUMNS}, "every column is drawn"
        for y, (case, process) in enumerate(PROCESS_CASES.items(), start=2):
            drawn = _segments_by_cell(table.render_line(y), placed)
            for (title, _, key), (text, category) in zip(PROCESS_COLUMNS, process_row(process, ME), strict=True):
                tui_text, tui_categories = drawn[key]
                assert tui_text == text, f"{case}: {title} is {text!r} as text, {tui_text!r} in the TUI"
                assert tui_categories == {category}, f"{case}: {title} {text!r}: {category!r} as text, {tui_categories}"


def test_process_words():
    """The words both views now share for the hard cases."""
    row = {
        case: dict(zip((t for t, _, _ in PROCESS_COLUMNS), process_row(p, ME), strict=True))
        for case, p in PROCESS_CASES.items()
    }
    assert row["mine"]["User"] == (ME, cells.PLAIN) and row["another user's"]["User"] == ("bob", cells.DIM)
    assert row["another user's"]["GPU Mem"] == ("3.0GiB", cells.PLAIN), "other users' figures stay readable"
    assert row["zombie"]["Command"] == ("python train.py <defunct>", cells.BAD)
    assert row["another user's zombie"]["Command"] == ("python train.py <defunct>", cells.BAD)
    foreign = row["foreign pid namespace"]
    assert foreign["User"] == ("?", cells.DIM)
    assert foreign["Command"] == ("(not visible from this PID namespace)", cells.DIM)
    denied = row["no permission"]
    assert denied["User"] == ("N/A", cells.DIM) and denied["Command"] == ("N/A (no permission)", cells.DIM)
    assert row["N/A memory and SM"]["SM%"] == ("N/A", cells.DIM) and row["N/A memory and SM"]["Type"] == ("C+G", "")
    assert (
        row["mine"]["SM%"] == ("41", "")
        and row["mine"]["CPU%"] == ("98.5", "")
        and row["mine"]["Time"] == ("1:02:05", "")
    )
    assert row["hostile"]["Command"] == ("rm \\e]0;x\\x07 -rf", "")
    assert row["in a pod"]["Owner"] == ("ml/trainer-0", cells.PLAIN)
    assert row["plain host process"]["Owner"] == ("-", cells.DIM)
    assert row["mine"]["Owner"] == ("N/A", cells.DIM), "not resolved: unknown"
    assert row["foreign pid namespace"]["Owner"] == ("N/A", cells.DIM)
    assert row["hostile owner"]["Owner"] == ("[b]x\\e]0;y\\x07", cells.PLAIN)


def test_the_text_view_writes_the_categories_of_its_process_rows():
    state = GpuState(BASE_STATIC, GpuSample(1.0, **BASE), processes=tuple(PROCESS_CASES.values()))
    runs = ansi_runs(Snapshot(1.0, HostInfo("h", "550", "12.4", user=ME), (state,)))
    for process in PROCESS_CASES.values():
        for text, category in process_row(process, ME):
            if category:
                assert (category, text) in runs, (text, category)

"""The short history (:mod:`nvtopy.history`), and the one home of each thing the views share with it.

One ring keeps the last N samples for the GPU sparklines and for the process screen; one renderer
draws eighth-block columns (``render/chart.py``); one formatter writes a byte rate (``render/units.py``).
The guards here read the package's source, so a second copy of any of them fails a test.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from nvtopy.history import SampleRing
from nvtopy.model import GpuHistory, GpuSample, GpuStatic, HistoryBuffer
from nvtopy.render.chart import block_chart, sparkline
from nvtopy.render.units import NA, fmt_rate
from nvtopy.tui.process_screen import ProcessHistory

PACKAGE = Path(__file__).resolve().parents[2] / "nvtopy"


def _sources() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")}


# --- the ring ---------------------------------------------------------------------------------------


def test_ring_keeps_the_last_points_and_trims_in_bulk():
    ring: SampleRing[float] = SampleRing(2, points=40)
    for i in range(200):
        ring.append(float(i), (float(i), -float(i)))
        assert len(ring.times) <= 40 + ring.slack, "bounded: at most a slack past its length"
    times, (first, second) = ring.window()
    assert len(ring) == 40 and times == tuple(float(i) for i in range(160, 200))
    assert first[-1] == 199.0 and second[0] == -160.0


def test_ring_of_lists_gives_back_what_went_in():
    ring: SampleRing[float | None] = SampleRing(2, points=3, typecode=None)
    for when, values in ((1.0, (5, None)), (2.0, (6, 1.25)), (3.0, (None, 2.5)), (4.0, (7, None))):
        ring.append(when, values)
    times, (ints, floats) = ring.window()
    assert times == (2.0, 3.0, 4.0)
    assert ints == (6, None, 7) and all(type(v) is int for v in ints if v is not None), "ints stay ints"
    assert floats == (1.25, 2.5, None), "a gap stays None, never NaN or 0"


def test_history_buffer_is_a_ring_of_the_gpus_points():
    static = GpuStatic(index=0, memory_total_bytes=100)
    buffer = HistoryBuffer(length=3)
    for t in range(5):
        buffer.append(static, GpuSample(timestamp=float(t), utilization_gpu_percent=t * 10, memory_used_bytes=t))
    history = buffer.history()
    assert isinstance(history, GpuHistory) and len(buffer) == 3
    assert history.timestamps == (2.0, 3.0, 4.0)
    assert history.utilization_gpu_percent == (20, 30, 40)
    assert history.memory_used_percent == (2.0, 3.0, 4.0)
    assert history.sm_active_percent == (None, None, None), "not measured: gaps"
    assert HistoryBuffer().history() == GpuHistory(), "nothing yet: empty"


def test_a_history_handed_out_never_changes_as_the_buffer_goes_on():
    """A snapshot's history is a window onto the ring (nothing copied): later points and cuts must not show in it."""
    static = GpuStatic(index=0, memory_total_bytes=100)
    buffer = HistoryBuffer(length=4)
    kept = []
    for t in range(60):  # past the ring's slack many times over: every cut happens while old windows are held
        buffer.append(static, GpuSample(timestamp=float(t), utilization_gpu_percent=t, power_draw_w=t / 2))
        kept.append((t, buffer.history()))
    for t, history in kept:
        first = max(0, t - 3)
        assert history.timestamps == tuple(float(n) for n in range(first, t + 1)), f"the history of t={t} moved"
        assert history.utilization_gpu_percent == tuple(range(first, t + 1))
        assert history.power_draw_w == tuple(n / 2 for n in range(first, t + 1))
    early, again = kept[10][1], HistoryBuffer(length=4)
    for t in range(7, 11):
        again.append(static, GpuSample(timestamp=float(t), utilization_gpu_percent=t, power_draw_w=t / 2))
    assert early == again.history() and hash(early) == hash(again.history()), "compared by the values it holds"
    assert early != kept[11][1]
    assert repr(early).startswith("GpuHistory(timestamps=(7.0, 8.0, 9.0, 10.0), utilization_gpu_percent=(7, 8")


def test_gpu_and_process_histories_share_the_one_ring():
    """The sparklines' and the process screen's short histories are the same ring, not copies of the idea."""
    assert isinstance(HistoryBuffer()._ring, SampleRing)
    processes = ProcessHistory()
    processes.pin((1, None))
    assert all(isinstance(ring, SampleRing) for ring in processes._series.values())
    sources = _sources()
    for name in ("model.py", "tui/process_screen.py"):  # where a deque of rows and parallel arrays used to be
        assert not re.search(r"^from array import|^import (array|collections)$|deque\(", sources[name], re.MULTILINE), (
            f"{name} keeps samples itself again: use nvtopy.history.SampleRing"
        )


# --- block charts -----------------------------------------------------------------------------------


def test_a_sparkline_is_a_block_chart_one_line_tall():
    values = (0, None, 12, 50.5, 100, 140, -3, math.nan)
    line = sparkline(values, 10, "green")
    assert line.parts == block_chart(values, 10, 1, 100.0, "green")[0].parts
    assert line.plain == "  ▁·▁▄██▁·"
    assert sparkline(values, 0).plain == "" and sparkline((), 3).plain == "   "


def test_block_characters_are_defined_once():
    """The eighth blocks are spelled out in render/chart.py only: another copy is another renderer."""
    holders = [name for name, text in _sources().items() if "▂▃▄▅▆▇" in text]
    assert holders == ["render/chart.py"]


def test_no_chart_renderer_shares_a_name_with_another():
    """Two functions once both called ``chart_lines`` drew different charts; each now says which it draws."""
    defined = [
        (name, match.group(1))
        for name, text in _sources().items()
        for match in re.finditer(r"^def ((?:\w+_)?chart(?:_\w+)?)\(", text, re.MULTILINE)
    ]
    names = [function for _, function in defined]
    assert len(names) == len(set(names)), defined


# --- byte rates -------------------------------------------------------------------------------------


def test_a_rate_is_formatted_in_one_place():
    assert fmt_rate(None) == NA and fmt_rate(1536) == "2KiB/s" and fmt_rate(3 * 2**30) == "3.0GiB/s"
    writes_rate = re.compile(r"fmt_bytes\([^)]*\)\}/s")
    assert [name for name, text in _sources().items() if writes_rate.search(text)] == ["render/units.py"]

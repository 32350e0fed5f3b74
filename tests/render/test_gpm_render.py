"""The real-work meter in the views: SM, tensor and DRAM activity (NVML GPM) beside utilisation.

Hand-made GPU states give exact figures: an H100 at 85 % utilisation with 52 %
of its SMs active, one at 100 % with 3 % (a stuck collective: it must not look
like a GPU that computes), an A100 (no GPM: N/A and why, never 0), a MIG GPU
whose instances report their own activity. Simulated snapshots check that the
pieces fit together, and one pilot run checks what the terminal shows.
"""

from __future__ import annotations

import dataclasses
import io

from rich.style import Style

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import (
    GPM_FIELDS,
    MIG_GPM_FIELDS,
    GpuHealth,
    GpuHistory,
    GpuState,
    MigInstance,
    MigUsage,
    Reason,
    Snapshot,
)
from nvtopy.render.cells import (
    ACTIVITY_WORDS,
    GPM_NOT_SUPPORTED,
    WARN,
    activity_reason,
    activity_shown,
    gpu_little_work,
    little_work,
    sm_active_cell,
)
from nvtopy.render.gpu import (
    activity_line,
    activity_rows,
    compact_line,
    compact_lines,
    mig_lines,
    panel_extra_rows,
    panel_lines,
)
from nvtopy.render.health import gpu_health_lines
from nvtopy.render.styled import Line
from nvtopy.render.text import activity_notes, render_snapshot
from nvtopy.sources.collector import Collector
from nvtopy.tui.gpu_view import plan_layout

from ..builders import GIB, gpu_sample, gpu_state, gpu_static, host_info, snapshot_of

YELLOW = Style.parse("yellow")
NOT_SUPPORTED = dict.fromkeys(GPM_FIELDS, Reason.NOT_SUPPORTED)


def gpu(
    index: int = 0,
    *,
    util: int | None = 85,
    sm: float | None = 52.0,
    tensor: float | None = 26.0,
    dram: float | None = 31.0,
    reasons: dict[str, Reason] | None = None,
    name: str = "NVIDIA H100 80GB HBM3",
    **sample: object,
) -> GpuState:
    """One GPU with the given utilisation and GPM figures (None with ``reasons``: N/A)."""
    values = {
        "memory_used_bytes": 40 * GIB,
        "utilization_gpu_percent": util,
        "utilization_memory_percent": 48,
        "temperature_c": 65,
        "power_draw_w": 500.0,
        "power_limit_w": 700.0,
        "pstate": 0,
        "graphics_active_percent": None if util is None else float(util),
        "sm_active_percent": sm,
        "tensor_active_percent": tensor,
        "dram_active_percent": dram,
        **sample,
    }
    board = {"name": name, "clock_sm_max_mhz": None, "pcie_link_gen_max": None, "pcie_link_width_max": None}
    static = gpu_static(index, nvlink_count=None, **board)
    history = GpuHistory(utilization_gpu_percent=(util,) * 30, sm_active_percent=(sm,) * 30)
    readings = gpu_sample(1.0, bare=True, unavailable=reasons or {}, **values)
    return gpu_state(index, static=static, sample=readings, history=history)


def a100(index: int = 0) -> GpuState:
    """An A100: utilisation as usual, no GPM (NotSupported for every figure)."""
    return gpu(index, sm=None, tensor=None, dram=None, reasons=NOT_SUPPORTED, name="NVIDIA A100-SXM4-80GB")


def stuck(index: int = 2) -> GpuState:
    """A GPU at 100 % utilisation with 3 % of its SMs active: a deadlocked collective."""
    return gpu(index, util=100, sm=3.0, tensor=1.0, dram=2.0)


def texts(lines: list[Line]) -> list[str]:
    return [line.plain for line in lines]


def styles_of(line: Line, text: str) -> list[Style | None]:
    """The styles of the pieces of ``line`` that contain ``text``."""
    return [style for piece, style in line.parts if text in piece]


def snapshot(*gpus: GpuState) -> Snapshot:
    return snapshot_of(*gpus, timestamp=1.0, host=host_info(driver_version="550"))


def once(snap: Snapshot) -> str:
    out = io.StringIO()
    render_snapshot(snap, out, color=False)
    return out.getvalue()


# --------------------------------------------------------------------------- the words and colours


def test_little_work_is_a_busy_gpu_whose_sms_barely_work():
    assert little_work(100, 3.0) and little_work(80, 19.9)
    assert not little_work(100, 90.0), "busy and computing"
    assert not little_work(50, 3.0), "not busy: an idle-ish GPU is not a stuck one"
    assert not little_work(100, None) and not little_work(None, 3.0), "unknown is not a verdict"
    assert gpu_little_work(stuck().sample) and not gpu_little_work(gpu(util=100, sm=90.0).sample)
    assert sm_active_cell(stuck().sample) == ("3%", WARN)
    assert sm_active_cell(gpu().sample) == ("52%", "")


def test_reasons_read_as_words():
    assert activity_reason(Reason.NOT_SUPPORTED) == GPM_NOT_SUPPORTED == "GPM needs Hopper or newer"
    assert activity_reason(Reason.NO_PERMISSION) == "no permission to read GPM"
    assert activity_reason(None) == "not reported"
    assert not activity_shown(a100().sample) and activity_shown(gpu().sample)
    denied = gpu(sm=None, tensor=None, dram=None, reasons=dict.fromkeys(GPM_FIELDS, Reason.NO_PERMISSION))
    assert activity_shown(denied.sample), "a Hopper GPU that may not read GPM says so on its own line"


# --------------------------------------------------------------------------- the panel


def test_the_panel_shows_sm_tensor_and_dram_under_utilisation():
    lines = texts(panel_lines(gpu(), 80))
    assert len(lines) == 5 and activity_rows(gpu()) == 1 and panel_extra_rows(gpu()) == 1
    utl, sm = lines[1], lines[2]
    assert utl.startswith("UTL ") and "85%  BW  48%" in utl
    assert sm.startswith("SM  ") and sm.rstrip().endswith("52%  TNS  26%  DRAM  31%")
    assert utl.index("85%") == sm.index("52%"), "the figures stack: utilisation right above SM active"
    assert utl.index("▇") == sm.index("▄"), "both charts start in the same column (time axes aligned)"


def test_a_busy_gpu_doing_little_work_looks_different_from_one_that_computes():
    busy = panel_lines(stuck(), 80)[2]
    working = panel_lines(gpu(util=100, sm=90.0), 80)[2]
    assert f"⚠ {ACTIVITY_WORDS}" in busy.plain and busy.plain.rstrip().endswith("3%  TNS   1%  DRAM   2%")
    assert YELLOW in styles_of(busy, "3%") and YELLOW in styles_of(busy, ACTIVITY_WORDS)
    assert ACTIVITY_WORDS not in working.plain and "90%" in working.plain
    assert YELLOW not in styles_of(working, "90%")


def test_the_warning_words_give_way_on_a_narrow_panel_but_the_colour_stays():
    line = activity_line(stuck(), 40)
    assert ACTIVITY_WORDS not in line.plain and line.cells == 40
    assert YELLOW in styles_of(line, "3%")


def test_a100_says_na_and_why_on_its_utilisation_line_never_zero():
    state = a100()
    assert activity_rows(state) == 0 and len(panel_lines(state, 100)) == 4, "no line spent on N/A"
    wide = texts(panel_lines(state, 100))[1]
    assert wide.rstrip().endswith(f"SM N/A ({GPM_NOT_SUPPORTED})")
    usual = texts(panel_lines(state, 55))[1]
    assert usual.rstrip().endswith("SM N/A (pre-Hopper)") and "85%" in usual
    narrow = texts(panel_lines(state, 36))[1]
    assert "85%" in narrow and "Hopper" not in narrow
    assert "0%" not in wide.replace("BW  48%", "")


def test_a_source_without_gpm_fields_draws_the_panel_as_before():
    old = gpu(sm=None, tensor=None, dram=None)  # a recording made before GPM: no values, no reasons
    lines = texts(panel_lines(old, 80))
    assert len(lines) == 4 and "SM N/A" not in lines[1] and "TNS" not in "".join(lines)


def test_no_permission_gets_its_line_with_the_reason():
    denied = gpu(sm=None, tensor=None, dram=None, reasons=dict.fromkeys(GPM_FIELDS, Reason.NO_PERMISSION))
    utl, line = texts(panel_lines(denied, 80))[1:3]
    assert line.rstrip() == "SM  N/A (no permission to read GPM)"
    assert utl.rstrip().endswith("85%  BW  48%"), "no empty chart to align with: utilisation keeps its width"


def test_panel_heights_count_the_real_work_line():
    plan = plan_layout(4, 120, 40, links=True, extra=(0,) * 4, panel_extra=(1,) * 4)
    assert (plan.kind, plan.links, plan.lines) == ("full", True, 2 * 8)
    assert plan_layout(4, 120, 40, links=True, extra=(0,) * 4, panel_extra=(0,) * 4).lines == 2 * 7
    short = plan_layout(4, 120, 34, links=True, extra=(0,) * 4, panel_extra=(1,) * 4)
    assert (short.kind, short.links, short.lines) == ("full", False, 2 * 7), "the links line goes first"
    assert plan_layout(4, 80, 24, links=True, panel_extra=(1,) * 4).kind == "compact"


# --------------------------------------------------------------------------- the compact view


def test_the_compact_line_has_sm_active_beside_utilisation():
    assert " 85% SM  52% " in compact_line(gpu(), 100).plain
    line = compact_line(stuck(), 100)
    assert "100% SM   3% " in line.plain and YELLOW in styles_of(line, "3%")
    assert f"⚠ {ACTIVITY_WORDS}" in line.plain, "the name's place says why"
    assert " SM " not in compact_line(a100(), 100).plain, "no room to say why: the panel and --once do"


def test_compact_bars_line_up_with_a_throttle_marker_on_a_narrow_line():
    plain = gpu(index=1)
    marked = gpu(index=2, throttle_reasons=("hw_slowdown",))
    for width in (38, 60, 80, 100):
        a, b = compact_line(plain, width), compact_line(marked, width)
        assert a.cells == b.cells == width
        assert a.plain.index("%") == b.plain.index("%"), f"memory figure in the same column at {width}"
        assert a.plain.index(" SM ") == b.plain.index(" SM "), f"SM active in the same column at {width}"
        assert "⚠" in b.plain


def test_a_narrow_compact_line_drops_the_pstate_and_power_before_sm_active():
    line = compact_line(gpu(), 38).plain
    assert "85% SM  52%" in line and "P0" not in line and "…" not in line


# --------------------------------------------------------------------------- MIG instances


def mig_gpu(sm: tuple[float | None, float | None] = (45.0, 3.0), reasons: Reason | None = None) -> GpuState:
    """An H100 with two instances reporting their own activity (the second busy with little work)."""
    instances = (
        MigInstance(0, uuid="MIG-aaaa", gpu_instance_id=1, compute_instance_id=0, profile="3g.40gb", sm_count=60),
        MigInstance(1, uuid="MIG-bbbb", gpu_instance_id=2, compute_instance_id=0, profile="2g.20gb", sm_count=32),
    )
    instances = tuple(dataclasses.replace(m, memory_total_bytes=(40 - 20 * m.index) * GIB) for m in instances)
    unavailable = {} if reasons is None else dict.fromkeys(MIG_GPM_FIELDS, reasons)
    usage = tuple(
        MigUsage(
            i,
            memory_used_bytes=4 * GIB,
            memory_free_bytes=10 * GIB,
            graphics_active_percent=None if sm[i] is None else 95.0,
            sm_active_percent=sm[i],
            tensor_active_percent=None if sm[i] is None else 19.0,
            dram_active_percent=None if sm[i] is None else 30.0,
            unavailable=unavailable,
        )
        for i in range(2)
    )
    state = gpu(1, util=None, mig_usage=usage)
    static = dataclasses.replace(state.static, mig_mode=True, mig_mode_pending=True, mig_instances=instances)
    return dataclasses.replace(state, static=static)


def test_mig_instances_show_their_own_sm_and_tensor_where_room():
    wide = mig_lines(mig_gpu(), 116, head=Line("MIG "))
    assert "SM   45%  TNS  19%" in wide[0].plain and "60 SMs" in wide[0].plain
    assert "SM    3%" in wide[1].plain and YELLOW in styles_of(wide[1], "3%"), "busy with little work"
    usual = texts(mig_lines(mig_gpu(), 55, head=Line("MIG ")))
    assert all(len(line) == 55 for line in usual)
    assert "SM   45%" in usual[0] and "TNS" not in usual[0], "SM active before tensor, the SM count, the UUID"


def test_the_mig_gpu_panel_has_its_real_work_line_although_utilisation_is_hidden():
    lines = texts(panel_lines(mig_gpu(), 80))
    assert lines[1].startswith("UTL N/A") and lines[2].startswith("SM  ") and "52%" in lines[2]
    assert len(lines) == 5 + 2


def test_mig_instances_on_a100_stay_as_they_were():
    lines = texts(compact_lines(mig_gpu(sm=(None, None), reasons=Reason.NOT_SUPPORTED), 60))
    assert all(" SM " not in line[-12:] for line in lines[1:]) and "60 SMs" in lines[1]


# --------------------------------------------------------------------------- --once


def test_once_has_sm_tensor_and_dram_columns():
    text = once(snapshot(gpu(0), stuck(2)))
    header = next(line for line in text.splitlines() if line.startswith("GPU  Name"))
    assert header.split()[5:9] == ["Util", "SM", "Act", "Tensor"] and "DRAM" in header
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:3].strip().isdigit()}
    assert rows["0"][7:11] == ["85%", "52%", "26%", "31%"]
    assert rows["2"][7:11] == ["100%", "3%", "1%", "2%"]
    assert "GPU 2: busy, little work: 100% utilisation, 3% SM active" in text


def test_once_on_a100_says_na_and_why_once():
    text = once(snapshot(a100(0), a100(1)))
    rows = [line.split() for line in text.splitlines() if line[:3].strip().isdigit()]
    assert len(rows) == 2 and all(row[5:9] == ["85%", "N/A", "N/A", "N/A"] for row in rows), "name in one word"
    assert text.count(GPM_NOT_SUPPORTED) == 1
    assert f"GPUs 0, 1: SM, tensor and DRAM activity N/A: {GPM_NOT_SUPPORTED}" in text


def test_once_names_each_reason_for_its_gpus():
    denied = gpu(3, sm=None, tensor=None, dram=None, reasons=dict.fromkeys(GPM_FIELDS, Reason.NO_PERMISSION))
    notes = [text for text, _ in activity_notes(snapshot(a100(0), gpu(1), denied))]
    assert notes == [
        f"GPU 0: SM, tensor and DRAM activity N/A: {GPM_NOT_SUPPORTED}",
        "GPU 3: SM, tensor and DRAM activity N/A: no permission to read GPM",
    ]


def test_once_mig_table_has_each_instances_activity():
    text = once(snapshot(mig_gpu()))
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("MIG "))
    assert lines[header].split() == ["MIG", "Profile", "Memory", "SMs", "Procs", "SM", "Act", "Tensor", "DRAM", "UUID"]
    assert lines[header + 2].split()[-4:] == ["45%", "19%", "30%", "MIG-aaaa"]


# --------------------------------------------------------------------------- the health screen


def test_the_health_screen_lists_the_real_work():
    lines = texts(gpu_health_lines(gpu()))
    row = next(line for line in lines if "Real work" in line)
    assert "SM active 52% · tensor 26% · DRAM 31%" in row
    stuck_row = next(line for line in texts(gpu_health_lines(stuck())) if "Real work" in line)
    assert ACTIVITY_WORDS in stuck_row
    a100_row = next(line for line in texts(gpu_health_lines(a100())) if "Real work" in line)
    assert a100_row.split("Real work")[1].strip() == f"N/A ({GPM_NOT_SUPPORTED})"


def test_the_suspected_hang_names_its_evidence():
    hung = dataclasses.replace(stuck(), health=GpuHealth(suspected_hang_seconds=360.0))
    text = texts(gpu_health_lines(hung))
    assert "    Suspected hang   busy with 3 % of SMs active for 6 min: a deadlocked collective?" in text
    barely = dataclasses.replace(hung, sample=dataclasses.replace(hung.sample, sm_active_percent=0.2))
    assert any("busy with <1 % of SMs active" in line for line in texts(gpu_health_lines(barely)))
    old = dataclasses.replace(hung, sample=dataclasses.replace(hung.sample, sm_active_percent=None))
    assert any("busy at low power for 6 min" in line for line in texts(gpu_health_lines(old)))


# --------------------------------------------------------------------------- simulated GPUs


def collect(sim, clock, **kwargs: object) -> Snapshot:
    collector = Collector(sim(**kwargs))
    for _ in range(3):
        clock.advance(1.0)
        snap = collector.collect()
    return snap


def test_a_simulated_stuck_gpu_looks_stuck_in_every_view(sim, clock):
    snap = collect(sim, clock, gpus=4, seed=4, faults=parse_fault_specs(["stuck@2"], gpus=4))
    state = snap.gpus[2]
    assert ACTIVITY_WORDS in texts(panel_lines(state, 55))[2]
    assert all(ACTIVITY_WORDS not in texts(panel_lines(g, 55))[2] for g in snap.gpus if g.index != 2)
    assert ACTIVITY_WORDS in once(snap) and "GPU 2: busy, little work" in once(snap)


def test_a_simulated_a100_says_na_and_why(sim, clock):
    snap = collect(sim, clock, gpus=2, seed=4, model="A100-SXM4-80GB")
    assert all(
        len(panel_lines(g, 55)) == 4 and "SM N/A (pre-Hopper)" in texts(panel_lines(g, 55))[1] for g in snap.gpus
    )
    assert f"GPUs 0, 1: SM, tensor and DRAM activity N/A: {GPM_NOT_SUPPORTED}" in once(snap)


async def test_the_monitor_shows_the_real_work_line(sim):
    from nvtopy.tui.app import NvtopyApp

    from ..tui_helpers import screen_text, started

    backend = sim(gpus=4, seed=4, faults=parse_fault_specs(["stuck@2"], gpus=4))
    app = NvtopyApp.for_backend(backend, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app, 2)
        screen = screen_text(app)
        assert app.query_one("#gpus").plan.kind == "full"
        assert screen.count("│ SM  ") == 4, "a real-work line in each H100 panel"
        assert f"⚠ {ACTIVITY_WORDS}" in screen

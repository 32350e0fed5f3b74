"""MIG in the views that need no terminal: the GPU panel and compact lines, ``--once``, the process logic.

Hand-made GPU states give exact figures (an instance's memory, SMs, processes);
a simulated snapshot (``mig=N@GPU``) checks that the pieces fit together. What
the TUI does with them (picker, filtering, sorting) is tests/tui/test_tui_mig.py.
"""

from __future__ import annotations

import dataclasses
import io

import pytest

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import (
    GpuProcess,
    GpuState,
    MigInstance,
    MigUsage,
    Reason,
    Snapshot,
)
from nvtopy.render.cells import MIG_UTILIZATION_NOTE, process_instance_cell
from nvtopy.render.gpu import compact_line, compact_lines, mig_lines, mig_rows, panel_lines, panel_title
from nvtopy.render.processes import ProcessFilter, SortOrder, build_rows, visible_columns
from nvtopy.render.text import render_snapshot
from nvtopy.sources.collector import Collector
from nvtopy.tui.gpu_view import plan_layout

from ..builders import gpu_process, gpu_sample, gpu_state, gpu_static, host_info, snapshot_of

GIB = 2**30
UUIDS = (
    "MIG-11111111-2222-4333-8444-555555555555",
    "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
)
NOT_SUPPORTED = {
    "utilization_gpu_percent": Reason.NOT_SUPPORTED,
    "utilization_memory_percent": Reason.NOT_SUPPORTED,
}


def instance(index: int, gi: int, profile: str, sms: int, total_gib: float, uuid: str | None = None) -> MigInstance:
    return MigInstance(
        index=index,
        uuid=uuid or UUIDS[index],
        gpu_instance_id=gi,
        compute_instance_id=0,
        profile=profile,
        memory_total_bytes=int(total_gib * GIB),
        sm_count=sms,
    )


def process(pid: int, gi: int | None, gpu: int = 1, memory_gib: float = 1.0) -> GpuProcess:
    """alice's ``python job<pid>.py`` on GPU ``gpu``, in GPU instance ``gi`` (compute instance 0), no start time."""
    return gpu_process(gpu, pid, gpu_memory_bytes=int(memory_gib * GIB), create_time=None, gpu_instance_id=gi,
                       compute_instance_id=None if gi is None else 0)  # fmt: skip


def mig_gpu(**static: object) -> GpuState:
    """GPU 1 with two instances: 1/1/0 3g.40gb (12 of 40 GiB, two processes) and 1/2/0 2g.20gb (idle)."""
    instances = (instance(0, 1, "3g.40gb", 60, 40.0), instance(1, 2, "2g.20gb", 32, 20.0))
    usage = (
        MigUsage(0, memory_used_bytes=12 * GIB, memory_free_bytes=28 * GIB),
        MigUsage(1, memory_used_bytes=32 * 2**20, memory_free_bytes=20 * GIB - 32 * 2**20),
    )
    fields = {
        "uuid": "GPU-1",
        "name": "NVIDIA H100 80GB HBM3",
        "bus_id": "00000000:2A:00.0",
        "memory_total_bytes": 80 * GIB,
        "temperature_slowdown_c": 87,
        "mig_mode": True,
        "mig_mode_pending": True,
        "mig_instances": instances,
        **static,
    }
    sample = gpu_sample(
        1.0,
        bare=True,
        memory_used_bytes=13 * GIB,
        temperature_c=55,
        power_draw_w=300.0,
        power_limit_w=700.0,
        pstate=0,
        mig_usage=usage,
        unavailable=NOT_SUPPORTED,
    )
    processes = (process(100, 1, memory_gib=8.0), process(101, 1, memory_gib=4.0))
    return gpu_state(1, *processes, static=gpu_static(1, bare=True, **fields), sample=sample)


def plain_gpu(**static: object) -> GpuState:
    """GPU 0 without MIG, 40 % busy."""
    sample = gpu_sample(
        1.0, bare=True, memory_used_bytes=10 * GIB, utilization_gpu_percent=40, utilization_memory_percent=20
    )
    static_ = gpu_static(0, bare=True, name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB, **static)
    return gpu_state(0, static=static_, sample=sample)


def texts(lines) -> list[str]:
    return [line.plain for line in lines]


# --------------------------------------------------------------------------- the panel


def test_the_panel_has_a_line_per_instance_with_profile_ids_memory_sms_and_processes():
    lines = texts(panel_lines(mig_gpu(), 116))
    assert len(lines) == 4 + 2 == 4 + mig_rows(mig_gpu())
    first, second = lines[4], lines[5]
    for text in ("MIG 1/1/0", "3g.40gb", "12.0/40.0GiB", "60 SMs", "2 procs", UUIDS[0]):
        assert text in first, (text, first)
    for text in ("MIG 1/2/0", "2g.20gb", "32MiB/20.0GiB", "32 SMs", "0 procs", UUIDS[1]):
        assert text in second, (text, second)
    assert all(len(line) == 116 for line in lines)


def test_the_bar_shows_the_instances_memory_share():
    first, second = texts(panel_lines(mig_gpu(), 116))[4:6]
    bar = first.split("3g.40gb ")[1].split(" ")[0]
    filled = sum(1 for char in bar if char not in "░")
    assert 0.25 < filled / len(bar) < 0.35, bar  # 12 of 40 GiB
    assert set(second.split("2g.20gb ")[1].split(" ")[0]) <= set("░▏"), "an idle instance's bar is empty"


def test_a_narrow_panel_keeps_every_figure_and_gives_up_the_uuid_first():
    for width in (48, 55):
        line = panel_lines(mig_gpu(), width)[4].plain
        assert len(line) == width and "█" in line, "a bar still"
        for text in ("1/1/0", "3g.40gb", "12.0/40.0GiB", "60 SMs", "2 procs"):
            assert text in line, (width, line)
        assert "MIG-1111" not in line
    cut = panel_lines(mig_gpu(), 80)[4].plain
    assert "MIG-11111111…" in cut and UUIDS[0] not in cut, "a middle width shows the UUID's start"


def test_the_instance_lines_line_up():
    first, second = texts(panel_lines(mig_gpu(), 100))[4:6]
    assert first.index("SMs") == second.index("SMs")
    assert first.index("GiB ") == second.index("GiB ")


def test_utilisation_under_mig_is_explained_once_never_drawn_as_zero():
    gpu = mig_gpu()
    lines = texts(panel_lines(gpu, 116))
    utl = lines[1]
    assert utl.startswith("UTL N/A") and MIG_UTILIZATION_NOTE in utl
    assert sum(line.count(MIG_UTILIZATION_NOTE) for line in lines) == 1
    assert not any(char in utl for char in "▁▂▃▄▅▆▇█"), "no chart of zeros"
    assert "0%" not in utl and "BW" not in utl
    assert MIG_UTILIZATION_NOTE in compact_line(gpu, 180).plain
    compact = compact_line(gpu, 140).plain  # the GiB figure has its cells first
    assert "not reported under MIG  N/A" in compact and compact.count("N/A") == 1, "a narrower line says it shorter"
    assert "under MIG  N/A" in compact_line(gpu, 80).plain


def test_utilisation_is_drawn_when_a_mig_gpu_reports_it():
    gpu = mig_gpu()
    busy = dataclasses.replace(gpu, sample=dataclasses.replace(gpu.sample, utilization_gpu_percent=55))
    assert MIG_UTILIZATION_NOTE not in "".join(texts(panel_lines(busy, 116)))
    assert "55%" in panel_lines(busy, 116)[1].plain


@pytest.mark.parametrize(
    ("now", "after", "words"), [(False, True, "MIG on after reset"), (True, False, "MIG off after reset")]
)
def test_a_pending_mode_change_is_in_the_title_and_the_compact_line(now, after, words):
    gpu = mig_gpu(mig_mode=now, mig_mode_pending=after, mig_instances=() if not now else mig_gpu().static.mig_instances)
    assert words in panel_title(gpu).plain
    assert words in panel_title(gpu, 60).plain, "kept when the bus id has to go"
    assert words in compact_line(gpu, 120).plain
    assert words in compact_line(gpu, 80).plain and "H100" not in compact_line(gpu, 80).plain, "kept, the name not"


def test_a_mig_gpu_says_so_in_its_title_and_a_plain_one_does_not():
    assert " · MIG · " in panel_title(mig_gpu()).plain
    assert "MIG" not in panel_title(plain_gpu()).plain
    assert "MIG" not in panel_title(plain_gpu(mig_mode=False, mig_mode_pending=False)).plain


def test_a_gpu_without_mig_has_no_instance_lines():
    gpu = plain_gpu()
    assert mig_rows(gpu) == 0 and mig_lines(gpu, 80) == []
    assert texts(compact_lines(gpu, 100)) == [compact_line(gpu, 100).plain]
    assert len(panel_lines(gpu, 60)) == 4
    assert "40%" in panel_lines(gpu, 60)[1].plain


def test_a_lost_gpu_or_a_noted_one_has_no_instance_lines():
    gpu = mig_gpu()
    lost = dataclasses.replace(gpu, sample=dataclasses.replace(gpu.sample, lost=True))
    noted = dataclasses.replace(gpu, note="host unreachable")
    for state in (lost, noted):
        assert mig_rows(state) == 0 and len(panel_lines(state, 60)) == 4


def test_a_stuck_gpus_instance_lines_are_dimmed():
    from nvtopy.model import GpuHealth

    gpu = dataclasses.replace(mig_gpu(), health=GpuHealth(responding=False, stalled_seconds=5.0))
    for line in mig_lines(gpu, 80) + mig_lines(gpu, 80, tree=True):
        assert all(style is not None and style.dim for text, style in line.parts if text.strip())


def test_instance_process_counts_na_when_the_process_list_is_unavailable():
    gpu = dataclasses.replace(mig_gpu(), processes=(), processes_unavailable=Reason.NO_PERMISSION)
    assert "N/A procs" in panel_lines(gpu, 116)[4].plain


# --------------------------------------------------------------------------- the compact view


def test_compact_view_has_one_indented_line_per_instance_under_its_gpu():
    lines = texts(compact_lines(mig_gpu(), 100))
    assert len(lines) == 3
    assert lines[0].startswith(" 1 ")
    assert lines[1].startswith(" ├ 1/1/0 3g.40gb ") and lines[2].startswith(" └ 1/2/0 2g.20gb ")
    for text in ("12.0/40.0GiB", "60 SMs", "2 procs"):
        assert text in lines[1]
    assert "0 procs" in lines[2] and "32 SMs" in lines[2]
    assert all(len(line) == 100 for line in lines)


# --------------------------------------------------------------------------- outside text


def test_driver_strings_of_an_instance_are_made_safe():
    hostile = instance(0, 1, "3g\x1b[2J.40gb", 60, 40.0, uuid="MIG-\x1b]0;pwned\x07-1")
    gpu = mig_gpu(mig_instances=(hostile,))
    drawn = texts(panel_lines(gpu, 116)) + texts(compact_lines(gpu, 116))
    drawn.append(_once(_snapshot(gpu)))
    for text in drawn:
        assert "\x1b" not in text and "\x07" not in text
    assert any("3g\\e[2J.40gb" in text for text in drawn[:5])
    assert "MIG-\\e]0;pwned\\x07-1" in drawn[4]
    assert "3g\\e[2J.40gb" in drawn[-1] and "MIG-\\e]0;pwned\\x07-1" in drawn[-1]


# --------------------------------------------------------------------------- nvtopy --once


def _snapshot(*gpus: GpuState) -> Snapshot:
    return snapshot_of(*gpus, host=host_info(backend="simulated", user="alice"))


def _once(snapshot: Snapshot) -> str:
    out = io.StringIO()
    render_snapshot(snapshot, out, color=False)
    return out.getvalue()


def test_once_lists_each_instance_under_the_gpus_with_its_figures():
    text = _once(_snapshot(plain_gpu(), mig_gpu()))
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("MIG "))
    assert lines[header].split() == ["MIG", "Profile", "Memory", "SMs", "Procs", "UUID"]
    first, second = lines[header + 2].split(), lines[header + 3].split()
    assert first == ["1/1/0", "3g.40gb", "12.0/40.0GiB", "(30%)", "60", "2", UUIDS[0]]
    assert second == ["1/2/0", "2g.20gb", "32MiB/20.0GiB", "(0%)", "32", "0", UUIDS[1]]
    assert header > next(i for i, line in enumerate(lines) if line.startswith("GPU  Name")), "after the GPU table"


def test_once_explains_mig_utilisation_once_and_a_pending_reset():
    pending = mig_gpu(mig_mode=False, mig_mode_pending=True, mig_instances=())
    pending = dataclasses.replace(pending, static=dataclasses.replace(pending.static, index=2))
    text = _once(_snapshot(plain_gpu(), mig_gpu(), pending))
    assert text.count(MIG_UTILIZATION_NOTE) == 1
    assert f"GPU 1: {MIG_UTILIZATION_NOTE}" in text
    assert "GPU 2: MIG on after reset (MIG off until the next GPU reset)" in text


def test_once_process_table_has_the_instance_column():
    stray = process(7, None, gpu=0)
    gpus = (dataclasses.replace(plain_gpu(), processes=(stray,)), mig_gpu())
    lines = _once(_snapshot(*gpus)).splitlines()
    header = next(line for line in lines if line.startswith("GPU  MIG"))
    assert header.split()[:3] == ["GPU", "MIG", "PID"]
    rows = {line.split()[2]: line.split()[1] for line in lines if line.split()[:1] in (["0"], ["1"]) and "job" in line}
    assert rows == {"100": "1/1/0", "101": "1/1/0", "7": "-"}


def test_once_without_mig_says_nothing_of_it():
    gpu = dataclasses.replace(plain_gpu(), processes=(process(7, None, gpu=0),))
    text = _once(_snapshot(gpu))
    assert "MIG" not in text


def test_once_on_a_simulated_mig_node(sim, clock):
    backend = sim(gpus=4, seed=4, faults=parse_fault_specs(["mig=3@1", "mig=7@2", "mig=pending@3"], gpus=4))
    collector = Collector(backend)
    for _ in range(3):
        clock.advance(1.0)
        snapshot = collector.collect()
    text = _once(snapshot)
    labels = [line.split()[0] for line in text.splitlines() if line[:1].isdigit() and line.split()[0].count("/") == 2]
    assert labels == [f"1/{gi}/0" for gi in range(1, 4)] + [f"2/{gi}/0" for gi in range(1, 8)]
    assert "GPU 3: MIG on after reset" in text and "GPUs 1, 2: " + MIG_UTILIZATION_NOTE in text
    for process_ in snapshot.processes:
        assert process_instance_cell(process_)[0] == (process_.instance_label or "-")


# --------------------------------------------------------------------------- the process table's logic


def test_the_mig_column_is_shown_only_when_asked_and_comes_after_gpu():
    assert "mig" not in [c.key for c in visible_columns(140)]
    keys = [c.key for c in visible_columns(140, mig=True)]
    assert keys[:3] == ["gpu", "mig", "pid"]
    assert "mig" in [c.key for c in visible_columns(65, mig=True)]
    narrow = [c.key for c in visible_columns(58, mig=True)]
    assert "mig" not in narrow and "user" in narrow and "owner" not in narrow, "it goes after OWNER, before USER"


def test_sorting_cycles_through_mig_after_gpu_and_sorts_by_the_ids_as_numbers():
    assert SortOrder("gpu").cycle(1, mig=True).column == "mig"
    assert SortOrder("mig").cycle(1, mig=True).column == "pid"
    assert SortOrder("pid").cycle(-1, mig=True).column == "mig"
    assert SortOrder("gpu").cycle(1).column == "pid", "without MIG the cycle is as it was"
    assert SortOrder("mig").cycle(1).column == "pid" and SortOrder("mig").cycle(-1).column == "gpu"
    procs = [process(1, 10), process(2, 2), process(3, None), process(4, 1, gpu=0)]
    rows = build_rows(procs, SortOrder("mig"), ProcessFilter(), "alice")
    assert [p.pid for p in rows] == [4, 2, 1, 3], "0/1/0, 1/2/0, 1/10/0, then no instance last"
    rows = build_rows(procs, SortOrder("mig", reverse=True), ProcessFilter(), "alice")
    assert [p.pid for p in rows] == [1, 2, 4, 3]


def test_filtering_by_instance_keeps_only_its_processes_and_its_line():
    gpu = dataclasses.replace(mig_gpu(), processes=(process(100, 1), process(200, 2)))
    other = dataclasses.replace(plain_gpu(), processes=(process(7, None, gpu=0),))
    row_filter = ProcessFilter(gpus=frozenset({0, 1}), instances=frozenset({(1, 2, 0)}))
    rows = build_rows([*other.processes, *gpu.processes], SortOrder(), row_filter, "alice")
    assert [p.pid for p in rows] == [7, 200], "GPU 0 whole, GPU 1 narrowed to 1/2/0"
    shown = row_filter.limit(gpu)
    assert [m.label(1) for m in shown.static.mig_instances] == ["1/2/0"]
    assert [p.pid for p in shown.processes] == [200]
    assert [u.index for u in shown.sample.mig_usage] == [1]
    assert [line.plain.split()[0] for line in mig_lines(shown, 80)] == ["1/2/0"]
    assert row_filter.limit(other) is other
    assert row_filter.describe() == ["GPUs 0", "MIG 1/2/0"]
    assert ProcessFilter(gpus=frozenset({1}), instances=frozenset({(1, 2, 0)})).describe() == ["MIG 1/2/0"]
    assert ProcessFilter(instances=frozenset({(1, 2, 0)})).active


def test_the_filter_text_matches_an_instance_label():
    procs = [process(100, 1), process(200, 2)]
    assert [p.pid for p in build_rows(procs, SortOrder(), ProcessFilter(text="1/2/0"), "alice")] == [200]


# --------------------------------------------------------------------------- layout


def test_a_row_of_panels_is_as_tall_as_its_tallest_gpu():
    assert plan_layout(4, 120, 100, extra=(0, 3, 7, 0)).lines == (6 + 3) + (6 + 7)
    assert plan_layout(4, 120, 100, extra=()).lines == plan_layout(4, 120, 100).lines == 12
    compact = plan_layout(4, 120, 40, extra=(0, 3, 7, 0))
    assert compact.kind == "compact" and compact.lines == 1 + (1 + 3) + (1 + 7)  # the column labels, then the GPUs
    narrow = plan_layout(4, 80, 24, extra=(0, 3, 7, 0))
    assert (narrow.columns, narrow.lines) == (1, 4 + 10), "two narrow columns would save one line: not worth it"
    assert plan_layout(16, 80, 24).columns == 2, "without MIG the compact layout is as it was"


def test_the_health_screen_lists_the_mig_mode_and_instances():
    from nvtopy.render.health import gpu_health_lines

    lines = texts(gpu_health_lines(mig_gpu()))
    start = lines.index("  MIG")
    assert "on · 2 instances" in lines[start + 1] and MIG_UTILIZATION_NOTE in lines[start + 2]
    assert lines[start + 3].split() == ["1/1/0", "3g.40gb", "12.0/40.0GiB", "60", "SMs", "2", "procs", UUIDS[0]]
    assert "  MIG" not in texts(gpu_health_lines(plain_gpu()))
    pending = mig_gpu(mig_mode=False, mig_mode_pending=True, mig_instances=())
    assert any("MIG on after reset" in line for line in texts(gpu_health_lines(pending)))

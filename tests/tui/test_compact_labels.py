"""The compact GPU lines explain themselves (issue 24): a line of column labels over them, the memory in GiB
where it fits, and what a sign in view means.

Before, at 80x24 nothing said that 74 % was memory and 73 % utilisation, and with
16 GPUs a ``⚠`` replaced the temperature unexplained -- for a power cap at full load
too, which the panel draws as benign.
"""

from __future__ import annotations

import dataclasses

import pytest

from nvtopy.model import Finding, GpuHealth, GpuState, Severity
from nvtopy.render.gpu import (
    compact_columns,
    compact_header,
    compact_legend,
    compact_line,
    compact_markers,
)
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.gpu_view import GpuView, plan_layout

from ..builders import FixedSource
from ..render.test_gpm_render import gpu
from ..tui_helpers import widget_lines
from .test_tui_health import my_snapshot, show

HARMFUL = "HW slowdown: SM at 45 % of max"


def throttled(index: int, *, harmful: bool) -> GpuState:
    """A GPU held back by a HW slowdown (harmful: the health layer counted it) or by its power cap (benign)."""
    state = gpu(index, throttle_reasons=("hw_slowdown",) if harmful else ("sw_power_cap",))
    if harmful:
        health = GpuHealth(
            Severity.WARN, (Finding(Severity.WARN, "throttle", HARMFUL, "check the cooling"),), throttle=HARMFUL
        )
    else:
        health = GpuHealth(Severity.OK, (), throttle="power cap: SM at 90 % of max")
    return dataclasses.replace(state, health=health)


@pytest.mark.parametrize("width", [39, 59, 80, 100, 140])
def test_the_labels_sit_over_the_memory_bar_and_the_utilisation_chart(width: int) -> None:
    state = gpu()
    line, labels = compact_line(state, width).plain, compact_header(state, width).plain
    columns = compact_columns(state, width)
    assert columns is not None and len(labels) == width
    memory_at = columns.head
    spark_at = columns.head + columns.bar + columns.memory
    assert labels[memory_at:].startswith("MEM"), labels
    assert labels[spark_at:].startswith("UTIL"), labels
    assert "█" in line[memory_at : memory_at + columns.bar] or "░" in line[memory_at : memory_at + columns.bar]
    assert " 50% " in line[memory_at + columns.bar : spark_at], "the memory figure sits under MEM"
    assert " 85%" in line[spark_at : spark_at + columns.spark + 5], "utilisation now sits under UTIL"


def test_the_memory_in_gib_where_the_line_has_room_for_it() -> None:
    wide = compact_line(gpu(), 140).plain
    assert "40.0/80.0GiB  50%" in wide and "H100 80GB HBM3" in wide, "the GiB comes with the name on a wide line"
    assert "GiB" not in compact_line(gpu(), 80).plain, "the bars keep their cells on a narrow one"
    a, b = compact_line(gpu(0), 140).plain, compact_line(gpu(1, memory_used_bytes=700 * 2**20), 140).plain
    assert "700MiB/80.0GiB" in b and a.index("% ") == b.index("% "), "whatever the figure, the columns line up"


def test_a_line_without_figures_has_no_columns() -> None:
    lost = dataclasses.replace(gpu(), note="host unreachable: timed out")
    assert compact_columns(lost, 80) is None
    assert compact_header(None, 40).plain == " " * 40


def test_the_sign_marks_harmful_throttling_only_as_the_panel_does() -> None:
    assert compact_markers(throttled(0, harmful=True)) == ("⚠",)
    assert compact_markers(throttled(1, harmful=False)) == (), "a power cap at full load is benign: no sign"
    assert "⚠" not in compact_line(throttled(1, harmful=False), 39).plain


def test_the_legend_says_what_the_sign_means_only_when_one_is_in_view() -> None:
    assert compact_legend([gpu(0), throttled(1, harmful=False)], 80).plain == ""
    legend = compact_legend([gpu(0), throttled(1, harmful=True)], 80).plain
    assert legend == "⚠ clocks slowed (heat, HW slowdown, power brake)"
    assert compact_legend([throttled(1, harmful=True)], 20).plain == "⚠ clocks slowed", "shortened, not cut"
    both = [throttled(1, harmful=True), gpu(2, ecc_mode=True, ecc_uncorrected_volatile=3)]
    assert compact_legend(both, 44).plain == "⚠ clocks slowed · ECC! uncorrected errors"


async def test_16_gpus_at_80x24_have_labels_and_the_sign_explained() -> None:
    gpus = [throttled(i, harmful=True) if i == 3 else gpu(i) for i in range(16)]
    app = NvtopyApp(FixedSource(), poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await show(pilot, app, my_snapshot(*gpus))
        view = app.query_one(GpuView)
        assert view.plan.kind == "compact" and view.plan.columns == 2
        labels, *lines = widget_lines(view)
        assert len(lines) == 8 and lines[1].rstrip().endswith("⚠"), "GPU 3's sign in place of its temperature"
        assert labels.startswith(" # MEM") and "UTIL" in labels
        assert labels.rstrip().endswith("⚠ clocks slowed (heat, HW slowdown, power brake)")
        spark_at = labels.index("UTIL")
        assert lines[0][spark_at - 6 : spark_at] == "  50% ", "the memory percentage under MEM, before UTIL"


def test_the_plan_counts_the_label_line() -> None:
    assert plan_layout(16, 80, 24).lines == 1 + 8
    assert plan_layout(4, 80, 24, mode="compact").lines == 1 + 4

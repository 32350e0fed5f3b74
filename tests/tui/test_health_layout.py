"""The health screen uses the terminal (issue 24): NVLinks summarised ("18/18 up") with only the links worth a
look listed, and GPU sections side by side where the width allows.

Before, a GPU's 18 NVLink rows pushed the other GPUs away, and a 200-column
terminal showed one section of about 90 columns.
"""

from __future__ import annotations

import dataclasses

from nvtopy.model import NvLink
from nvtopy.render.health import gpu_health_lines
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.health_screen import SECTION_WIDTH, HealthScreen, section_columns

from ..builders import FixedSource
from ..tui_helpers import screen_text, wait_until
from .test_tui_health import healthy_gpu, my_snapshot, show, sick_gpu


def nvlink_rows(lines: list[str]) -> list[str]:
    """The per-link rows of a section (``    3     up     4  ...``)."""
    start = lines.index("  NVLink")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    return [line for line in lines[start + 1 : end] if line[4:5].isdigit()]


def test_healthy_links_are_one_line_not_eighteen() -> None:
    gpu = healthy_gpu()
    links = tuple(
        NvLink(i, active=True, version=4, rx_bytes_per_s=2**20, tx_bytes_per_s=2**20, errors=0) for i in range(18)
    )
    gpu = dataclasses.replace(gpu, sample=dataclasses.replace(gpu.sample, nvlinks=links))
    lines = [line.plain for line in gpu_health_lines(gpu)]
    assert any("Links" in line and "18/18 up" in line for line in lines)
    assert nvlink_rows(lines) == [] and any("every link up, no errors" in line for line in lines)


def test_a_bad_link_is_listed_and_the_rest_summed_up() -> None:
    lines = [line.plain for line in gpu_health_lines(sick_gpu())]
    rows = nvlink_rows(lines)
    assert len(rows) == 1 and rows[0].split()[:2] == ["2", "down"], rows
    assert any("the other 3 up, no errors" in line for line in lines)


def test_sections_side_by_side_where_they_fit() -> None:
    assert section_columns(80, 4) == 1 and section_columns(2 * SECTION_WIDTH, 4) == 2
    assert section_columns(400, 3) == 3, "never more columns than GPUs"


async def test_200_columns_show_two_gpus_side_by_side() -> None:
    gpus = [healthy_gpu(0), sick_gpu(1), healthy_gpu(2)]
    app = NvtopyApp(FixedSource(), poll=False)
    async with app.run_test(size=(200, 50)) as pilot:
        snapshot = my_snapshot(*gpus)
        await show(pilot, app, snapshot)
        app.push_screen(HealthScreen(snapshot, gpus))
        await wait_until(pilot, lambda: isinstance(app.screen, HealthScreen), message="the health screen")
        await pilot.pause()
        text = screen_text(app)
        assert any("GPU 0 " in line and "GPU 1 " in line for line in text.splitlines()), text
        assert "GPU 2 " in text, "the third GPU's section is on the first screen too"

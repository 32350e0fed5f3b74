"""MIG in the monitor (pilot tests): instance lines under their GPU, the MIG column, the GPU picker's instances.

The simulated node has four H100s: GPU 0 without MIG, GPU 1 with three
instances (1/1/0, 1/2/0, 1/3/0), GPU 2 with seven, GPU 3 switching MIG on at its
next reset. What is drawn is read back from the widgets' lines.
"""

from __future__ import annotations

from textual.widgets import SelectionList

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.render.cells import MIG_UTILIZATION_NOTE
from nvtopy.render.processes import ProcessFilter
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.screens import GpuPickerScreen

from ..tui_helpers import header_line, more_snapshots, started, table_of, wait_until, widget_lines

INTERVAL = 0.2
MIG_NODE = ["mig=3@1", "mig=7@2", "mig=pending@3"]


def mig_app(sim, size_layout: str = "auto") -> NvtopyApp:
    backend = sim(gpus=4, seed=4, faults=parse_fault_specs(MIG_NODE, gpus=4))
    return NvtopyApp.for_backend(backend, interval=INTERVAL, layout=size_layout)


def gpu_text(app) -> str:
    return "\n".join(widget_lines(app.query_one("#gpus")))


def table_lines(app) -> list[str]:
    return widget_lines(table_of(app))


async def test_panels_show_each_instance_under_its_gpu(sim):
    app = mig_app(sim, "full")
    async with app.run_test(size=(200, 60)) as pilot:
        await started(pilot, app)
        text = gpu_text(app)
        snapshot = app.snapshot
        for gpu in snapshot.gpus:
            for state in gpu.mig:
                line = next(line for line in text.splitlines() if f"MIG {state.label} " in line)
                assert state.instance.profile in line
                assert f"{state.instance.sm_count} SMs" in line
                count = len(state.processes)
                assert f"{count} proc" in line
        assert text.count(MIG_UTILIZATION_NOTE) == 2, "once for GPU 1 and once for GPU 2"
        assert "MIG on after reset" in text
        assert "MIG 0/" not in text and "MIG 3/" not in text


async def test_compact_view_indents_instances_under_their_gpu(sim):
    app = mig_app(sim, "compact")
    async with app.run_test(size=(100, 40)) as pilot:
        await started(pilot, app)
        # Every GPU's instances read: a loaded machine's first snapshot may miss one GPU's read past its deadline.
        await wait_until(
            pilot,
            lambda: sum(1 for line in widget_lines(app.query_one("#gpus")) if line.startswith((" ├ ", " └ "))) == 10,
            message="both MIG GPUs' instances drawn",
        )
        lines = widget_lines(app.query_one("#gpus"))
        gpu1 = next(i for i, line in enumerate(lines) if line.startswith(" 1 "))
        assert [line[:9] for line in lines[gpu1 + 1 : gpu1 + 4]] == [" ├ 1/1/0 ", " ├ 1/2/0 ", " └ 1/3/0 "]
        assert lines[gpu1 + 4].startswith(" 2 ")
        assert sum(1 for line in lines if line.startswith((" ├ 2/", " └ 2/"))) == 7


async def test_the_process_table_has_an_instance_column(sim):
    app = mig_app(sim)
    async with app.run_test(size=(140, 50)) as pilot:
        await started(pilot, app)
        lines = table_lines(app)
        assert lines[0].split()[:3] == ["GPU▲", "MIG", "PID"]
        for row, line in zip(table_of(app).rows, lines[1:], strict=False):
            words = line.split()
            assert words[0] == str(row.gpu_index) and words[2] == str(row.pid)
            assert words[1] == (row.instance_label or "-")
        labels = {p.instance_label for p in table_of(app).rows}
        assert None in labels and any(label and label.startswith("2/") for label in labels)

        await pilot.press("s")  # GPU -> MIG
        await pilot.pause()
        assert app.order.column == "mig"
        assert "MIG▲" in table_lines(app)[0]
        values = [(p.gpu_index, p.gpu_instance_id) for p in table_of(app).rows if p.gpu_instance_id is not None]
        assert values == sorted(values)
        assert table_of(app).rows[-1].instance_label is None, "processes on no instance sort last"


async def test_without_mig_the_table_has_no_instance_column(sim):
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1), interval=INTERVAL)
    async with app.run_test(size=(140, 40)) as pilot:
        await started(pilot, app)
        assert "MIG" not in table_lines(app)[0]
        assert "MIG" not in gpu_text(app)
        await pilot.press("s")
        await pilot.pause()
        assert app.order.column == "pid"


async def test_the_picker_lists_instances_and_one_can_be_shown_alone(sim):
    app = mig_app(sim, "full")
    async with app.run_test(size=(160, 60)) as pilot:
        await started(pilot, app)
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GpuPickerScreen)
        chooser = app.screen.query_one(SelectionList)
        values = [chooser.get_option_at_index(i).value for i in range(chooser.option_count)]
        assert values == [0, 1, (1, 1, 0), (1, 2, 0), (1, 3, 0), 2, *[(2, gi, 0) for gi in range(1, 8)], 3]
        assert set(chooser.selected) == set(values), "everything shown at first"
        prompts = [str(chooser.get_option_at_index(i).prompt) for i in range(chooser.option_count)]
        uuid = app.snapshot.gpus[1].static.mig_instances[1].uuid
        assert "MIG 1/2/0" in prompts[3] and "2g.20gb" in prompts[3] and uuid in prompts[3]
        assert "MIG on after reset" in prompts[-1]

        # A GPU's entry stands for all its instances, both ways.
        await pilot.press("down", "space")  # GPU 1 off: its instances too
        await pilot.pause()
        assert not {1, (1, 1, 0), (1, 2, 0), (1, 3, 0)} & set(chooser.selected)
        await pilot.press("down", "down", "space")  # 1/2/0 on alone: GPU 1 stays off (not all of it)
        await pilot.pause()
        assert (1, 2, 0) in chooser.selected and 1 not in chooser.selected

        # Only 1/2/0: nothing else.
        await pilot.press("n")
        await pilot.pause()
        assert chooser.selected == []
        chooser.highlighted = values.index((1, 2, 0))
        await pilot.press("space", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, GpuPickerScreen)
        assert app.row_filter == ProcessFilter(gpus=frozenset({1}), instances=frozenset({(1, 2, 0)}))

        expected = {p.pid for p in app.snapshot.processes if p.gpu_index == 1 and p.gpu_instance_id == 2}
        assert expected, "the simulation runs something on 1/2/0"
        assert {p.pid for p in table_of(app).rows} == expected
        assert {p.instance_label for p in table_of(app).rows} == {"1/2/0"}
        (gpu,) = app.visible_gpus()
        assert [m.gpu_instance_id for m in gpu.static.mig_instances] == [2]
        text = gpu_text(app)
        assert "MIG 1/2/0 " in text and "1/1/0" not in text and "1/3/0" not in text and "╭─ 0 " not in text
        assert "MIG 1/2/0" in header_line(app) and "GPUs 1/4" in header_line(app)
        await more_snapshots(pilot, app)
        assert {p.instance_label for p in table_of(app).rows} == {"1/2/0"}, "a new snapshot keeps the choice"

        # The picker opens on the choice in force; cancelling keeps it; 'a' brings everything back.
        await pilot.press("g")
        await pilot.pause()
        chooser = app.screen.query_one(SelectionList)
        assert set(chooser.selected) == {(1, 2, 0)}
        await pilot.press("escape")
        await pilot.pause()
        assert app.row_filter.instances == frozenset({(1, 2, 0)})
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("a", "enter")
        await pilot.pause()
        assert app.row_filter == ProcessFilter()
        assert len(app.visible_gpus()) == 4 and "1/3/0" in gpu_text(app)


async def test_choosing_every_instance_of_a_gpu_shows_it_whole(sim):
    app = mig_app(sim, "full")
    async with app.run_test(size=(160, 60)) as pilot:
        await started(pilot, app)
        await pilot.press("g")
        await pilot.pause()
        chooser = app.screen.query_one(SelectionList)
        await pilot.press("n")
        for gi in (1, 2, 3):
            chooser.highlighted = [chooser.get_option_at_index(i).value for i in range(chooser.option_count)].index(
                (1, gi, 0)
            )
            await pilot.press("space")
        await pilot.pause()
        assert 1 in chooser.selected, "all its instances: the GPU's entry checks itself"
        await pilot.press("enter")
        await pilot.pause()
        assert app.row_filter.gpus == frozenset({1}) and app.row_filter.instances == frozenset()
        assert [g.index for g in app.visible_gpus()] == [1]

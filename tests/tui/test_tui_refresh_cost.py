"""What a refresh may do: an unchanged snapshot redraws nothing; a changed one redraws lines.

These pin the properties the performance work relies on (benchmarks/README.md): no
widget is created or removed per refresh, no layout pass, and only changed lines are
sent to the compositor.
"""

from __future__ import annotations

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.gpu_view import GpuView
from nvtopy.tui.process_table import ProcessTable


async def test_unchanged_snapshot_redraws_nothing_and_changed_one_only_lines(sim, clock, monkeypatch):
    backend = sim(gpus=4, seed=1, processes_per_gpu=4)
    app = NvtopyApp.for_backend(backend, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(150):  # same instant: let every sparkline window fill with identical values
            app.source.poll_once(slow=True)
            await pilot.pause()
        widgets_before = len(app.query("*"))
        calls: list[tuple[str, tuple, dict]] = []
        for widget in (app.query_one(GpuView), app.query_one(ProcessTable)):
            original = widget.refresh
            widget_name = type(widget).__name__

            def spy(*regions, _name=widget_name, _original=original, **kwargs):
                calls.append((_name, regions, kwargs))
                return _original(*regions, **kwargs)

            monkeypatch.setattr(widget, "refresh", spy)

        app.source.poll_once(slow=True)
        await pilot.pause()
        assert calls == [], f"an identical snapshot redrew {calls[:3]}"

        clock.advance(1)
        app.source.poll_once(slow=True)
        await pilot.pause()
        assert calls, "changed values must be redrawn"
        for name, regions, kwargs in calls:
            assert not kwargs.get("layout") and not kwargs.get("recompose"), (name, kwargs)
            assert regions, f"{name} refreshed as a whole instead of its changed lines"
            assert all(region.height == 1 for region in regions), (name, regions)
        assert len(app.query("*")) == widgets_before, "no widget is created or removed per refresh"

"""The monitor on ``--ssh`` hosts, driven as a user drives it (Textual's pilot), through the stand-in ssh of
tests/sources/remote/ssh: hosts live and failing side by side, grouped by host, read-only, quit at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nvtopy.sources.remote.ssh.hosts import SshHosts
from nvtopy.sources.remote.ssh.targets import expand
from nvtopy.tui.app import NvtopyApp

from ..sources.remote.ssh import fake_ssh
from ..tui_helpers import screen_text, wait_until, widget_lines


@pytest.mark.timing  # a bound on the clock (quit within 0.5 s): run apart from the loaded pass
async def test_hosts_are_grouped_each_says_its_state_and_quit_ends_every_ssh(tmp_path: Path):
    program = fake_ssh.install(tmp_path)
    source = SshHosts(expand(["gpu-a", "denied", "hang", "gpu-b"], {}), 1.0, program=str(program))
    app = NvtopyApp(source, layout="compact")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "SSH 2/4 hosts" in screen_text(app), 20.0, "two hosts live")
        await wait_until(pilot, lambda: "lost: me@denied" in screen_text(app), 10.0, "the denied host's reason")
        lines = widget_lines(app.query_one("#gpus"))
        headers = [line.strip().split(" ─")[0] for line in lines if line.startswith("── ")]
        assert headers == [
            "── gpu-a · 2 GPUs · reachable",
            "── denied · unreachable",
            "── hang · connecting",
            "── gpu-b · 2 GPUs · reachable",
        ]
        table = widget_lines(app.query_one("#processes"))
        assert table[0].split()[:3] == ["GPU▲", "HOST", "PID"]
        assert {line.split()[1].split("/")[0] for line in table[1:] if line.strip()} == {"gpu-a", "gpu-b"}
        await pilot.press("b")  # the processes grouped by host
        await pilot.pause()
        assert "read-only" in screen_text(app)
        children = source.streams.children()
        assert len(children) >= 3
        began = time.monotonic()
        await pilot.press("q")
    took = time.monotonic() - began
    assert took < 2.0, f"quitting took {took:.2f} s"  # generous: the bound that matters is below
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists() and _running(pid)]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False

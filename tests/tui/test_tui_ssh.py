"""The monitor on ``--ssh`` hosts, driven as a user drives it (Textual's pilot), through the stand-in ssh of
tests/sources/remote/ssh: hosts live and failing side by side, grouped by host, read-only, quit at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nvtopy.sources.remote.ssh.hosts import SshHosts
from nvtopy.sources.remote.ssh.targets import expand
from nvtopy.tui.app import NvtopyApp

from ..end_to_end.test_slow_driver import ALT_SCREEN_OFF, Terminal
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
        expected = [
            "── gpu-a · 2 GPUs · reachable",
            "── denied · unreachable",
            "── hang · connecting",
            "── gpu-b · 2 GPUs · reachable",
        ]

        def headers() -> list[str]:
            lines = widget_lines(app.query_one("#gpus"))
            return [line.strip().split(" ─")[0] for line in lines if line.startswith("── ")]

        # The status line counts a host live from its first snapshot read; its panel shows it from the next refresh
        # (1 s): the headers are waited for, not read once (a loaded run drew gpu-b 'connecting' after '2/4').
        await wait_until(pilot, lambda: headers() == expected, 10.0, "every host's header")
        assert headers() == expected
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


@pytest.mark.timing  # a bound on the clock (the program gone within 0.75 s of q): run apart from the loaded pass
def test_the_program_with_64_hosts_ends_at_once_and_leaves_no_ssh(tmp_path: Path):
    """The real program in a terminal: 64 hosts x 8 GPUs live, q, and the shell's prompt is back at once.

    What it guards: the fleet's hundreds of thousands of objects are not freed one by one at exit
    (``dispatch.exit_at_once``); that took about a second at this size after the screen was gone.
    """
    program = fake_ssh.install(tmp_path, gpus=8, period=1.0, lines=4)
    config = tmp_path / "config.toml"
    config.write_text(f'[ssh]\nprogram = "{program}"\n')
    hosts = ",".join(f"node{n:02d}" for n in range(64))
    term = Terminal(["--config", str(config), "--ssh", hosts], cols=200, rows=50)
    try:
        term.wait_for(b"SSH 64/64 hosts", timeout=60)
        time.sleep(2.5)  # a few refreshes: every GPU's history and charts begun
        elapsed = term.quit_time()
        assert term.status == 0 and ALT_SCREEN_OFF in term.text()
    finally:
        term.close()
    assert elapsed < 0.75, f"the program ended {elapsed:.2f} s after q"
    until_gone = time.monotonic() + 5
    while _ssh_children(program) and time.monotonic() < until_gone:
        time.sleep(0.05)
    assert not _ssh_children(program)


def _ssh_children(program: Path) -> list[int]:
    """The stand-in ssh processes still running (orphans are re-parented: found by their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(program).encode() in (entry / "cmdline").read_bytes() and _running(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found

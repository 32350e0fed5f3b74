"""Signalling processes from the monitor: the confirmation, real kills, and every refusal.

Real kills run against child processes of this test (reported as GPU processes
by the simulated backend with ``real_pids``), so the pidfd / create-time path
of :mod:`nvtopy.backends.host.signals` is exercised for real. Simulated processes cover the
refusals that cannot be staged safely with real ones (pid reuse, other users).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from nvtopy.backends.simulated.catalog import Workload
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.process_screen import ProcessScreen
from nvtopy.tui.screens import ConfirmSignalScreen

from ..tui_helpers import (
    SendSpy,
    more_snapshots,
    pids,
    screen_text,
    select,
    started,
    table_of,
    wait_until,
    widget_lines,
)

SIZE = (120, 40)
INTERVAL = 2.0  # snapshots come when a test asks for them; a signal sent triggers one itself


@pytest.fixture
def spawn():
    """Start sleeping child processes; each is reaped in the background and killed at the end."""
    children: list[subprocess.Popen] = []

    def make(code: str = "import time; time.sleep(120)") -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        children.append(child)
        if "ready" in code:
            assert child.stdout.readline().strip() == "ready"
        threading.Thread(target=child.wait, daemon=True).start()  # no zombie once it is signalled
        return child

    yield make
    for child in children:
        if child.returncode is None:
            child.kill()
        child.wait(timeout=10)
        child.stdout.close()


async def confirm_dialog(pilot, app, key: str) -> ConfirmSignalScreen:
    await pilot.press(key)
    await pilot.pause()
    assert isinstance(app.screen, ConfirmSignalScreen)
    return app.screen


def exited(child: subprocess.Popen) -> bool:
    return child.returncode is not None or child.poll() is not None


# --------------------------------------------------------------------------- the dialog


SHORT = [
    Workload("python train.py --epochs 3", (0.1, 0.2), (0.3, 0.5), (600, 600)),
    Workload("python serve.py --port 8000", (0.1, 0.2), (0.3, 0.5), (600, 600)),
]


@pytest.mark.parametrize("cancel", ["n", "escape"])
async def test_t_names_the_process_and_cancel_sends_nothing(sim, cancel):
    backend = sim(gpus=2, seed=1, workloads=SHORT, viewer="alice")
    spy = SendSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await select(pilot, app, lambda p: p.user == "alice" and p.gpu_index == 1)
        target = table_of(app).selected
        dialog = await confirm_dialog(pilot, app, "T")
        assert dialog.signal == "SIGTERM"
        assert [p.key for p in dialog.targets] == [target.key]
        question = "".join(widget_lines(dialog.query_one("#question")))
        assert "Send SIGTERM to process?" in question
        targets = "\n".join(widget_lines(dialog.query_one("#targets")))
        header, row = targets.splitlines()[:2]
        assert header.split() == ["PID", "USER", "GPU", "GPU-MEM", "COMMAND"]
        assert row.split()[:3] == [str(target.pid), "alice", "1"]
        assert target.command in row
        assert str(target.pid) in screen_text(app), "the dialog is on screen"
        assert dialog.query_one("#cancel").has_focus, "a stray enter cancels"

        await pilot.press(cancel)
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        await more_snapshots(pilot, app)
        await pilot.pause(0.1)
        assert spy.calls == []
        assert app.last_outcomes == []
        assert target.key in {p.key for p in table_of(app).rows}, "still listed"


async def test_enter_on_the_dialog_cancels(sim):
    backend = sim(gpus=2, seed=1, workloads=SHORT, viewer="alice")
    spy = SendSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await select(pilot, app, lambda p: p.user == "alice")
        await confirm_dialog(pilot, app, "K")
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        await pilot.pause(0.1)
        assert spy.calls == []
        assert app.last_outcomes == []


# --------------------------------------------------------------------------- real kills


@pytest.mark.parametrize(
    ("key", "signum"), [("T", signal.SIGTERM), ("K", signal.SIGKILL), ("I", signal.SIGINT)], ids=["T", "K", "I"]
)
async def test_signal_key_kills_a_real_process(sim, spawn, key, signum):
    child, bystander = spawn(), spawn()
    backend = sim(gpus=2, real_pids=[child.pid, bystander.pid], processes_per_gpu=0, clock=time.time)
    spy = SendSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        # Both listed: the first snapshot may miss a GPU whose read passed its deadline on a loaded machine (the
        # bystander is on the second GPU), so wait for a snapshot that has both.
        await wait_until(pilot, lambda: pids(app) == {child.pid, bystander.pid}, timeout=10, message="both listed")
        await select(pilot, app, lambda p: p.pid == child.pid)
        target = table_of(app).selected
        dialog = await confirm_dialog(pilot, app, key)
        assert dialog.signal == signal.Signals(signum).name
        assert [p.pid for p in dialog.targets] == [child.pid]
        await pilot.press("y")
        await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
        assert len(app.last_outcomes) == 1
        assert app.last_outcomes[0].ok, app.last_outcomes[0].message
        assert f"sent {signal.Signals(signum).name} to pid {child.pid}" in app.last_outcomes[0].message
        await wait_until(pilot, lambda: exited(child), timeout=5, message="the child exits")
        assert child.returncode == -signum
        assert spy.calls == [(child.pid, target.create_time, signum)], "checked against the create time shown"
        await wait_until(pilot, lambda: child.pid not in pids(app), timeout=5, message="its row goes")
        await more_snapshots(pilot, app)
        assert pids(app) == {bystander.pid}, "the other process is untouched and still listed"
        assert bystander.poll() is None


async def test_tagged_processes_all_get_the_signal_after_one_confirmation(sim, spawn):
    first, second, third = spawn(), spawn(), spawn()
    backend = sim(gpus=2, real_pids=[first.pid, second.pid, third.pid], processes_per_gpu=0, clock=time.time)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await wait_until(
            pilot, lambda: pids(app) == {first.pid, second.pid, third.pid}, timeout=10, message="all listed"
        )
        await select(pilot, app, lambda p: p.pid == first.pid)
        await pilot.press("space")
        await select(pilot, app, lambda p: p.pid == second.pid)
        await pilot.press("space")
        assert {key[1] for key in app.tags.keys} == {first.pid, second.pid}
        await select(pilot, app, lambda p: p.pid == third.pid)  # the cursor elsewhere: the tags win
        dialog = await confirm_dialog(pilot, app, "T")
        assert sorted(p.pid for p in dialog.targets) == sorted([first.pid, second.pid])
        assert "Send SIGTERM to 2 processes?" in "".join(widget_lines(dialog.query_one("#question")))
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.last_outcomes) == 2, message="two outcomes")
        assert all(o.ok for o in app.last_outcomes), [o.message for o in app.last_outcomes]
        await wait_until(pilot, lambda: exited(first) and exited(second), timeout=5, message="both exit")
        assert first.returncode == second.returncode == -signal.SIGTERM
        await wait_until(pilot, lambda: pids(app) == {third.pid}, timeout=5, message="their rows go")
        assert app.tags.keys == set(), "the tags of signalled processes are dropped"
        assert third.poll() is None, "the untagged process under the cursor was spared"


IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"
)


async def test_a_process_that_survives_the_signal_stays_listed_but_untagged(sim, spawn):
    stubborn = spawn(IGNORES_SIGTERM)
    backend = sim(gpus=1, real_pids=[stubborn.pid], processes_per_gpu=0, clock=time.time)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("space")
        assert len(app.tags.keys) == 1
        await confirm_dialog(pilot, app, "T")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
        assert app.last_outcomes[0].ok, "the signal was delivered"
        assert app.tags.keys == set(), "sent: no longer tagged, so a second T does not resend to it by surprise"
        await more_snapshots(pilot, app, 2)
        assert pids(app) == {stubborn.pid}
        assert stubborn.poll() is None
        assert app.tags.keys == set()


# --------------------------------------------------------------------------- refusals


async def test_pid_reused_after_the_dialog_opened_is_refused(sim):
    backend = sim(gpus=2, seed=1, viewer="alice")
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await select(pilot, app, lambda p: p.user == "alice")
        target = table_of(app).selected
        await confirm_dialog(pilot, app, "T")
        reborn = backend.simulate_pid_reuse(target.pid)
        assert reborn is not None and reborn != target.create_time
        await pilot.press("y")
        await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
        (outcome,) = app.last_outcomes
        assert not outcome.ok
        assert f"pid {target.pid} now belongs to another process" in outcome.message
        assert "nothing sent" in outcome.message
        await more_snapshots(pilot, app)
        same_pid = [p for p in table_of(app).rows if p.pid == target.pid]
        assert len(same_pid) == 1, "the new process with that pid is still listed"
        assert same_pid[0].create_time == pytest.approx(reborn)


async def test_readonly_mode_opens_no_dialog_and_sends_nothing(sim):
    backend = sim(gpus=2, seed=1, viewer="alice")
    spy = SendSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert "read-only" in "".join(widget_lines(app.query_one("#header")))
        await select(pilot, app, lambda p: p.user == "alice")
        target = table_of(app).selected
        stack = list(app.screen_stack)
        for count, key in enumerate(("T", "K", "I"), 1):
            await pilot.press(key)
            await pilot.pause()
            assert list(app.screen_stack) == stack, f"{key}: no dialog"
            assert not isinstance(app.screen, ConfirmSignalScreen)
            notes = list(app._notifications)
            assert len(notes) == count
            assert "read-only" in notes[-1].message and notes[-1].severity == "warning"
        await more_snapshots(pilot, app)
        assert spy.calls == []
        assert app.last_outcomes == []
        assert target.key in {p.key for p in table_of(app).rows}


async def test_another_users_process_is_not_permitted(sim):
    backend = sim(gpus=2, seed=1, viewer="alice")
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await select(pilot, app, lambda p: p.user not in ("alice", None))
        target = table_of(app).selected
        await confirm_dialog(pilot, app, "K")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
        (outcome,) = app.last_outcomes
        assert not outcome.ok
        assert "not permitted" in outcome.message and target.user in outcome.message
        errors = [n for n in app._notifications if n.severity == "error"]
        assert [n.message for n in errors] == [outcome.message], "the refusal is shown to the user"
        await more_snapshots(pilot, app)
        assert target.key in {p.key for p in table_of(app).rows}, "still running"


async def test_foreign_pids_cannot_be_signalled(sim):
    backend = sim(gpus=2, seed=1, viewer="alice", faults=parse_fault_specs(["foreign"]))
    spy = SendSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        rows = table_of(app).rows
        assert rows and all(p.foreign for p in rows)
        assert "(not visible from this PID namespace)" in widget_lines(table_of(app))[1]
        stack = list(app.screen_stack)
        for key in ("T", "K"):
            await pilot.press(key)
            await pilot.pause()
            assert list(app.screen_stack) == stack, "no dialog"
        notes = list(app._notifications)
        assert [n.severity for n in notes] == ["error", "error"]
        assert f"pid {rows[0].pid} is not visible from this PID namespace" in notes[0].message
        assert spy.calls == []
        assert app.last_outcomes == []


async def test_a_pid_this_namespace_lacks_is_listed_and_never_signalled(sim, spawn):
    """NVML lists a pid the host does not have (a container, a captured machine): a row, refused by every kill path.

    The ``vanished`` fault lists such pids beside a real process on one GPU: the row's own K, the tagged
    rows' K, its process screen's K and the GPU group's K (``b``) all refuse with one line naming it,
    and nothing is sent to anyone.
    """
    child = spawn()
    backend = sim(gpus=1, seed=1, real_pids=[child.pid], faults=parse_fault_specs(["vanished"]))
    spy = SendSpy(backend)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        hidden = [p for p in table_of(app).rows if p.foreign]
        assert hidden, "the driver listed a pid the host does not have: it is a row"
        row = hidden[0]
        assert row.gpu_memory_bytes and row.user is None and row.command is None and row.create_time is None
        assert child.pid in pids(app)
        line = next(line for line in widget_lines(table_of(app)) if f" {row.pid} " in line)
        assert "(not visible from this PID namespace)" in line
        stack = list(app.screen_stack)

        await select(pilot, app, lambda p: p.pid == row.pid)
        await pilot.press("K")  # the row itself
        await pilot.press("space")
        await select(pilot, app, lambda p: p.pid == child.pid)
        await pilot.press("space", "K")  # tagged, with a visible one
        assert len(app.tags.keys) == 2
        app.tags.keys.clear()
        await select(pilot, app, lambda p: p.pid == row.pid)
        await pilot.press("enter")  # its process screen
        await pilot.pause()
        assert isinstance(app.screen, ProcessScreen)
        await pilot.press("K", "escape")
        await pilot.pause()
        for _ in range(4):  # its GPU's group
            if app.group_by == "gpu":
                break
            await pilot.press("b")
        assert app.group_by == "gpu"
        await pilot.press("home", "K")
        await pilot.pause()

        assert list(app.screen_stack) == stack, "no dialog"
        notes = [n.message for n in app._notifications if n.severity == "error"]
        assert len(notes) == 4, notes
        for note in notes:
            assert f"pid {row.pid}" in note and "is not visible from this PID namespace" in note, note
            assert "nothing sent" in note
        assert spy.calls == [] and app.last_outcomes == []
        assert child.poll() is None, "the visible process of the refused group is untouched"


async def test_nothing_selected_opens_no_dialog(sim):
    backend = sim(gpus=2, seed=1, processes_per_gpu=0)
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert table_of(app).rows == []
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        assert [n.message for n in app._notifications] == ["no process selected"]


async def test_outcome_naming_a_process_with_markup_does_not_crash(sim):
    """The outcome message quotes the process's own name: it must be shown literally, not parsed as markup."""
    backend = sim(
        gpus=2, seed=1, viewer="alice", workloads=[Workload("[/bold]x --y", (0.1, 0.2), (0.3, 0.5), (600, 600))]
    )
    app = NvtopyApp.for_backend(backend, interval=INTERVAL)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot, app)
        await select(pilot, app, lambda p: p.user == "alice")
        target = table_of(app).selected
        await confirm_dialog(pilot, app, "T")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.last_outcomes, message="the outcome")
        assert app.last_outcomes[0].ok
        message = f"sent SIGTERM to pid {target.pid} ([/bold]x)"
        await wait_until(pilot, lambda: message in screen_text(app), message="the toast shows it literally")
        await more_snapshots(pilot, app)
        assert target.key not in {p.key for p in table_of(app).rows}, "the simulated process ended"
        assert app.is_running

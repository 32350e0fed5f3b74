"""Keys users already know from htop and nvitop, and the dialogs every one of them closes with q or esc.

h is help (htop, nvitop), t the tree, ``,`` and ``.`` the sort column, ``o``
then a letter sorts as nvitop's ``oX``; nvtopy's own features moved to keys
those tools leave free (H health, y type filter, C and F2 the column chooser,
[ and ] step). Driven as a user would, through Textual's pilot on simulated GPUs,
and the real CLI in a pseudo-terminal for the time from q to the shell prompt.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.columns_screen import ColumnsScreen
from nvtopy.tui.health_screen import HealthScreen
from nvtopy.tui.process_screen import ProcessScreen
from nvtopy.tui.screens import ConfirmSignalScreen, GpuPickerScreen, HelpScreen, SortByScreen

from ..end_to_end.test_slow_driver import ALT_SCREEN_OFF, Terminal
from ..tui_helpers import screen_text, started, wait_until

SIZE = (120, 40)
INTERVAL = 2.0


def app_of(sim, **kwargs) -> NvtopyApp:
    return NvtopyApp.for_backend(sim(gpus=4, seed=1, processes_per_gpu=4, **kwargs), interval=INTERVAL)


async def test_h_is_help_and_shift_h_is_health(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        listed = {keys: text for rows in dict(app.screen.sections).values() for keys, text in rows}
        assert "h ? f1" in listed
        assert any(keys == "H" and "health" in text for keys, text in listed.items())
        await pilot.press("h")  # h closes the help too
        await pilot.pause()
        await pilot.press("H")
        await pilot.pause()
        assert isinstance(app.screen, HealthScreen)
        await pilot.press("H")  # and H the health screen
        await pilot.pause()
        assert not isinstance(app.screen, HealthScreen | HelpScreen)


async def test_t_shows_the_tree_and_y_the_process_type(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("t")
        await pilot.pause()
        assert app.tree_view
        assert app.row_filter.process_type is None, "t is no type filter any more"
        await pilot.press("t")
        await pilot.pause()
        assert not app.tree_view
        await pilot.press("y")
        assert app.row_filter.process_type == "C"


async def test_comma_and_full_stop_step_the_sort_column(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.order.column == "gpu"
        await pilot.press("full_stop")
        assert app.order.column == "pid"
        await pilot.press("full_stop")
        assert app.order.column == "user"
        await pilot.press("comma")
        assert app.order.column == "pid"


async def test_o_then_a_letter_sorts_as_in_nvitop(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, SortByScreen)
        shown = screen_text(app)
        for words in ("p PID", "g GPU-MEM", "s SM%", "c CPU%", "t TIME"):
            assert words in " ".join(shown.split()), words
        await pilot.press("g")  # og: GPU memory, biggest first
        await pilot.pause()
        assert not isinstance(app.screen, SortByScreen)
        assert (app.order.column, app.order.reverse) == ("gpu_memory", True)
        await pilot.press("o", "G")  # oG: the other way
        await pilot.pause()
        assert (app.order.column, app.order.reverse) == ("gpu_memory", False)
        await pilot.press("o", "p")
        await pilot.pause()
        assert (app.order.column, app.order.reverse) == ("pid", False)
        await pilot.press("o", "z")  # no column's letter: still asking
        await pilot.pause()
        assert isinstance(app.screen, SortByScreen)
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, SortByScreen)
        assert app.order.column == "pid" and app.is_running


DIALOGS = {
    "help": ("h", HelpScreen),
    "GPU picker": ("g", GpuPickerScreen),
    "column chooser": ("C", ColumnsScreen),
    "column chooser (F2)": ("f2", ColumnsScreen),
    "sort by": ("o", SortByScreen),
    "health": ("H", HealthScreen),
    "signal confirmation": ("T", ConfirmSignalScreen),
    "process screen": ("enter", ProcessScreen),
}


@pytest.mark.parametrize("close", ["q", "escape"])
@pytest.mark.parametrize("dialog", list(DIALOGS))
async def test_q_and_escape_close_every_dialog_without_quitting(sim, dialog, close):
    key, screen = DIALOGS[dialog]
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press(key)
        await wait_until(pilot, lambda: isinstance(app.screen, screen), message=f"{dialog} open")
        await pilot.press(close)
        await wait_until(pilot, lambda: not isinstance(app.screen, screen), message=f"{close} closes the {dialog}")
        assert app.is_running and app.screen is app.screen_stack[0]


async def test_the_gpu_picker_shows_whole_uuids(sim):
    app = app_of(sim)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GpuPickerScreen)
        shown = screen_text(app)
        for gpu in app.snapshot.gpus:
            assert len(gpu.static.uuid) > 16
            assert gpu.static.uuid in shown, gpu.static.uuid


# --------------------------------------------------------------------------- quitting


async def test_the_terminal_driver_stops_reading_input_at_once():
    """Textual's input thread waits out its 0.1 s poll, then 0.1 s more after it stops reading (0.1-0.2 s of each
    quit): the app's driver wakes it at once."""
    driver_class = NvtopyApp.for_backend(None, opener=lambda: None).get_driver_class()  # type: ignore[arg-type]
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT, signal.SIGWINCH)}
    keys, typed = os.pipe()  # stands for the terminal
    try:
        driver = driver_class(app=None)  # type: ignore[arg-type]
        driver.fileno = keys
        driver.write = driver.flush = lambda *data: None  # no terminal to write the mode changes to
        driver._key_thread = thread = threading.Thread(target=driver._run_input_thread, daemon=True)
        thread.start()
        began = time.perf_counter()
        driver.disable_input()
        took = time.perf_counter() - began
        assert not thread.is_alive()
        assert took < 0.09, f"input stopped in {took * 1000:.0f} ms"
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.close(keys)
        os.close(typed)


def test_q_ends_the_monitor_promptly():
    """The real CLI in a pty with --demo: from q to the end of the process, bounded (measured: 0.1-0.3 s)."""
    term = Terminal(["--demo"], cols=120, rows=40)
    try:
        term.wait_for(b"vllm", 30)  # a snapshot's processes are drawn
        took = term.quit_time()
        assert took < 1.0, f"q took {took:.2f} s"
        assert term.status == 0
    finally:
        term.close()


@pytest.mark.timing
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_the_monitor_and_give_the_terminal_back(signum: int):
    """``kill PID`` (or the terminal closing) ends the monitor as ``q`` does: exit 0, out of the alternate screen."""
    term = Terminal(["--demo"], cols=120, rows=40)
    try:
        term.wait_for(b"vllm", 30)  # a snapshot's processes are drawn
        with term.lock:
            before = len(term.output)
        os.kill(term.pid, signum)
        term.wait_exit(10.0)
        assert term.status == 0
        assert ALT_SCREEN_OFF in term.text()[before:], "the terminal was left in the alternate screen"
    finally:
        term.close()

"""Modal screens: signal confirmation, GPU picker, help.

Text that comes from the system (commands, user names, GPU names) is passed as
rich ``Text`` / Textual ``Content`` objects, never as strings, which Textual
would parse as markup.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, SelectionList, Static
from textual.widgets.selection_list import Selection

from ..model import GpuProcess, GpuStatic
from ..render.units import NA, fmt_bytes, short_name
from ..textsafe import safe_text

__all__ = ["ConfirmSignalScreen", "GpuPickerScreen", "HelpScreen"]

# Styles: screens.tcss, beside this file (one file for the three dialogs).
_STYLES = "screens.tcss"


class ConfirmSignalScreen(ModalScreen[bool]):
    """Ask before signalling: names every target (pid, user, GPU, GPU memory, command).

    The targets are captured when the dialog opens -- pid *and* create time -- so
    the backend can refuse if a pid now belongs to another process. Focus starts
    on Cancel: a stray Enter does not kill anything; ``y`` confirms.
    """

    CSS_PATH = _STYLES
    BINDINGS = [
        Binding("y", "answer(True)", "Send", show=False),
        Binding("n,escape", "answer(False)", "Cancel", show=False),
    ]

    def __init__(self, targets: list[GpuProcess], signal: str, *, group: str | None = None) -> None:
        """``group``: the group the targets are (``"owner ns/pod"``), named in the question; outside text."""
        super().__init__()
        self.targets = targets
        self.signal = signal
        self.group = group

    def compose(self) -> ComposeResult:
        count = len(self.targets)
        noun = "process" if count == 1 else f"{count} processes"
        table = Table.grid(padding=(0, 2))
        for header in ("PID", "USER", "GPU", "GPU-MEM", "COMMAND"):
            table.add_column(header, no_wrap=header != "COMMAND", overflow="fold")
        table.add_row(*(Text(h, style="bold") for h in ("PID", "USER", "GPU", "GPU-MEM", "COMMAND")))
        for process in self.targets:
            table.add_row(
                Text(str(process.pid)),
                Text(safe_text(process.user) if process.user else NA),
                Text(str(process.gpu_index)),
                Text(fmt_bytes(process.gpu_memory_bytes)),
                Text(safe_text(process.command) if process.command else NA),
            )
        with Vertical():
            of = "" if self.group is None else f" of {safe_text(self.group)}"
            yield Static(Text(f"Send {self.signal} to {noun}{of}?"), id="question")
            with VerticalScroll():
                yield Static(table, id="targets")
            with Horizontal(classes="buttons"):
                yield Button(Content(f"Send {self.signal} (y)"), variant="error", id="send")
                yield Button(Content("Cancel (n)"), variant="primary", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "send")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class GpuPickerScreen(ModalScreen["frozenset[int] | None"]):
    """Toggle which GPUs the panels and the process table show. Returns None when cancelled."""

    CSS_PATH = _STYLES
    BINDINGS = [
        Binding("enter", "apply", "Apply", show=False, priority=True),
        Binding("a", "all", "All", show=False),
        Binding("escape", "cancel", "Cancel", show=False),
    ]

    def __init__(self, gpus: Iterable[GpuStatic], shown: frozenset[int] | None) -> None:
        super().__init__()
        self.gpus = list(gpus)
        self.shown = shown

    def compose(self) -> ComposeResult:
        selections = []
        for gpu in self.gpus:
            bus, uuid = safe_text(gpu.short_bus_id) or NA, safe_text(gpu.uuid) or NA  # from the driver or a peer
            label = f"{gpu.index:>2}  {short_name(gpu.name):<18} {bus:<8} {uuid[:16]}"
            selections.append(Selection(Content(label), gpu.index, self.shown is None or gpu.index in self.shown))
        with Vertical():
            yield Static(Text("Show which GPUs?", style="bold"))
            yield SelectionList[int](*selections, id="gpus")
            yield Static(Text("space toggles · a selects all · enter applies · esc cancels"), id="hint")
            with Horizontal(classes="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(SelectionList).focus()

    def action_apply(self) -> None:
        chosen = frozenset(self.query_one(SelectionList).selected)
        everything = frozenset(g.index for g in self.gpus)
        self.dismiss(None if chosen == everything else chosen)

    def action_all(self) -> None:
        self.query_one(SelectionList).select_all()

    def action_cancel(self) -> None:
        self.dismiss(self.shown if self.shown is not None else None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "apply":
            self.action_apply()
        else:
            self.action_cancel()


class HelpScreen(ModalScreen[None]):
    """Every key, generated from the bindings so it cannot fall out of date."""

    CSS_PATH = _STYLES
    BINDINGS = [Binding("escape,q,question_mark,f1", "close", "Close", show=False)]

    def __init__(self, sections: list[tuple[str, list[tuple[str, str]]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(justify="right", style="bold cyan", no_wrap=True)
        table.add_column()
        for title, rows in self.sections:
            table.add_row("", Text(title, style="bold underline"))
            for keys, description in rows:
                table.add_row(Text(keys), Text(description))
            table.add_row("", "")
        with Vertical():
            yield Static(Text("nvtopy keys", style="bold"))
            with VerticalScroll():
                yield Static(table)
            yield Static(Text("esc, q or ? closes this help", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)

"""Modal screens: signal confirmation, GPU picker, sort by a column's letter, help.

The help is made from the bindings (:func:`help_sections`): a key bound with a
description is in it, in the section its action is mapped to; only what is no
binding of the app (the table's arrows, a click, Textual's palette) is written
by hand, as extra rows.

Every one closes with ``esc`` or ``q`` (cancelling where there is something to
cancel), as the dialogs of htop and nvitop do.

Text that comes from the system (commands, user names, GPU names, MIG profiles
and UUIDs) is passed as rich ``Text`` / Textual ``Content`` objects, never as
strings, which Textual would parse as markup, after
:func:`~nvtopy.textsafe.safe_text`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, SelectionList, Static
from textual.widgets.selection_list import Selection

from ..model import GpuProcess, GpuStatic, MigInstance, MigKey
from ..render.cells import mig_mode_cell, mig_profile_cell, mig_sm_cell, mig_uuid_cell
from ..render.processes import COLUMNS, FLAGS_COLUMN, HOST_COLUMN, MIG_COLUMN, SortOrder
from ..render.units import NA, fmt_bytes, short_name
from ..selection import ChosenInstances
from ..textsafe import safe_text
from .checklist import CheckList

__all__ = [
    "SORT_LETTERS",
    "ConfirmSignalScreen",
    "GpuChoice",
    "GpuPickerScreen",
    "HelpRows",
    "HelpScreen",
    "SortByScreen",
    "help_keys",
    "help_sections",
]

GpuChoice = tuple[frozenset[int] | None, ChosenInstances]
"""What the GPU picker returns: the GPUs to show (None: all) and the MIG instances chosen on GPUs
that are not shown whole (see :attr:`~nvtopy.render.processes.ProcessFilter.instances`)."""
PickerValue = int | MigKey  # a GPU's index, or an instance's key

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
        Binding("n,escape,q", "answer(False)", "Cancel", show=False),
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


class GpuPickerScreen(ModalScreen["GpuChoice | None"]):
    """Toggle which GPUs -- and which MIG instances -- the panels and the process table show.

    A MIG-enabled GPU lists its instances under it. Its own entry stands for all of
    them: toggling it toggles them all, and it is checked while they all are. A GPU
    with only some instances checked is shown narrowed to them (their panel lines
    and their processes). Returns None when cancelled.
    """

    CSS_PATH = _STYLES
    BINDINGS = [
        Binding("enter", "apply", "Apply", show=False, priority=True),
        Binding("a", "all", "All", show=False),
        Binding("n", "none", "None", show=False),
        Binding("escape,q", "cancel", "Cancel", show=False),
    ]

    def __init__(
        self,
        gpus: Iterable[GpuStatic],
        shown: frozenset[int] | None,
        instances: ChosenInstances = frozenset(),
    ) -> None:
        super().__init__()
        self.gpus = list(gpus)
        self.shown = shown
        self.instances = instances
        # Each GPU's instance keys (instances whose GPU instance id is unknown cannot be chosen: not listed).
        self._keys: dict[int, list[MigKey]] = {
            gpu.index: [m.key(gpu.index) for m in _choosable(gpu)] for gpu in self.gpus
        }

    def _selections(self) -> list[Selection[PickerValue]]:
        selections: list[Selection[PickerValue]] = []
        for gpu in self.gpus:
            shown = self.shown is None or gpu.index in self.shown
            narrowed = {k for k in self.instances if k.gpu_index == gpu.index}
            selections.append(Selection(Content(_gpu_label(gpu)), gpu.index, shown and not narrowed))
            instances = list(zip(self._keys[gpu.index], _choosable(gpu), strict=True))
            for i, (key, instance) in enumerate(instances):
                chosen = shown and (not narrowed or key in narrowed)
                label = _instance_label(gpu.index, instance, last=i == len(instances) - 1)
                selections.append(Selection(Content(label), key, chosen))
        return selections

    def compose(self) -> ComposeResult:
        mig = any(self._keys.values())
        with Vertical():
            yield Static(Text("Show which GPUs" + (" and MIG instances?" if mig else "?"), style="bold"))
            yield CheckList[PickerValue](*self._selections(), id="gpus")
            hint = "space toggles · a all · n none · enter applies · esc or q cancels"
            yield Static(Text(hint), id="hint")
            with Horizontal(classes="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(SelectionList).focus()

    def on_selection_list_selection_toggled(self, event: SelectionList.SelectionToggled[PickerValue]) -> None:
        """Keep a MIG GPU's entry and its instances' in step (the user toggled one of them)."""
        chooser: SelectionList[PickerValue] = self.query_one(SelectionList)
        value = event.selection.value
        if isinstance(value, int):
            change = chooser.select if value in chooser.selected else chooser.deselect
            for key in self._keys.get(value, ()):
                change(key)
            return
        gpu = value.gpu_index
        if all(key in chooser.selected for key in self._keys[gpu]):
            chooser.select(gpu)
        else:
            chooser.deselect(gpu)

    def choice(self) -> GpuChoice:
        """The GPUs shown whole or narrowed (None: every GPU, whole), and the instances of the narrowed ones."""
        selected = set(self.query_one(SelectionList).selected)
        gpus: set[int] = set()
        instances: set[MigKey] = set()
        for gpu in self.gpus:
            keys = self._keys[gpu.index]
            chosen = [key for key in keys if key in selected]
            if gpu.index in selected or (keys and len(chosen) == len(keys)):
                gpus.add(gpu.index)
            elif chosen:
                gpus.add(gpu.index)
                instances.update(chosen)
        everything = {g.index for g in self.gpus}
        return (None if gpus == everything and not instances else frozenset(gpus), frozenset(instances))

    def action_apply(self) -> None:
        self.dismiss(self.choice())

    def action_all(self) -> None:
        self.query_one(SelectionList).select_all()

    def action_none(self) -> None:
        self.query_one(SelectionList).deselect_all()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "apply":
            self.action_apply()
        else:
            self.action_cancel()


def _choosable(gpu: GpuStatic) -> list[MigInstance]:
    """The instances the picker lists (those a process can be matched to: GPU instance id known)."""
    return [m for m in gpu.mig_instances if m.gpu_instance_id is not None]


UUID_WIDTH = 40
"""A GPU's UUID in the picker: ``GPU-`` and 36 characters, whole; a longer one (outside text) is cut with ``…``."""


def _gpu_label(gpu: GpuStatic) -> str:
    """``" 1  H100 80GB HBM3     2A:00.0  GPU-4f1c2b3a-…-9d3e  MIG"``: bus id and the whole UUID (the driver's or
    a peer's); the dialog is as wide as its longest label, within the screen."""
    bus, uuid = safe_text(gpu.short_bus_id) or NA, safe_text(gpu.uuid) or NA
    if len(uuid) > UUID_WIDTH:
        uuid = uuid[: UUID_WIDTH - 1] + "…"
    label = f"{gpu.index:>2}  {short_name(gpu.name):<18} {bus:<8} {uuid}"
    mig = mig_mode_cell(gpu)
    return label if mig is None else f"{label}  {mig[0]}"


def _instance_label(gpu_index: int, instance: MigInstance, *, last: bool) -> str:
    """``"    ├ MIG 1/2/0   3g.40gb     60 SMs  MIG-8f03024c-…"``: one instance, under its GPU (``└`` the last)."""
    profile = mig_profile_cell(instance)[0]
    sms = mig_sm_cell(instance)[0]
    uuid = mig_uuid_cell(instance)[0]
    branch = "└" if last else "├"
    return f"    {branch} MIG {instance.label(gpu_index):<7} {profile:<10} {sms:>3} SMs  {uuid[:48]}"


SORT_LETTERS: dict[str, str] = {
    "n": "gpu",
    "h": "host",
    "i": "mig",
    "p": "pid",
    "u": "user",
    "o": "owner",
    "y": "type",
    "g": "gpu_memory",
    "s": "sm",
    "c": "cpu",
    "m": "host_memory",
    "t": "time",
    "f": "flags",
    "x": "command",
}
"""``o`` then a letter sorts by a column: nvitop's letters (n p u g s c m t: GPU index, PID, user, GPU memory, SM,
CPU, host memory, time), and letters of nvtopy's own columns; an upper-case letter sorts the other way."""

_TITLES = {c.key: c.title for c in (*COLUMNS, HOST_COLUMN, MIG_COLUMN, FLAGS_COLUMN)}
_NATURAL = {c.key: SortOrder(c.key, c.descending_first) for c in (*COLUMNS, HOST_COLUMN, MIG_COLUMN, FLAGS_COLUMN)}


class SortByScreen(ModalScreen["SortOrder | None"]):
    """``o``: the next key names the column to sort by (nvitop's ``oX``); returns the order, None when cancelled.

    A lower-case letter sorts the column its natural way (numbers biggest first),
    an upper-case one the other way. Only the columns the table can show now are
    offered (HOST with several hosts, MIG while a GPU has instances).
    """

    CSS_PATH = _STYLES
    BINDINGS = [Binding("escape,q", "cancel", "Cancel", show=False)]

    def __init__(self, columns: Iterable[str]) -> None:
        """``columns``: the keys of the columns that can be sorted by now."""
        super().__init__()
        offered = set(columns)
        self.letters = {letter: key for letter, key in SORT_LETTERS.items() if key in offered}

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 1))
        for _ in range(3):
            table.add_column(justify="right", style="bold cyan", no_wrap=True)
            table.add_column(no_wrap=True)
        cells = [(letter, _TITLES[key]) for letter, key in self.letters.items()]
        rows = (len(cells) + 2) // 3
        for row in range(rows):
            line: list[Text] = []
            for letter, title in cells[row::rows]:
                line += [Text(letter), Text(title)]
            table.add_row(*line)
        with Vertical():
            yield Static(Text("Sort by (the column's letter)", style="bold"))
            yield Static(table)
            yield Static(Text("upper case: the other way · esc or q cancels"), id="hint")

    def on_key(self, event: events.Key) -> None:
        letter = event.character
        if letter is None or letter.lower() not in self.letters:
            return
        event.stop()
        event.prevent_default()
        column = self.letters[letter.lower()]
        natural = _NATURAL[column]
        self.dismiss(natural.flipped() if letter.isupper() else natural)

    def action_cancel(self) -> None:
        self.dismiss(None)


HelpRows = list[tuple[str, str]]
"""A section of the help: (the keys, what they do) rows."""


def help_keys(binding: Binding, key_display: Callable[[Binding], str]) -> str:
    """``binding``'s keys as the help writes them: as Textual shows each (``key_display``), ``ctrl+`` ones spelt
    out (Textual writes ``^c``)."""
    names = binding.key.split(",")
    return " ".join(name if name.startswith("ctrl+") else key_display(Binding(name, "")) for name in names)


def help_sections(
    bindings: Iterable[BindingType],
    section_of: Mapping[str, str],
    key_display: Callable[[Binding], str],
    *,
    order: Sequence[str],
    extra: Mapping[str, HelpRows],
) -> list[tuple[str, HelpRows]]:
    """The help's sections in ``order``: a row per binding (its keys, its tooltip or else its description) in the
    section ``section_of`` maps its action's name to ("General" if none), then the ``extra`` rows of each section."""
    sections: dict[str, HelpRows] = {}
    for binding in bindings:
        assert isinstance(binding, Binding)  # the app's bindings are Binding objects, never tuples
        action = binding.action.split("(")[0]
        row = (help_keys(binding, key_display), binding.tooltip or binding.description)
        sections.setdefault(section_of.get(action, "General"), []).append(row)
    for name, rows in extra.items():
        sections.setdefault(name, []).extend(rows)
    return [(name, sections[name]) for name in order if name in sections]


class HelpScreen(ModalScreen[None]):
    """Every key, generated from the bindings so it cannot fall out of date (:func:`help_sections`)."""

    CSS_PATH = _STYLES
    BINDINGS = [Binding("escape,q,h,question_mark,f1", "close", "Close", show=False)]

    def __init__(self, sections: list[tuple[str, HelpRows]]) -> None:
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
            yield Static(Text("esc, q, h or ? closes this help", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)

"""A styled line of fixed cells: the cheap way to draw text that changes every second.

Why not rich ``Text``: the GPU panels are rebuilt every refresh, and ``Text``
keeps spans that ``render()`` resolves, splits and combines for every line --
most of the UI thread's time in a profile of the monitor (see
benchmarks/README.md). A :class:`Line` is a list of (text, Style) pieces with
pre-parsed styles; it becomes segments (for a Textual ``Strip``) without any
of that work.

Text given to a line must already be safe for a terminal (ours, or passed
through :func:`nvtopy.textsafe.safe_text`).
"""

from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style

__all__ = ["Line", "style"]

_new_tuple = tuple.__new__


@lru_cache(maxsize=256)
def style(definition: str) -> Style | None:
    """A parsed rich style, cached (``""`` is no style)."""
    return Style.parse(definition) if definition else None


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


class Line:
    """Text pieces with styles, and their total width in terminal cells."""

    __slots__ = ("cells", "parts")

    # __init__ and add measure in line, not through _cells: a panel, chart and header refresh makes about 500
    # pieces a second, a Python call each saved.
    def __init__(self, text: str = "", style_name: str = "") -> None:
        if text:
            self.parts: list[tuple[str, Style | None]] = [(text, style(style_name))]
            self.cells = len(text) if text.isascii() else cell_len(text)
        else:
            self.parts = []
            self.cells = 0

    def add(self, text: str, style_name: str = "") -> Line:
        if text:
            self.parts.append((text, style(style_name)))
            self.cells += len(text) if text.isascii() else cell_len(text)
        return self

    def extend(self, other: Line) -> Line:
        self.parts.extend(other.parts)
        self.cells += other.cells
        return self

    def restyle(self, style_name: str) -> Line:
        """Give every piece ``style_name`` where the piece says nothing itself (e.g. red for a lost GPU's title,
        dim for a stalled GPU's values): a piece's own colours and attributes win, so a verdict drawn white on
        red stays white on red (laid over it, red drew the verdict red on red: unreadable)."""
        extra = style(style_name)
        if extra is None:
            return self
        self.parts = [(text, extra if old is None else extra + old) for text, old in self.parts]
        return self

    def fit(self, width: int) -> Line:
        """Exactly ``width`` cells: pad with spaces, or cut and end with an ellipsis."""
        if self.cells <= width:
            if self.cells < width:
                self.parts.append((" " * (width - self.cells), None))
                self.cells = width
            return self
        kept: list[tuple[str, Style | None]] = []
        room = max(0, width - 1)
        used = 0
        last_style: Style | None = None
        for text, piece_style in self.parts:
            size = _cells(text)
            if used + size <= room:
                kept.append((text, piece_style))
                used += size
                last_style = piece_style
                continue
            head = set_cell_size(text, room - used) if room > used else ""
            if head:
                kept.append((head, piece_style))
                used += _cells(head)
            last_style = piece_style
            break
        if width >= 1:
            kept.append(("…", last_style))
            used += 1
        self.parts, self.cells = kept, used
        return self

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.parts)

    def segments(self) -> list[Segment]:
        # Made as plain tuples of Segment's three fields: Segment(...) goes through NamedTuple's Python-level
        # __new__, a frame a piece, and every panel and chart line is turned into segments every second.
        return [_new_tuple(Segment, (text, piece_style, None)) for text, piece_style in self.parts]

    def __repr__(self) -> str:
        return f"Line({self.plain!r})"

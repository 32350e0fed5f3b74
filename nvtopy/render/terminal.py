"""What the terminal can show: colour or not (``NO_COLOR``), and whether it is a dumb one (``TERM=dumb``).

One rule for every view. ``NO_COLOR`` set and not empty (no-color.org): no colour;
each state is told by an attribute and by its words instead (the ``monochrome``
palette of :mod:`nvtopy.render.cells`). ``TERM=dumb`` (or ``unknown``, as rich
reads it): a terminal that promises nothing -- no colour at all, and drawing in
ASCII (:func:`ascii_drawing`): braille charts, box borders, block bars and
symbols become ``'-._|+#``. Letters, digits and marks of any script stay: a
user's name is text, not drawing.

No rich and no Textual here: ``--once`` reads :func:`color_allowed`.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping

__all__ = ["DUMB_TERMS", "ascii_drawing", "color_allowed", "dumb_terminal", "no_color"]

DUMB_TERMS = frozenset({"dumb", "unknown"})
"""``TERM`` values of a terminal that promises no capability (rich's reading of them)."""


def no_color(environ: Mapping[str, str] | None = None) -> bool:
    """``NO_COLOR`` is set and not empty (no-color.org)."""
    return bool((os.environ if environ is None else environ).get("NO_COLOR"))


def dumb_terminal(environ: Mapping[str, str] | None = None) -> bool:
    """``TERM`` names a dumb terminal: no colour, ASCII drawing."""
    return (os.environ if environ is None else environ).get("TERM", "").strip().lower() in DUMB_TERMS


def color_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether colour may be written at all: neither ``NO_COLOR`` nor a dumb terminal."""
    return not no_color(environ) and not dumb_terminal(environ)


# ----------------------------------------------------------------- ASCII drawing

# Braille dot rows, top to bottom: the bits of the two dots of each row (render.chart draws with them).
_BRAILLE_ROWS = (0x01 | 0x08, 0x02 | 0x10, 0x04 | 0x20, 0x40 | 0x80)
# Lower eighth blocks (sparklines), by height: ▁ to █.
_LOWER_BLOCKS = "__.--==#"
# Left eighth blocks (the tip of a bar), ▉ (7/8) to ▏ (1/8).
_LEFT_BLOCKS = "###||||"
_SHADES = {"░": ".", "▒": ":", "▓": "#", "▀": '"', "▐": "|", "▔": "'", "▕": "|"}
_SYMBOLS = {
    "·": ".",
    "…": "~",
    "°": " ",
    "▲": "^",
    "▼": "v",
    "▸": ">",
    "▾": "v",
    "▶": ">",
    "◀": "<",
    "◂": "<",
    "●": "*",
    "⚠": "!",
    "✓": "v",
    "✗": "x",
    "⟳": "~",
    "⏸": "=",
}


def _braille(bits: int) -> str:
    """A braille cell as one ASCII mark at the height of its dots; a column of three or four dots is ``|``."""
    rows = [row for row, mask in enumerate(_BRAILLE_ROWS) if bits & mask]
    if not rows:
        return " "
    if rows[-1] - rows[0] >= 2:
        return "|"
    return "'-._"[round(sum(rows) / len(rows) + 0.01)]


def _box(name: str) -> str:
    """A box-drawing character: ``-`` across, ``|`` down, ``+`` where lines meet or turn."""
    if "DIAGONAL" in name:
        return "X" if "CROSS" in name else "/" if "UPPER RIGHT TO LOWER LEFT" in name else "\\"
    across = any(word in name for word in ("HORIZONTAL", "LEFT", "RIGHT"))
    down = any(word in name.split() for word in ("VERTICAL", "UP", "DOWN"))
    return "+" if across and down else "-" if across else "|" if down else "+"


def _ascii(char: str) -> str:
    """``char`` as ASCII when it is drawing or a symbol (as many cells wide); letters, digits and marks unchanged."""
    code = ord(char)
    category = unicodedata.category(char)
    if category[0] in "LMN":  # text of any script: a name, not drawing
        return char
    if 0x2800 <= code <= 0x28FF:
        shown = _braille(code - 0x2800)
    elif 0x2581 <= code <= 0x2588:
        shown = _LOWER_BLOCKS[code - 0x2581]
    elif 0x2589 <= code <= 0x258F:
        shown = _LEFT_BLOCKS[code - 0x2589]
    elif char in _SHADES:
        shown = _SHADES[char]
    elif 0x2596 <= code <= 0x259F:  # quadrants
        shown = "#"
    elif 0x2500 <= code <= 0x257F:
        shown = _box(unicodedata.name(char, ""))
    elif char in _SYMBOLS:
        shown = _SYMBOLS[char]
    elif category == "Pd":
        shown = "-"
    elif category in ("Pi", "Pf"):
        shown = '"'
    elif category == "Zs":
        shown = " "
    else:
        folded = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
        shown = folded if len(folded) == 1 else "?"
    width = 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return shown[:width].ljust(width)


class _AsciiTable(dict[int, str]):
    """``str.translate``'s table, filled as characters are met (each is worked out once)."""

    def __missing__(self, code: int) -> str:
        shown = self[code] = _ascii(chr(code))
        return shown


_TABLE = _AsciiTable()


def ascii_drawing(text: str) -> str:
    """``text`` with its drawing characters and symbols in ASCII, each as many cells wide as before.

    ``⣿⡀ ╭─┤ ████▌░░ ▁▃▅█ ▲ …`` becomes ``|_ +-+ ####|.. _.-# ^ ~``; letters of any script stay.
    """
    return text if text.isascii() else text.translate(_TABLE)

"""Untrusted text (command lines, user names) made safe to draw in a terminal.

Why: a process can put anything in its argv -- escape sequences that restyle or
move the cursor, newlines that break a table row, NULs. Rich ``Text`` already
keeps ``[bold]``-style markup literal; this removes the control characters that
would still reach the terminal, replacing each with a visible stand-in.
"""

from __future__ import annotations

__all__ = ["safe_text"]

# C0 controls, DEL and C1 controls -> visible escapes; tab and newline get short forms.
_TABLE = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TABLE.update({0x09: " ", 0x0A: "\\n", 0x0D: "\\r", 0x1B: "\\e"})
_TABLE.update({code: f"\\u{code:04x}" for code in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def safe_text(text: str | None) -> str:
    """``text`` with every terminal control character (and bidi override) replaced by a visible escape."""
    if not text:
        return text or ""
    if text.isprintable():
        return text
    return text.translate(_TABLE)

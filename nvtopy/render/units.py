"""Human-readable numbers, shared by every text view so that they agree with each other.

Why one module: the TUI, ``--once`` and the logger must print the same value the
same way ("N/A" for a missing value -- never 0 -- and binary units as nvidia-smi
and nvitop use them).
"""

from __future__ import annotations

import functools
import unicodedata

from ..textsafe import safe_text

__all__ = [
    "NA",
    "fmt_age",
    "fmt_bytes",
    "fmt_duration",
    "fmt_mhz",
    "fmt_percent",
    "fmt_pstate",
    "fmt_rate",
    "fmt_watts",
    "short_name",
    "width_of",
]

NA = "N/A"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(value: int | float | None, *, precision: int = 1) -> str:
    """``85520809984`` -> ``"79.6GiB"``; MiB below 1 GiB, as nvidia-smi users expect.

    A whole number of bytes is kept per value and precision (a bound of 2,048): every visible process row
    writes two of them each second, and a process's memory seldom moves (about 2.5 us made, 0.3 us kept).
    Not a float: ``-0.0`` equals ``0`` as a key, and writes ``-0B``."""
    if type(value) is int:
        return _kept_bytes(value, precision)
    return _bytes(value, precision)


@functools.lru_cache(maxsize=2048)
def _kept_bytes(value: int, precision: int) -> str:
    return _bytes(value, precision)


def _bytes(value: int | float | None, precision: int) -> str:
    if value is None:
        return NA
    size = float(value)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            if unit in ("B", "KiB", "MiB"):
                return f"{size:.0f}{unit}"
            return f"{size:.{precision}f}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


def fmt_rate(value: int | float | None) -> str:
    """Bytes per second as the panels and the health screen write them: ``"1.5GiB/s"``; N/A when unknown."""
    return NA if value is None else f"{fmt_bytes(value)}/s"


def fmt_percent(value: float | None, *, precision: int = 0) -> str:
    return NA if value is None else f"{value:.{precision}f}%"


def fmt_watts(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}W"


def fmt_mhz(value: int | None) -> str:
    return NA if value is None else f"{value}MHz"


def fmt_pstate(value: int | None) -> str:
    return NA if value is None else f"P{value}"


def fmt_celsius(value: int | None) -> str:
    return NA if value is None else f"{value}°C"


def fmt_duration(seconds: float | None) -> str:
    """Running time like ps: ``"59:59"``, ``"1:02:03"``, ``"3d 04:05"``."""
    if seconds is None:
        return NA
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def short_name(name: str | None) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"H100 80GB HBM3"``: the vendor prefix wastes columns.

    The name comes from the driver (or a recording, or a remote exporter's label)
    and is only ever shown on a terminal: it is made safe here (``safe_text``).
    """
    if not name:
        return NA
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            return safe_text(name[len(prefix) :])
    return safe_text(name)


def fmt_age(seconds: float | None) -> str:
    """A span in one unit, as people say it: ``"12 s"``, ``"5 min"``, ``"3 h"``, ``"2 d"``."""
    if seconds is None:
        return NA
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    if seconds < 172800:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} d"


def width_of(text: str) -> int:
    """Terminal cells of ``text``: wide (East Asian) characters take two, combining marks none (no rich import:
    ``--once`` stays light)."""
    if text.isascii():
        return len(text)
    return _cells(text)


@functools.lru_cache(maxsize=1024)
def _cells(text: str) -> int:
    """:func:`width_of` of a text with a character past ASCII, two lookups a character, remembered: a table
    measures the same texts again and again (a rule of ``─``, ``°C``, an owner label ``…`` in every row)."""
    cells = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        cells += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return cells

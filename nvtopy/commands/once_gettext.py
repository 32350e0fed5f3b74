"""argparse for a local ``nvtopy --once`` without :mod:`gettext` where no translation of its messages can exist.

Why: argparse imports gettext at its top and calls it for its own words as a parser is built; each
call looks for a catalogue (``messages.mo``) under Python's ``share/locale`` and imports :mod:`locale`
to name the languages. Together that was about 2.5 ms of a one-shot's 90 ms of CPU (gettext's and
locale's imports, three regular expressions compiled, the look-ups), for words that come back
unchanged wherever that folder does not exist (pyenv's, uv's and python.org's builds).

What stays the same: argparse is imported with a stand-in for gettext (in ``sys.modules`` only during
that import) whose ``gettext`` and ``ngettext`` answer as gettext's own do when no catalogue is found --
the message, or ``singular`` for 1 and ``plural`` otherwise -- as long as the folder gettext would look in
does not exist and nobody has imported gettext itself (who could bind another domain or folder). In any
other case they are the real gettext's answers, imported then. Any other name asked of the stand-in is
the real module's.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["catalogues_possible", "import_argparse"]


def catalogues_possible() -> bool:
    """Whether gettext could find a catalogue: it is imported (its domain and folders may have been changed), or the
    folder it looks in by default (``sys.base_prefix``/share/locale, ``gettext._default_localedir``) exists."""
    real = sys.modules.get("gettext")
    if real is not None and not isinstance(real, _GettextStandIn):
        return True
    return os.path.isdir(os.path.join(sys.base_prefix, "share", "locale"))


def _real() -> ModuleType:
    if isinstance(sys.modules.get("gettext"), _GettextStandIn):
        del sys.modules["gettext"]
    import gettext

    return gettext


def gettext(message: str) -> str:
    """``gettext.gettext(message)``: the message itself where no catalogue can be found (see the module)."""
    if catalogues_possible():
        translated: str = _real().gettext(message)
        return translated
    return message


def ngettext(singular: str, plural: str, n: int) -> str:
    """``gettext.ngettext(singular, plural, n)``: without a catalogue, ``singular`` for 1 and ``plural`` otherwise."""
    if catalogues_possible():
        chosen: str = _real().ngettext(singular, plural, n)
        return chosen
    return singular if n == 1 else plural


class _GettextStandIn(ModuleType):
    """gettext while argparse is imported: :func:`gettext` and :func:`ngettext`, any other name the real module's."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(_real(), name)


def import_argparse() -> None:
    """Import argparse with the gettext stand-in (nothing is done where either is imported already)."""
    if "argparse" in sys.modules or "gettext" in sys.modules:
        return
    stand_in = _GettextStandIn("gettext")
    stand_in.gettext = gettext  # type: ignore[attr-defined]
    stand_in.ngettext = ngettext  # type: ignore[attr-defined]
    sys.modules["gettext"] = stand_in
    try:
        import argparse  # noqa: F401 -- imported now, with the stand-in
    finally:
        if sys.modules.get("gettext") is stand_in:
            del sys.modules["gettext"]

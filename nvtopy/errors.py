"""Errors that reach the user as one line, never as a traceback.

Why a small hierarchy: the CLI maps each class to an exit code (2 for things the
user typed wrong, 1 for a machine that cannot be monitored), and the library
API raises the same classes so callers can catch them precisely.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .textsafe import quoted

__all__ = [
    "INLINE_NAMES",
    "NAME_QUOTE_LIMIT",
    "BackendUnavailableError",
    "NvtopyError",
    "SelectionError",
    "UsageError",
    "close_names",
    "did_you_mean",
    "unknown_name",
]


class NvtopyError(Exception):
    """Base class: ``str(error)`` is a complete, single-line message for the user."""

    exit_code = 1


class UsageError(NvtopyError):
    """A command-line argument or option value is invalid."""

    exit_code = 2


class SelectionError(UsageError):
    """A ``--gpus`` entry names no GPU, or more than one."""


class BackendUnavailableError(NvtopyError):
    """The GPUs cannot be read at all: no NVIDIA library, driver not loaded, version mismatch."""


# ------------------------------------------------------------------ an unknown name


INLINE_NAMES = 24
"""A list of known names up to this long is written out in the error; a longer one (``log --fields``: 109)
is named by count with the command that lists it, one a line: all of them on one line reads as noise."""

NAME_QUOTE_LIMIT = 40
"""Characters of a name the user gave quoted back in an error: a pasted paragraph is not repeated whole."""
_LONGEST = 100  # characters of a given name compared: no name is longer, and the comparison stays cheap
_WORDS = re.compile(r"[^a-z0-9]+")


def close_names(name: str, known: Sequence[str], limit: int = 3) -> list[str]:
    """The known names ``name`` was probably meant to be, best first (none when nothing is close).

    Two ways to be close, case ignored: the spelling (``difflib.get_close_matches``: ``lgo`` -> ``log``,
    ``User`` -> ``user``), or a word in common (``gpu_temp`` -> ``temperature_c``, ``memory.used`` ->
    ``memory_used_bytes``: a word of the name given that is a word of the known one, starts one, three
    letters or more, or is one and more, ``clocks``). A word that many names share (``gpu``) says less
    than a rare one (``temp``), so it weighs less; names far behind the best are left out, so ``lgo``
    gets ``log`` alone.
    """
    import difflib  # here, not at the top: only a mistyped name needs it (4 ms of every start otherwise)

    wanted = name.strip().lower()[:_LONGEST]
    if not wanted:
        return []
    lowered: dict[str, str] = {}
    for candidate in known:
        lowered.setdefault(candidate.lower(), candidate)
    spelled = set(difflib.get_close_matches(wanted, list(lowered), n=2 * limit, cutoff=0.6))
    words = [word for word in _WORDS.split(wanted) if word]
    parts = {low: _WORDS.split(low) for low in lowered}

    def shares(word: str, of: list[str]) -> bool:
        return any(
            part == word or (len(word) >= 3 and part.startswith(word)) or (len(part) >= 4 and word.startswith(part))
            for part in of
        )

    weights = {}
    for word in words:
        sharing = sum(1 for of in parts.values() if shares(word, of))
        if sharing:
            weights[word] = 1 / sharing
    scored = []
    for order, (low, candidate) in enumerate(lowered.items()):
        in_common = sum(weight for word, weight in weights.items() if shares(word, parts[low]))
        if low in spelled or in_common:
            score = in_common + difflib.SequenceMatcher(None, wanted, low).ratio()
            scored.append((-score, order, candidate))
    scored.sort()
    if not scored:
        return []
    best = -scored[0][0]
    return [candidate for score, _, candidate in scored if -score >= 0.75 * best][:limit]


def did_you_mean(name: str, known: Sequence[str], limit: int = 3) -> str:
    """``; did you mean 'a', 'b' or 'c'?`` with :func:`close_names`, or nothing when none is close."""
    close = [repr(candidate) for candidate in close_names(name, known, limit)]
    if not close:
        return ""
    return f"; did you mean {close[0] if len(close) == 1 else ', '.join(close[:-1]) + ' or ' + close[-1]}?"


def unknown_name(what: str, noun: str, name: str, known: Sequence[str], listing: str | None = None) -> UsageError:
    """The one-line error for a name that is none of ``known``: the closest ones, then where the rest are.

    ``what`` says where the name was given (``--fields``, ``--by``: the message starts with it, as
    every usage error does); ``noun`` what it names (``field``); ``listing`` how to list the names,
    one a line (``'nvtopy log --fields help' lists them``), for a list too long to write out.
    Why the close names first: the user typed one of them, nearly; the list is the fallback.
    """
    message = f"{what + ': ' if what else ''}unknown {noun} {quoted(name, NAME_QUOTE_LIMIT)}{did_you_mean(name, known)}"
    if len(known) <= INLINE_NAMES or listing is None:
        message += f" (known: {', '.join(known)})"
    else:
        message += f" ({len(known)} {noun}s: {listing})"
    return UsageError(message)

"""Keeping the secrets of a channel's URL out of everything nvtopy shows.

Why a scrubber next to apprise's privacy URL: apprise renders a URL with its password and
tokens masked (``url(privacy=True)``), which is what a channel's name and description use; but
an error text (a library's exception, a log line) may quote the URL as the user wrote it. So
each URL channel keeps the pieces of its URL that the privacy form left out -- the secrets, by
definition -- and :func:`scrub` replaces them in any text before it is shown.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["MASK", "scheme_only", "scrub", "secret_parts", "without_query"]

MASK = "****"
_SEPARATORS = re.compile(r"[/:@?&=#,;+\s]+")
_SHORTEST_SECRET = 3  # shorter pieces (a port's digits, "v1") are no secret and would mangle every message


def secret_parts(raw: str, shown: str) -> list[str]:
    """The pieces of ``raw`` (a URL as the user wrote it) that ``shown`` (its privacy form) leaves out.

    Each piece also in its percent-decoded form; longest first, so a scrub replaces a whole token
    before a piece of it. The scheme is no secret (apprise may show another spelling: ``ntfys``).
    Every value in the query counts as a secret too: apprise shows headers (``+X-Token=...``) and
    payload extras as they are, and nvtopy shows no query at all (:func:`without_query`).
    """
    raw = raw.split("://", 1)[-1]
    kept = set(_SEPARATORS.split(shown)) | set(_SEPARATORS.split(urllib.parse.unquote(shown)))
    secrets: set[str] = set()
    for piece in _SEPARATORS.split(raw):
        for form in (piece, urllib.parse.unquote(piece)):
            if len(form) >= _SHORTEST_SECRET and form not in kept:
                secrets.add(form)
    query = raw.split("#", 1)[0].partition("?")[2]
    for _, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        for form in (value, urllib.parse.quote(value), urllib.parse.quote_plus(value)):
            if len(form) >= _SHORTEST_SECRET:
                secrets.add(form)
    return sorted(secrets, key=lambda secret: (-len(secret), secret))


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by :data:`MASK`."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def without_query(url: str) -> str:
    """A URL without its ``?query`` and ``#fragment``: apprise's privacy form lists every default there."""
    return url.split("?", 1)[0].split("#", 1)[0]


def scheme_only(entry: str) -> str:
    """What may be shown of a URL nothing could parse: its scheme, ``ntfy://…`` (the rest may be a token)."""
    scheme = entry.split("://", 1)[0].strip()
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,31}", scheme):
        return "a URL"
    return f"'{scheme}://…'"

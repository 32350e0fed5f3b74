"""JSON from outside nvtopy (a recording's line, a Prometheus server's answer), decoded or refused in words.

Why one home: ``json.loads`` raises more than ``JSONDecodeError`` on hostile input --
``RecursionError`` for arrays nested a thousand deep, a plain ``ValueError`` for an
integer of more digits than Python converts -- and a caller that catches only the
first turns a bad line or a bad answer into a crash (or, on a source's thread, into
a misleading "closed the connection"). :func:`decode_json` raises one error,
:class:`JsonRefusedError`, whose ``str()`` says why in a few words; the size of
what is decoded is its caller's bound (a recording's line, an answer's bytes).

Why msgspec first: ``nvtopy --ssh`` decodes 64 hosts' lines a second and the fleet view a
30 MB Prometheus answer a refresh; msgspec's decoder is about 3-4x faster than the standard
library's there. It gives the very values the standard library gives for the JSON it accepts
(integers of any size, the same nearest float, the last of two equal keys); for anything it
refuses -- invalid UTF-8, a lone surrogate escape, ``NaN``, an integer of thousands of digits,
deep nesting, any syntax error -- the line goes through ``json.loads`` as before, so what is
accepted, replaced and refused, and the words of a refusal, are unchanged
(``tests/core/test_jsondecode.py`` compares the two on hostile inputs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["JsonRefusedError", "decode_json"]


class JsonRefusedError(ValueError):
    """Text that is not JSON nvtopy reads; ``str()`` is why.

    ``kind``: ``"syntax"`` (malformed, or cut short), ``"depth"`` (nested too deeply to read)
    or ``"value"`` (well-formed, with a value Python cannot hold: an integer of 5,000 digits).
    """

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind

    @property
    def syntax(self) -> bool:
        return self.kind == "syntax"


_fast: Callable[[bytes | str], Any] | None = None


def _fast_decoder() -> Callable[[bytes | str], Any]:
    """msgspec's decoder, imported the first time JSON is read (``nvtopy --once`` reads none)."""
    global _fast
    if _fast is None:
        import msgspec.json

        _fast = msgspec.json.Decoder().decode
    return _fast


def decode_json(raw: bytes | str) -> Any:
    """``raw`` (UTF-8 bytes, undecodable ones replaced, or text) as JSON; JsonRefusedError saying why it is not."""
    try:
        return _fast_decoder()(raw)
    except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
        pass  # decoded again as it always was: the same values, replacements and refusals
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonRefusedError(f"not JSON ({exc.msg})", "syntax") from None
    except RecursionError:
        raise JsonRefusedError("nested too deeply", "depth") from None
    except ValueError as exc:  # an integer longer than Python converts (int_max_str_digits)
        raise JsonRefusedError(" ".join(str(exc).split())[:60] or "a value that cannot be read", "value") from None

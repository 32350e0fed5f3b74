"""JSON from outside nvtopy (a recording's line, a Prometheus server's answer), decoded or refused in words.

Why one home: ``json.loads`` raises more than ``JSONDecodeError`` on hostile input --
``RecursionError`` for arrays nested a thousand deep, a plain ``ValueError`` for an
integer of more digits than Python converts -- and a caller that catches only the
first turns a bad line or a bad answer into a crash (or, on a source's thread, into
a misleading "closed the connection"). :func:`decode_json` raises one error,
:class:`JsonRefusedError`, whose ``str()`` says why in a few words; the size of
what is decoded is its caller's bound (a recording's line, an answer's bytes).
"""

from __future__ import annotations

import json
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


def decode_json(raw: bytes | str) -> Any:
    """``raw`` (UTF-8 bytes, undecodable ones replaced, or text) as JSON; JsonRefusedError saying why it is not."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonRefusedError(f"not JSON ({exc.msg})", "syntax") from None
    except RecursionError:
        raise JsonRefusedError("nested too deeply", "depth") from None
    except ValueError as exc:  # an integer longer than Python converts (int_max_str_digits)
        raise JsonRefusedError(" ".join(str(exc).split())[:60] or "a value that cannot be read", "value") from None

"""``decode_json``: msgspec's decoder first, the standard library's for what msgspec refuses -- the same answers.

Why this matters: every byte from outside (a far host's stream line, a recording, a Prometheus
answer) goes through :func:`nvtopy.jsondecode.decode_json`. msgspec was put in front for speed;
it must not change what is accepted, what invalid text becomes, or what is refused and why.
Each case here is decoded by ``json.loads`` (what nvtopy used alone before) and by
``decode_json``, and the two must agree, types included.
"""

from __future__ import annotations

import json
import math

import pytest

from nvtopy import jsondecode
from nvtopy.jsondecode import JsonRefusedError, decode_json

AGREE = [
    b'{"a": 1, "b": [1.5, -0.0, 1e-400, 2.2250738585072014e-308, 5e-324, 1.7976931348623157e308]}',
    b"18446744073709551616",  # past 64 bits: an int still (a fast decoder may make it a float)
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b'{"a": 1, "a": 2}',  # the last of two equal keys
    b"-0",
    b'"\\u00e9\\n\\t\\"\\\\"',
    b'"\xc3\xa9 caf\xc3\xa9"',
    b'"\xff\xfe bytes that are no UTF-8"',  # replaced, not refused
    b'"\\ud800 a lone surrogate"',
    b"NaN",
    b"[Infinity, -Infinity]",
    b"1e400",
    b" [1, 2] ",
    b"0.1000000000000000055511151231257827",
    b"[" * 50 + b"]" * 50,
]

REFUSED = [
    (b"[1, 2,]", "syntax"),
    (b'{"a": 1} x', "syntax"),
    (b"", "syntax"),
    (b'{"a": ', "syntax"),
    (b"1" * 5000, "value"),  # more digits than Python converts
    (b"[" * 100_000 + b"]" * 100_000, "depth"),
]


def _same(a: object, b: object) -> bool:
    """Equal with the very types (1 and 1.0 and True are three values), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))  # type: ignore[arg-type]
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)  # type: ignore[arg-type]
    return a == b


@pytest.mark.parametrize("raw", AGREE, ids=lambda raw: raw[:30].decode("latin-1"))
def test_the_values_are_the_standard_librarys(raw):
    expected = json.loads(raw.decode("utf-8", "replace"))
    assert _same(decode_json(raw), expected), (decode_json(raw), expected)
    assert _same(decode_json(raw.decode("utf-8", "replace")), expected), "text in: the same"


@pytest.mark.parametrize(
    ("raw", "kind"), REFUSED, ids=lambda v: v[:20].decode("latin-1") if isinstance(v, bytes) else v
)
def test_what_is_refused_is_refused_in_words(raw, kind):
    with pytest.raises(JsonRefusedError) as caught:
        decode_json(raw)
    assert caught.value.kind == kind
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 120


def test_the_fast_decoder_is_the_one_used():
    """The speed is the point: a line the fast decoder reads must not go through json.loads at all."""
    calls = []
    real = json.loads
    try:
        json.loads = lambda *a, **k: calls.append(a) or real(*a, **k)  # type: ignore[assignment]
        assert decode_json(b'{"gpus": [], "timestamp": 1.5}') == {"gpus": [], "timestamp": 1.5}
        assert not calls, "a plain line fell back to json.loads"
        assert decode_json(b"NaN") != decode_json(b"NaN")  # NaN: only json.loads reads it
        assert calls, "what msgspec refuses goes to json.loads"
    finally:
        json.loads = real
    assert jsondecode._fast is not None

"""An answer's rows found from its end (``TaggedRows.answer``) and decoded in chunks (``ChunkedRows``): the very rows
of the whole answer when it is well-formed, an error when it is not -- never rows of a malformed answer.

Why a test of its own: the fast way reads Prometheus's compact answer without checking it whole first, so
what it accepts must be exactly what the standard library accepts, here checked against ``json.loads``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from nvtopy.jsondecode import _ANSWER_HEAD, ChunkedRows, TaggedRows

ROWS = TaggedRows({"up": ("instance", "gpu")})


def _row(n: int, name: str = "up") -> dict[str, Any]:
    return {"metric": {"__name__": name, "instance": f"h{n % 3}", "gpu": str(n)}, "value": [1.5, str(n)]}


def _answer(rows: list[dict[str, Any]], **extra: Any) -> bytes:
    """An answer as Prometheus writes it: compact, status then data."""
    data = {"status": "success", "data": {"resultType": "vector", "result": rows}, **extra}
    return json.dumps(data, separators=(",", ":")).encode()


def _read(raw: bytes, size: int = 200) -> list[tuple[dict[str, str], list[Any]]] | None:
    """The rows as the fleet reads them (None: ``answer`` declined), each as (labels, value)."""
    found = ROWS.answer(raw)
    if found is None:
        return None

    def fallback(chunk: bytes) -> list[Any]:
        items = json.loads(chunk)  # ValueError where malformed: as the client's error
        return [ROWS.row(item["metric"], item["value"]) for item in items]

    chunked = ChunkedRows(
        found.buffer,
        ROWS.decode_rows,
        fallback,
        lambda n: None,
        size,
        start=found.start,
        end=found.end,
        last=found.last,
    )
    return [(row.metric.as_dict(), list(row.value)) for row in chunked]


def _whole(raw: bytes) -> list[tuple[dict[str, str], list[Any]]]:
    """The rows as the standard library reads them, each value's text read by float()."""
    return [(item["metric"], [item["value"][0], float(item["value"][1])]) for item in json.loads(raw)["data"]["result"]]


@pytest.mark.parametrize("count", [1, 2, 7, 60])
@pytest.mark.parametrize("size", [1, 150, 1 << 20])
def test_a_compact_answer_is_read_from_its_end_as_the_whole(count, size):
    raw = _answer([_row(n) for n in range(count)])
    found = ROWS.answer(raw)
    assert found is not None and found.last is not None, "Prometheus's compact answer: read from its end"
    assert found.buffer is raw, "its rows are not copied out"
    assert _read(raw, size) == _whole(raw)


def test_warnings_after_the_rows_are_the_envelopes():
    raw = _answer([_row(n) for n in range(5)], warnings=["partial: one store down"])
    found = ROWS.answer(raw)
    assert found is not None and found.last is not None
    assert found.envelope.warnings == ["partial: one store down"]
    assert _read(raw) == _whole(raw)


@pytest.mark.parametrize(
    "raw",
    [
        # A member after the data whose text holds a row's start: read whole (the end is not the last row's).
        _answer([_row(1), _row(2)], extra={"x": [{"metric": {}, "value": [1, "2"]}]}),
        _answer([_row(1), _row(2)], extra=[{"metric": 1}]),
        # A process command (a label) holding a row's start, escaped in JSON: not a cut.
        _answer([_row(1), {"metric": {"__name__": "up", "gpu": ',{"metric":'}, "value": [1, "1"]}, _row(3)]),
        # The last row written value first.
        _answer([_row(1), {"value": [1.5, "9"], "metric": {"__name__": "up", "gpu": "9"}}]),
        # Spaces: read whole, as before.
        json.dumps({"status": "success", "data": {"resultType": "vector", "result": [_row(1), _row(2)]}}).encode(),
        _answer([]),
    ],
)
def test_any_well_formed_answer_reads_as_the_whole(raw):
    assert _read(raw) == _whole(raw)


@pytest.mark.parametrize(
    "raw",
    [
        _ANSWER_HEAD + b',{"metric":{"__name__":"up"},"value":[1,"2"]}]}}',  # nothing before the comma
        _ANSWER_HEAD + b' ,{"metric":{"__name__":"up"},"value":[1,"2"]}]}}',
        _ANSWER_HEAD + b'{"metric":{"__name__":"up"},"value":[1,"2"]},,{"metric":{"__name__":"up"},"value":[1,"3"]}]}}',
        _ANSWER_HEAD + b'{"metric":{"__name__":"up"},"value":[1,"2"],{"metric":{"__name__":"up"},"value":[1,"3"]}]}}',
        _ANSWER_HEAD + b'{"metric":{"__name__":"up","gpu":"a,{"metric":{"__name__":"up"},"value":[1,"3"]}]}}',
        _ANSWER_HEAD + b'{"metric":{"__name__":"up"},"value":[1,"2"]} {"metric":{"__name__":"up"},"value":[1,"3"]}]}}',
        _ANSWER_HEAD + b'{,{"metric":{"__name__":"up"},"value":[1,"3"]}]}}',
        _ANSWER_HEAD + b'{"metric":{"__name__":"up"},"value":[1,"3"]}]}',  # cut short
        _ANSWER_HEAD + b'{"metric":{"__name__":"up"},"value":[1,"3"]}]}}}',
    ],
)
def test_a_malformed_answer_is_never_rows(raw):
    """Each is malformed JSON: ``answer`` declines it (the caller's other paths refuse it in words) or the rows'
    decoding raises; never rows."""
    with pytest.raises(ValueError):
        json.loads(raw)
    try:
        rows = _read(raw, size=1)
    except ValueError:
        return
    assert rows is None, f"rows of a malformed answer: {rows}"


@pytest.mark.parametrize(
    "texts",
    [
        ["0", "-0", "0.0", "1", "39739.2733335495", "1e-7", "2.5E+3", "123456789012345678901234567890", "NaN", "-Inf"],
        ["0.1", "0.30000000000000004", "1.7976931348623157e308", "5e-324", "4.9e-324", "2.2250738585072011e-308"],
        ["+Inf", "1e400", "-1e400", "Infinity", "nan", "inf", "1.0000000000000000000000001", "00012"],
    ],
)
def test_each_value_is_float_of_its_text(texts):
    """Read as the rows' numbers (msgspec, not strict), or -- a text msgspec does not read -- as any JSON with
    float(): the very float float() gives, NaN as NaN (the sign of a zero aside: msgspec reads "-0" as 0.0; the
    fleet reads every zero as 0.0)."""
    raw = _answer([{**_row(n), "value": [1.5, text]} for n, text in enumerate(texts)])
    rows = _read(raw, size=60)
    assert rows is not None
    for (_, (_, got)), text in zip(rows, texts, strict=True):
        want = float(text)
        assert type(got) is float
        assert got == want or (math.isnan(got) and math.isnan(want)), text


@pytest.mark.parametrize("text", ["abc", "0x10", "", "--1", "1,5"])
def test_a_value_not_a_number_is_never_a_row(text):
    raw = _answer([_row(1), {**_row(2), "value": [1.5, text]}, _row(3)])
    with pytest.raises((ValueError, TypeError)):
        _read(raw, size=1)

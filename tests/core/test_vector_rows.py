"""``VectorRows``: a Prometheus answer decoded straight into typed rows, or refused (None) for the caller's JSON path.

Why this matters: the fleet view's read answer (210,000 rows at 4,096 GPUs) is decoded
into rows for speed, and everything else about it must stay as it was. Where the rows
fit, they say exactly what the JSON says (``json.loads`` is the reference); where they
do not fit exactly -- another label, a label that is not text, a value that is not a
``[time, "text"]`` pair, JSON msgspec refuses -- :meth:`VectorRows.decode` says None and
the caller reads the answer as any JSON, so nothing is accepted that was refused.
"""

from __future__ import annotations

import json

import pytest

from nvtopy.jsondecode import VectorRows

ROWS = VectorRows(("__name__", "instance", "gpu", "pid", "Hostname"))


def _answer(*items: object, status: str = "success") -> bytes:
    return json.dumps({"status": status, "data": {"resultType": "vector", "result": list(items)}}).encode()


GOOD = [
    {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "instance": "10.0.0.1:9400", "gpu": "0"}, "value": [1.5, "87"]},
    {"metric": {"instance": "10.0.0.1:9400", "gpu": "1", "pid": "4711"}, "value": [1.5, "1"]},
    {"metric": {}, "value": [1795000000, "NaN"]},
    {"metric": {"Hostname": "caf\u00e9 \u2603", "gpu": ""}, "value": [1.5, "-Inf"]},  # an empty label is a label
    {"metric": {"gpu": "0"}, "value": [int("7" * 400), "1"]},  # a time no float holds: an int, as json.loads says
]


def test_rows_say_what_the_json_says():
    answer = ROWS.decode(_answer(*GOOD))
    assert answer is not None, "an answer of the shape asked for is decoded into rows"
    assert answer.status == "success" and answer.data.resultType == "vector" and answer.warnings is None
    assert len(answer.data.result) == len(GOOD)
    for row, item in zip(answer.data.result, GOOD, strict=True):
        assert row.metric.as_dict() == item["metric"]
        assert list(row.value) == item["value"] and type(row.value[0]) is type(item["value"][0])
        assert row.metric.name == item["metric"].get("__name__") and row.metric.pid == item["metric"].get("pid")
        assert row == ROWS.row(item["metric"], row.value), "a row made of a dict is the same row"
    assert answer.data.result[3].metric.gpu == "" and answer.data.result[2].metric.gpu is None


def test_warnings_and_the_last_of_two_equal_keys_are_the_standard_librarys():
    raw = (
        b'{"status": "success", "warnings": ["partial"], "data": {"resultType": "vector", "result": '
        b'[{"metric": {"instance": "a", "gpu": "0", "instance": "b"}, "value": [1, "2"], "value": [3, "4"]}]}}'
    )
    answer = ROWS.decode(raw)
    expected = json.loads(raw)
    assert answer is not None and answer.warnings == expected["warnings"]
    (row,) = answer.data.result
    (item,) = expected["data"]["result"]
    assert row.metric.as_dict() == item["metric"] and list(row.value) == item["value"]


def test_a_row_made_of_a_dict_leaves_out_the_labels_the_rows_do_not_name():
    row = ROWS.row({"instance": "a", "job": "dcgm", "gpu": "3"}, [1.0, "2"])
    assert row.metric.as_dict() == {"instance": "a", "gpu": "3"}


REFUSED = [
    (_answer({"metric": {"instance": "a", "job": "dcgm"}, "value": [1, "2"]}), "a label the rows do not name"),
    (_answer({"metric": {"instance": None}, "value": [1, "2"]}), "a label that is null"),
    (_answer({"metric": {"gpu": 0}, "value": [1, "2"]}), "a label that is a number"),
    (_answer({"metric": {"gpu": ["0"]}, "value": [1, "2"]}), "a label that is a list"),
    (_answer({"metric": ["gpu"], "value": [1, "2"]}), "labels that are not an object"),
    (_answer({"metric": {}, "value": [1, 2]}), "a value that is a number, not text"),
    (_answer({"metric": {}, "value": [1]}), "a value without its time"),
    (_answer({"metric": {}, "value": [1, "2", 3]}), "a value of three"),
    (_answer({"value": [1, "2"]}), "a row without labels"),
    (_answer("a string"), "a row that is not an object"),
    (b'{"status": "error", "errorType": "bad_data", "error": "parse error"}', "an error answer"),
    (_answer({"metric": {}, "value": [1, "2"]}).replace(b'[1, "2"]', b'[NaN, "2"]'), "NaN"),
    (_answer({"metric": {"gpu": "\ud800"}, "value": [1, "2"]}), "a lone surrogate"),
    (_answer({"metric": {}, "value": [1, "2"]}).replace(b'"2"', b'"\xff"'), "invalid UTF-8"),
    (_answer({"metric": {}, "value": [1, "2"]})[:-3], "cut short"),
    (b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
]


@pytest.mark.parametrize(("raw", "why"), REFUSED, ids=[why for _, why in REFUSED])
def test_an_answer_the_rows_do_not_fit_exactly_is_none_for_the_json_path(raw, why):
    assert ROWS.decode(raw) is None, why


@pytest.mark.parametrize("labels", [("__name__", "name"), ("class",), ("a-b",), ("_x", "x_")])
def test_labels_without_distinct_attribute_names_are_refused_at_once(labels):
    with pytest.raises(ValueError, match="labels without distinct attribute names"):
        VectorRows(labels)


@pytest.mark.parametrize("order", ["sorted", "reversed", "as-given"])
def test_labels_in_any_order_are_the_same_row_and_read_whole_in_the_rows_order(order):
    """The rows' fields follow the order Prometheus writes labels in (sorted), for speed; a row's labels in any
    order are the same row, and ``as_dict`` keeps :attr:`VectorRows.labels`' order (what the callers always got)."""
    labels = {"pid": "4711", "gpu": "1", "__name__": "nvtopy_process_cpu_percent", "instance": "10.0.0.1:9400"}
    keys = {"sorted": sorted(labels), "reversed": sorted(labels)[::-1], "as-given": list(labels)}[order]
    item = {"metric": {k: labels[k] for k in keys}, "value": [1.5, "3"]}
    (row,) = ROWS.decode(_answer(item)).data.result
    assert (row.metric.name, row.metric.instance, row.metric.gpu, row.metric.pid) == (
        "nvtopy_process_cpu_percent",
        "10.0.0.1:9400",
        "1",
        "4711",
    )
    assert row.metric.Hostname is None
    assert list(row.metric.as_dict().items()) == [(k, labels[k]) for k in ROWS.labels if k in labels]
    assert row.metric == ROWS.row(labels, [1.5, "3"]).metric, "equal to the row made of the dict"


def test_one_label_rows_read_whole():
    rows = VectorRows(("gpu",))
    (row,) = rows.decode(_answer({"metric": {"gpu": "2"}, "value": [1.5, "1"]})).data.result
    assert row.metric.as_dict() == {"gpu": "2"}

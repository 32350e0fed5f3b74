"""The fleet's read answer decoded straight into rows (``nvtopy.jsondecode.TaggedRows``), or read as any JSON.

Why: at 4,096 GPUs the read answer is 210,000 rows, and decoding them into typed rows
(labels checked as text in C, read as attributes) is what keeps a refresh's CPU down. An
answer that does not fit the rows exactly (another label, a value given as a number) is
read as before, as any JSON checked item by item: the GPUs shown must be the same either
way, and the fast path must really be the one taken where the answer fits.
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import json

from nvtopy.sources.remote import prometheus as prometheus_module

from ...prometheus_fixtures import simulated_exposition
from .test_fleet import NOW, add_hosts, comparable, fake, fleet_of  # noqa: F401
from .test_prometheus_api import send


def _counting_json(monkeypatch) -> list[int]:
    """The size of each answer read as any JSON (decode_json) from now on."""
    sizes: list[int] = []
    real = prometheus_module.decode_json

    def counted(raw):
        sizes.append(len(raw))
        return real(raw)

    monkeypatch.setattr(prometheus_module, "decode_json", counted)
    return sizes


def _reading(fake, change) -> None:
    """The fake answers the read query (not the first, the list of hosts) with each row changed by ``change``."""

    def reply(handler, query: str) -> bool:
        if query.startswith("max by (instance, hostname, Hostname) (timestamp("):
            return False  # the first query: the fake's own answer
        data = json.loads(fake.answer(query))
        for item in data["data"]["result"]:
            change(item)
        send(handler, 200, json.dumps(data).encode(), Content_Type="application/json")
        return True

    fake.reply = reply


def test_the_read_answer_is_decoded_straight_into_rows(fake, monkeypatch):
    """Only the short list of hosts goes through decode_json; the big answer, read twice, never does."""
    add_hosts(fake, 3)
    fleet = fleet_of(fake)
    sizes = _counting_json(monkeypatch)
    first = fleet.poll_once()
    assert len(first.gpus) == 6 and first.processes
    assert len(sizes) == 1, f"the read answer went through decode_json: {sizes}"
    fleet.read_once()
    assert len(sizes) == 2 and fleet.client.queries == 4


def _extra_label(item: dict) -> None:
    item["metric"]["job"] = "dcgm"  # a label no query keeps: the rows do not fit


def _value_as_number(item: dict) -> None:
    if item["value"][1] not in ("NaN", "+Inf", "-Inf"):
        item["value"][1] = float(item["value"][1])  # JSON allows it; float() reads it as it always did


def _label_outside_its_type(item: dict) -> None:
    if item["metric"].get("__name__", "").startswith("DCGM_FI_DEV_"):
        item["metric"]["xid"] = "13"  # a label the query keeps, but not of a GPU value's row type


def test_an_answer_the_rows_do_not_fit_shows_the_same_gpus(fake, monkeypatch):
    add_hosts(fake, 3)
    expected = [comparable(g) for g in fleet_of(fake).read_once().gpus]
    for change in (_extra_label, _value_as_number, _label_outside_its_type):
        _reading(fake, change)
        sizes = _counting_json(monkeypatch)
        snapshot = fleet_of(fake).read_once()
        assert len(sizes) == 2, f"{change.__name__}: not read as any JSON"
        assert [comparable(g) for g in snapshot.gpus] == expected, change.__name__


def test_each_row_type_reads_as_the_row_of_every_label(fake):
    """A row decoded into its name's type (a handful of labels) has the very labels, name and ``as_dict`` of the
    same item made a row of every label (the answers that do not fit): the row loop reads both alike. The
    identity rows, named by the query only for a type of their own, have no name either way."""
    from nvtopy.sources.remote.fleet import _ROWS, read_query

    add_hosts(fake, 2)
    faulty = simulated_exposition("node9", 9, 3, faults=["mig=2@0"])
    fake.add_exposition(faulty, "10.0.9.9:9400", timestamp=NOW - 0.5)
    raw = fake.answer(read_query())
    typed = _ROWS.decode(raw)
    assert typed is not None
    items = json.loads(raw)["data"]["result"]
    assert len(typed.data.result) == len(items)
    kinds = set()
    for row, item in zip(typed.data.result, items, strict=True):
        generic = _ROWS.row(item["metric"], item["value"]).metric
        typed_metric = row.metric
        kinds.add(type(typed_metric).__struct_config__.tag)
        assert typed_metric.as_dict() == generic.as_dict(), item
        assert list(typed_metric.as_dict()) == list(generic.as_dict()), "in the same order"
        assert all(getattr(typed_metric, a) == getattr(generic, a) for a in _ROWS.attributes), item
        assert len(type(typed_metric).__struct_fields__) <= len(_ROWS.attributes) // 2 or typed_metric.name is None
    assert {"nvtopy_fleet_gpu_identity", "nvtopy_fleet_process_identity"} <= kinds
    assert any(k.startswith("nvtopy_mig_device") for k in kinds), kinds

"""The read answer's rows in runs of one GPU: whatever the rows' order, every GPU reads the same.

Why: ``PrometheusFleet._read`` takes a row whose host and GPU labels are the very texts of the
row before as that row's host, index and GPU (the answer comes sorted by labels, some 13 rows of
a GPU in a row at 4,096 GPUs) instead of looking them up again. The oracle is the same answer
with its rows dealt out one GPU at a time (no row follows a row of its own GPU: every row is
looked up, as before the runs); the answer sorted as Prometheus writes it, reversed, grouped
by GPU text (rows of two hosts behind one instance side by side) and shuffled must read exactly
as the oracle does -- hostile values included (out of range, NaN, a GPU label ``01``, a MIG
instance's rows, a host name spelt ``hostname`` beside ``Hostname``).
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest

from ...prometheus_fixtures import exposition_series, simulated_exposition
from .test_fleet import DCGM, NOW, comparable, fake, fleet_of  # noqa: F401
from .test_prometheus_api import send


def _shown(gpu) -> tuple:
    """A GPU line as shown, but for when it was read (an Xid is dated when this monitor first saw it)."""
    static, sample, processes, health, note = comparable(gpu)
    events = tuple(dataclasses.replace(event, timestamp=0.0) for event in health.events)
    # the reasons a value is N/A as a set: their order is the rows' (any order of rows is a Prometheus answer)
    values = tuple((f.name, getattr(sample, f.name)) for f in dataclasses.fields(sample) if f.name != "unavailable")
    reasons = sorted(sample.unavailable.items())
    return (static.host, static, values, reasons, processes, dataclasses.replace(health, events=events), note)


def _run_key(item: dict) -> tuple:
    """What _read compares between a row and the row before: the host's labels and the GPU label."""
    labels = item["metric"]
    return (labels.get("instance"), labels.get("gpu"), labels.get("hostname"), labels.get("Hostname"))


def _dealt(rows: list[dict]) -> list[dict]:
    """One row of a GPU at a time (each GPU's rows in their order), so that no row follows one of its own GPU."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(_run_key(row), []).append(row)
    queues = list(groups.values())
    dealt: list[dict] = []
    last = None
    while True:  # the GPU with the most rows left, of those the row before is not of: apart while it can be
        candidates = [queue for queue in queues if queue and _run_key(queue[0]) != last]
        if not candidates:
            break
        row = max(candidates, key=len).pop(0)
        dealt.append(row)
        last = _run_key(row)
    for row in [row for queue in queues for row in queue]:  # one GPU's last rows: each put between others
        key = _run_key(row)
        after = max((i for i, other in enumerate(dealt) if _run_key(other) == key), default=-1) + 1
        at = next(
            i
            for i in range(after, len(dealt) + 1)
            if (i == 0 or _run_key(dealt[i - 1]) != key) and (i == len(dealt) or _run_key(dealt[i]) != key)
        )
        dealt.insert(at, row)
    return dealt


def _sorted(rows: list[dict]) -> list[dict]:
    """As Prometheus wrote the answers recorded at 4,096 GPUs: a GPU's rows together (by name within)."""
    return sorted(rows, key=lambda row: (tuple(v or "" for v in _run_key(row)), sorted(row["metric"].items())))


def _by_gpu_text(rows: list[dict]) -> list[dict]:
    """Rows of the same GPU label and name side by side, whatever their host (two hosts behind one instance)."""
    return sorted(
        rows,
        key=lambda row: (
            row["metric"].get("gpu") or "",
            row["metric"].get("__name__") or "",
            tuple(v or "" for v in _run_key(row)),
        ),
    )


def _reversed(rows: list[dict]) -> list[dict]:
    return _sorted(rows)[::-1]


def _shuffled(rows: list[dict]) -> list[dict]:
    rows = list(rows)
    random.Random(27).shuffle(rows)
    return rows


def _answering(fake, arrange) -> list[list[dict]]:
    """The fake answers the read query with its rows arranged by ``arrange``; the answers sent, kept."""
    sent: list[list[dict]] = []

    def reply(handler, query: str) -> bool:
        if query.startswith("max by (instance, hostname, Hostname) (timestamp("):
            return False  # the first query: the fake's own answer
        data = json.loads(fake.answer(query))
        data["data"]["result"] = arrange(data["data"]["result"])
        sent.append(data["data"]["result"])
        send(handler, 200, json.dumps(data).encode(), Content_Type="application/json")
        return True

    fake.reply = reply
    return sent


def _hostile_fleet(fake, *, shared: bool) -> None:
    """Simulated hosts (a MIG GPU among them) and dcgm-exporter's text with values out of range; a GPU label
    ``01`` (the same number, another text) on some rows and a NaN. ``shared``: three hosts behind one instance,
    one named by ``Hostname`` and two by ``hostname`` (each row keeps its host label: not one name an instance)."""
    series = []
    if shared:
        for n, name in enumerate(("left", "right", "third")):
            more = exposition_series(simulated_exposition(name, n, 2), "10.0.9.9:9400", NOW - 0.5)
            if name != "left":  # two spelt hostname, one Hostname: runs told apart by either label
                for s in more:
                    if "Hostname" in s.labels:
                        s.labels["hostname"] = s.labels.pop("Hostname")
            series.extend(more)
    else:
        series.extend(exposition_series(simulated_exposition("node-a", 1, 3), "10.0.0.1:9400", NOW - 0.5))
        series.extend(
            exposition_series(simulated_exposition("node-b", 2, 2, faults=["mig=3@1"]), "10.0.0.2:9400", NOW - 0.5)
        )
    hostile = DCGM.replace("} 87", "} 250").replace("} 3\n", "} -1\n").replace("} 1024", "} NaN")
    dcgm = exposition_series(hostile, "10.0.0.3:9400", NOW - 0.5)
    for s in dcgm:
        if s.labels.get("__name__") == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
            s.labels["gpu"] = "01"  # not GPU 1's text: read as a number, apart from the runs
    series.extend(dcgm)
    fake.set_series(series)


@pytest.mark.parametrize("shared", [False, True], ids=["one-name-an-instance", "hosts-behind-one-instance"])
def test_rows_in_any_order_read_as_rows_looked_up_one_by_one(fake, shared):
    _hostile_fleet(fake, shared=shared)
    sent = _answering(fake, _dealt)
    oracle = fleet_of(fake).read_once()
    rows = sent[-1]
    assert all(_run_key(a) != _run_key(b) for a, b in itertools.pairwise(rows)), "the oracle has a run"
    expected = [_shown(g) for g in oracle.gpus]
    assert len(oracle.gpus) >= 6 and oracle.processes
    assert any(g.sample.utilization_gpu_percent is None for g in oracle.gpus), "a value out of range: N/A"
    for arrange in (_sorted, _by_gpu_text, _reversed, _shuffled):
        sent = _answering(fake, arrange)
        snapshot = fleet_of(fake).read_once()
        rows = sent[-1]
        runs = sum(_run_key(a) == _run_key(b) for a, b in itertools.pairwise(rows))
        if arrange in (_sorted, _reversed):
            assert runs > len(rows) // 2, f"{arrange.__name__}: the runs are not taken"
        shown = [_shown(g) for g in snapshot.gpus]
        assert shown == expected, arrange.__name__
        assert repr(shown) == repr(expected), f"{arrange.__name__}: a value of another type (1 for 1.0, True for 1)"


def test_a_refresh_after_another_reads_the_same_in_runs(fake):
    """Refresh after refresh (the timed groups asked when due, kept values laid under the new), sorted rows read as
    dealt ones do."""
    _hostile_fleet(fake, shared=True)
    fleets = {arrange: fleet_of(fake) for arrange in (_dealt, _sorted)}
    for step in range(5):
        fake.now = NOW + step
        shown = {}
        for arrange, fleet in fleets.items():
            _answering(fake, arrange)
            for known in fleet._known.values():
                known.newest = None  # every host read again
            snapshot = fleet.poll_once()
            shown[arrange] = [_shown(g) for g in snapshot.gpus]
        assert shown[_sorted] == shown[_dealt], step
        assert repr(shown[_sorted]) == repr(shown[_dealt]), step


def test_a_gpu_whose_identity_labels_change_shows_what_they_say_now(fake):
    """A GPU's identity (UUID, model, bus id, pod, driver) is read once while its identity row's labels stay the
    same: refresh after refresh a fleet shows what a fleet reading them afresh shows, and labels that change (a
    GPU swapped, a pod rescheduled, a driver upgraded) show what they say now."""
    _hostile_fleet(fake, shared=False)
    fleet = fleet_of(fake)
    for step in range(4):
        fake.now = NOW + step
        if step == 2:  # the labels change under the same GPUs
            for s in fake.series:
                if s.labels.get("UUID") == "GPU-aaaa":
                    s.labels.update(UUID="GPU-swapped", pod="trainer-1", DCGM_FI_DRIVER_VERSION="570.86.10")
                s.timestamp += 1.0
            fake.set_series(list(fake.series))
        for known in fleet._known.values():
            known.newest = None  # every host read again
        snapshot = fleet.poll_once()
        fresh = fleet_of(fake).poll_once()
        assert [_shown(g) for g in snapshot.gpus] == [_shown(g) for g in fresh.gpus], step
        assert [g.processes_hint for g in snapshot.gpus] == [g.processes_hint for g in fresh.gpus], step
        assert snapshot.host.driver_version == fresh.host.driver_version, step
        uuids = {g.static.uuid for g in snapshot.gpus}
        assert ("GPU-swapped" in uuids) == (step >= 2) and ("GPU-aaaa" in uuids) == (step < 2), step
    hints = [g.processes_hint for g in snapshot.gpus if g.static.uuid == "GPU-swapped"]
    assert hints == ["held by pod ml/trainer-1 (container main)"]

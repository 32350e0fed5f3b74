"""The fleet's building takes short cuts (issue 27); each must build the very GpuStates the general path builds.

(And a GPU's sample, whose "not available" reasons are kept by the names its host says: the oracle there is the
former way, by keyword through the dataclass.)

The short cuts: ``HostGpus.gpus`` keeps a GPU's GpuStatic without gathering its figures again when ``_scrape``
hands it the very (frozen) GpuStatic of the last refresh; ``_scrape`` hands the process rows over in parts (pid,
identity, values) that ``HostGpus.gpus`` builds directly, rather than as one merged dict a row. The oracle is the
general path, the one ``--remote`` takes: a HostScrape whose process rows are the merged dicts, each GPU's
static a new object every refresh. Compared: whole states, reasons in their order, types and spellings (repr),
over refreshes where a GPU's static changes, a host is renamed and moved, a row says a value out of range.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest

from nvtopy.formats.prometheus.parse import HostScrape
from nvtopy.model import GpuState, ProcessType, Reason
from nvtopy.sources.remote import fleet as fleet_module
from nvtopy.sources.remote import hostscrape
from nvtopy.sources.remote.hostscrape import HostGpus

from ...builders import gpu_static
from .test_hostscrape_building import Former, former_gpus

pytestmark = pytest.mark.timeout(60)

NOW = 1_795_000_000.0


class Labels:
    """A process identity row's labels as the fleet's decoder gives them: compared whole, read as a dict."""

    def __init__(self, **labels: str) -> None:
        self.labels = labels

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Labels) and other.labels == self.labels

    __hash__ = None  # type: ignore[assignment]

    def as_dict(self) -> dict[str, str]:
        return dict(self.labels)


STATIC = {
    "uuid": "GPU-0",
    "name": "NVIDIA H100 80GB HBM3",
    "bus_id": "00000000:18:00.0",
    "memory_total_bytes": 80 << 30,
    "temperature_slowdown_c": 90,
}
VALUES = {"utilization_gpu_percent": 40, "memory_used_bytes": 1 << 30, "temperature_c": 55, "power_draw_w": 300.0}
READINGS = {
    "gpu_memory_bytes": 1 << 30,
    "sm_utilization_percent": 50,
    "memory_utilization_percent": 20,
    "cpu_percent": 12.5,
    "host_memory_bytes": 1 << 28,
    "start_time_seconds": NOW - 100.0,
    "idle_held_seconds": 5.0,
}


def a_host(name: str = "node1", *, renamed_static: bool = False) -> fleet_module._Host:
    """A host of four GPUs as the fleet's read leaves it: a plain one with every kind of process row, a MIG
    one (its rows on GPU instances), a lost one, one with a value said out of range."""
    host = fleet_module._Host(key=("10.0.0.1:9400", name))
    for index in range(4):
        gpu = host.gpu(index)
        gpu.static.update(STATIC, uuid=f"GPU-{index}")
        gpu.values.update(VALUES)
    if renamed_static:
        host.gpus[0].static["name"] = "NVIDIA H200"
    host.gpus[1].instances.update({1: {"profile": "3g.40gb"}, 2: {"profile": "3g.40gb"}})
    host.gpus[2].lost = True
    host.gpus[3].values["utilization_gpu_percent"] = None  # said, out of range
    rows: dict[tuple[int, int], tuple[Labels | None, dict[str, Any]]] = {
        (0, 100): (Labels(user="alice", command="python train.py", type="C"), dict(READINGS)),
        (0, 101): (Labels(user="bob", type="G", pod="p", namespace="ns"), {**READINGS, "cpu_percent": None}),
        (0, 102): (Labels(type="C+G"), {**READINGS, "start_time_seconds": None}),  # said out of range: no age
        (0, 103): (None, {}),  # no identity row, no value: every field not said
        (0, 104): (Labels(type="C", container="c1"), {"sm_utilization_percent": 7}),
        (0, 105): (Labels(type="C"), {**READINGS, "start_time_seconds": NOW + 50.0}),  # a clock ahead: 0 s
        (1, 200): (Labels(type="C", GPU_I_ID="1", compute_instance_id="0"), dict(READINGS)),
        (1, 201): (Labels(type="C", GPU_I_ID="2"), {**READINGS, "idle_held_seconds": None}),
        (2, 300): (Labels(type="C"), dict(READINGS)),
        (7, 700): (Labels(type="C"), dict(READINGS)),  # a GPU without GPU series: nowhere to be shown
    }
    for key, (labels, readings) in rows.items():
        host.processes[key] = readings
        if labels is not None:
            host.process_labels[key] = labels
    return host


def merged(scrape: HostScrape, parts: dict[int, list[hostscrape.ProcessParts]]) -> HostScrape:
    """The general path's HostScrape: each process row one dict, as ``--remote`` reads them."""
    rows = {index: [{"pid": pid, **identity, **values} for pid, identity, values in of] for index, of in parts.items()}
    return dataclasses.replace(scrape, processes=rows)


def shown(gpus: list[GpuState]) -> list[tuple[Any, ...]]:
    """Everything of each state that a view reads, reasons in their order (repr: types and spellings too)."""
    return [
        (
            g,
            repr(g),
            list(g.sample.unavailable.items()),
            [list(p.unavailable.items()) for p in g.processes],
            [type(p.type) for p in g.processes],
        )
        for g in gpus
    ]


def build_both(refreshes: list[list[fleet_module._Host]], titles: dict[int, str] | None = None) -> list[GpuState]:
    """Each refresh's hosts built the fleet's way and the general way; the same states, refresh after refresh.
    ``titles``: refresh -> the title its first host is shown by (its name elsewhere)."""
    fast, general = HostGpus(), HostGpus()
    statics: dict[tuple[str, str], dict[int, Any]] = {}
    said: dict[tuple[str, str], Any] = {}
    gpus: list[GpuState] = []
    for n, hosts in enumerate(refreshes):
        gpus, want = [], []
        for number, host in enumerate(hosts):
            name = (titles or {}).get(n, host.key[1]) if number == 0 else host.key[1]
            key = host.key
            scrape, said[key], parts = fleet_module._scrape(host, name, said.get(key), statics.setdefault(key, {}))
            gpus.extend(fast.gpus(scrape, len(gpus), NOW + n, key=lambda i, k=key: (*k, i), parts=parts))
            fresh, _, fresh_parts = fleet_module._scrape(host, name)  # new GpuStatics, nothing kept
            want.extend(general.gpus(merged(fresh, fresh_parts), len(want), NOW + n, key=lambda i, k=key: (*k, i)))
        assert shown(gpus) == shown(want), f"refresh {n}"
    return gpus


def test_the_fleets_short_cuts_build_the_general_paths_states():
    """Over refreshes: the same again (the kept GpuStatic), a static changed, a host moved before another."""
    gpus = build_both(
        [
            [a_host("node1"), a_host("node2")],
            [a_host("node1"), a_host("node2")],
            [a_host("node1", renamed_static=True), a_host("node2")],
            [a_host("node0"), a_host("node1"), a_host("node2")],  # node1's GPUs now numbered from 4
            [a_host("node1"), a_host("node2")],
        ]
    )
    first = gpus[0]
    assert [p.pid for p in first.processes] == [100, 101, 102, 103, 104, 105]
    assert first.processes[1].unavailable == {"cpu_percent": Reason.OUT_OF_RANGE}
    assert first.processes[1].type is ProcessType.GRAPHICS
    assert first.processes[2].unavailable.keys() == {"create_time", "running_seconds"}
    assert first.processes[5].running_seconds == 0.0
    assert [(p.gpu_instance_id, p.compute_instance_id) for p in gpus[1].processes] == [(1, 0), (2, None)]
    assert gpus[1].static.mig_instances and gpus[2].sample.lost
    assert gpus[3].sample.why("utilization_gpu_percent") is Reason.OUT_OF_RANGE
    assert gpus[4].static.host_index == 0 and gpus[4].static.index == 4 and gpus[4].static.host == "node2"


def test_a_changed_static_is_seen_the_fleets_way():
    """The kept GpuStatic is the host's only while it is the very object: another is read again."""
    gpus = build_both([[a_host()], [a_host(renamed_static=True)]])
    assert gpus[0].static.name == "NVIDIA H200"


def test_a_host_titled_anew_keeps_no_static_of_its_old_title():
    """Another host of the same name came: this one is titled by its instance, its GpuStatics too."""
    gpus = build_both([[a_host()], [a_host()], [a_host()]], titles={1: "10.0.0.1:9400"})
    assert gpus[0].static.host == "node1"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1, 10**30, "12"], ids=repr)
def test_a_value_outside_its_range_that_reaches_the_model_is_none_as_the_dataclass_says(bad):
    """A reading no range check caught (a caller's mistake): the checked constructor's None, and why, both ways."""
    host = a_host()
    host.processes[(0, 100)]["sm_utilization_percent"] = bad
    gpus = build_both([[host]])
    assert gpus[0].processes[0].sm_percent is None
    assert gpus[0].processes[0].unavailable == {"sm_percent": Reason.OUT_OF_RANGE}


def test_an_unknown_process_type_fails_as_on_the_general_path():
    """What the general path refuses (the caller reads it as an unreadable host), the parts path refuses too."""
    scrape = HostScrape(url="prometheus://h", hostname="h", gpus=[])
    for kind in ("X", 3, None):
        identity = {**fleet_module.process_from_labels({}), "type": kind}
        with pytest.raises(ValueError):
            hostscrape._processes([(1, identity, dict(READINGS))], 0, None, NOW, "h")
        with pytest.raises(ValueError):
            hostscrape.process({"pid": 1, **identity, **READINGS}, 0, None, NOW, "h")
    assert HostGpus().gpus(scrape, 0, NOW, parts={}) == []


def test_the_short_cuts_are_the_ones_taken(monkeypatch):
    """The common rows are built without process(), and a kept GpuStatic's figures are not gathered again."""
    calls = {"process": 0, "said": 0}
    real_process, real_said = hostscrape.process, hostscrape._STATIC_SAID

    def counted_process(*args: Any, **kwargs: Any) -> Any:
        calls["process"] += 1
        return real_process(*args, **kwargs)

    def counted_said(static: Any) -> Any:
        calls["said"] += 1
        return real_said(static)

    monkeypatch.setattr(hostscrape, "process", counted_process)
    monkeypatch.setattr(hostscrape, "_STATIC_SAID", counted_said)
    fast, statics = HostGpus(), {}
    said = None
    for n in range(3):
        calls.update(process=0, said=0)
        scrape, said, parts = fleet_module._scrape(a_host(), "node1", said, statics)
        fast.gpus(scrape, 0, NOW + n, key=lambda i: ("10.0.0.1:9400", "node1", i), parts=parts)
        # the rows said out of range (pids 101, 102, 201), or with a value of no range (none here), go merged
        assert calls["process"] == 3
        assert calls["said"] == (4 if n == 0 else 0)


@pytest.mark.parametrize(
    ("identity", "values"),
    [
        ({"type": "C"}, dict(READINGS)),  # an identity not process_from_labels's: keys missing
        ({**fleet_module.process_from_labels({}), "pid": 9}, dict(READINGS)),  # one more key, the pid's
        (fleet_module.process_from_labels({}), {**READINGS, "user": "mallory"}),  # a value no ranged metric's
        (fleet_module.process_from_labels({}), {**READINGS, "gpu_memory_bytes": None}),
    ],
    ids=["identity-cut", "identity-plus", "value-unranged", "value-none"],
)
def test_parts_unlike_the_fleets_are_built_as_the_merged_row(identity, values):
    """Parts the direct build does not expect go merged to process(): the very row --remote would build."""
    made = hostscrape._processes([(5, identity, values)], 0, "GPU-0", NOW, "h")
    want = hostscrape.process({"pid": 5, **identity, **values}, 0, "GPU-0", NOW, "h")
    assert shown_process(made[0]) == shown_process(want)


def shown_process(made: Any) -> tuple[Any, ...]:
    return made, repr(made), list(made.unavailable.items()), type(made.type)


def former_sample(values: dict[str, Any], lost: bool, now: float) -> Any:
    """A GPU's sample as built before the fast constructors (test_hostscrape_building's oracle: by keyword)."""
    scrape = HostScrape(url="http://h", hostname="h", gpus=[(gpu_static(0, bare=True), values, lost)])
    return former_gpus(scrape, 0, now, Former())[0].sample


def test_hosts_of_every_kind_in_turn_get_each_their_own_reasons(monkeypatch):
    """The "not available" reasons are kept by the names a host's values say, in their order: hosts that say
    other names, the same names in another order, or as many names, each get the reasons of their own."""
    monkeypatch.setattr(hostscrape, "_NOT_SAID", {})
    kinds = [
        dict(VALUES),
        {"power_draw_w": 300.0, "temperature_c": 55, "utilization_gpu_percent": 40, "memory_used_bytes": 1},
        {**VALUES, "fan_percent": 30, "sm_active_percent": 12.0},
        {**VALUES, "fan_percent": 30, "tensor_active_percent": 12.0},  # as many names as the kind before
        {k: v for k, v in VALUES.items() if k != "power_draw_w"},
        {},
        {**VALUES, "fan_percent": None},  # said out of range
    ]
    worked_out: list[tuple[str, ...]] = []
    real = hostscrape._not_said
    monkeypatch.setattr(hostscrape, "_not_said", lambda said: worked_out.append(said) or real(said))
    for n in range(3):
        assert len(worked_out) == (0 if n == 0 else len(kinds)), "each kind's reasons worked out once, then kept"
        for values in kinds:
            made = hostscrape._sample(values, n == 1, NOW + n)
            want = former_sample(values, n == 1, NOW + n)
            assert (made, repr(made), list(made.unavailable.items())) == (
                want,
                repr(want),
                list(want.unavailable.items()),
            )


def test_the_kinds_of_host_kept_are_bounded(monkeypatch):
    """A hostile fleet of every order of names: at most NOT_SAID_KINDS kinds kept (a full cache is emptied and filled
    again, never left full for good), each GPU's reasons right."""
    monkeypatch.setattr(hostscrape, "_NOT_SAID", {})
    said = {**VALUES, "fan_percent": 30, "sm_active_percent": 12.0}
    for names in itertools.islice(itertools.permutations(said), 300):
        values = {name: said[name] for name in names}
        made = hostscrape._sample(values, False, NOW)
        assert (made, list(made.unavailable.items())) == (
            former_sample(values, False, NOW),
            list(former_sample(values, False, NOW).unavailable.items()),
        )
    assert len(hostscrape._NOT_SAID) == 300 - hostscrape.NOT_SAID_KINDS, "emptied when full, then filled again"
    assert hostscrape._NOT_SAID[tuple(values)] is made.unavailable, "the newest kind kept"

"""``HostGpus.gpus`` builds with the model's fast constructors (issue 27): the very GpuStates the dataclasses build.

The oracle here is the former way, kept verbatim in this file: every GpuSample, GpuProcess and GpuState built
by keyword through the dataclass ``__init__`` (its range check included). Each test compares whole states --
values, reasons and their order, processes, health, history -- for realistic scrapes (a simulated exporter's
text, read as a host's) and for hostile ones (values said out of range: None; values outside a range that reach
the model anyway: NaN, infinities, negatives, huge; rows without a start time or a type).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import pytest

from nvtopy.formats.prometheus.parse import HostScrape, parse_exposition
from nvtopy.formats.prometheus.series import PROCESS_FIELDS
from nvtopy.model import (
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HistoryBuffer,
    ProcessType,
    Reason,
    freeze,
)
from nvtopy.sources.remote import hostscrape
from nvtopy.sources.remote.hostscrape import SAID_OR_NOT_AVAILABLE, HostGpus
from nvtopy.sources.timeline import Timeline

from ...builders import gpu_static
from ...prometheus_fixtures import simulated_exposition

pytestmark = pytest.mark.timeout(60)

NOW = 1_795_000_000.0


class Former:
    """What the former way kept between refreshes: each GPU's history and timeline, the Xid dates (HostGpus.health)."""

    def __init__(self) -> None:
        self.histories: dict[Hashable, HistoryBuffer] = {}
        self.timelines: dict[Hashable, Timeline] = {}
        self.health = HostGpus()


def former_process(row: dict[str, Any], index: int, uuid: str | None, now: float, host: str | None) -> GpuProcess:
    """The process row as it was built before the fast constructors: by keyword, the dataclass checking."""
    started = row.get("start_time_seconds")
    said_out_of_range = [field for metric, field in PROCESS_FIELDS.items() if metric in row and row[metric] is None]
    if started is None and "start_time_seconds" in row:
        said_out_of_range.append("running_seconds")
    return GpuProcess(
        gpu_index=index,
        gpu_uuid=uuid,
        pid=row["pid"],
        type=ProcessType(row["type"]),
        gpu_memory_bytes=row.get("gpu_memory_bytes"),
        sm_percent=row.get("sm_utilization_percent"),
        memory_percent=row.get("memory_utilization_percent"),
        user=row.get("user"),
        command=row.get("command"),
        cpu_percent=row.get("cpu_percent"),
        host_memory_bytes=row.get("host_memory_bytes"),
        create_time=started,
        running_seconds=None if started is None else max(0.0, now - started),
        owner=row.get("owner"),
        idle_seconds=row.get("idle_held_seconds"),
        gpu_instance_id=row.get("gpu_instance_id"),
        compute_instance_id=row.get("compute_instance_id"),
        host=host,
        unavailable=freeze(dict.fromkeys(said_out_of_range, Reason.OUT_OF_RANGE)),
    )


def former_gpus(scrape: HostScrape, first: int, now: float, kept: Former) -> list[Any]:
    """The GPUs as built before (health from the class itself: it did not change)."""
    histories, health_of = kept.histories, kept.health
    gpus: list[GpuState] = []
    host = scrape.hostname
    for remote_static, values, lost in scrape.gpus:
        index = first + len(gpus)
        static = GpuStatic(
            index=index,
            host=host,
            host_index=remote_static.index,
            **{name: getattr(remote_static, name) for name in hostscrape._STATIC_COPIED},
        )
        reasons = {k: Reason.NOT_AVAILABLE for k in SAID_OR_NOT_AVAILABLE if k not in values}
        reasons.update({k: Reason.OUT_OF_RANGE for k, v in values.items() if v is None})
        sample = GpuSample(now, lost=lost, unavailable=freeze(reasons), **values)
        processes = tuple(
            former_process(row, index, static.uuid, now, host) for row in scrape.processes.get(remote_static.index, [])
        )
        history = histories.setdefault((scrape.url, remote_static.index), HistoryBuffer())
        history.append(static, sample)
        timeline = kept.timelines.setdefault((scrape.url, remote_static.index), Timeline())
        timeline.record(static, sample)
        health = health_of.health((scrape.url, remote_static.index), scrape.health.get(remote_static.index), index, now)
        gpus.append(GpuState(static, sample, processes, history=history.history(), health=health, timeline=timeline))
    if scrape.note:
        gpus.append(GpuState(GpuStatic(index=first + len(gpus), host=host), GpuSample(now), note=scrape.note))
    return gpus


def shown(gpus: list[GpuState]) -> list[tuple[Any, ...]]:
    """Everything of each state that a view reads, reasons in their order (repr: types and spellings too)."""
    return [
        (
            g,
            repr(g),  # the timeline's too (its samples: GpuState equality leaves it out)
            list(g.sample.unavailable.items()),
            [list(p.unavailable.items()) for p in g.processes],
            [type(p.type) for p in g.processes],
        )
        for g in gpus
    ]


def assert_same_as_before(scrapes: list[HostScrape], refreshes: int = 3) -> list[GpuState]:
    made, kept = HostGpus(), Former()
    gpus: list[GpuState] = []
    for n in range(refreshes):  # a second refresh: the kept GpuStatic reused, the histories grown
        now, gpus, want = NOW + n, [], []
        for scrape in scrapes:
            gpus.extend(made.gpus(scrape, len(gpus), now))
            want.extend(former_gpus(scrape, len(want), now, kept))
        assert shown(gpus) == shown(want)
    return gpus


def scrape_of(hostname: str, seed: int, count: int) -> HostScrape:
    return parse_exposition(simulated_exposition(hostname, seed, count), f"http://{hostname}:9400/metrics")


def test_the_fast_ways_are_the_ones_taken():
    """The model's field orders are those the positional builders assume (else they build by keyword, slower)."""
    assert hostscrape._SAMPLE_BY_POSITION
    assert hostscrape._PROCESS_BY_POSITION
    assert hostscrape._STATE_BY_POSITION


def test_simulated_hosts_build_the_same_states_as_before():
    scrapes = [scrape_of(f"node-{seed}", seed, 8) for seed in range(1, 5)]
    gpus = assert_same_as_before(scrapes)
    assert any(g.processes for g in gpus), "processes compared too"


def hostile_scrape(values: dict[str, Any], rows: list[dict[str, Any]], lost: bool = False) -> HostScrape:
    static = gpu_static(3, bare=True, uuid="GPU-h", name="NVIDIA H100", memory_total_bytes=80 << 30)
    return HostScrape(
        url="http://h:9400/metrics", hostname="h", gpus=[(static, values, lost)], processes={3: rows}, note="cut"
    )


ROW = {
    "pid": 4242,
    "type": "C",
    "gpu_memory_bytes": 1 << 30,
    "sm_utilization_percent": 50,
    "memory_utilization_percent": 20,
    "cpu_percent": 12.5,
    "host_memory_bytes": 1 << 28,
    "start_time_seconds": NOW - 100.0,
    "idle_held_seconds": 5.0,
    "user": "alice",
    "command": "python train.py",
    "gpu_instance_id": None,  # said as none (no MIG): not out of range
    "compute_instance_id": None,
}

BAD = [math.nan, math.inf, -math.inf, -1, 10**30, "12", True]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_values_out_of_range_are_none_with_the_reason_as_before(bad):
    """A figure the scrape left out of range reaches the model: None and "out of range", as the dataclass says."""
    values = {
        "utilization_gpu_percent": bad,
        "memory_used_bytes": 1 << 30,
        "temperature_c": 60,
        "power_draw_w": bad,
        "sm_active_percent": 12.0,
    }
    rows = [{**ROW, "cpu_percent": bad}, {**ROW, "pid": 7, "gpu_memory_bytes": bad, "sm_utilization_percent": bad}]
    gpus = assert_same_as_before([hostile_scrape(values, rows)])
    if bad is True:  # a bool is an int in range to the dataclass as well
        return
    assert gpus[0].sample.utilization_gpu_percent is None
    assert gpus[0].sample.why("utilization_gpu_percent") is Reason.OUT_OF_RANGE
    assert gpus[0].processes[0].cpu_percent is None
    assert gpus[0].processes[0].unavailable["cpu_percent"] is Reason.OUT_OF_RANGE


def test_values_said_out_of_range_and_values_not_said_keep_their_reasons():
    """None in the scrape (said, out of range) and fields absent (not available): each reason, in its order."""
    values = {"utilization_gpu_percent": None, "temperature_c": 61, "fp16_active_percent": 3.0}
    rows = [
        {**ROW, "start_time_seconds": None},  # said, out of range: no running time either
        {**ROW, "pid": 8, "cpu_percent": None, "idle_held_seconds": None},
        {k: v for k, v in ROW.items() if k not in ("start_time_seconds", "user", "gpu_memory_bytes")},
        {**ROW, "pid": 9, "type": "M", "start_time_seconds": NOW + 50.0},  # a clock ahead: running 0, as before
    ]
    gpus = assert_same_as_before([hostile_scrape(values, rows, lost=True)])
    sample = gpus[0].sample
    assert sample.why("utilization_gpu_percent") is Reason.OUT_OF_RANGE
    assert sample.why("fan_percent") is Reason.NOT_AVAILABLE
    assert gpus[0].processes[0].unavailable.keys() == {"create_time", "running_seconds"}
    assert gpus[0].processes[3].running_seconds == 0.0
    assert gpus[-1].note == "cut"


def test_every_field_said_or_none_said():
    """A host that says every "said or not" field (no reason at all) and one that says no figure at all."""
    everything = dict.fromkeys(SAID_OR_NOT_AVAILABLE, 1.0)
    assert_same_as_before([hostile_scrape(everything, []), hostile_scrape({}, [dict(ROW)])])


def test_a_row_of_an_unknown_type_fails_as_before():
    """What the dataclass refused, this refuses too (the caller reads it as an unreadable host)."""
    for kind in ("X", 3, None):
        with pytest.raises(ValueError):
            former_process({**ROW, "type": kind}, 0, None, NOW, "h")
        with pytest.raises(ValueError):
            HostGpus().gpus(hostile_scrape({}, [{**ROW, "type": kind}]), 0, NOW)


def test_a_sample_value_the_model_has_no_field_for_fails_as_before():
    with pytest.raises(TypeError):
        HostGpus().gpus(hostile_scrape({"no_such_field": 1}, []), 0, NOW)
    with pytest.raises(TypeError):
        HostGpus().gpus(hostile_scrape({"timestamp": 1.0}, []), 0, NOW)


def test_the_oracle_notices_an_unchecked_constructor(monkeypatch):
    """These tests can fail: a builder that skips the range check (or a default) is told apart from the former."""
    values = {"utilization_gpu_percent": math.nan, "temperature_c": 60}

    def unchecked_sample(*args: Any) -> GpuSample:
        made = object.__new__(GpuSample)
        for name, value in zip(GpuSample.__dataclass_fields__, args, strict=True):
            object.__setattr__(made, name, value)
        return made

    monkeypatch.setattr(hostscrape, "_NEW_SAMPLE", unchecked_sample)
    with pytest.raises(AssertionError):
        assert_same_as_before([hostile_scrape(values, [])], refreshes=1)
    monkeypatch.undo()
    monkeypatch.setattr(hostscrape, "_PROCESS_TYPES", {"C": ProcessType.MPS})
    with pytest.raises(AssertionError):
        assert_same_as_before([hostile_scrape({}, [dict(ROW)])], refreshes=1)

"""The Xid window behind the verdict: every Xid of the window counted, in bounded memory, the same in every view.

Issue 23, item 1: after a reset-level Xid (48, 79, any FAIL one), 64 more Xids of
any kind pushed it out of the bounded timeline and the verdict dropped from FAIL
to WARN in the TUI, ``log`` and the exporter (``nvtopy_gpu_health`` 2 -> 1), and
the findings counted the timeline ("Xid 119 x6" while 1,635 had come). And after
an Xid 0, ``DCGM_FI_DEV_XID_ERRORS`` read 0, as "none" does.
"""

from __future__ import annotations

import io
import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.writers import CsvWriter
from nvtopy.health.verdict import MAX_XID_FINDINGS, HealthInputs, HealthThresholds, assess
from nvtopy.health.xid import MAX_XIDS_PER_GPU, XID_CATALOGUE, describe_xid
from nvtopy.health.xid_window import BUCKETS, XidWindow
from nvtopy.model import EVENTS_PER_GPU, GpuEvent, Severity
from nvtopy.render.health import gpu_health_lines
from nvtopy.render.text import health_lines
from nvtopy.sources.collector import Collector
from nvtopy.sources.events import EventLog

from ..builders import LatestSource
from ..commands.test_health_exporter import exposition, remote_gpus
from .test_health_rules import HEALTHY, STATIC

FAIL, WARN, OK = Severity.FAIL, Severity.WARN, Severity.OK
FAIL_XIDS = sorted(number for number, info in XID_CATALOGUE.items() if info.severity is FAIL)
# Minor Xids, as a crash-looping job or the fake driver's storm sends them: the application's, and unknown numbers.
MINOR_XIDS = (13, 31, 43, 45, 0, 999, 65535, 12345678)
WINDOW = HealthThresholds().xid_window_s


def storm(gpu: int, start: float, count: int, every: float = 0.5) -> list[GpuEvent]:
    """``count`` minor Xids on ``gpu``, one each ``every`` seconds from ``start``, cycling :data:`MINOR_XIDS`."""
    return [GpuEvent(start + i * every, gpu, xid=MINOR_XIDS[i % len(MINOR_XIDS)]) for i in range(count)]


def xid_findings(health) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.text for f in health.findings if f.code == "xid"]


def csv_row(snapshot, index: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """GPU ``index``'s row as ``nvtopy log`` writes it (CSV, its default health fields)."""
    out = io.StringIO()
    fields = ["index", "health_verdict", "health_findings", "last_xid", "xid_events"]
    CsvWriter(out, fields, processes=False, header=True).write(snapshot)
    header, *rows = (line.split(",") for line in out.getvalue().splitlines())
    return next(dict(zip(header, row, strict=True)) for row in rows if row[0] == str(index))


def gpu_health_series(text: str, name: str, gpu: int) -> list[tuple[dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and sample.labels.get("gpu") == str(gpu)
    ]


# ------------------------------------------------------------------------- the verdict, in every view


@pytest.mark.parametrize("fail_xid", FAIL_XIDS)
def test_a_reset_level_xid_keeps_the_verdict_past_a_storm_of_minor_ones(sim, clock, fail_xid):
    backend = sim(gpus=2)
    log = EventLog()
    collector = Collector(backend, events=log)
    start = clock()
    log.add([GpuEvent(start, 1, xid=fail_xid)])
    log.add(storm(1, start + 1, 3 * EVENTS_PER_GPU))
    clock.advance(200)
    snapshot = collector.collect()
    gpu = snapshot.gpu(1)
    health = gpu.health
    assert fail_xid not in [e.xid for e in health.events], "the premise: it left the timeline shown"
    assert health.verdict is FAIL, health.findings
    assert health.findings[0].text == f"Xid {fail_xid}: {describe_xid(fail_xid).meaning}"
    # Every view says FAIL: the TUI's panel and health screen, --once, JSON, log, the exporter.
    assert "FAIL" in gpu_health_lines(gpu, clock())[0].plain
    assert any(f"Xid {fail_xid}: " in text for text, _ in health_lines(gpu))
    assert snapshot_to_dict(snapshot)["gpus"][1]["health"]["verdict"] == "FAIL"
    row = csv_row(snapshot, 1)
    assert row["health_verdict"] == "FAIL" and row["health_findings"].startswith("xid")
    ((_, value),) = gpu_health_series(exposition(snapshot), "nvtopy_gpu_health", 1)
    assert value == 2, "an alert on FAIL does not clear itself"
    assert snapshot.gpu(0).health.verdict is OK, "events belong to their GPU"


def test_the_verdict_lasts_exactly_one_window_after_the_last_reset_level_xid(sim, clock):
    backend = sim(gpus=1)
    log = EventLog()
    collector = Collector(backend, events=log)
    start = clock()
    log.add([GpuEvent(start, 0, xid=48)])
    log.add(storm(0, start + 1, int(2 * WINDOW)))  # minor Xids every half second for the whole window and on
    clock.advance(WINDOW)
    assert collector.collect().gpu(0).health.verdict is FAIL, "one hour after it: still within the window"
    clock.advance(1)
    after = collector.collect().gpu(0).health
    assert after.verdict is WARN and not any(t.startswith("Xid 48") for t in xid_findings(after))


def test_findings_count_every_xid_of_the_window_not_the_timeline(sim, clock):
    backend = sim(gpus=1)
    log = EventLog()
    collector = Collector(backend, events=log)
    start = clock()
    log.add([GpuEvent(start + i, 0, xid=119) for i in range(1635)])  # a GSP storm: 1,635 in 27 minutes
    log.add([GpuEvent(start + 1700 + i, 0, xid=13) for i in range(3)])
    clock.advance(1800)
    gpu = collector.collect().gpu(0)
    health = gpu.health
    assert len(health.events) == EVENTS_PER_GPU and health.xid_counts == ((13, 3), (119, 1635))
    assert xid_findings(health) == ["Xid 119 x1635: GSP RPC timeout", "Xid 13 x3: graphics engine exception"]
    screen = "\n".join(line.plain for line in gpu_health_lines(gpu, clock()))
    assert "Xid 119 x1635: GSP RPC timeout" in screen and "Xid 119 x1635 · " not in screen.split("Xid events")[0]
    assert "since nvtopy started: Xid 13 x3 · Xid 119 x1635" in screen, "the same screen agrees with the findings"


def test_counts_leave_the_window_with_their_events(sim, clock):
    backend = sim(gpus=1)
    log = EventLog()
    collector = Collector(backend, events=log)
    start = clock()
    log.add([GpuEvent(start + i, 0, xid=31) for i in range(100)])
    log.add([GpuEvent(start + 2000 + i, 0, xid=31) for i in range(7)])
    clock.advance(2000 + WINDOW - 300)  # the first 100 are more than a minute out of the window, the 7 in it
    health = collector.collect().gpu(0).health
    assert xid_findings(health) == ["Xid 31 x7: GPU memory page fault"]
    assert health.xid_counts == ((31, 107),), "since nvtopy started: every one"


# ------------------------------------------------------------------------- bounded, whatever comes


def test_a_flood_of_distinct_numbers_is_bounded_and_keeps_the_fail():
    window = XidWindow()
    t0 = 1_795_000_000.0
    window.add(t0, 79)
    for i in range(200_000):  # 100,000 distinct numbers over 2 hours and a bit: every minute's bucket is full
        window.add(t0 + 1 + i * 0.04, 1000 + i % 100_000)
        if i % 20_000 == 0:
            buckets, counts = window.size()
            assert buckets <= BUCKETS + 1 and counts <= (BUCKETS + 1) * (MAX_XIDS_PER_GPU + 2)
    now = t0 + 1 + 200_000 * 0.04
    recent = window.recent(now)
    assert len(recent) <= MAX_XIDS_PER_GPU + 2
    assert sum(entry.count for entry in recent) >= WINDOW / 0.04, "every event of the window is still counted"
    health = assess(STATIC, HEALTHY, HealthInputs(now=now, recent_xids=recent))
    assert health.verdict is WARN, "the 79 is older than the hour"
    assert len(health.findings) <= MAX_XID_FINDINGS + 1, "one finding per number would be a page of them"


def test_a_fail_among_numbers_past_the_cap_still_fails():
    window = XidWindow()
    t0 = 1_795_000_000.0
    for i in range(MAX_XIDS_PER_GPU):
        window.add(t0 + i * 0.01, 1000 + i)  # made-up numbers fill every place
    window.add(t0 + 10, 48)  # a double-bit ECC error arrives after them
    now = t0 + 20
    recent = window.recent(now)
    assert sum(entry.count for entry in recent) == MAX_XIDS_PER_GPU + 1
    health = assess(STATIC, HEALTHY, HealthInputs(now=now, recent_xids=recent))
    assert health.verdict is FAIL
    more = MAX_XIDS_PER_GPU - MAX_XID_FINDINGS + 1  # the numbers past the findings' own, and the 48 past the cap
    assert health.findings[0].text == f"{more} more Xid events of other numbers"
    assert health.findings[0].severity is FAIL, "the worst of them"
    assert len(health.findings) == MAX_XID_FINDINGS + 1


def test_the_window_ignores_a_clock_that_is_not_finite_and_folds_one_going_back():
    window = XidWindow()
    window.add(float("nan"), 48)
    window.add(float("inf"), 48)
    assert window.recent(1_795_000_000.0) == ()
    window.add(1_795_000_000.0, 13)
    window.add(1_794_990_000.0, 13)  # the clock went back almost three hours: folded into the newest bucket
    ((xid, severity, count, newest),) = window.recent(1_795_000_000.0)
    assert (xid, severity, count, newest) == (13, WARN, 2, 1_795_000_000.0)
    with pytest.raises(ValueError):
        XidWindow(float("nan"))


def test_a_shorter_window_counts_its_own_minutes_and_a_quiet_hour_counts_none():
    window = XidWindow()
    t0 = 1_794_999_600.0  # a whole minute
    for i in range(600):
        window.add(t0 + i, 13)  # ten minutes of one a second
    assert window.recent(t0 + 599) == ((13, WARN, 600, t0 + 599),)
    assert window.recent(t0 + 599, 120)[0].count == 180, "the last two minutes and the minute they start in"
    assert window.recent(t0 + 599 + WINDOW)[0].count == 60, "an hour after the last: still in, with its minute"
    assert window.recent(t0 + 600 + WINDOW) == (), "a second more: out, with no new event to prune them"
    window.add(t0 + 599 + WINDOW + 1, 13)
    assert window.recent(t0 + 599 + WINDOW + 1) == ((13, WARN, 1, t0 + 600 + WINDOW),)
    assert window.size() == (1, 1), "the old buckets went when a new one opened"


def test_the_collector_weighs_xids_over_its_own_window(sim, clock):
    backend = sim(gpus=1)
    short = Collector(backend, thresholds=HealthThresholds(xid_window_s=60))
    default = Collector(backend)
    for collector in (short, default):
        collector.events.add([GpuEvent(clock() - 120, 0, xid=79)])
    assert default.collect().gpu(0).health.verdict is FAIL
    assert short.collect().gpu(0).health.verdict is OK
    with pytest.raises(ValueError):
        Collector(backend, thresholds=HealthThresholds(xid_window_s=2 * WINDOW), events=EventLog())


# ------------------------------------------------------------------------- Xid 0 is not "none"


def test_an_xid_0_is_told_from_none_on_the_exporter_and_read_back(sim, clock):
    backend = sim(gpus=3)
    log = EventLog()
    log.watching = True  # watched: "none" is a claim nvtopy can make
    collector = Collector(backend, events=log)
    log.add([GpuEvent(clock(), 0, xid=0), GpuEvent(clock(), 2, xid=79), GpuEvent(clock() + 1, 2, xid=0)])
    snapshot = collector.collect()
    text = exposition(snapshot)
    ((zero_labels, zero),) = gpu_health_series(text, "DCGM_FI_DEV_XID_ERRORS", 0)
    ((none_labels, none),) = gpu_health_series(text, "DCGM_FI_DEV_XID_ERRORS", 1)
    assert zero == none == 0, "the value stays dcgm-exporter's: the last Xid, 0 when none"
    assert zero_labels["err_code"] == "0" and zero_labels["err_msg"] == "unknown Xid"
    assert "err_code" not in none_labels and "err_msg" not in none_labels
    ((again_labels, again),) = gpu_health_series(text, "DCGM_FI_DEV_XID_ERRORS", 2)
    assert again == 0 and again_labels["err_code"] == "0", "an Xid 0 after a 79 is the last one"
    _, gpus = remote_gpus(text)
    assert gpus[0].health.last_xid == 0 and [e.xid for e in gpus[0].health.events] == [0]
    assert gpus[1].health.last_xid is None and gpus[1].health.events == ()
    assert gpus[2].health.last_xid == 0 and gpus[0].health.verdict is WARN
    data = snapshot_to_dict(snapshot)["gpus"]
    assert [g["health"]["last_xid"] for g in data] == [0, None, 0]
    assert json.dumps(data)  # the JSON said it already: null is none, 0 an Xid 0


def test_a_dcgm_exporters_zero_is_none():
    _, gpus = remote_gpus(
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a",err_code="0",err_msg="No Error"} 0\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 5\n'
    )
    assert gpus[0].health.last_xid is None and gpus[0].health.events == (), "no Xid count says one came"


def test_an_exporter_reusing_its_families_still_tells_an_xid_0_that_came_since(sim, clock):
    backend = sim(gpus=1)
    log = EventLog()
    log.watching = True
    collector = Collector(backend, events=log)
    source = LatestSource(None)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    source.latest = collector.collect()
    ((before, _),) = gpu_health_series(generate_latest(registry).decode(), "DCGM_FI_DEV_XID_ERRORS", 0)
    log.add([GpuEvent(clock(), 0, xid=0)])
    source.latest = collector.collect()
    ((after, value),) = gpu_health_series(generate_latest(registry).decode(), "DCGM_FI_DEV_XID_ERRORS", 0)
    assert "err_code" not in before and after["err_code"] == "0" and value == 0, "the same value, a new series"

"""The charts' long history (nvtopy.sources.timeline): buckets, tiers, bounded memory, threads, and who feeds it."""

from __future__ import annotations

import json
import math
import random
import threading
import tracemalloc

import pytest

from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.model import GpuSample, GpuStatic
from nvtopy.sources import timeline as timeline_module
from nvtopy.sources.collector import Collector
from nvtopy.sources.replay import load_recording
from nvtopy.sources.timeline import METRICS, SLACK, TIERS, WINDOWS, Timeline, bound_bytes, metric_values

T0 = 1_794_999_600.0  # a whole hour: bucket boundaries of every tier fall on it
NONE = (None,) * len(METRICS)


def values(**given: float | None) -> tuple[float | None, ...]:
    return tuple(given.get(name) for name in METRICS)


def test_a_bucket_keeps_lowest_mean_and_highest():
    timeline = Timeline()
    for offset, util in ((0.0, 10.0), (0.25, 50.0), (0.5, 30.0), (0.75, 90.0)):
        timeline.add(T0 + offset, values(utilization=util))
    one = timeline.series("utilization", 60, T0 + 0.9)
    assert one.step == 1.0
    assert list(one.buckets) == [int(T0)]
    assert (one.lo[0], one.mean[0], one.hi[0]) == (10.0, 45.0, 90.0)


@pytest.mark.parametrize("window", WINDOWS)
def test_a_spike_and_a_dip_fed_mid_bucket_stay_its_top_and_bottom_at_every_zoom(window):
    """Issue 23, item 15: every test fed its largest value last, so a bucket that kept its last value
    instead of its highest passed them all. Here no bucket of any tier ends on its extreme: the spike
    (97 %) and the dip (3 %) come in the middle of their second, ten seconds and minute."""
    timeline = Timeline()
    spike, dip = T0 + 65.5, T0 + 74.25  # second 65 and 74: in the 10-s buckets 60 and 70, in minute 1
    for quarter in range(4 * 120):  # four samples a second for two minutes, 20 % but for the two
        when = T0 + quarter / 4
        timeline.add(when, values(utilization=97.0 if when == spike else 3.0 if when == dip else 20.0))
    s = timeline.series("utilization", window, T0 + 119.75)
    top = list(s.buckets).index(math.floor(spike / s.step))
    bottom = list(s.buckets).index(math.floor(dip / s.step))
    assert s.hi[top] == 97.0 and max(s.hi) == 97.0, f"the spike is the top of its {s.step:g}-s bucket"
    assert s.lo[bottom] == 3.0 and min(s.lo) == 3.0, f"the dip is the bottom of its {s.step:g}-s bucket"


def test_tiers_aggregate_the_same_samples_at_their_own_size():
    timeline = Timeline()
    for second in range(120):  # two minutes, util = the second
        timeline.add(T0 + second, values(utilization=float(second)))
    end = T0 + 119
    fine = timeline.series("utilization", 600, end)
    assert fine.step == 1 and len(fine.buckets) == 120 and list(fine.mean[:3]) == [0.0, 1.0, 2.0]
    ten = timeline.series("utilization", 3600, end)
    assert ten.step == 10 and len(ten.buckets) == 12
    assert (ten.lo[0], ten.mean[0], ten.hi[0]) == (0.0, 4.5, 9.0)
    minute = timeline.series("utilization", 86400, end)
    assert minute.step == 60 and len(minute.buckets) == 2
    assert (minute.lo[1], minute.mean[1], minute.hi[1]) == (60.0, 89.5, 119.0)


@pytest.mark.parametrize(("window", "step"), [(60, 1), (600, 1), (3600, 10), (86400, 60)])
def test_each_window_reads_the_finest_tier_that_covers_it(window, step):
    for bounded in (True, False):
        timeline = Timeline(bounded=bounded)
        timeline.add(T0, values(utilization=1.0))
        assert timeline.series("utilization", window, T0).step == step
    assert window in WINDOWS


def test_missing_values_are_gaps_never_zero():
    timeline = Timeline()
    timeline.add(T0, values(utilization=40.0))  # no power
    timeline.add(T0 + 1, NONE)  # a lost GPU
    power = timeline.series("power", 60, T0 + 1)
    assert len(power.buckets) == 2 and all(math.isnan(v) for v in power.mean)
    util = timeline.series("utilization", 60, T0 + 1)
    assert util.mean[0] == 40.0 and math.isnan(util.mean[1])
    assert metric_values(GpuStatic(0), GpuSample(T0, lost=True)) == NONE


def test_metric_values_of_a_sample():
    static = GpuStatic(0, memory_total_bytes=80 * 2**30)
    sample = GpuSample(
        T0,
        utilization_gpu_percent=70,
        memory_used_bytes=20 * 2**30,
        power_draw_w=350.5,
        sm_active_percent=40.0,
        pcie_rx_bytes_per_s=None,
        gpm_pcie_rx_bytes_per_s=1e9,  # NVML's PCIe counter missing: GPM's stands in
        pcie_tx_bytes_per_s=2_000_000,
        nvlink_rx_bytes_per_s=5,
        nvlink_tx_bytes_per_s=6,
    )
    assert metric_values(static, sample) == (70, 25.0, 350.5, 40.0, 1e9, 2_000_000, 5, 6)


def test_only_the_window_up_to_end_is_read():
    timeline = Timeline()
    for second in range(300):
        timeline.add(T0 + second, values(utilization=float(second)))
    early = timeline.series("utilization", 60, T0 + 100)
    assert early.buckets[0] == int(T0) + 40 and early.buckets[-1] == int(T0) + 100
    assert early.mean[-1] == 100.0, "a snapshot of the past reads the past: nothing after its time"


def test_a_clock_going_back_folds_into_the_newest_bucket():
    timeline = Timeline()
    timeline.add(T0 + 10, values(utilization=10.0))
    timeline.add(T0 + 5, values(utilization=30.0))  # NTP stepped the clock back
    fine = timeline.series("utilization", 60, T0 + 10)
    assert list(fine.buckets) == [int(T0) + 10] and fine.mean[0] == 20.0
    timeline.add(float("nan"), values(utilization=99.0))  # no time at all: ignored
    assert timeline.appended == 2


def test_old_buckets_are_dropped_past_the_capacity():
    timeline = Timeline()
    for second in range(700):
        timeline.add(T0 + second, values(utilization=1.0))
    fine = timeline._tiers[0]
    assert len(fine.buckets) <= TIERS[0][1] + SLACK + 1
    assert fine.buckets[0] >= int(T0) + 699 - TIERS[0][1] - SLACK
    ten_minutes = timeline.series("utilization", 600, T0 + 699)
    assert len(ten_minutes.buckets) == 601, "a full window is always kept"


def _fill_24h(timeline: Timeline, start: float, every: float) -> float:
    """Samples every ``every`` seconds for 24 hours and then one every second for the last hour; the end time."""
    when = start
    while when < start + 23 * 3600:
        timeline.add(when, values(utilization=50.0, memory=30.0, power=300.0, sm_active=20.0, pcie_rx=1e8))
        when += every
    for _ in range(3600):
        timeline.add(when, tuple(float(i) for i in range(len(METRICS))))
        when += 1
    return when - 1


def test_24_hours_stay_within_the_stated_memory():
    """The README's figure: a GPU's timeline at its largest, as allocated (tracemalloc), under bound_bytes()."""
    bound = bound_bytes()
    assert bound < 300_000, "the README states under 300 kB per GPU"
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        timeline = Timeline()
        # Every tier full: a sample a minute for 23 h fills the 1-minute tier, a second one for the last hour
        # fills the 10-s and 1-s tiers (a full day of 1-s samples holds the same buckets: see below).
        end = _fill_24h(timeline, T0, 60.0)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # The timeline's own allocations (the test's tuples linger on CPython's free lists: not the timeline's).
    only = [tracemalloc.Filter(True, timeline_module.__file__)]
    grown = sum(stat.size_diff for stat in after.filter_traces(only).compare_to(before.filter_traces(only), "filename"))
    assert 0 < grown <= bound, f"{grown} bytes allocated, {bound} stated"
    assert timeline.nbytes() <= bound
    assert all(len(t.buckets) >= capacity for t, (_, capacity) in zip(timeline._tiers, TIERS, strict=True)), "full"
    assert len(timeline.series("power", 86400, end).buckets) == 1440


def test_a_day_of_one_second_samples_is_bounded_too():
    timeline = Timeline()
    end = _fill_24h(timeline, T0, 1.0)
    assert timeline.appended == 23 * 3600 + 3600
    assert timeline.nbytes() <= bound_bytes()
    day = timeline.series("utilization", 86400, end)
    assert day.step == 60 and len(day.buckets) == 1440 and day.mean[0] == 50.0


def test_a_replay_timeline_keeps_everything():
    timeline = Timeline(bounded=False)
    for second in range(0, 3 * 86400, 30):
        timeline.add(T0 + second, values(utilization=float(second % 100)))
    assert len(timeline._tiers[0].buckets) == 3 * 86400 // 30, "every bucket of the recording"
    first_day = timeline.series("utilization", 86400, T0 + 86400 - 1)
    assert len(first_day.buckets) == 1440


def test_one_writer_and_readers_on_other_threads():
    """The poller appends while the UI reads: every read is a consistent copy, nothing raises."""
    timeline = Timeline()
    stop = threading.Event()
    problems: list[str] = []

    def write() -> None:
        for i in range(20_000):
            timeline.add(T0 + i * 0.25, values(utilization=float(i % 100), power=float(i)))
        stop.set()

    def read() -> None:
        while not stop.is_set():
            newest = timeline.newest
            if newest is None:
                continue
            for window in WINDOWS:
                s = timeline.series("power", window, newest)
                if not len(s.buckets) == len(s.lo) == len(s.mean) == len(s.hi):
                    problems.append("torn read")
                if list(s.buckets) != sorted(set(s.buckets)):
                    problems.append("buckets out of order")
                if any(lo > hi for lo, hi in zip(s.lo, s.hi, strict=True)):
                    problems.append("lowest above highest")

    threads = [threading.Thread(target=write), *(threading.Thread(target=read) for _ in range(2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not problems, problems[:3]
    assert timeline.appended == 20_000


def test_the_collector_feeds_one_timeline_per_gpu(sim, clock):
    collector = Collector(sim(gpus=2, seed=3))
    first = collector.collect()
    for _ in range(4):
        clock.advance(1)
        last = collector.collect()
    for before, after in zip(first.gpus, last.gpus, strict=True):
        assert isinstance(after.timeline, Timeline) and after.timeline is before.timeline, "shared, not copied"
        assert after.timeline.appended == 5
        util = after.timeline.series("utilization", 60, last.timestamp)
        assert util.mean[-1] == after.sample.utilization_gpu_percent
    assert first.gpus[0] != last.gpus[0]  # values differ; the timeline takes no part in comparisons
    assert "Timeline(5 samples)" in repr(last.gpus[0])


def test_a_collector_without_charts_keeps_no_timeline(sim, clock, monkeypatch):
    """The exporter, ``log``, ``--once`` and the API pass ``timeline=False``: no buckets, no work per poll.

    Only this thread's records count (a collector records on the thread that collects): the patch is the class's,
    and a poller another test of this worker left running records on its own thread (seen once in CI: three
    records of a 3-GPU poller in the middle of this test)."""
    recorded = []
    me = threading.get_ident()
    monkeypatch.setattr(
        Timeline, "record", lambda self, *args: recorded.append(args) if threading.get_ident() == me else None
    )
    collector = Collector(sim(gpus=2, seed=3), timeline=False)
    for _ in range(3):
        snapshot = collector.collect()
        clock.advance(1)
    assert [gpu.timeline for gpu in snapshot.gpus] == [None, None]
    assert recorded == []
    Collector(sim(gpus=1, seed=3)).collect()
    assert len(recorded) == 1  # the default (the monitor's) keeps one


@pytest.mark.parametrize(
    ("module", "call"),
    [
        (
            "nvtopy.commands.exporter.command",
            "Collector(backend, history=1, thresholds=options.health_thresholds(args), timeline=False)",
        ),
        (
            "nvtopy.commands.log",
            "Collector(backend, history=1, thresholds=options.health_thresholds(args), timeline=False)",
        ),
        ("nvtopy.commands.options", "Collector(backend, timeline=False)"),  # --once's read_one_snapshot
        ("nvtopy.api.sampler", "Collector(backend, history=1, timeline=False)"),
    ],
)
def test_views_without_charts_ask_for_no_timeline(module, call):
    import importlib
    import inspect

    assert call in inspect.getsource(importlib.import_module(module))


def test_a_replay_feeds_the_charts_from_the_whole_recording(tmp_path, sim, clock):
    collector = Collector(sim(gpus=2, seed=5))
    lines = []
    for _ in range(30):
        clock.advance(1)
        lines.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    snapshots = load_recording(str(path)).snapshots
    recorded = [json.loads(line)["gpus"][1]["utilization_gpu_percent"] for line in lines]
    late, early = snapshots[29], snapshots[9]
    assert late.gpus[1].timeline is early.gpus[1].timeline, "one timeline for the recording"
    assert list(late.gpus[1].timeline.series("utilization", 60, late.timestamp).mean) == recorded
    assert list(early.gpus[1].timeline.series("utilization", 60, early.timestamp).mean) == recorded[:10], (
        "as of the snapshot shown"
    )


def test_samples_waiting_in_a_bucket_are_folded_in_when_read_and_past_the_pending_bound():
    """A sample in the newest bucket waits (timeline.PENDING at most) before it is folded into it: a read
    between any two samples, and a bucket of many more than PENDING samples, still give its exact lowest,
    mean and highest -- NaN and None (no reading) left out, a sample dated before the bucket folded into it."""
    timeline = Timeline()
    said: list[float] = []
    for n in range(5 * timeline_module.PENDING + 3):
        when = T0 + 30 + n * 0.01 if n % 7 else T0 + 25  # now and then a clock that went back
        util = float("nan") if n % 5 == 0 else None if n % 11 == 0 else float((n * 37) % 101)
        timeline.add(when, values(utilization=util, power=float(n)))
        if util is not None and util == util:
            said.append(util)
        if n % 9 == 0 and said:
            for window in WINDOWS:
                s = timeline.series("utilization", window, T0 + 59)
                assert (s.lo[-1], s.hi[-1]) == (min(said), max(said)), window
                assert s.mean[-1] == pytest.approx(sum(said) / len(said), rel=1e-6), window
    minute = timeline.series("power", 86400, T0 + 59)
    assert list(minute.buckets) == [int(T0) // 60]
    count = 5 * timeline_module.PENDING + 3
    assert (minute.lo[0], minute.mean[0], minute.hi[0]) == (0.0, (count - 1) / 2, count - 1.0)


def _tier_state(timeline: Timeline) -> list[tuple[object, ...]]:
    """Every tier's buckets, lowest, mean and highest (bytes: NaN included), and what waits to be folded."""
    return [
        (
            tier.buckets.tobytes(),
            tier.lo.tobytes(),
            tier.mean.tobytes(),
            tier.hi.tobytes(),
            tier.pending,
            tier.opened,
            tier.sums,
            tier.counts,
        )
        for tier in timeline._tiers
    ]


class _ReferenceTier(timeline_module._Tier):
    """A tier written as it was before a new bucket's values were converted once: each array extended with the
    sample itself (the plain, obviously right way; the tier's own ``add`` must keep what this keeps)."""

    __slots__ = ()

    def add(self, when: float, values) -> None:  # type: ignore[no-untyped-def]
        bucket = math.floor(when / self.step)
        if self.buckets and bucket <= self.buckets[-1]:
            self.pending.append(values)
            if len(self.pending) >= timeline_module.PENDING:
                self.fold()
            return
        if self.pending:
            self.fold()
        self.buckets.append(bucket)
        self.lo.extend(values)
        self.mean.extend(values)
        self.hi.extend(values)
        self.opened = values
        if self.capacity is not None and len(self.buckets) > self.capacity + SLACK:
            self._cut(bucket - self.capacity)


def _reference_timeline() -> Timeline:
    reference = Timeline()
    reference._tiers = tuple(_ReferenceTier(step, capacity) for step, capacity in TIERS)
    return reference


def test_a_new_bucket_written_in_one_conversion_keeps_what_extending_by_the_sample_keeps():
    """A tier converts a new bucket's values once (``--ssh`` records 512 remote GPUs a refresh): the very same
    buckets as extending each array by the sample, sample after sample,
    whatever comes -- several samples a second, none for minutes, a clock that goes back, gaps (None, NaN),
    integers and values past float32's range -- and the same series at every window."""
    rng = random.Random(29)
    for _ in range(4):
        plain, quick = _reference_timeline(), Timeline()
        when = T0 + rng.random() * 60
        for n in range(1600):  # over ten minutes of seconds (past the 1-s tier's capacity, cut), then anything
            when += rng.choice([1.0] * 12 + [0.25, 0.0, -2.0] + ([] if n < 1200 else [3.5, 61.0, 700.0] * 4))
            figures = tuple(
                rng.choice([None, float("nan"), 0, 3, 17.25, 1e30 if rng.random() < 0.01 else 50.5, rng.random()])
                for _ in METRICS
            )
            plain.add(when, figures)
            quick.add(when, figures)
            assert _tier_state(quick) == _tier_state(plain)
        assert (quick.appended, quick.newest) == (plain.appended, plain.newest)
        for metric in METRICS:
            for window in WINDOWS:
                got, expected = quick.series(metric, window, when), plain.series(metric, window, when)
                assert [bytes(memoryview(column)) for column in got[1:]] == [
                    bytes(memoryview(column)) for column in expected[1:]
                ]

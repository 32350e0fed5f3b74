"""The suspected hang judged by SM activity (GPM, Hopper and newer), by power where SM activity is N/A.

A GPU at 100 % utilisation whose SMs are ~3 % active computes nothing: GPM
says so directly, so it wins over the power reading (the older evidence) where
the sample has it. The rule over hand-made samples first (every threshold
pinned), then end to end: the simulated backend on a manual clock through the
collector, as the monitor, ``--once`` and the exporter see it.
"""

from __future__ import annotations

import dataclasses

import pytest

from nvtopy.backends.base import Reading
from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.health.realwork import GpuWatch, looks_hung
from nvtopy.health.verdict import HealthInputs, HealthThresholds, assess
from nvtopy.model import GpuProcess, GpuSample, GpuState, GpuStatic, ProcessType, Severity
from nvtopy.sources.collector import Collector

T0 = 1_700_000_000.0
STATIC = GpuStatic(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3")
SM_WORDS = "busy at 100 % with 3 % of SMs active for 5 min: a deadlocked collective?"
POWER_WORDS = "busy at low power for 5 min: a deadlocked collective?"

# Busy, with 3 % of its SMs active, drawing plenty: only GPM tells that nothing is computed.
SPINNING = GpuSample(
    timestamp=T0, utilization_gpu_percent=100, sm_active_percent=3.0, power_draw_w=650.0, power_limit_w=700.0
)


def gpu(**changes: object) -> GpuSample:
    return dataclasses.replace(SPINNING, **changes)


def hang_after(sample: GpuSample, seconds: float = 300.0, thresholds: HealthThresholds | None = None) -> float | None:
    """The watch's suspected-hang seconds after ``seconds`` of ``sample`` (observed at the start and the end)."""
    watch = GpuWatch(thresholds)
    watch.observe(sample, [], T0)
    return watch.observe(sample, [], T0 + seconds).suspected_hang_seconds


# --------------------------------------------------------------------------- the rule, sample by sample


def test_the_default_sm_threshold() -> None:
    limits = HealthThresholds()
    assert limits.hang_sm_active_percent == 10.0
    assert (limits.hang_utilization_percent, limits.hang_power_share, limits.hang_seconds) == (95, 0.30, 300.0)


@pytest.mark.parametrize(
    ("util", "sm", "power", "hung"),
    [
        (100, 3.0, 650.0, True),  # SMs idle: hung whatever it draws (SM activity wins over power)
        (95, 9.9, 650.0, True),  # at the utilisation limit, just under 10 % of SMs
        (100, 10.0, 100.0, False),  # 10 % of SMs: working, even at low power (SM activity wins)
        (100, 70.0, 100.0, False),  # a busy GPU at low power is not flagged where GPM measures its SMs
        (94, 0.0, 100.0, False),  # not busy enough
        (0, 0.0, 70.0, False),  # idle
    ],
)
def test_sm_activity_decides_where_measured(util: int, sm: float, power: float, hung: bool) -> None:
    sample = gpu(utilization_gpu_percent=util, sm_active_percent=sm, power_draw_w=power)
    assert looks_hung(sample, HealthThresholds()) is hung
    assert (hang_after(sample) is not None) is hung


@pytest.mark.parametrize(
    ("power", "cap", "hung"),
    [
        (100.0, 700.0, True),  # under 30 % of the limit
        (210.0, 700.0, False),  # 30 %: real work
        (None, 700.0, None),  # neither SM activity nor power: cannot tell
        (100.0, None, None),
    ],
)
def test_power_decides_where_sm_activity_is_na(power: float | None, cap: float | None, hung: bool | None) -> None:
    sample = gpu(sm_active_percent=None, power_draw_w=power, power_limit_w=cap)
    assert looks_hung(sample, HealthThresholds()) is hung
    assert (hang_after(sample) is not None) is bool(hung)


def test_utilisation_na_tells_nothing_whatever_the_sm_activity() -> None:
    """Under MIG the driver reports no utilisation: as before, no hang clock starts."""
    sample = gpu(utilization_gpu_percent=None, sm_active_percent=0.0, power_draw_w=50.0)
    assert looks_hung(sample, HealthThresholds()) is None
    watch = GpuWatch()
    assert all(watch.observe(sample, [], T0 + t).suspected_hang_seconds is None for t in range(0, 1801, 30))


def test_the_sm_threshold_is_a_knob() -> None:
    limits = HealthThresholds(hang_sm_active_percent=20.0, hang_seconds=60.0)
    assert hang_after(gpu(sm_active_percent=15.0), 60.0, limits) == 60.0
    assert hang_after(gpu(sm_active_percent=15.0), 60.0) is None, "over the default 10 %"


def test_sm_activity_rising_ends_the_hang_and_its_clock() -> None:
    watch = GpuWatch()
    watch.observe(SPINNING, [], T0)
    assert watch.observe(SPINNING, [], T0 + 300).suspected_hang_seconds == 300.0
    working = gpu(sm_active_percent=60.0, power_draw_w=100.0)  # low power does not keep it going
    assert watch.observe(working, [], T0 + 310).suspected_hang_seconds is None
    assert watch.observe(SPINNING, [], T0 + 320).suspected_hang_seconds is None
    assert watch.observe(SPINNING, [], T0 + 620).suspected_hang_seconds == 300.0, "a new clock"


def test_the_clock_runs_on_when_the_evidence_changes() -> None:
    """The first GPM interval not measured yet (SM N/A) on a low-power GPU: power carries the running clock."""
    watch = GpuWatch()
    watch.observe(gpu(power_draw_w=100.0), [], T0)
    quiet = gpu(sm_active_percent=None, power_draw_w=100.0)
    assert watch.observe(quiet, [], T0 + 200).suspected_hang_seconds is None
    assert watch.observe(SPINNING, [], T0 + 300).suspected_hang_seconds == 300.0


def test_every_process_of_the_hung_gpu_is_flagged() -> None:
    rows = [
        GpuProcess(gpu_index=0, gpu_uuid="GPU-0", pid=p, type=ProcessType.COMPUTE, gpu_memory_bytes=1 << 30)
        for p in (1, 2)
    ]
    watch = GpuWatch()
    watch.observe(SPINNING, rows, T0)
    assert [r.flags for r in watch.observe(SPINNING, rows, T0 + 300).rows] == [("suspected-hang",)] * 2


# --------------------------------------------------------------------------- the finding's words


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({}, SM_WORDS),
        ({"sm_active_percent": 2.6}, SM_WORDS),  # rounded as every percentage shown
        ({"sm_active_percent": 0.2}, SM_WORDS.replace("3 %", "<1 %")),  # never a 0 that is not
        ({"sm_active_percent": 0.0}, SM_WORDS.replace("3 %", "0 %")),
        ({"utilization_gpu_percent": 97}, SM_WORDS.replace("100 %", "97 %")),
        ({"sm_active_percent": None}, POWER_WORDS),  # the evidence was power
    ],
)
def test_the_finding_names_its_evidence(changes: dict[str, object], text: str) -> None:
    health = assess(STATIC, gpu(**changes), HealthInputs(now=T0, suspected_hang_seconds=330.0))
    (finding,) = [f for f in health.findings if f.code == "suspected-hang"]
    assert finding.severity is Severity.WARN and health.verdict is Severity.WARN
    assert finding.text == text
    assert finding.action == "check the job's logs; py-spy dump its processes"
    assert health.suspected_hang_seconds == 330.0


def test_no_finding_without_a_hang() -> None:
    health = assess(STATIC, SPINNING, HealthInputs(now=T0))
    assert health.verdict is Severity.OK and not health.findings


# --------------------------------------------------------------------------- end to end on simulated GPUs


def run(backend, clock, minutes: float = 5.5, step: float = 30.0) -> list[GpuState]:
    """Collect every ``step`` seconds of the manual clock for ``minutes``; the last snapshot's GPUs."""
    collector = Collector(backend)
    snapshot = collector.collect()
    for _ in range(int(minutes * 60 / step)):
        clock.advance(step)
        snapshot = collector.collect()
    return list(snapshot.gpus)


def hang_finding(state: GpuState) -> str | None:
    texts = [f.text for f in state.health.findings if f.code == "suspected-hang"]
    return texts[0] if texts else None


def test_a_stuck_h100_is_flagged_by_its_sm_activity(sim, clock) -> None:
    backend = sim(gpus=4, seed=3, faults=parse_fault_specs(["stuck@2"], 4))
    assert "H100" in backend.model.name
    gpus = run(backend, clock, minutes=4.5)
    assert all(hang_finding(g) is None for g in gpus), "not before hang_seconds"
    gpus = run(backend, clock, minutes=6)
    stuck = gpus[2]
    assert stuck.sample.utilization_gpu_percent == 100
    assert stuck.sample.sm_active_percent is not None and stuck.sample.sm_active_percent < 10
    text = hang_finding(stuck)
    assert text is not None and text.startswith("busy at 100 % with ") and " % of SMs active for 6 min" in text
    assert stuck.health.verdict is Severity.WARN and stuck.health.suspected_hang_seconds == 360.0
    assert stuck.processes and all("suspected-hang" in p.flags for p in stuck.processes)
    for other in (gpus[0], gpus[1], gpus[3]):  # busy and working: their SMs are active
        assert hang_finding(other) is None and not any("suspected-hang" in p.flags for p in other.processes)


def frugal(backend: SimulatedBackend, index: int) -> SimulatedBackend:
    """Make GPU ``index`` of ``backend`` report 100 % utilisation at 80 W, whatever else it does."""
    read = backend.read_sample

    def reading(gpu: int, groups) -> Reading:
        answer = read(gpu, groups)
        if gpu == index:
            if "utilization" in groups:
                answer.values["utilization_gpu_percent"] = 100
            if "power" in groups:
                answer.values["power_draw_w"] = 80.0
        return answer

    backend.read_sample = reading  # type: ignore[method-assign]
    return backend


def test_a_busy_h100_at_low_power_is_not_flagged(sim, clock) -> None:
    """Its SMs are active, so low power (a memory-bound job, a power cap) is no hang; without GPM it would be."""
    gpus = run(frugal(sim(gpus=2, seed=3), 1), clock, minutes=6)
    busy = gpus[1]
    assert busy.sample.utilization_gpu_percent == 100 and busy.sample.power_draw_w == 80.0
    assert busy.sample.sm_active_percent is not None and busy.sample.sm_active_percent > 10
    assert hang_finding(busy) is None and busy.health.suspected_hang_seconds is None

    blind = frugal(sim(gpus=2, seed=3, faults=parse_fault_specs(["unsupported=gpm@1"], 2)), 1)
    assert hang_finding(run(blind, clock, minutes=6)[1]) == POWER_WORDS.replace("5 min", "6 min")


@pytest.mark.parametrize(
    ("model", "faults"),
    [
        ("NVIDIA A100-SXM4-80GB", ["stuck@2"]),  # before Hopper: GPM not supported
        (None, ["unsupported=gpm@2", "stuck@2"]),  # an H100 whose GPM cannot be read
    ],
)
def test_without_sm_activity_power_decides(sim, clock, model, faults) -> None:
    kwargs = {} if model is None else {"model": model}
    backend = sim(gpus=4, seed=3, faults=parse_fault_specs(faults, 4), **kwargs)
    gpus = run(backend, clock, minutes=6)
    stuck = gpus[2]
    assert stuck.sample.sm_active_percent is None and stuck.sample.why("sm_active_percent") is not None
    assert hang_finding(stuck) == POWER_WORDS.replace("5 min", "6 min")
    assert all("suspected-hang" in p.flags for p in stuck.processes)
    assert all(hang_finding(g) is None for g in gpus if g.index != 2)


def test_mig_is_unaffected(sim, clock) -> None:
    """Under MIG the driver reports no utilisation: no hang is suspected, whatever GPM says of the GPU."""
    backend = sim(gpus=4, seed=3, faults=parse_fault_specs(["mig=3@2", "stuck@2"], 4))
    gpus = run(backend, clock, minutes=12)
    stuck = gpus[2]
    assert stuck.mig and stuck.sample.utilization_gpu_percent is None
    assert stuck.sample.sm_active_percent is not None and stuck.sample.sm_active_percent < 10
    assert hang_finding(stuck) is None and stuck.health.suspected_hang_seconds is None
    assert not any("suspected-hang" in p.flags for p in stuck.processes)

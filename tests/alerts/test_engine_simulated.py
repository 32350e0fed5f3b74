"""The engine on the simulated backend's snapshots, faults injected as ``--demo-fault`` does, on a manual clock.

What the hand-made tests cannot show: that the engine reads what the collector and the health
layer really publish (the Xid counts of an event log, the lost flag, the remapping readings,
the real-work flags that need time) -- and that a healthy simulation raises none of the faults.
"""

from __future__ import annotations

import pytest

from nvtopy.alerts.engine import AlertEngine
from nvtopy.alerts.events import AlertEvent, Transition
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import GpuEvent
from nvtopy.sources.collector import Collector
from nvtopy.sources.events import EventLog

pytestmark = pytest.mark.timeout(120)

FAULT_RULES = {
    "gpu-xid",
    "gpu-remap-pending",
    "gpu-remap-failed",
    "gpu-not-responding",
    "gpu-lost",
    "gpu-idle-held",
    "gpu-suspected-hang",
    "gpu-temperature-near-slowdown",
    "gpu-health-worse",
}


def run_for(sim, clock, seconds: float, step: float = 15.0, *, xids=(), **kwargs) -> list[AlertEvent]:
    """Every event of a simulation polled every ``step`` s for ``seconds`` (Xids logged at the start)."""
    backend = sim(**kwargs)
    log = EventLog()
    collector = Collector(backend, events=log)
    log.add([GpuEvent(clock(), gpu, xid=xid) for gpu, xid in xids])
    engine = AlertEngine()
    events: list[AlertEvent] = []
    elapsed = 0.0
    while elapsed <= seconds:
        events += engine.observe(collector.collect())
        clock.advance(step)
        elapsed += step
    return events


def fired(events: list[AlertEvent]) -> dict[str, set[int | None]]:
    out: dict[str, set[int | None]] = {}
    for event in events:
        if event.transition is Transition.FIRING:
            out.setdefault(event.rule_id, set()).add(event.gpu_index)
    return out


def test_injected_faults_fire_their_rules_on_their_gpus(sim, clock):
    faults = parse_fault_specs(
        ["lost@1", "remapped=0/3/1/1@2", "stuck@3", "hot@3", "idle-held@0", "throttle=0x4@2"], gpus=4
    )
    events = run_for(sim, clock, 40 * 60, gpus=4, faults=faults, xids=[(0, 48), (2, 13)])
    got = fired(events)
    assert got["gpu-lost"] == {1}
    assert got["gpu-remap-pending"] == {2} and got["gpu-remap-failed"] == {2}
    assert got["gpu-suspected-hang"] == {3}
    assert got["gpu-temperature-near-slowdown"] == {3}
    assert got["gpu-idle-held"] == {0}
    assert got["gpu-power-capped"] == {2}
    assert got["gpu-xid"] == {0, 2}
    xid = {e.xid: e for e in events if e.rule_id == "gpu-xid" and e.transition is Transition.FIRING}
    assert xid[48].severity.value == "critical" and xid[13].severity.value == "warning"
    assert "gpu-xid" in {e.rule_id for e in events if e.transition is Transition.CLEARED}, "after its 10 min window"
    assert {0, 1, 2}.issubset(got["gpu-health-worse"])
    assert "gpu-not-responding" not in got, "every simulated GPU answered"


def test_a_healthy_simulation_raises_no_fault(sim, clock):
    events = run_for(sim, clock, 20 * 60, gpus=4)
    assert not FAULT_RULES & set(fired(events)), [e.summary for e in events]


def test_idle_simulated_gpus_are_free_and_busy_ones_are_not(sim, clock):
    free = fired(run_for(sim, clock, 60, step=5, gpus=2, processes_per_gpu=0))
    assert free.get("gpu-free") == {0, 1}
    busy = fired(run_for(sim, clock, 60, step=5, gpus=2, steady=True))
    assert "gpu-free" not in busy


def test_the_viewers_ended_processes_are_told_and_only_theirs(sim, clock):
    events = run_for(sim, clock, 3 * 3600, step=30, gpus=4, viewer="alice")
    ended = [e for e in events if e.rule_id == "process-ended"]
    assert ended, "the simulation's jobs end over three hours"
    assert {e.user for e in ended} == {"alice"}

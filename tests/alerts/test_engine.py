"""The local alert engine on hand-made snapshots: every local rule must fire, and must not, when it says.

Times are the snapshots' own (``NOW + t``): each test states the instants it feeds, and
the hysteresis (for, clear, cooldown) is checked at the second either side of its edge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from nvtopy.alerts.catalog import RULES_BY_ID, AlertSeverity
from nvtopy.alerts.engine import AlertEngine, gpu_free
from nvtopy.alerts.events import Transition
from nvtopy.alerts.settings import LOCAL_RULES, AlertConfigError, alert_settings
from nvtopy.model import GpuEvent, GpuHealth, GpuSample, GpuState, OwnerKind, ProcessOwner, Reason, Severity, Snapshot

from ..builders import (
    GIB,
    MIB,
    NOW,
    gpu_process,
    gpu_sample,
    gpu_state,
    gpu_static,
    host_info,
    host_line,
    snapshot_of,
)

pytestmark = pytest.mark.timeout(60)

FIRING, CLEARED = Transition.FIRING, Transition.CLEARED


def engine(**tables: dict[str, object]) -> AlertEngine:
    """An engine with these ``[alerts.RULE]`` tables (rule ids with ``_`` for ``-``)."""
    return AlertEngine(alert_settings({rule.replace("_", "-"): table for rule, table in tables.items()}))


def only(rule_id: str, **table: object) -> AlertEngine:
    """An engine evaluating ``rule_id`` alone (the others disabled), with ``table``'s settings."""
    tables: dict[str, dict[str, object]] = {r.id: {"enabled": False} for r in LOCAL_RULES if r.id != rule_id}
    tables[rule_id] = dict(table)
    return AlertEngine(alert_settings(tables))


def at(t: float, *gpus: GpuState, user: str | None = "alice") -> Snapshot:
    return snapshot_of(*gpus, timestamp=NOW + t, host=host_info(user=user))


def gpu(index: int = 0, *processes: object, health: GpuHealth | None = None, **sample: object) -> GpuState:
    """A healthy busy GPU ``index`` (the builders' H100) with these sample fields and processes."""
    return gpu_state(
        index,
        *processes,  # type: ignore[arg-type]
        sample=gpu_sample(**sample),
        **({"health": health} if health is not None else {}),
    )


def feed(eng: AlertEngine, snapshots: Sequence[Snapshot]) -> list[tuple[float, Transition, str]]:
    """Every event of ``snapshots``, as (seconds after NOW, transition, key)."""
    out = []
    for snapshot in snapshots:
        out += [(e.at - NOW, e.transition, e.key) for e in eng.observe(snapshot)]
    return out


KEY0 = "node/GPU-0"


# ---------------------------------------------------------------------------------------------- gpu-xid


def xid_health(*arrivals: tuple[int, float]) -> GpuHealth:
    """A GPU's health after these (xid, seconds after NOW) events: the timeline and the counts since start."""
    counts: dict[int, int] = {}
    for xid, _ in arrivals:
        counts[xid] = counts.get(xid, 0) + 1
    events = tuple(GpuEvent(NOW + t, 0, xid=xid) for xid, t in arrivals)
    return GpuHealth(events=events, xid_counts=tuple(sorted(counts.items())))


def test_xid_fires_at_once_with_its_own_severity_meaning_and_action():
    eng = only("gpu-xid")
    assert eng.observe(at(0, gpu())) == []
    (event,) = eng.observe(at(5, gpu(health=xid_health((79, 4)))))
    assert (event.transition, event.key, event.xid) == (FIRING, f"gpu-xid/{KEY0}/79", 79)
    assert event.severity is AlertSeverity.CRITICAL
    assert event.summary == "Xid 79 on GPU 0 of node: GPU has fallen off the bus"
    assert event.action == "reboot the node; check power, cooling and the slot."
    assert event.at == NOW + 5
    (minor,) = eng.observe(at(6, gpu(health=xid_health((79, 4), (13, 6)))))
    assert minor.xid == 13 and minor.severity is AlertSeverity.WARNING, "an application's Xid is a warning"


def test_xid_clears_after_its_window_and_clear_time_and_a_new_one_fires_again():
    eng = only("gpu-xid", window_s=100, clear=10, cooldown=0)
    health = xid_health((48, 0))
    assert [t for t, _, _ in feed(eng, [at(0, gpu(health=health))])] == [0]
    assert feed(eng, [at(t, gpu(health=health)) for t in (50, 100, 101, 110)]) == []
    assert feed(eng, [at(111, gpu(health=health))]) == [(111, CLEARED, f"gpu-xid/{KEY0}/48")]
    again = xid_health((48, 0), (48, 200))
    assert feed(eng, [at(200, gpu(health=again))]) == [(200, FIRING, f"gpu-xid/{KEY0}/48")]


def test_xid_does_not_fire_for_an_old_xid_nor_again_for_the_same_count():
    eng = only("gpu-xid")
    old = xid_health((31, -3600))  # came an hour before the engine's first snapshot: out of the 10 min window
    assert feed(eng, [at(t, gpu(health=old)) for t in (0, 10, 20)]) == []
    eng = only("gpu-xid", cooldown=0, clear=0, window_s=5)
    health = xid_health((31, 0))
    assert len(feed(eng, [at(0, gpu(health=health))])) == 1
    assert [tr for _, tr, _ in feed(eng, [at(t, gpu(health=health)) for t in range(1, 30)])] == [CLEARED]


# ------------------------------------------------------------------------- remap pending, remap failed


@pytest.mark.parametrize(("rule_id", "field"), [("gpu-remap-pending", "remapped_rows_pending"),
                                               ("gpu-remap-failed", "remapped_rows_failure")])  # fmt: skip
def test_remapping_flags_fire_and_clear(rule_id, field):
    eng = only(rule_id, clear=30)
    (event,) = eng.observe(at(0, gpu(**{field: True})))
    assert event.rule_id == rule_id and event.severity is RULES_BY_ID[rule_id].severity
    assert "GPU 0 of node" in event.summary
    assert feed(eng, [at(10, gpu(**{field: False})), at(39, gpu(**{field: False}))]) == []
    assert feed(eng, [at(40, gpu(**{field: False}))]) == [(40, CLEARED, f"{rule_id}/{KEY0}")]


@pytest.mark.parametrize("field", ["remapped_rows_pending", "remapped_rows_failure"])
def test_remapping_flags_unknown_or_false_do_not_fire(field):
    rule_id = "gpu-remap-pending" if field == "remapped_rows_pending" else "gpu-remap-failed"
    eng = only(rule_id)
    unknown = gpu(**{field: None, "unavailable": {field: Reason.NOT_SUPPORTED}})
    assert feed(eng, [at(0, gpu(**{field: False})), at(10, unknown), at(100, unknown)]) == []


def test_a_firing_alert_is_not_cleared_by_an_unknown_reading():
    eng = only("gpu-remap-pending", clear=10)
    assert len(eng.observe(at(0, gpu(remapped_rows_pending=True)))) == 1
    unknown = gpu(remapped_rows_pending=None)
    assert feed(eng, [at(t, unknown) for t in (5, 100, 1000)]) == [], "N/A is not 'back to 0'"
    assert list(eng.firing_keys("gpu-remap-pending")) == [f"gpu-remap-pending/{KEY0}"]
    lost = gpu(remapped_rows_pending=False, lost=True)
    assert feed(eng, [at(t, lost) for t in (1001, 2000)]) == [], "a lost GPU's readings are not readings"
    assert feed(eng, [at(2001, gpu()), at(2011, gpu())]) == [(2011, CLEARED, f"gpu-remap-pending/{KEY0}")]


# --------------------------------------------------------------------------- not responding, lost


def test_not_responding_fires_after_its_for_time_not_before():
    eng = only("gpu-not-responding")
    stuck = [at(t, gpu(health=GpuHealth(responding=False, stalled_seconds=t + 2))) for t in (0, 30, 59, 60)]
    out = feed(eng, stuck[:3])
    assert out == [], "under a minute"
    (event,) = eng.observe(stuck[3])
    assert event.summary == "GPU 0 of node does not respond: a driver call has hung for 1m 2s"
    assert event.value == "1m 2s"


def test_a_responding_gpu_is_not_reported_not_responding():
    eng = only("gpu-not-responding", **{"for": 0})
    assert feed(eng, [at(t, gpu()) for t in (0, 100, 200)]) == []


def test_lost_fires_at_once_and_a_gpu_that_answers_does_not():
    eng = only("gpu-lost")
    assert feed(eng, [at(0, gpu(1)), at(5, gpu(1))]) == []
    lost = gpu_state(1, sample=GpuSample(NOW, lost=True))
    assert feed(eng, [at(6, lost)]) == [(6, FIRING, "gpu-lost/node/GPU-1")]


# ------------------------------------------------------------------------------------ idle-held


def idle(pid: int, minutes: float | None, **changes: object) -> object:
    seconds = None if minutes is None else minutes * 60
    return gpu_process(0, pid, gpu_memory_bytes=8 * GIB, idle_seconds=seconds, flags=("idle-held",), **changes)


def test_idle_held_fires_at_its_minutes_and_names_the_process():
    eng = only("gpu-idle-held")
    assert feed(eng, [at(0, gpu(0, idle(42, 29.9)))]) == []
    (event,) = eng.observe(at(6, gpu(0, idle(42, 30))))
    assert (event.key, event.pid, event.user) == (f"gpu-idle-held/{KEY0}/42", 42, "alice")
    assert event.summary == "Process 42 of alice has held GPU 0 of node without computing for 30m 0s"
    assert "python job42.py" in event.description


def test_idle_held_does_not_fire_for_a_working_or_unknown_process_and_clears_when_it_ends():
    eng = only("gpu-idle-held", idle_minutes=1, clear=5)
    working = gpu_process(0, 42, gpu_memory_bytes=8 * GIB, sm_percent=90)
    unknown = gpu_process(0, 42, gpu_memory_bytes=None, idle_seconds=None)
    assert feed(eng, [at(0, gpu(0, working)), at(100, gpu(0, unknown))]) == []
    assert len(feed(eng, [at(200, gpu(0, idle(42, 2)))])) == 1
    assert feed(eng, [at(201, gpu()), at(205, gpu())]) == [], "gone: clear for 4 s of 5"
    assert feed(eng, [at(206, gpu())]) == [(206, CLEARED, f"gpu-idle-held/{KEY0}/42")]


# ----------------------------------------------------------------------------------- suspected hang


def test_suspected_hang_fires_with_the_health_layers_seconds():
    eng = only("gpu-suspected-hang")
    assert feed(eng, [at(0, gpu())]) == []
    (event,) = eng.observe(at(1, gpu(health=GpuHealth(suspected_hang_seconds=330.0))))
    assert event.summary == "GPU 0 of node looks busy but computes nothing, for 5m 30s"


def test_suspected_hang_does_not_fire_while_the_health_layer_sees_none():
    eng = only("gpu-suspected-hang")
    busy = gpu(utilization_gpu_percent=100, sm_active_percent=3.0)  # one sample: the health layer's clock decides
    assert feed(eng, [at(t, busy) for t in (0, 600, 1200)]) == []


# -------------------------------------------------------------------------------- temperature


def test_temperature_near_that_gpus_slowdown_fires_after_for_time():
    eng = only("gpu-temperature-near-slowdown")  # for 5 min, margin 5 C, the builders' H100 slows down at 87 C
    warm = [at(t, gpu(temperature_c=83)) for t in (0, 299)]
    assert feed(eng, warm) == []
    (event,) = eng.observe(at(300, gpu(temperature_c=84)))
    assert event.summary == "GPU 0 of node is at 84 °C, within 5 °C of its slowdown temperature"
    assert event.value == "84 °C"


def test_temperature_with_no_known_slowdown_never_fires_and_under_the_margin_does_not():
    eng = only("gpu-temperature-near-slowdown", **{"for": 0})
    no_threshold = gpu_state(0, static=gpu_static(0, temperature_slowdown_c=None), sample=gpu_sample(temperature_c=120))
    assert feed(eng, [at(t, no_threshold) for t in (0, 600)]) == [], "never a guessed threshold"
    assert feed(eng, [at(t, gpu(temperature_c=81)) for t in (700, 1300)]) == [], "81 is 6 under 87"
    newer = gpu_state(0, static=gpu_static(0, temperature_slowdown_c=95), sample=gpu_sample(temperature_c=88))
    assert feed(eng, [at(2000, newer)]) == [], "a model with a higher threshold is not warm at 88"


def test_an_unknown_temperature_resets_the_for_clock():
    eng = only("gpu-temperature-near-slowdown", **{"for": 100})
    hot, unknown = gpu(temperature_c=86), gpu(temperature_c=None)
    assert feed(eng, [at(0, hot), at(60, unknown), at(120, hot), at(219, hot)]) == []
    assert [t for t, _, _ in feed(eng, [at(220, hot)])] == [220], "held for 100 s since it was known again"


# ------------------------------------------------------------------------------------ power cap


def test_power_capped_fires_after_fifteen_minutes_of_power_cap_or_brake():
    eng = only("gpu-power-capped")
    capped = [at(t, gpu(throttle_reasons=("sw_power_cap",))) for t in (0, 899)]
    assert feed(eng, capped) == []
    assert len(feed(eng, [at(900, gpu(throttle_reasons=("hw_power_brake_slowdown",)))])) == 1


def test_other_throttling_or_unknown_reasons_are_no_power_cap():
    eng = only("gpu-power-capped", **{"for": 0})
    others = [gpu(throttle_reasons=("hw_slowdown", "gpu_idle")), gpu(throttle_reasons=None), gpu()]
    assert feed(eng, [at(t, g) for t, g in zip((0, 10, 20), others, strict=True)]) == []


# ---------------------------------------------------------------------------------- health worse


def test_health_worse_fires_on_fail_after_a_minute():
    eng = only("gpu-health-worse")
    fail = GpuHealth(verdict=Severity.FAIL)
    assert feed(eng, [at(0, gpu(health=fail)), at(59, gpu(health=fail))]) == []
    (event,) = eng.observe(at(60, gpu(health=fail)))
    assert event.summary == "GPU 0 of node is unhealthy: health verdict 2 (1 WARN, 2 FAIL)" and event.value == "FAIL"


def test_health_worse_does_not_fire_on_warn_unless_the_threshold_says_so():
    warn = GpuHealth(verdict=Severity.WARN)
    assert feed(only("gpu-health-worse"), [at(t, gpu(health=warn)) for t in (0, 100)]) == []
    assert len(feed(only("gpu-health-worse", verdict_rank=1), [at(t, gpu(health=warn)) for t in (0, 100)])) == 1


# ------------------------------------------------------------------------------------- gpu free


def free_gpu(index: int = 0, used_mib: float = 100) -> GpuState:
    return gpu(index, memory_used_bytes=int(used_mib * MIB), utilization_gpu_percent=0)


def test_gpu_free_fires_after_thirty_seconds_with_no_process_and_little_memory():
    eng = only("gpu-free")
    assert feed(eng, [at(0, free_gpu()), at(29, free_gpu())]) == []
    (event,) = eng.observe(at(30, free_gpu()))
    assert event.summary == "GPU 0 of node is free" and event.action == "Start your job on it (CUDA_VISIBLE_DEVICES=0)."
    assert eng.firing_gpus("gpu-free") == (0,)
    busy = gpu(0, gpu_process(0, 7))
    assert feed(eng, [at(31, busy), at(90, busy)]) == [], "taken for 59 s of the 60 clear_s"
    assert feed(eng, [at(91, busy)]) == [(91, CLEARED, f"gpu-free/{KEY0}")]


def test_a_gpu_with_a_process_much_memory_or_unknown_readings_is_not_free():
    eng = only("gpu-free", **{"for": 0})
    cases = [
        gpu(0, gpu_process(0, 7)),  # a process
        free_gpu(0, used_mib=600),  # 600 MiB used, over 512
        gpu_state(0, sample=gpu_sample(memory_used_bytes=0), processes_unavailable=Reason.NO_PERMISSION),
        gpu(0, memory_used_bytes=None),  # memory N/A
        gpu_state(0, sample=GpuSample(NOW, lost=True)),
    ]
    assert feed(eng, [at(t, g) for t, g in enumerate(cases)]) == []
    assert [gpu_free(g, 512) for g in cases] == [False, False, None, None, None]


def test_a_free_gpu_then_lost_still_fires_but_is_not_free_now():
    eng = only("gpu-free", **{"for": 0, "clear": 0})
    assert len(feed(eng, [at(0, free_gpu(0), free_gpu(1))])) == 2
    lost = gpu_state(1, sample=GpuSample(NOW, lost=True))
    assert feed(eng, [at(1, free_gpu(0), lost)]) == [], "N/A clears nothing"
    assert eng.firing_gpus("gpu-free") == (0, 1)
    assert eng.firing_gpus("gpu-free", holding=True) == (0,), "--once-free's answer: free at this snapshot"


def test_gpu_free_takes_its_memory_threshold_from_the_settings():
    eng = only("gpu-free", **{"for": 0}, memory_mib=1024)
    assert len(feed(eng, [at(0, free_gpu(0, used_mib=600))])) == 1


# --------------------------------------------------------------------------------- process ended


def test_my_process_ending_fires_once_and_never_clears():
    eng = only("process-ended")
    mine = gpu_process(0, 42, command="python train.py")
    assert feed(eng, [at(0, gpu(0, mine)), at(1, gpu(0, mine))]) == []
    (event,) = eng.observe(at(2, gpu(0)))
    assert event.summary == "Process 42 (python train.py) on GPU 0 of node ended" and event.user == "alice"
    assert feed(eng, [at(t, gpu(0)) for t in range(3, 500, 60)]) == [], "a one-shot: no cleared"
    assert eng.firing() == ()


def test_other_users_processes_ending_do_not_fire_unless_the_scope_says_everyone():
    bobs = gpu_process(0, 43, user="bob")
    assert feed(only("process-ended"), [at(0, gpu(0, bobs)), at(1, gpu(0))]) == []
    assert len(feed(only("process-ended", users=["*"]), [at(0, gpu(0, bobs)), at(1, gpu(0))])) == 1
    assert feed(only("process-ended"), [at(0, gpu(0, bobs), user=None), at(1, gpu(0), user=None)]) == [], (
        "current user unknown: nobody's, never everyone's"
    )


def test_a_process_list_that_cannot_be_read_ends_no_process():
    eng = only("process-ended")
    mine = gpu_process(0, 42)
    unreadable = gpu_state(0, sample=gpu_sample(), processes_unavailable=Reason.NO_PERMISSION)
    assert feed(eng, [at(0, gpu(0, mine)), at(1, unreadable), at(2, gpu(0, mine))]) == []
    lost = gpu_state(0, sample=GpuSample(NOW, lost=True))
    assert feed(eng, [at(3, lost)]) == [], "a lost GPU lists nobody: nobody ended"


# ------------------------------------------------------------------------------- hysteresis, scope


def test_cooldown_holds_a_second_firing_back():
    eng = only("gpu-lost", clear=0, cooldown=100)
    lost, fine = gpu_state(0, sample=GpuSample(NOW, lost=True)), gpu()
    out = feed(eng, [at(0, lost), at(1, fine), at(2, lost), at(99, lost)])
    assert out == [(0, FIRING, f"gpu-lost/{KEY0}"), (1, CLEARED, f"gpu-lost/{KEY0}")]
    assert feed(eng, [at(100, lost)]) == [(100, FIRING, f"gpu-lost/{KEY0}")]


def test_a_gpu_scope_leaves_the_other_gpus_out():
    eng = only("gpu-lost", gpus=[1, "GPU-2"])
    lost = [gpu_state(i, sample=GpuSample(NOW, lost=True)) for i in range(3)]
    assert sorted(k for _, _, k in feed(eng, [at(0, *lost)])) == ["gpu-lost/node/GPU-1", "gpu-lost/node/GPU-2"]


def test_a_user_or_owner_scope_keeps_only_their_processes():
    slurm = ProcessOwner(OwnerKind.SLURM, job="1234", step="0")
    alices, bobs = idle(42, 40), idle(43, 40, user="bob", owner=slurm)
    by_user = feed(only("gpu-idle-held", users=["b*"]), [at(0, gpu(0, alices, bobs))])
    assert [k for _, _, k in by_user] == [f"gpu-idle-held/{KEY0}/43"]
    by_owner = feed(only("gpu-idle-held", owners=["slurm 1234.0"]), [at(0, gpu(0, alices, bobs))])
    assert [k for _, _, k in by_owner] == [f"gpu-idle-held/{KEY0}/43"]
    assert feed(only("gpu-idle-held", owners=["slurm 99"]), [at(0, gpu(0, alices, bobs))]) == []


def test_a_gpu_rule_scoped_to_users_watches_the_gpus_running_their_processes():
    eng = only("gpu-remap-pending", users=["alice"])
    pending = {"remapped_rows_pending": True}
    assert feed(eng, [at(0, gpu(0, gpu_process(0, 1, user="bob"), **pending))]) == []
    assert len(feed(eng, [at(1, gpu(0, gpu_process(0, 2), **pending))])) == 1


def test_a_disabled_rule_is_not_evaluated():
    eng = engine(gpu_lost={"enabled": False})
    lost = gpu_state(0, sample=GpuSample(NOW, lost=True))
    assert "gpu-lost" not in {e.rule_id for e in eng.observe(at(0, lost))}


def test_a_clock_gone_back_neither_fires_nor_clears_early():
    eng = only("gpu-lost", **{"for": 10})
    lost = gpu_state(0, sample=GpuSample(NOW, lost=True))
    assert feed(eng, [at(100, lost), at(0, lost), at(-500, lost), at(109, lost)]) == []
    assert len(feed(eng, [at(110, lost)])) == 1
    assert eng.observe(snapshot_of(lost, timestamp=float("nan"))) == []


def test_every_event_is_an_alert_event_with_the_catalogs_words():
    eng = engine()
    sick = gpu(
        0,
        idle(42, 40),
        health=dataclasses.replace(xid_health((79, 0)), verdict=Severity.FAIL, suspected_hang_seconds=400.0),
        remapped_rows_pending=True,
        remapped_rows_failure=True,
        temperature_c=86,
        throttle_reasons=("sw_power_cap",),
    )
    stuck = gpu_state(1, sample=GpuSample(NOW, lost=True), health=GpuHealth(responding=False, stalled_seconds=5))
    gone = host_line(3, "node7", "lost: Connection refused; reconnecting in 8 s")
    fired = {e.rule_id for t in range(0, 1000, 10) for e in eng.observe(at(t, sick, stuck, free_gpu(2), gone))}
    fired |= {e.rule_id for e in eng.observe(at(1000, sick, stuck, gpu(2), gone))}
    expected = {r.id for r in LOCAL_RULES} - {"process-ended"}
    assert fired == expected
    for event in eng.firing():
        assert event.summary and event.description and event.action and "{" not in event.summary + event.action


# ---------------------------------------------------------------------- a fleet view's host lines


def test_a_host_that_cannot_be_read_is_host_unreachable_never_a_lost_gpu():
    """A fleet view marks a host it cannot read as a lost line with its words: not a GPU off the bus."""
    eng = engine()
    gone = host_line(0, "node7", "lost: me@node7: Permission denied (publickey).\n-- needs a key")
    said = [e for t in range(0, 200, 10) for e in eng.observe(at(t, gone, gpu(1)))]
    assert [(e.rule_id, e.transition) for e in said] == [("host-unreachable", FIRING)]
    event = said[0]
    assert event.at == NOW + 120  # its for: 2 min, as exporter-down's
    assert event.key == "host-unreachable/node7" and event.host == "node7" and event.gpu_index is None
    assert event.summary == "node7 cannot be read: lost: me@node7: Permission denied (publickey). -- needs a key"
    assert "ssh node7 true" in event.action and event.severity is AlertSeverity.CRITICAL
    assert "gpu-lost" not in {e.rule_id for e in eng.firing()}
    back = eng.observe(at(200, gpu(0), gpu(1))) + eng.observe(at(261, gpu(0), gpu(1)))
    assert [(e.rule_id, e.transition) for e in back] == [("host-unreachable", CLEARED)]


def test_a_host_connecting_or_stale_raises_nothing():
    eng = engine()
    lines = (
        host_line(0, "a", "connecting (5 s)", lost=False),
        host_line(1, "b", "stale: no snapshot for 9 s", lost=False),
    )
    assert [e for t in range(0, 600, 10) for e in eng.observe(at(t, *lines))] == []


def test_a_gpus_alert_stays_firing_while_its_host_cannot_be_read():
    """Unknown is never "back to 0": the GPU's line is missing (its host's line stands in), so nothing clears."""
    eng = only("gpu-health-worse")
    sick = gpu(0, health=GpuHealth(verdict=Severity.FAIL))
    assert [e.transition for t in (0, 60) for e in eng.observe(at(t, sick))] == [FIRING]
    stale = gpu_state(0, sample=GpuSample(NOW), note="stale: no snapshot for 9 s")  # its identity, no figures
    gone = host_line(0, "node", "lost: silent for 10 s")
    assert [e for t in range(70, 1000, 10) for e in eng.observe(at(t, stale if t < 500 else gone))] == []
    assert [e.rule_id for e in eng.firing()] == ["gpu-health-worse"]


def test_a_stale_hosts_processes_did_not_end():
    """A stale line keeps the GPU's identity and shows no process: not "your process ended"."""
    eng = only("process-ended")
    mine = gpu(0, gpu_process(4242, user="alice"))
    stale = gpu_state(0, sample=GpuSample(NOW), note="stale: no snapshot for 9 s")
    assert eng.observe(at(0, mine)) == [] and eng.observe(at(1, stale)) == [] and eng.observe(at(2, mine)) == []


def test_one_alert_a_host_and_its_words_are_one_safe_line():
    eng = only("host-unreachable", **{"for": 0})
    long = "lost: " + "\x1b[31mred\x07 " * 40
    said = eng.observe(at(0, host_line(0, "n", long), host_line(1, "n", "lost: again"), host_line(2, "m", "lost: x")))
    assert [e.key for e in said] == ["host-unreachable/n", "host-unreachable/m"]
    reason = said[0].summary.removeprefix("n cannot be read: ")
    assert reason.isprintable() and len(reason) == 160 and reason.endswith("…")


def test_host_unreachable_takes_no_scope():
    with pytest.raises(AlertConfigError, match=r"host-unreachable is about hosts.*takes no gpus"):
        alert_settings({"host-unreachable": {"gpus": [0]}})

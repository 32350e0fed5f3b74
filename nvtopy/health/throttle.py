"""Throttling in plain words: why the clocks are low, and whether that is a problem.

NVML reports a bit mask of "clock event reasons" (decoded into names by
:func:`nvtopy.model.decode_throttle_reasons`). Users ask "why are my clocks
low?" (gpustat#135): most reasons are benign -- the GPU is idle, application
clocks are set, sync boost holds a group together, the board is at its power
cap under full load -- and a few mean the GPU cannot run at the speed it
should: a hardware slowdown, thermal slowdown, the power brake. This module
says which, with the SM clock as a share of its maximum, so a reader sees the
cost at a glance: "HW slowdown: SM at 45 % of max". A reason whose clock is
still at its maximum costs nothing yet, and says so: "power cap active; SM
clock still at max" (not "power cap: SM at 100 % of max", which read as a
contradiction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["BENIGN", "HARMFUL", "REASON_WORDS", "ThrottleSummary", "summarize_throttle"]

REASON_WORDS: dict[str, str] = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "application clocks",
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "thermal slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "power brake",
    "display_clock_setting": "display clocks",
}
"""The words for each NVML clock-event reason (an unknown bit keeps its hex name)."""

HARMFUL = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
"""Reasons that cost performance the GPU should have: heat, a failing power supply, an external brake."""

BENIGN = frozenset(REASON_WORDS) - HARMFUL


class ThrottleSummary(NamedTuple):
    """Throttling of one GPU: a sentence, whether it hurts, and the SM clock share behind it."""

    text: str  # "HW slowdown, thermal slowdown: SM at 45 % of max"; "idle"
    harmful: bool
    sm_share_percent: int | None  # the SM clock as a share of its maximum


def summarize_throttle(
    reasons: Sequence[str] | None, clock_sm_mhz: int | None, clock_sm_max_mhz: int | None
) -> ThrottleSummary | None:
    """Throttling in words; None when nothing slows the GPU (or the reasons are unknown).

    Harmful reasons come first and carry the SM clock share; benign ones alone
    read as what they are ("idle", "power cap"), without alarm. The share is said
    only when the clock is below its maximum: "power cap: SM at 90 % of max", but
    "power cap active; SM clock still at max".
    """
    if not reasons:
        return None
    harmful = [r for r in reasons if r in HARMFUL]
    others = [r for r in reasons if r not in HARMFUL]
    share = None
    if clock_sm_mhz is not None and clock_sm_max_mhz:
        share = round(100 * clock_sm_mhz / clock_sm_max_mhz)
    names = [REASON_WORDS.get(r, r) for r in (harmful or others)]
    text = ", ".join(names)
    if share is not None and (harmful or "gpu_idle" not in others):
        # At its maximum the clock has lost nothing (yet): the reason is active, not a cost.
        text += " active; SM clock still at max" if share >= 100 else f": SM at {share} % of max"
    return ThrottleSummary(text, bool(harmful), share)

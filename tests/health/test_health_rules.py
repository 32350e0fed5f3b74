"""The health rules, table by table: the Xid catalogue, throttling in words, the verdict and the real-work flags.

Pure functions and one tracker over real model instances (no backend, no clock:
time is a plain float), so every threshold can be pinned exactly.
"""

from __future__ import annotations

import dataclasses

import pytest

from nvtopy.health.realwork import GpuWatch
from nvtopy.health.throttle import summarize_throttle
from nvtopy.health.verdict import (
    BUSY_UTILIZATION,
    RETIRED_PAGES_LIMIT,
    HealthInputs,
    HealthThresholds,
    assess,
    memory_findings,
    pcie_downgrade,
    pcie_link,
    worst,
)
from nvtopy.health.xid import XID_CATALOGUE, describe_xid
from nvtopy.health.xid_window import XidWindow
from nvtopy.model import GpuEvent, GpuProcess, GpuSample, GpuStatic, NvLink, Severity

from ..builders import gpu_process

GIB = 1 << 30
T0 = 1_700_000_000.0
OK, WARN, FAIL = Severity.OK, Severity.WARN, Severity.FAIL

STATIC = GpuStatic(
    index=0,
    uuid="GPU-0",
    name="NVIDIA H100 80GB HBM3",
    memory_total_bytes=80 * GIB,
    clock_sm_max_mhz=1980,
    temperature_slowdown_c=87,
    temperature_shutdown_c=92,
    pcie_link_gen_max=5,
    pcie_link_width_max=16,
    nvlink_count=4,
)

HEALTHY = GpuSample(
    timestamp=T0,
    memory_used_bytes=10 * GIB,
    memory_free_bytes=70 * GIB,
    utilization_gpu_percent=80,
    temperature_c=60,
    power_draw_w=500.0,
    power_limit_w=700.0,
    clock_sm_mhz=1980,
    ecc_mode=True,
    ecc_corrected_volatile=3,
    ecc_uncorrected_volatile=0,
    throttle_reasons=(),
    remapped_rows_corrected=0,
    remapped_rows_uncorrected=0,
    remapped_rows_pending=False,
    remapped_rows_failure=False,
    retired_pages_sbe=0,
    retired_pages_dbe=0,
    retired_pages_pending=False,
    pcie_link_gen=5,
    pcie_link_width=16,
    pcie_replay_counter=0,
    nvlinks=tuple(NvLink(link=n, active=True, errors=0) for n in range(4)),
)


def sample(**changes: object) -> GpuSample:
    return dataclasses.replace(HEALTHY, **changes)


def inputs(**changes: object) -> HealthInputs:
    """The inputs at T0; ``events`` are counted into the Xid window as the event log counts them."""
    if "events" in changes and "recent_xids" not in changes:
        window = XidWindow()
        for event in changes["events"]:  # type: ignore[attr-defined]
            if event.xid is not None:
                window.add(event.timestamp, event.xid)
        changes["recent_xids"] = window.recent(T0)
    return HealthInputs(now=T0, **changes)  # type: ignore[arg-type]


def xid(number: int, age: float = 0.0) -> GpuEvent:
    return GpuEvent(timestamp=T0 - age, gpu_index=0, xid=number)


def codes(health) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.code for f in health.findings]


def only(health, code: str):  # type: ignore[no-untyped-def]
    """The one finding with ``code`` (and that it is the only one)."""
    assert codes(health) == [code], health.findings
    return health.findings[0]


# --------------------------------------------------------------------------------------------- Xid catalogue

FREQUENT_XIDS = (13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120)


@pytest.mark.parametrize("number", FREQUENT_XIDS)
def test_frequent_xids_are_catalogued_with_meaning_and_action(number: int) -> None:
    info = describe_xid(number)
    assert number in XID_CATALOGUE
    assert info.xid == number
    assert info.meaning and info.meaning != "unknown Xid"
    assert info.action and "look it up" not in info.action
    assert info.severity in (WARN, FAIL)


@pytest.mark.parametrize(
    ("number", "severity"),
    [(13, WARN), (31, WARN), (43, WARN), (45, WARN), (68, WARN)]  # the application's fault
    + [(n, FAIL) for n in (48, 62, 64, 79, 95, 119, 120)],  # the GPU needs a reset, a reboot or support
)
def test_xid_severity(number: int, severity: Severity) -> None:
    assert describe_xid(number).severity is severity


@pytest.mark.parametrize(
    ("number", "words"),
    [(13, "graphics engine"), (31, "page fault"), (48, "double-bit ECC"), (79, "fallen off the bus"), (119, "GSP")],
)
def test_xid_meanings_follow_the_catalogue(number: int, words: str) -> None:
    assert words.lower() in describe_xid(number).meaning.lower()


def test_xid_79_says_reboot() -> None:
    assert "reboot" in describe_xid(79).action


@pytest.mark.parametrize("number", [999, 0, -1, 10_000])
def test_unknown_xid_still_gets_a_sentence_and_is_a_warning(number: int) -> None:
    info = describe_xid(number)
    assert number not in XID_CATALOGUE
    assert info.xid == number
    assert info.meaning == "unknown Xid"
    assert "Xid catalogue" in info.action
    assert info.severity is WARN


# --------------------------------------------------------------------------------------------- throttling


@pytest.mark.parametrize("reasons", [None, ()])
def test_no_reasons_no_summary(reasons: tuple[str, ...] | None) -> None:
    assert summarize_throttle(reasons, 792, 1760) is None


@pytest.mark.parametrize(
    ("reasons", "clock", "text", "harmful", "share"),
    [
        (("gpu_idle",), 210, "idle", False, 12),  # idle: the low clock is the point, no share in the text
        (("gpu_idle",), None, "idle", False, None),
        (("sw_power_cap",), 1584, "power cap: SM at 90 % of max", False, 90),
        (("applications_clocks_setting",), 1408, "application clocks: SM at 80 % of max", False, 80),
        (("sync_boost",), None, "sync boost", False, None),
        (("gpu_idle", "sw_power_cap"), 880, "idle, power cap", False, 50),
        (("hw_slowdown",), 792, "HW slowdown: SM at 45 % of max", True, 45),
        (("sw_power_cap", "hw_slowdown"), 792, "HW slowdown: SM at 45 % of max", True, 45),  # harmful first
        (("gpu_idle", "hw_thermal_slowdown"), 792, "HW thermal slowdown: SM at 45 % of max", True, 45),
        (
            ("sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown"),
            880,
            "thermal slowdown, power brake: SM at 50 % of max",
            True,
            50,
        ),
        (("0x200",), 1760, "0x200 active; SM clock still at max", False, 100),  # an unknown bit keeps its hex name
        # At its maximum the clock lost nothing: never "power cap: SM at 100 % of max" (read as a contradiction).
        (("sw_power_cap",), 1760, "power cap active; SM clock still at max", False, 100),
        (("sw_power_cap", "sync_boost"), 1755, "power cap, sync boost active; SM clock still at max", False, 100),
        (("hw_slowdown",), 1800, "HW slowdown active; SM clock still at max", True, 102),
        (("hw_slowdown",), None, "HW slowdown", True, None),  # clock unknown: no share
    ],
)
def test_summarize_throttle(
    reasons: tuple[str, ...], clock: int | None, text: str, harmful: bool, share: int | None
) -> None:
    summary = summarize_throttle(reasons, clock, 1760)
    assert summary is not None
    assert summary.text == text
    assert summary.harmful is harmful
    assert summary.sm_share_percent == share


@pytest.mark.parametrize("maximum", [None, 0])
def test_throttle_share_none_when_max_clock_unknown(maximum: int | None) -> None:
    summary = summarize_throttle(("hw_slowdown",), 792, maximum)
    assert summary == ("HW slowdown", True, None)


# --------------------------------------------------------------------------------------------- verdict


def test_healthy_sample_is_ok_without_findings() -> None:
    health = assess(STATIC, HEALTHY, inputs())
    assert health.verdict is OK
    assert health.findings == ()
    assert health.throttle is None
    assert health.responding is True


def test_all_none_sample_and_static_never_raise_and_are_ok() -> None:
    health = assess(GpuStatic(index=0), GpuSample(timestamp=T0), inputs())
    assert health.verdict is OK
    assert health.findings == ()
    health = assess(STATIC, GpuSample(timestamp=T0), HealthInputs(now=T0, events=(GpuEvent(T0, 0, xid=None),)))
    assert health.verdict is OK


def test_not_responding_fails_with_seconds() -> None:
    health = assess(STATIC, HEALTHY, inputs(responding=False, stalled_seconds=42.9))
    finding = only(health, "not-responding")
    assert finding.severity is FAIL
    assert "42 s" in finding.text
    assert health.verdict is FAIL
    assert health.responding is False and health.stalled_seconds == 42.9


def test_not_responding_without_seconds_says_zero() -> None:
    finding = only(assess(STATIC, HEALTHY, inputs(responding=False)), "not-responding")
    assert "0 s" in finding.text


def test_lost_fails() -> None:
    health = assess(STATIC, GpuSample(timestamp=T0, lost=True), inputs())
    finding = only(health, "lost")
    assert finding.severity is FAIL
    assert "79" in (finding.action or "")


@pytest.mark.parametrize(("number", "severity"), [(13, WARN), (31, WARN), (79, FAIL), (48, FAIL), (999, WARN)])
def test_xid_within_window_takes_catalogue_severity(number: int, severity: Severity) -> None:
    health = assess(STATIC, HEALTHY, inputs(events=(xid(number, age=60),)))
    finding = only(health, "xid")
    assert finding.severity is severity
    assert health.verdict is severity
    assert finding.text == f"Xid {number}: {describe_xid(number).meaning}"
    assert finding.action == describe_xid(number).action


def test_repeated_xid_counts_and_distinct_xids_most_recent_first() -> None:
    events = (xid(13, age=300), xid(79, age=200), xid(13, age=100))
    health = assess(STATIC, HEALTHY, inputs(events=events))
    assert codes(health) == ["xid", "xid"]
    assert health.findings[0].text.startswith("Xid 79: ")  # FAIL sorts first
    assert health.findings[1].text.startswith("Xid 13 x2: ")
    assert health.events == events


def test_xid_order_within_a_severity_is_most_recent_first() -> None:
    events = (xid(13, age=300), xid(31, age=100))
    texts = [f.text for f in assess(STATIC, HEALTHY, inputs(events=events)).findings]
    assert texts[0].startswith("Xid 31") and texts[1].startswith("Xid 13")


def test_xid_older_than_window_is_ignored() -> None:
    window = HealthThresholds().xid_window_s
    health = assess(STATIC, HEALTHY, inputs(events=(xid(79, age=window + 1),), xid_counts=((79, 1),)))
    assert health.verdict is OK
    assert health.findings == ()
    assert health.xid_counts == ((79, 1),)  # the evidence stays, the verdict does not
    at_edge = assess(STATIC, HEALTHY, inputs(events=(xid(79, age=window),)))
    assert at_edge.verdict is FAIL


def test_only_recent_xids_are_counted() -> None:
    window = HealthThresholds().xid_window_s
    events = (xid(13, age=window + 130), xid(13, age=10))  # counted to the minute: two minutes out
    assert only(assess(STATIC, HEALTHY, inputs(events=events)), "xid").text.startswith("Xid 13: ")


def test_xid_window_threshold_moves_the_limit() -> None:
    event = (xid(79, age=120),)
    assert assess(STATIC, HEALTHY, inputs(events=event)).verdict is FAIL
    short = HealthThresholds(xid_window_s=60)
    assert assess(STATIC, HEALTHY, inputs(events=event), short).verdict is OK


@pytest.mark.parametrize(
    ("changes", "code", "severity"),
    [
        ({"remapped_rows_failure": True}, "remap-failure", FAIL),
        ({"remapped_rows_pending": True}, "remap-pending", WARN),
        ({"retired_pages_pending": True}, "retire-pending", WARN),
        ({"retired_pages_sbe": 40, "retired_pages_dbe": 24}, "retired-limit", FAIL),
        ({"retired_pages_dbe": RETIRED_PAGES_LIMIT}, "retired-limit", FAIL),
        ({"ecc_uncorrected_volatile": 2}, "ecc-uncorrected", WARN),
    ],
)
def test_memory_rules(changes: dict[str, object], code: str, severity: Severity) -> None:
    health = assess(STATIC, sample(**changes), inputs())
    assert only(health, code).severity is severity
    assert health.verdict is severity


def test_retired_pages_below_limit_are_fine() -> None:
    assert RETIRED_PAGES_LIMIT == 64
    assert assess(STATIC, sample(retired_pages_sbe=40, retired_pages_dbe=23), inputs()).findings == ()
    text = only(assess(STATIC, sample(retired_pages_sbe=64, retired_pages_dbe=None), inputs()), "retired-limit").text
    assert text.startswith("64 pages retired")


@pytest.mark.parametrize(
    ("errors", "text"), [(1, "1 uncorrectable ECC error since"), (3, "3 uncorrectable ECC errors")]
)
def test_uncorrected_ecc_text(errors: int, text: str) -> None:
    assert text in only(assess(STATIC, sample(ecc_uncorrected_volatile=errors), inputs()), "ecc-uncorrected").text


def test_corrected_ecc_and_aggregate_counts_alone_are_fine() -> None:
    healthy = sample(ecc_corrected_volatile=500, ecc_corrected_aggregate=9000, ecc_uncorrected_aggregate=1)
    assert assess(STATIC, healthy, inputs()).verdict is OK


@pytest.mark.parametrize(
    ("gen", "width", "utilization", "flagged"),
    [
        (5, 8, 0, True),  # width below max: at any load
        (5, 8, 100, True),
        (5, 8, None, True),
        (3, 16, 0, False),  # gen drop at idle: power saving, not a downgrade
        (3, 16, 9, False),
        (3, 16, 10, True),  # busy: a real downgrade
        (3, 16, 100, True),
        (3, 16, None, False),  # load unknown: not flagged
        (5, 16, 100, False),
        (None, None, 100, False),
    ],
)
def test_pcie_downgrade(gen: int | None, width: int | None, utilization: int | None, flagged: bool) -> None:
    health = assess(
        STATIC, sample(pcie_link_gen=gen, pcie_link_width=width, utilization_gpu_percent=utilization), inputs()
    )
    if flagged:
        finding = only(health, "pcie-downgrade")
        assert finding.severity is WARN
        assert finding.text == f"PCIe link Gen{gen} x{width}, the GPU can do Gen5 x16"
    else:
        assert health.findings == ()


def test_pcie_downgrade_text_never_says_none() -> None:
    # the width dropped, the generation could not be read (nor its maximum)
    static = dataclasses.replace(STATIC, pcie_link_gen_max=None)
    finding = only(assess(static, sample(pcie_link_gen=None, pcie_link_width=8), inputs()), "pcie-downgrade")
    assert "None" not in finding.text
    assert finding.text == "PCIe link x8, the GPU can do x16"


def test_pcie_without_known_maximum_is_not_judged() -> None:
    static = dataclasses.replace(STATIC, pcie_link_gen_max=None, pcie_link_width_max=None)
    assert assess(static, sample(pcie_link_gen=1, pcie_link_width=1), inputs()).findings == ()


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"remapped_rows_failure": True, "remapped_rows_pending": True},
        {"retired_pages_sbe": 70, "retired_pages_pending": True, "ecc_uncorrected_volatile": 1},
        {"pcie_link_width": 8},
        {"pcie_link_gen": 3, "utilization_gpu_percent": BUSY_UTILIZATION},
        {"pcie_link_gen": 3, "utilization_gpu_percent": BUSY_UTILIZATION - 1},
    ],
)
def test_the_public_rules_are_the_verdicts_own(changes: dict[str, object]) -> None:
    """``nvtopy doctor`` calls memory_findings and pcie_downgrade: they must be exactly what the verdict finds."""
    reading = sample(**changes)
    rules = [*memory_findings(reading), *filter(None, [pcie_downgrade(pcie_link(STATIC, reading))])]
    assert sorted(rules, key=lambda f: -f.severity.rank) == list(assess(STATIC, reading, inputs()).findings)


def test_pcie_link_reads_the_link_beside_its_maximum() -> None:
    link = pcie_link(STATIC, sample(pcie_link_gen=3, pcie_link_width=16, utilization_gpu_percent=None))
    assert (link.gen, link.width, link.gen_max, link.width_max, link.utilization) == (3, 16, 5, 16, None)
    assert link.slower and not link.narrow and not link.busy and not link.downgraded


@pytest.mark.parametrize(("growth", "flagged"), [(None, False), (0, False), (7, True)])
def test_replay_growth(growth: int | None, flagged: bool) -> None:
    health = assess(STATIC, HEALTHY, inputs(replay_growth=growth))
    if flagged:
        finding = only(health, "pcie-replays")
        assert finding.severity is WARN and "+7" in finding.text
    else:
        assert health.findings == ()


def test_large_replay_counter_without_growth_is_fine() -> None:
    assert assess(STATIC, sample(pcie_replay_counter=10_000), inputs(replay_growth=0)).verdict is OK


def test_nvlink_inactive_names_links_and_counts_up() -> None:
    links = (NvLink(0, active=True), NvLink(1, active=False), NvLink(2, active=True), NvLink(3, active=False))
    finding = only(assess(STATIC, sample(nvlinks=links), inputs()), "nvlink-down")
    assert finding.severity is WARN
    assert finding.text == "NVLink 1, 3 inactive (2/4 up)"


@pytest.mark.parametrize("links", [None, (), (NvLink(0, active=None), NvLink(1, active=True))])
def test_nvlink_unknown_or_absent_is_not_down(links: tuple[NvLink, ...] | None) -> None:
    assert assess(STATIC, sample(nvlinks=links), inputs()).findings == ()


def test_nvlink_error_growth() -> None:
    finding = only(assess(STATIC, HEALTHY, inputs(nvlink_error_growth=(0, 2))), "nvlink-errors")
    assert finding.severity is WARN
    assert finding.text == "NVLink errors growing on link 0, 2"


def test_harmful_throttle_warns_with_share() -> None:
    health = assess(STATIC, sample(throttle_reasons=("hw_slowdown",), clock_sm_mhz=891), inputs())
    finding = only(health, "throttle")
    assert finding.severity is WARN
    assert finding.text == "HW slowdown: SM at 45 % of max"
    assert health.throttle == "HW slowdown: SM at 45 % of max"


@pytest.mark.parametrize("reasons", [("gpu_idle",), ("sw_power_cap",), ("sync_boost", "applications_clocks_setting")])
def test_benign_throttle_is_reported_but_not_a_finding(reasons: tuple[str, ...]) -> None:
    health = assess(STATIC, sample(throttle_reasons=reasons), inputs())
    assert health.verdict is OK
    assert health.findings == ()
    assert health.throttle is not None


@pytest.mark.parametrize(("temperature", "flagged"), [(86, False), (87, True), (95, True), (None, False)])
def test_temperature_at_slowdown(temperature: int | None, flagged: bool) -> None:
    health = assess(STATIC, sample(temperature_c=temperature), inputs())
    if flagged:
        finding = only(health, "temperature")
        assert finding.severity is WARN
        assert finding.text == f"at {temperature} °C, its slowdown threshold is 87 °C"
    else:
        assert health.findings == ()


def test_temperature_without_known_slowdown_is_not_judged() -> None:
    static = dataclasses.replace(STATIC, temperature_slowdown_c=None)
    assert assess(static, sample(temperature_c=120), inputs()).findings == ()


@pytest.mark.parametrize(
    ("count", "held", "text"),
    [
        (1, 2 * GIB, "1 process holds 2.0 GiB and computes nothing"),
        (3, int(40.5 * GIB), "3 processes hold 40.5 GiB and compute nothing"),
    ],
)
def test_idle_held(count: int, held: int, text: str) -> None:
    health = assess(STATIC, HEALTHY, inputs(idle_held_processes=count, idle_held_bytes=held))
    finding = only(health, "idle-held")
    assert finding.severity is WARN
    assert finding.text == text
    assert health.idle_held_bytes == held


@pytest.mark.parametrize(("seconds", "minutes"), [(300.0, 5), (359.9, 5), (3600.0, 60)])
def test_suspected_hang(seconds: float, minutes: int) -> None:
    health = assess(STATIC, HEALTHY, inputs(suspected_hang_seconds=seconds))
    finding = only(health, "suspected-hang")
    assert finding.severity is WARN
    assert f"for {minutes} min" in finding.text
    assert health.suspected_hang_seconds == seconds


def test_verdict_is_worst_and_findings_are_ordered_worst_first() -> None:
    bad = sample(
        pcie_link_width=8,  # WARN
        remapped_rows_pending=True,  # WARN
        remapped_rows_failure=True,  # FAIL
        temperature_c=90,  # WARN
    )
    health = assess(STATIC, bad, inputs(events=(xid(13),)))
    assert health.verdict is FAIL
    severities = [f.severity for f in health.findings]
    assert severities == sorted(severities, key=lambda s: -s.rank)
    assert codes(health)[0] == "remap-failure"
    # within a severity, rule order is kept (stable sort): Xid, memory, link, ..., temperature
    assert codes(health)[1:] == ["xid", "remap-pending", "pcie-downgrade", "temperature"]


def test_warnings_only_give_warn() -> None:
    health = assess(STATIC, sample(remapped_rows_pending=True, temperature_c=90), inputs())
    assert health.verdict is WARN
    assert len(health.findings) == 2


@pytest.mark.parametrize(
    ("verdicts", "expected"), [((), OK), ((OK, OK), OK), ((OK, WARN, OK), WARN), ((WARN, FAIL, OK), FAIL)]
)
def test_worst(verdicts: tuple[Severity, ...], expected: Severity) -> None:
    assert worst(verdicts) is expected


# --------------------------------------------------------------------------------------------- GpuWatch


def proc(
    pid: int = 100, memory: int | None = 2 * GIB, sm: int | None = 0, create_time: float | None = T0 - 1000
) -> GpuProcess:
    """A compute process on GPU 0 as NVML lists it: no user, no command (nothing read from the host)."""
    return gpu_process(
        0, pid, bare=True, gpu_uuid="GPU-0", gpu_memory_bytes=memory, sm_percent=sm, create_time=create_time
    )


IDLE_GPU = GpuSample(timestamp=T0, utilization_gpu_percent=0, power_draw_w=70.0, power_limit_w=700.0)
HUNG_GPU = GpuSample(timestamp=T0, utilization_gpu_percent=100, power_draw_w=100.0, power_limit_w=700.0)


def test_idle_held_after_exactly_idle_held_seconds() -> None:
    watch = GpuWatch()
    limit = watch.thresholds.idle_held_seconds
    assert limit == 600.0
    first = watch.observe(IDLE_GPU, [proc()], T0)
    assert first.rows[0].flags == () and first.rows[0].idle_seconds == 0.0
    assert first.idle_held_processes == 0 and first.idle_held_bytes is None
    before = watch.observe(IDLE_GPU, [proc()], T0 + limit - 0.5)
    assert before.rows[0].flags == () and before.rows[0].idle_seconds == limit - 0.5
    at = watch.observe(IDLE_GPU, [proc()], T0 + limit)
    assert at.rows[0].flags == ("idle-held",)
    assert at.rows[0].idle_seconds == limit
    assert at.idle_held_processes == 1 and at.idle_held_bytes == 2 * GIB


def test_idle_held_sums_processes() -> None:
    watch = GpuWatch()
    rows = [proc(1, 2 * GIB), proc(2, 3 * GIB), proc(3, 4 * GIB, sm=50)]
    watch.observe(IDLE_GPU, rows, T0)
    result = watch.observe(IDLE_GPU, rows, T0 + 600)
    assert [r.flags for r in result.rows] == [("idle-held",), ("idle-held",), ()]
    assert result.idle_held_processes == 2 and result.idle_held_bytes == 5 * GIB
    assert result.rows[2].idle_seconds is None


@pytest.mark.parametrize(("memory", "flagged"), [(GIB, True), (GIB - 1, False), (None, False), (0, False)])
def test_idle_held_needs_one_gib(memory: int | None, flagged: bool) -> None:
    watch = GpuWatch()
    watch.observe(IDLE_GPU, [proc(memory=memory)], T0)
    row = watch.observe(IDLE_GPU, [proc(memory=memory)], T0 + 10_000).rows[0]
    assert (row.flags == ("idle-held",)) is flagged
    if not flagged:
        assert row.idle_seconds is None


@pytest.mark.parametrize(("sm", "idle"), [(0, True), (1, True), (2, False)])
def test_idle_means_at_most_idle_sm_percent(sm: int, idle: bool) -> None:
    watch = GpuWatch()
    watch.observe(IDLE_GPU, [proc(sm=sm)], T0)
    assert (watch.observe(IDLE_GPU, [proc(sm=sm)], T0 + 600).rows[0].flags == ("idle-held",)) is idle


def test_idle_clock_resets_when_sm_rises() -> None:
    watch = GpuWatch()
    watch.observe(IDLE_GPU, [proc(sm=0)], T0)
    watch.observe(IDLE_GPU, [proc(sm=0)], T0 + 500)
    busy = watch.observe(IDLE_GPU, [proc(sm=30)], T0 + 550)
    assert busy.rows[0].flags == () and busy.rows[0].idle_seconds is None
    again = watch.observe(IDLE_GPU, [proc(sm=0)], T0 + 600)
    assert again.rows[0].idle_seconds == 0.0 and again.rows[0].flags == ()
    assert watch.observe(IDLE_GPU, [proc(sm=0)], T0 + 1199).rows[0].flags == ()
    assert watch.observe(IDLE_GPU, [proc(sm=0)], T0 + 1200).rows[0].flags == ("idle-held",)


@pytest.mark.parametrize(("gpu_util", "flagged"), [(0, True), (1, True), (50, False)])
def test_gpu_utilization_stands_in_when_sm_unknown(gpu_util: int, flagged: bool) -> None:
    watch = GpuWatch()
    gpu = dataclasses.replace(IDLE_GPU, utilization_gpu_percent=gpu_util)
    watch.observe(gpu, [proc(sm=None)], T0)
    assert (watch.observe(gpu, [proc(sm=None)], T0 + 600).rows[0].flags == ("idle-held",)) is flagged


def test_process_sm_wins_over_gpu_utilization() -> None:
    watch = GpuWatch()
    busy_gpu = dataclasses.replace(IDLE_GPU, utilization_gpu_percent=90)  # another process is busy
    watch.observe(busy_gpu, [proc(sm=0)], T0)
    assert watch.observe(busy_gpu, [proc(sm=0)], T0 + 600).rows[0].flags == ("idle-held",)


def test_unknown_activity_never_flags() -> None:
    watch = GpuWatch()
    unknown = GpuSample(timestamp=T0)
    for step in range(0, 7200, 60):
        result = watch.observe(unknown, [proc(sm=None)], T0 + step)
        assert result.rows[0].flags == () and result.rows[0].idle_seconds is None
        assert result.idle_held_processes == 0
    assert watch._idle_since == {}


def test_reused_pid_with_another_create_time_starts_over() -> None:
    watch = GpuWatch()
    watch.observe(IDLE_GPU, [proc(pid=7, create_time=T0 - 100)], T0)
    reused = watch.observe(IDLE_GPU, [proc(pid=7, create_time=T0 + 500)], T0 + 600)
    assert reused.rows[0].flags == () and reused.rows[0].idle_seconds == 0.0
    assert list(watch._idle_since) == [(7, T0 + 500)]  # the old one is forgotten


def test_exited_process_is_forgotten_and_returning_key_starts_over() -> None:
    watch = GpuWatch()
    watch.observe(IDLE_GPU, [proc(pid=1)], T0)
    watch.observe(IDLE_GPU, [], T0 + 300)
    assert watch._idle_since == {}
    back = watch.observe(IDLE_GPU, [proc(pid=1)], T0 + 600)
    assert back.rows[0].idle_seconds == 0.0 and back.rows[0].flags == ()


def test_memory_is_bounded_by_living_processes() -> None:
    watch = GpuWatch()
    steady = proc(pid=1)
    for n in range(10_000):
        short = proc(pid=10_000 + n, create_time=T0 + n)
        watch.observe(IDLE_GPU, [steady, short], T0 + n)
        assert len(watch._idle_since) <= 2
    assert set(watch._idle_since) == {(1, steady.create_time), (19_999, T0 + 9_999)}
    final = watch.observe(IDLE_GPU, [steady], T0 + 10_000)
    assert final.rows[0].flags == ("idle-held",)  # the long-lived one kept its clock through all of it
    assert len(watch._idle_since) == 1


def test_rows_are_passed_through_unchanged_when_nothing_to_say() -> None:
    watch = GpuWatch()
    busy = proc(sm=80)
    result = watch.observe(HEALTHY, [busy], T0)
    assert result.rows == (busy,)
    assert result.rows[0] is busy


def test_idle_threshold_changes_move_the_limits() -> None:
    watch = GpuWatch(HealthThresholds(idle_held_bytes=4 * GIB, idle_held_seconds=60, idle_sm_percent=5))
    rows = [proc(1, 4 * GIB, sm=5), proc(2, 3 * GIB, sm=0)]
    watch.observe(IDLE_GPU, rows, T0)
    result = watch.observe(IDLE_GPU, rows, T0 + 60)
    assert [r.flags for r in result.rows] == [("idle-held",), ()]


def hang_run(watch: GpuWatch, gpu: GpuSample, start: float, stop: float, step: float = 30.0) -> list[float | None]:
    out = []
    t = start
    while t <= stop:
        out.append(watch.observe(gpu, [], t).suspected_hang_seconds)
        t += step
    return out


def test_suspected_hang_after_hang_seconds() -> None:
    watch = GpuWatch()
    assert watch.thresholds.hang_seconds == 300.0
    assert watch.observe(HUNG_GPU, [], T0).suspected_hang_seconds is None
    assert watch.observe(HUNG_GPU, [], T0 + 299).suspected_hang_seconds is None
    assert watch.observe(HUNG_GPU, [], T0 + 300).suspected_hang_seconds == 300.0
    assert watch.observe(HUNG_GPU, [], T0 + 900).suspected_hang_seconds == 900.0


@pytest.mark.parametrize(
    ("util", "power", "hung"),
    [
        (100, 100.0, True),
        (95, 209.0, True),  # at the utilisation limit, just under 30 % of 700 W
        (94, 100.0, False),  # not busy enough
        (100, 210.0, False),  # 30 % of the limit: real work
        (100, 650.0, False),  # busy and at full power: working
        (0, 70.0, False),  # idle
    ],
)
def test_suspected_hang_conditions(util: int, power: float, hung: bool) -> None:
    watch = GpuWatch()
    gpu = dataclasses.replace(HUNG_GPU, utilization_gpu_percent=util, power_draw_w=power)
    watch.observe(gpu, [], T0)
    assert (watch.observe(gpu, [], T0 + 300).suspected_hang_seconds is not None) is hung


def test_suspected_hang_resets_when_power_rises() -> None:
    watch = GpuWatch()
    watch.observe(HUNG_GPU, [], T0)
    assert watch.observe(HUNG_GPU, [], T0 + 400).suspected_hang_seconds == 400.0
    working = dataclasses.replace(HUNG_GPU, power_draw_w=600.0)
    assert watch.observe(working, [], T0 + 410).suspected_hang_seconds is None
    assert watch.observe(HUNG_GPU, [], T0 + 420).suspected_hang_seconds is None
    assert watch.observe(HUNG_GPU, [], T0 + 719).suspected_hang_seconds is None
    assert watch.observe(HUNG_GPU, [], T0 + 720).suspected_hang_seconds == 300.0


def test_suspected_hang_flags_every_process_of_the_gpu() -> None:
    watch = GpuWatch()
    rows = [proc(1, sm=100), proc(2, memory=GIB // 2, sm=100), proc(3, sm=None)]
    watch.observe(HUNG_GPU, rows, T0)
    result = watch.observe(HUNG_GPU, rows, T0 + 300)
    assert [r.flags for r in result.rows] == [("suspected-hang",)] * 3
    assert [r.pid for r in result.rows] == [1, 2, 3]
    assert result.idle_held_processes == 0


def test_unknown_power_keeps_a_running_hang_clock_but_never_starts_or_shortens_it() -> None:
    unknown = dataclasses.replace(HUNG_GPU, power_draw_w=None)
    watch = GpuWatch()
    assert hang_run(watch, unknown, T0, T0 + 900) == [None] * 31  # never starts on unknown readings
    watch = GpuWatch()
    watch.observe(HUNG_GPU, [], T0)
    assert watch.observe(unknown, [], T0 + 10).suspected_hang_seconds is None  # not yet hang_seconds
    assert watch.observe(unknown, [], T0 + 300).suspected_hang_seconds == 300.0  # the clock kept running
    assert watch.observe(HUNG_GPU, [], T0 + 330).suspected_hang_seconds == 330.0


def test_hang_threshold_changes_move_the_limits() -> None:
    watch = GpuWatch(HealthThresholds(hang_utilization_percent=80, hang_power_share=0.5, hang_seconds=60))
    gpu = dataclasses.replace(HUNG_GPU, utilization_gpu_percent=85, power_draw_w=340.0)
    watch.observe(gpu, [], T0)
    assert watch.observe(gpu, [], T0 + 59).suspected_hang_seconds is None
    assert watch.observe(gpu, [], T0 + 60).suspected_hang_seconds == 60.0


def replay(value: int | None) -> GpuSample:
    return dataclasses.replace(HEALTHY, pcie_replay_counter=value)


def test_replay_growth_none_without_reading_zero_on_first() -> None:
    watch = GpuWatch()
    assert watch.observe(replay(None), [], T0).replay_growth is None
    assert watch.observe(replay(1234), [], T0 + 1).replay_growth == 0  # a large counter is history, not growth
    assert watch.observe(replay(None), [], T0 + 2).replay_growth is None


def test_replay_growth_within_window_then_ages_out() -> None:
    watch = GpuWatch()
    window = watch.thresholds.counter_window_s
    assert window == 600.0
    watch.observe(replay(10), [], T0)
    assert watch.observe(replay(13), [], T0 + 100).replay_growth == 3
    assert watch.observe(replay(15), [], T0 + 200).replay_growth == 5
    assert watch.observe(replay(15), [], T0 + 699).replay_growth == 5  # the +3 at T0+100 is still within
    assert watch.observe(replay(15), [], T0 + 700).replay_growth == 2  # it aged out; the +2 at T0+200 did not
    assert watch.observe(replay(15), [], T0 + 800).replay_growth == 0
    assert watch.observe(replay(16), [], T0 + 5000).replay_growth == 1


def test_replay_counter_going_down_starts_over() -> None:
    watch = GpuWatch()
    watch.observe(replay(100), [], T0)
    assert watch.observe(replay(150), [], T0 + 10).replay_growth == 50
    assert watch.observe(replay(2), [], T0 + 20).replay_growth == 0  # the driver reloaded
    assert watch.observe(replay(5), [], T0 + 30).replay_growth == 3


def test_counter_window_threshold_moves_the_limit() -> None:
    watch = GpuWatch(HealthThresholds(counter_window_s=60))
    watch.observe(replay(0), [], T0)
    assert watch.observe(replay(4), [], T0 + 10).replay_growth == 4
    assert watch.observe(replay(4), [], T0 + 69).replay_growth == 4
    assert watch.observe(replay(4), [], T0 + 70).replay_growth == 0


def test_counter_readings_are_bounded() -> None:
    watch = GpuWatch()
    for n in range(5000):
        watch.observe(replay(n), [], T0 + n * 0.01)  # a change every reading, all within the window
    assert len(watch._replays) <= 1024


def links(*errors: int | None) -> GpuSample:
    return dataclasses.replace(HEALTHY, nvlinks=tuple(NvLink(n, active=True, errors=e) for n, e in enumerate(errors)))


def test_nvlink_error_growth_per_link() -> None:
    watch = GpuWatch()
    assert watch.observe(links(5, 0, None, 9), [], T0).nvlink_error_growth == ()
    assert watch.observe(links(5, 3, None, 9), [], T0 + 10).nvlink_error_growth == (1,)
    assert watch.observe(links(5, 3, 7, 12), [], T0 + 20).nvlink_error_growth == (1, 3)  # link 2: first reading
    assert watch.observe(links(5, 3, 7, 12), [], T0 + 610).nvlink_error_growth == (3,)  # link 1 grew at +10
    assert watch.observe(links(5, 3, 7, 12), [], T0 + 620).nvlink_error_growth == ()  # link 3 grew at +20
    assert watch.observe(links(0, 3, 7, 12), [], T0 + 630).nvlink_error_growth == ()  # link 0 went down: over
    assert watch.observe(links(1, 3, 8, 12), [], T0 + 640).nvlink_error_growth == (0, 2)
    assert set(watch._errors) == {0, 1, 2, 3}


@pytest.mark.parametrize("nvlinks", [None, ()])
def test_no_nvlinks_no_growth(nvlinks: tuple[NvLink, ...] | None) -> None:
    assert GpuWatch().observe(dataclasses.replace(HEALTHY, nvlinks=nvlinks), [], T0).nvlink_error_growth == ()


def test_watch_feeds_assess() -> None:
    watch = GpuWatch()
    rows = [proc(1, 8 * GIB, sm=0)]
    watch.observe(IDLE_GPU, rows, T0)
    result = watch.observe(IDLE_GPU, rows, T0 + 600)
    health = assess(
        STATIC,
        IDLE_GPU,
        HealthInputs(
            now=T0 + 600,
            idle_held_bytes=result.idle_held_bytes,
            idle_held_processes=result.idle_held_processes,
            suspected_hang_seconds=result.suspected_hang_seconds,
            replay_growth=result.replay_growth,
            nvlink_error_growth=result.nvlink_error_growth,
        ),
    )
    assert only(health, "idle-held").text == "1 process holds 8.0 GiB and computes nothing"

"""The simulated backend's GPU health: readings per board, health faults, Xid events, hangs, stuck and idle GPUs.

Why these matter: the demo, the screenshots and every test of the health rules
stand on these readings, so they must look like the boards they claim to be
(row remapping from Ampere on, NVLink on SXM boards, a PCIe link that trains
down at idle), stay deterministic, and produce each fake-nvml scenario exactly
when and where the ``--demo-fault`` spec says.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from nvtopy.backends.simulated.catalog import find_model
from nvtopy.backends.simulated.faults import FAULT_NAMES, Hang, SimFaults, XidFault, parse_fault_specs
from nvtopy.backends.simulated.health import EVENTS_UNSUPPORTED_NOTE, LINK_BYTES_PER_S, SimEventStream
from nvtopy.errors import UsageError
from nvtopy.model import HEALTH_GROUPS, SAMPLE_GROUPS, GpuEvent, NvLink, Reason

GIB = 1024**3
ALL = frozenset(SAMPLE_GROUPS)


def sample(backend, index, groups=ALL):
    """One reading of GPU ``index``: its values and why any are missing."""
    reading = backend.read_sample(index, groups)
    return reading.values, reading.unavailable


# ----------------------------------------------------------------------------- spec syntax


def test_every_fault_name_is_documented():
    import nvtopy.backends.simulated.faults as module

    for name in FAULT_NAMES:
        assert name in module.__doc__, name


@pytest.mark.parametrize(
    ("spec", "check"),
    [
        ("xid=79", lambda f: f.xids == [XidFault(79, 0.0, None)]),
        ("xid=48:30@1", lambda f: f.xids == [XidFault(48, 30.0, (1,))]),
        ("xid=13:2.5@0,2", lambda f: f.xids == [XidFault(13, 2.5, (0, 2))]),
        ("remapped=5/3/1/0@2", lambda f: f.remapped == {2: (5, 3, True, False)}),
        ("remapped=0/0/0/1", lambda f: f.remapped == {None: (0, 0, False, True)}),
        ("retired=2/1/1@0-1", lambda f: f.retired == {0: (2, 1, True), 1: (2, 1, True)}),
        ("pcie-downgrade=3/8@1", lambda f: f.pcie_downgrade == {1: (3, 8)}),
        ("pcie-replay=100@0", lambda f: f.pcie_replay == {0: (100, False)}),
        ("pcie-replay=7+", lambda f: f.pcie_replay == {None: (7, True)}),
        ("throttle=0x48@3", lambda f: f.throttle == {3: 0x48}),
        ("throttle=8", lambda f: f.throttle == {None: 0x8}),
        ("throttle=0XFF", lambda f: f.throttle == {None: 0xFF}),
        ("nvlink-down=0/3@1", lambda f: f.nvlink_down == {1: frozenset({0, 3})}),
        ("nvlink-down=17", lambda f: f.nvlink_down == {None: frozenset({17})}),
        ("nvlink-errors=12@2", lambda f: f.nvlink_errors == {2: 12}),
        ("events-unsupported@1", lambda f: f.events_unsupported == {1}),
        ("events-unsupported", lambda f: f.events_unsupported == {None}),
        ("hang=30@1", lambda f: f.hang == {1: [Hang(30.0, 0.0)]}),
        ("hang=0.5:10@0", lambda f: f.hang == {0: [Hang(0.5, 10.0)]}),
        ("hang=5", lambda f: f.hang == {None: [Hang(5.0, 0.0)]}),
        ("idle-held@1,3", lambda f: f.idle_held == {1, 3}),
        ("idle-held", lambda f: f.idle_held == {0, 1, 2, 3}),
        ("stuck@2", lambda f: f.stuck == {2}),
        (" XID = 79 @ 1 ", lambda f: f.xids == [XidFault(79, 0.0, (1,))]),
    ],
)
def test_health_specs_parse(spec, check):
    assert check(parse_fault_specs([spec], gpus=4))


def test_repeated_specs_add_up():
    faults = parse_fault_specs(["xid=13@0", "xid=13@0", "xid=79:5@1", "nvlink-down=1@0", "nvlink-down=2@0"], gpus=2)
    assert len(faults.xids) == 3, "each xid spec is one more event"
    assert faults.nvlink_down == {0: frozenset({1, 2})}
    faults = parse_fault_specs(["hang=1@0", "hang=2:5@0"], gpus=2)
    assert faults.hang == {0: [Hang(1.0, 0.0), Hang(2.0, 5.0)]}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("xid", "give the Xid number"),
        ("xid=", "give the Xid number"),
        ("xid=0", "give the Xid number"),
        ("xid=-1", "give the Xid number"),
        ("xid=abc", "give the Xid number"),
        ("xid=79:", "give the Xid number"),
        ("xid=79:-5", "give the Xid number"),
        ("xid=79:nan", "give the Xid number"),
        ("xid=79:inf", "give the Xid number"),
        ("xid=99999", "give the Xid number"),
        ("xid=79@9", "no GPU 9"),
        ("remapped=1/2/3", "give CORR/UNC/PENDING/FAILURE"),
        ("remapped=1/2/2/0", "give CORR/UNC/PENDING/FAILURE"),
        ("remapped=-1/2/0/0", "give CORR/UNC/PENDING/FAILURE"),
        ("remapped=1.5/2/0/0", "give CORR/UNC/PENDING/FAILURE"),
        ("retired=1/2", "give SBE/DBE/PENDING"),
        ("retired=1/2/yes", "give SBE/DBE/PENDING"),
        ("pcie-downgrade=3", "give GEN/WIDTH"),
        ("pcie-downgrade=0/8", "give GEN/WIDTH"),
        ("pcie-downgrade=7/8", "give GEN/WIDTH"),
        ("pcie-downgrade=3/3", "give GEN/WIDTH"),
        ("pcie-replay=", "give the replay count"),
        ("pcie-replay=+", "give the replay count"),
        ("pcie-replay=1++", "give the replay count"),
        ("pcie-replay=-3", "give the replay count"),
        ("throttle=0xZZ", "clock-event mask in hex"),
        ("throttle=0x", "clock-event mask in hex"),
        ("throttle=0x10000000000000000", "clock-event mask in hex"),
        ("nvlink-down=18", "link numbers 0-17"),
        ("nvlink-down=1//2", "link numbers 0-17"),
        ("nvlink-down=a", "link numbers 0-17"),
        ("nvlink-errors=lots", "error count of each link"),
        ("hang", "seconds each call blocks"),
        ("hang=0", "seconds each call blocks"),
        ("hang=-1@1", "seconds each call blocks"),
        ("hang=7200", "seconds each call blocks"),
        ("hang=1:-1", "seconds each call blocks"),
        ("hang=1:x@1", "seconds each call blocks"),
        ("events-unsupported=1", "takes no '=' argument"),
        ("idle-held=4", "takes no '=' argument"),
        ("stuck=1", "takes no '=' argument"),
        ("stuck@5", "no GPU 5"),
        ("stuck@", "name the GPUs after '@'"),
    ],
)
def test_bad_health_specs_say_what_is_wrong(spec, fragment):
    with pytest.raises(UsageError, match=re.escape(fragment)) as caught:
        parse_fault_specs([spec], gpus=4)
    assert repr(spec) in str(caught.value) or "unknown fault" in str(caught.value), "the message names the spec"


def test_nvlink_down_is_checked_against_the_board_when_known():
    assert parse_fault_specs(["nvlink-down=17"], gpus=2, model=find_model("H100 80GB HBM3")).nvlink_down
    with pytest.raises(UsageError, match=re.escape("no NVLink 12 (the NVIDIA A100-SXM4-80GB has links 0-11)")):
        parse_fault_specs(["nvlink-down=3/12"], gpus=2, model=find_model("A100-SXM4-80GB"))
    with pytest.raises(UsageError, match=re.escape("no NVLink 0 (the NVIDIA L4 has no NVLink)")):
        parse_fault_specs(["nvlink-down=0"], gpus=2, model=find_model("L4"))


# ----------------------------------------------------------------------------- readings per board


@pytest.mark.parametrize(
    ("model", "gen", "links", "version", "remapping"),
    [
        ("H100 80GB HBM3", 5, 18, 4, True),
        ("H100 PCIe", 5, 0, 0, True),
        ("H200", 5, 18, 4, True),
        ("A100-SXM4-80GB", 4, 12, 3, True),
        ("A100-SXM4-40GB", 4, 12, 3, True),
        ("L4", 4, 0, 0, True),
        ("RTX 4090", 4, 0, 0, False),
        ("V100", 3, 6, 2, False),
        ("T4", 3, 0, 0, False),
    ],
)
def test_readings_per_model(sim, model, gen, links, version, remapping):
    backend = sim(gpus=2, model=model, steady=True)
    board = backend.model
    static = backend.read_static(0)
    assert (static.pcie_link_gen_max, static.pcie_link_width_max, static.nvlink_count) == (gen, 16, links)
    values, unavailable = sample(backend, 0)
    assert values["utilization_gpu_percent"] >= 5, "steady: every slot busy"
    assert (values["pcie_link_gen"], values["pcie_link_width"], values["pcie_replay_counter"]) == (gen, 16, 0)
    if remapping:  # Ampere and later with ECC: row remapping, no page retirement
        assert (values["remapped_rows_corrected"], values["remapped_rows_uncorrected"]) == (0, 0)
        assert values["remapped_rows_pending"] is False and values["remapped_rows_failure"] is False
        assert all(unavailable[f] is Reason.NOT_SUPPORTED for f in SAMPLE_GROUPS["retired_pages"])
    else:
        assert all(unavailable[f] is Reason.NOT_SUPPORTED for f in SAMPLE_GROUPS["remapped_rows"])
    if board.page_retirement:  # V100, T4: page retirement instead
        assert (values["retired_pages_sbe"], values["retired_pages_dbe"], values["retired_pages_pending"]) == (
            0,
            0,
            False,
        )
    elif not remapping:  # a GeForce board without ECC: neither
        assert all(unavailable[f] is Reason.NOT_SUPPORTED for f in SAMPLE_GROUPS["retired_pages"])
    nvlinks = values["nvlinks"]
    assert len(nvlinks) == links
    if links:
        assert all(isinstance(link, NvLink) for link in nvlinks)
        assert [link.link for link in nvlinks] == list(range(links))
        assert all(link.active and link.version == version and link.errors == 0 for link in nvlinks)
        assert all(0 < link.rx_bytes_per_s < LINK_BYTES_PER_S for link in nvlinks), "busy: data moves"
        assert values["nvlink_rx_bytes_per_s"] == sum(link.rx_bytes_per_s for link in nvlinks)
        assert values["nvlink_tx_bytes_per_s"] == sum(link.tx_bytes_per_s for link in nvlinks)
    else:
        assert nvlinks == (), "a board without NVLink has no links"
        assert values["nvlink_rx_bytes_per_s"] == values["nvlink_tx_bytes_per_s"] == 0, "and moves nothing over them"
    assert not (set(unavailable) - {f for g in HEALTH_GROUPS for f in SAMPLE_GROUPS[g]} - set(_old_gaps(board))), (
        "nothing but what the board lacks is missing"
    )


def _old_gaps(board):
    """Fields the simulation reports NotSupported for other reasons than health (fan, ECC, GPM before Hopper)."""
    gaps = [] if board.fans else ["fan_percent"]
    gaps += [] if int(board.compute_capability.split(".")[0]) >= 9 else list(SAMPLE_GROUPS["gpm"])
    return gaps + ([] if board.ecc else list(SAMPLE_GROUPS["ecc"]))


def test_nvlink_remotes(sim):
    """HGX boards reach four NVSwitches; a DGX-1 V100's links reach peer GPUs (as fake-nvml wires them)."""
    h100 = sample(sim(gpus=8), 0, {"nvlink"})[0]["nvlinks"]
    assert {link.remote for link in h100} == {f"00000000:{b:02X}:00.0" for b in (5, 6, 7, 8)}
    backend = sim(gpus=8, model="V100")
    v100 = sample(backend, 2, {"nvlink"})[0]["nvlinks"]
    peers = {backend.read_static(i).bus_id for i in range(8) if i != 2}
    assert {link.remote for link in v100} <= peers and len({link.remote for link in v100}) == 6
    lone = sample(sim(gpus=1, model="V100"), 0, {"nvlink"})[0]["nvlinks"]
    assert all(link.remote is None for link in lone), "a lone board has nothing at the other end"


def test_pcie_link_trains_down_at_idle_and_nvlink_follows_load(sim):
    idle = sim(gpus=2, processes_per_gpu=0)
    values, _ = sample(idle, 0)
    assert values["utilization_gpu_percent"] < 5
    assert (values["pcie_link_gen"], values["pcie_link_width"]) == (1, 16), "idle: gen 1, width kept"
    assert values["nvlink_rx_bytes_per_s"] == values["nvlink_tx_bytes_per_s"] == 0, "idle: nothing moves"
    assert all(link.active for link in values["nvlinks"]), "an idle link is still up"
    busy = sim(gpus=2, steady=True)
    values, _ = sample(busy, 0)
    assert values["pcie_link_gen"] == 5
    assert values["nvlink_rx_bytes_per_s"] > 0


def test_nvlink_throughput_grows_with_utilization(sim):
    backend = sim(gpus=8, seed=3)
    readings = sorted(
        (values["utilization_gpu_percent"], values["nvlink_rx_bytes_per_s"])
        for values, _ in (sample(backend, i, {"utilization", "nvlink"}) for i in range(8))
    )
    utils = [u for u, _ in readings]
    assert utils[-1] - utils[0] > 20, "the seed mixes busy and quiet GPUs"
    assert readings[-1][1] > readings[0][1], "the busiest GPU moves the most over NVLink"


def test_health_readings_are_deterministic(sim, clock):
    def run(seed):
        backend = sim(gpus=4, seed=seed, faults=parse_fault_specs(["pcie-replay=3+@1", "nvlink-errors=2@2"], 4))
        seen = []
        for _ in range(5):
            clock.advance(7)
            seen.append([sample(backend, i, HEALTH_GROUPS) for i in range(4)])
        clock.advance(-35)
        return seen

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_reads_on_threads_match_sequential_reads_and_counts_stay_exact(sim, clock):
    """Each GPU on its own thread (as the collector reads them): same values as one thread, no lost counts."""
    sequential = sim(gpus=8, seed=5)
    expected = {i: sample(sequential, i) for i in range(8)}
    threaded = sim(gpus=8, seed=5)
    results: dict[int, object] = {}
    rounds = 50

    def read(index):
        for _ in range(rounds):
            results[index] = sample(threaded, index)
            threaded.read_processes(index)
            threaded.inspect_processes({1, 2, 3})  # every GPU's jobs, from every thread

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(8):
        assert results[index][0] == expected[index][0]
    counts = threaded.call_counts()
    assert counts["memory"] == counts["nvlink"] == counts["processes"] == 8 * rounds


# ----------------------------------------------------------------------------- health faults


def test_memory_repair_faults(sim):
    faults = parse_fault_specs(["remapped=5/3/1/1@1", "retired=4/2/1@0"], 2)
    h100 = sim(gpus=2, faults=faults)
    values, _ = sample(h100, 1, {"remapped_rows"})
    assert values == {
        "remapped_rows_corrected": 5,
        "remapped_rows_uncorrected": 3,
        "remapped_rows_pending": True,
        "remapped_rows_failure": True,
    }
    assert sample(h100, 0, {"remapped_rows"})[0]["remapped_rows_uncorrected"] == 0, "only the GPU named"
    values, _ = sample(h100, 0, {"retired_pages"})
    assert values == {"retired_pages_sbe": 4, "retired_pages_dbe": 2, "retired_pages_pending": True}, (
        "asked for on a board without it: shown anyway (as fake-nvml does)"
    )
    v100 = sim(gpus=2, model="V100", faults=parse_fault_specs(["retired=0/1/1"], 2))
    assert sample(v100, 1, {"retired_pages"})[0]["retired_pages_dbe"] == 1


def test_pcie_downgrade_holds_under_load_and_at_idle(sim):
    faults = parse_fault_specs(["pcie-downgrade=3/8@0", "pcie-downgrade=6/32@1"], 2)
    busy = sim(gpus=2, steady=True, faults=faults)
    assert sample(busy, 0, {"pcie_link"})[0]["pcie_link_gen"] == 3
    assert sample(busy, 0, {"pcie_link"})[0]["pcie_link_width"] == 8
    assert sample(busy, 1, {"pcie_link"})[0]["pcie_link_gen"] == 5, "clamped to the board's maximum"
    assert sample(busy, 1, {"pcie_link"})[0]["pcie_link_width"] == 16
    assert busy.read_static(0).pcie_link_gen_max == 5, "the maximum stays"
    idle = sim(gpus=2, processes_per_gpu=0, faults=faults)
    assert sample(idle, 0, {"pcie_link"})[0]["pcie_link_gen"] == 3, "regardless of load"


def test_pcie_replay_counter_grows_with_the_clock(sim, clock):
    backend = sim(gpus=2, faults=parse_fault_specs(["pcie-replay=10+@0", "pcie-replay=4@1"], 2))
    assert sample(backend, 0, {"pcie_link"})[0]["pcie_replay_counter"] == 10
    clock.advance(2.5)
    assert sample(backend, 0, {"pcie_link"})[0]["pcie_replay_counter"] == 12, "1 per second since open"
    clock.advance(100)
    assert sample(backend, 0, {"pcie_link"})[0]["pcie_replay_counter"] == 112
    assert sample(backend, 1, {"pcie_link"})[0]["pcie_replay_counter"] == 4, "without '+': fixed"


@pytest.mark.parametrize(
    ("mask", "reasons", "share"),
    [
        (0x8, ("hw_slowdown",), 0.45),
        (0x40, ("hw_thermal_slowdown",), 0.45),
        (0x80, ("hw_power_brake_slowdown",), 0.45),
        (0x20, ("sw_thermal_slowdown",), 0.70),
        (0x4, ("sw_power_cap",), 0.85),
        (0x10, ("sync_boost",), 0.95),
        (0x24, ("sw_power_cap", "sw_thermal_slowdown"), 0.70),
        (0x0, (), 1.0),
        (0x1, ("gpu_idle",), None),
        (0x200, ("0x200",), 1.0),
    ],
)
def test_throttle_mask_is_reported_exactly_and_caps_the_sm_clock(sim, mask, reasons, share):
    backend = sim(gpus=2, steady=True, faults=parse_fault_specs([f"throttle={mask:#x}@1"], 2))
    board = backend.model
    values, _ = sample(backend, 1, {"throttle", "clocks", "temperature", "utilization"})
    assert values["utilization_gpu_percent"] >= 5, "busy: the clock would be at max"
    assert values["throttle_reasons"] == reasons
    expected = board.sm_idle_mhz if share is None else int(board.sm_max_mhz * share)
    assert values["clock_sm_mhz"] == expected
    other, _ = sample(backend, 0, {"throttle", "clocks"})
    assert other["clock_sm_mhz"] == board.sm_max_mhz, "only the GPU named"
    if mask & 0x40:
        assert values["temperature_c"] >= board.slowdown_c
    elif mask & 0x20:
        assert values["temperature_c"] >= board.slowdown_c - 2


def test_nvlink_down_and_errors(sim):
    faults = parse_fault_specs(["nvlink-down=0/5@1", "nvlink-errors=7@1"], 2)
    backend = sim(gpus=2, steady=True, faults=faults)
    links = sample(backend, 1, {"nvlink"})[0]["nvlinks"]
    down = [link for link in links if not link.active]
    assert [link.link for link in down] == [0, 5]
    assert all(link.rx_bytes_per_s == link.tx_bytes_per_s == 0 for link in down), "a down link carries nothing"
    assert all(link.rx_bytes_per_s > 0 for link in links if link.active)
    assert all(link.errors == 7 for link in links)
    healthy = sample(backend, 0, {"nvlink"})[0]["nvlinks"]
    assert all(link.active and link.errors == 0 for link in healthy)


def test_unsupported_applies_to_health_groups(sim):
    backend = sim(gpus=1, faults=parse_fault_specs(["unsupported=nvlink+pcie_link"], 1))
    values, unavailable = sample(backend, 0, {"nvlink", "pcie_link", "remapped_rows"})
    assert "nvlinks" not in values and unavailable["nvlinks"] is Reason.NOT_SUPPORTED
    assert unavailable["pcie_link_gen"] is Reason.NOT_SUPPORTED
    assert values["remapped_rows_failure"] is False


# ----------------------------------------------------------------------------- Xid events


def test_events_are_delivered_once_at_their_time(sim, clock):
    start = clock.now
    backend = sim(gpus=3, faults=parse_fault_specs(["xid=13:5@0", "xid=48:5@2", "xid=79:10@1", "xid=31@0"], 3))
    stream = backend.open_events()
    assert stream.notes == {}
    assert stream.wait(0) == [GpuEvent(timestamp=start, gpu_index=0, xid=31)], "AFTER_S 0: due at once"
    assert stream.wait(0) == [], "each event once"
    clock.advance(4.9)
    assert stream.wait(0) == []
    clock.advance(0.1)
    assert stream.wait(0) == [
        GpuEvent(timestamp=start + 5, gpu_index=0, xid=13),
        GpuEvent(timestamp=start + 5, gpu_index=2, xid=48),
    ]
    clock.advance(100)
    assert stream.wait(0) == [GpuEvent(timestamp=start + 10, gpu_index=1, xid=79)], "late readers still get it"
    assert stream.wait(0) == []
    stream.close()
    stream.close()  # idempotent


def test_xid_on_every_gpu_and_streams_are_independent(sim, clock):
    backend = sim(gpus=3, faults=parse_fault_specs(["xid=43:1"], 3))
    first = backend.open_events()
    clock.advance(2)
    assert [e.gpu_index for e in first.wait(0)] == [0, 1, 2]
    second = backend.open_events()
    assert [e.xid for e in second.wait(0)] == [43, 43, 43], "a stream opened after the event still gets it"
    assert first.wait(0) == second.wait(0) == []


def test_events_unsupported_notes_and_withholds_events(sim, clock):
    backend = sim(gpus=3, faults=parse_fault_specs(["events-unsupported@1", "xid=13"], 3))
    stream = backend.open_events()
    assert stream.notes == {1: EVENTS_UNSUPPORTED_NOTE}
    assert EVENTS_UNSUPPORTED_NOTE == "Xid events not supported on this GPU"
    assert [e.gpu_index for e in stream.wait(0)] == [0, 2]
    for specs in (["events-unsupported"], ["events-unsupported@0-1"]):
        everywhere = sim(gpus=2, faults=parse_fault_specs([*specs, "xid=13"], 2)).open_events()
        assert everywhere.notes == {None: EVENTS_UNSUPPORTED_NOTE}, "said once when it holds for every GPU"
        assert everywhere.wait(0) == []


def test_wait_blocks_for_its_timeout_and_close_interrupts_it(sim):
    backend = sim(gpus=1, faults=parse_fault_specs(["xid=13:1000"], 1))
    stream = backend.open_events()
    started = time.monotonic()
    assert stream.wait(0.3) == []
    assert 0.28 <= time.monotonic() - started < 2.0, "waits the timeout out (manual clock: nothing comes)"
    threading.Timer(0.2, stream.close).start()
    started = time.monotonic()
    assert stream.wait(30) == []
    assert time.monotonic() - started < 5, "close() ends the wait"
    assert stream.wait(30) == [], "closed: returns at once"


def test_wait_sees_a_manual_clock_moved_by_another_thread(sim, clock):
    backend = sim(gpus=1, faults=parse_fault_specs(["xid=94:60"], 1))
    stream = backend.open_events()
    threading.Timer(0.1, clock.advance, args=(60,)).start()
    started = time.monotonic()
    events = stream.wait(10)
    assert [e.xid for e in events] == [94]
    assert time.monotonic() - started < 2, "noticed within a recheck, not at the timeout"


def test_wait_on_the_real_clock_sleeps_until_the_event(sim):
    backend = sim(gpus=2, clock=time.time, faults=parse_fault_specs(["xid=62:0.3@1"], 2))
    stream = backend.open_events()
    assert isinstance(stream, SimEventStream)
    started = time.monotonic()
    events = stream.wait(10)
    assert [(e.gpu_index, e.xid) for e in events] == [(1, 62)]
    assert 0.2 <= time.monotonic() - started < 3


def test_xid_79_loses_the_gpu_from_then_on(sim, clock):
    backend = sim(gpus=2, faults=parse_fault_specs(["xid=79:30@1"], 2))
    reading = backend.read_sample(1, {"memory", "nvlink"})
    assert not reading.lost and reading.values["memory_used_bytes"] >= 0
    clock.advance(30)
    reading = backend.read_sample(1, {"memory", "nvlink"})
    assert reading.lost and reading.unavailable["memory_used_bytes"] is Reason.LOST
    assert reading.unavailable["nvlinks"] is Reason.LOST
    processes = backend.read_processes(1)
    assert processes.lost and processes.unavailable is Reason.LOST
    static = backend.read_static(1)
    assert static.name and static.uuid, "the driver still knows who it was"
    assert static.memory_total_bytes is None and static.unavailable["nvlink_count"] is Reason.LOST
    assert not backend.read_sample(0, {"memory"}).lost, "the other GPU keeps reporting"
    other_xid = sim(gpus=1, faults=parse_fault_specs(["xid=48"], 1))
    assert not other_xid.read_sample(0, {"memory"}).lost, "only Xid 79 loses the GPU"


# ----------------------------------------------------------------------------- hangs


def _timed(call):
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def test_hang_blocks_only_its_gpu(sim):
    hang = 0.3
    backend = sim(gpus=2, faults=parse_fault_specs([f"hang={hang}@1"], 2))
    for read in (
        lambda i: backend.read_sample(i, {"memory"}),
        backend.read_processes,
        backend.read_static,
    ):
        slow, _ = _timed(lambda read=read: read(1))
        fast, _ = _timed(lambda read=read: read(0))
        assert slow >= hang
        assert fast < hang / 3, "the other GPU answers at once"
    elapsed, _ = _timed(lambda: backend.inspect_processes({1}))
    assert elapsed < hang / 3, "calls bound to no GPU are not the hung GPU's"


def test_a_hung_gpu_does_not_block_reads_of_another_on_other_threads(sim):
    backend = sim(gpus=2, faults=parse_fault_specs(["hang=0.5@1"], 2))
    done: dict[int, float] = {}
    started = time.perf_counter()

    def read(index):
        backend.read_sample(index, ALL)
        backend.read_processes(index)
        done[index] = time.perf_counter() - started

    threads = [threading.Thread(target=read, args=(i,)) for i in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert done[0] < 0.25 <= 0.5 <= done[1], "GPU 0 answered while GPU 1's call was stuck (no lock held)"


def test_hang_starts_after_its_delay(sim):
    backend = sim(gpus=2, faults=parse_fault_specs(["hang=0.3:0.4@0"], 2))
    before, _ = _timed(lambda: backend.read_sample(0, {"memory"}))
    assert before < 0.15, "not yet"
    time.sleep(0.45)
    after, _ = _timed(lambda: backend.read_sample(0, {"memory"}))
    assert after >= 0.3


def test_hang_without_gpus_blocks_opening_and_every_call(sim):
    elapsed, backend = _timed(lambda: sim(gpus=2, faults=parse_fault_specs(["hang=0.2"], 2)))
    assert elapsed >= 0.2, "opening (nvmlInit) hangs"
    for call in (backend.host_info, backend.device_count, lambda: backend.inspect_processes({1})):
        assert _timed(call)[0] >= 0.2
    assert _timed(lambda: backend.read_sample(1, {"memory"}))[0] >= 0.2


def test_hang_seconds_pick_the_longest_active_hang():
    faults = SimFaults(hang={None: [Hang(1.0, 10.0)], 2: [Hang(3.0, 0.0), Hang(5.0, 20.0)]})
    assert faults.hang_seconds(2, 0.0) == 3.0
    assert faults.hang_seconds(2, 25.0) == 5.0
    assert faults.hang_seconds(0, 5.0) == 0.0
    assert faults.hang_seconds(0, 10.0) == 1.0
    assert faults.hang_seconds(None, 10.0) == 1.0


# ----------------------------------------------------------------------------- stuck and idle-held


def test_stuck_gpu_looks_busy_and_computes_nothing(sim, clock):
    backend = sim(gpus=2, seed=3, faults=parse_fault_specs(["stuck@1"], 2))
    board = backend.model
    for _ in range(5):
        clock.advance(13)
        values, _ = sample(backend, 1)
        assert values["utilization_gpu_percent"] == 100
        assert values["power_draw_w"] < 0.25 * values["power_limit_w"]
        assert values["clock_sm_mhz"] == board.sm_max_mhz
        assert values["pcie_link_gen"] == board.pcie_gen_max, "busy as far as the link knows"
        assert values["temperature_c"] < board.slowdown_c - 20, "it draws little, so it stays cool"
        processes = backend.read_processes(1).processes
        compute = [p for p in processes if p.type.value != "G"]
        assert compute and all(p.sm_percent == 100 for p in compute)
        commands = {backend.inspect_processes({p.pid})[p.pid].command for p in processes}
        assert any("torch.distributed.run" in c for c in commands), "a training job is stuck in it"
    values, _ = sample(backend, 0)
    assert values["utilization_gpu_percent"] < 100 or values["power_draw_w"] > 0.25 * values["power_limit_w"]


def test_idle_held_process_holds_memory_at_zero_sm_for_its_whole_life(sim, clock):
    start = clock.now
    backend = sim(gpus=2, seed=1, faults=parse_fault_specs(["idle-held@0"], 2))
    first = None
    for _ in range(12):
        processes = {p.pid: p for p in backend.read_processes(0).processes}
        held = [p for p in processes.values() if p.gpu_memory_bytes >= 4 * GIB and p.sm_percent == 0]
        assert len(held) == 1, "exactly one idle-held process"
        proc = held[0]
        if first is None:
            first = proc
        assert proc.pid == first.pid and proc.gpu_memory_bytes == first.gpu_memory_bytes, "same process, same memory"
        clock.advance(600)  # two hours in all: jobs around it come and go
    host = backend.inspect_processes({first.pid})[first.pid]
    assert host is not None and host.create_time < start - 3600, "started well before the clock's start"
    assert "ipykernel" in host.command
    assert all(p.gpu_memory_bytes < 4 * GIB or p.sm_percent for p in backend.read_processes(1).processes), (
        "only the GPU named"
    )


def test_idle_held_process_can_be_killed(sim):
    """The remedy the health view suggests works on it: it is a process like any other (seed 2: alice's)."""
    import signal

    backend = sim(gpus=2, seed=2, faults=parse_fault_specs(["idle-held@1"], 2))
    held = next(p for p in backend.read_processes(1).processes if p.gpu_memory_bytes >= 4 * GIB and p.sm_percent == 0)
    host = backend.inspect_processes({held.pid})[held.pid]
    assert host.user == "alice"
    outcome = backend.send_signal(held.pid, host.create_time, signal.SIGKILL)
    assert outcome.ok, outcome.message
    assert held.pid not in {p.pid for p in backend.read_processes(1).processes}


def test_healthy_by_default(sim, clock):
    backend = sim(gpus=4, seed=9)
    for _ in range(10):
        clock.advance(60)
        for index in range(4):
            values, _ = sample(backend, index, HEALTH_GROUPS | {"throttle"})
            assert values["remapped_rows_uncorrected"] == 0 and not values["remapped_rows_failure"]
            assert not values["remapped_rows_pending"]
            assert values["pcie_replay_counter"] == 0 and values["pcie_link_width"] == 16
            assert all(link.active and link.errors == 0 for link in values["nvlinks"])
            assert not {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"} & set(
                values["throttle_reasons"]
            )
    stream = backend.open_events()
    assert stream.notes == {} and stream.wait(0) == []

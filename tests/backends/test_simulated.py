"""The simulated backend: deterministic, plausible, moving, and able to inject every fault."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from nvtopy.backends.simulated.catalog import MODELS, find_model
from nvtopy.backends.simulated.faults import SimFaults, parse_fault_specs
from nvtopy.errors import UsageError
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.model import ALL_GROUPS, Reason
from nvtopy.sources.collector import Collector


def collect(backend):
    return Collector(backend).collect()


def test_same_seed_and_time_give_identical_snapshots(sim):
    a = snapshot_to_dict(collect(sim(gpus=4, seed=7)))
    b = snapshot_to_dict(collect(sim(gpus=4, seed=7)))
    c = snapshot_to_dict(collect(sim(gpus=4, seed=8)))
    for data in (a, b, c):
        data.pop("timestamp")
    assert a == b
    assert a != c


def test_values_are_plausible_over_an_hour(sim, clock):
    backend = sim(gpus=8, seed=3, model="A100-SXM4-80GB")
    collector = Collector(backend)
    seen_process_sets = set()
    for _ in range(120):
        clock.advance(30)
        snapshot = collector.collect()
        for gpu in snapshot.gpus:
            s, st = gpu.sample, gpu.static
            assert 0 <= s.utilization_gpu_percent <= 100
            assert 0 <= s.memory_used_bytes <= st.memory_total_bytes
            assert s.memory_used_bytes + s.memory_free_bytes + s.memory_reserved_bytes == st.memory_total_bytes
            assert 0 < s.power_draw_w <= s.power_limit_w
            assert 20 <= s.temperature_c < st.temperature_slowdown_c
            assert s.pstate in (0, 8)
            total = sum(p.gpu_memory_bytes for p in gpu.processes)
            assert total == s.memory_used_bytes
            for proc in gpu.processes:
                assert proc.user and proc.command and proc.create_time <= snapshot.timestamp
                assert proc.running_seconds >= 0
        seen_process_sets.add(frozenset(p.pid for p in snapshot.processes))
    assert len(seen_process_sets) > 10, "processes must come and go"


def test_energy_counter_is_monotonic(sim, clock):
    backend = sim(gpus=2)
    collector = Collector(backend)
    last = [0, 0]
    for _ in range(20):
        clock.advance(1)
        for gpu in collector.collect().gpus:
            assert gpu.sample.energy_mj > last[gpu.index]
            last[gpu.index] = gpu.sample.energy_mj


def test_models(sim):
    rtx = collect(sim(gpus=1, model="RTX 4090")).gpus[0]
    assert rtx.static.name == "NVIDIA GeForce RTX 4090"
    assert rtx.sample.fan_percent is not None, "a GeForce board has a fan"
    assert rtx.sample.ecc_mode is None and rtx.sample.why("ecc_mode") is Reason.NOT_SUPPORTED
    h100 = collect(sim(gpus=1)).gpus[0]
    assert h100.sample.fan_percent is None and h100.sample.why("fan_percent") is Reason.NOT_SUPPORTED
    with pytest.raises(UsageError, match="unknown GPU model"):
        sim(model="Voodoo2")


def test_fault_lost_gpu_others_keep_reporting(sim, clock):
    backend = sim(gpus=3)
    collector = Collector(backend)
    before = collector.collect()
    assert not before.gpus[1].lost
    backend.set_lost(1)
    clock.advance(1)
    during = collector.collect()
    assert during.gpus[1].lost
    assert during.gpus[1].sample.utilization_gpu_percent is None
    assert during.gpus[1].sample.why("utilization_gpu_percent") is Reason.LOST
    assert during.gpus[1].processes == () and during.gpus[1].processes_unavailable is Reason.LOST
    assert during.gpus[1].static.name == before.gpus[1].static.name, "static identity is kept"
    for index in (0, 2):
        assert not during.gpus[index].lost and during.gpus[index].sample.utilization_gpu_percent is not None
    backend.set_lost(1, lost=False)
    clock.advance(1)
    after = collector.collect()
    assert not after.gpus[1].lost and after.gpus[1].sample.temperature_c is not None


def test_fault_lost_from_start_rereads_static_when_back(sim, clock):
    backend = sim(gpus=2, faults=parse_fault_specs(["lost@1"]))
    collector = Collector(backend)
    first = collector.collect().gpus[1]
    assert first.lost and first.static.memory_total_bytes is None
    assert first.static.unavailable["memory_total_bytes"] is Reason.LOST
    backend.set_lost(1, lost=False)
    backend.faults.lost.clear()
    clock.advance(1)
    again = collector.collect().gpus[1]
    assert not again.lost and again.static.memory_total_bytes is not None


def test_fault_unsupported_groups_per_gpu(sim):
    faults = parse_fault_specs(["unsupported=power+clocks@0", "unsupported=processes@1"])
    snapshot = collect(sim(gpus=2, faults=faults))
    gpu0, gpu1 = snapshot.gpus
    assert gpu0.sample.power_draw_w is None and gpu0.sample.clock_sm_mhz is None
    assert gpu0.sample.why("power_draw_w") is Reason.NOT_SUPPORTED
    assert gpu0.sample.temperature_c is not None and gpu0.processes
    assert gpu1.sample.power_draw_w is not None
    assert gpu1.processes == () and gpu1.processes_unavailable is Reason.NOT_SUPPORTED


def test_fault_no_permission_on_one_gpu(sim):
    snapshot = collect(sim(gpus=2, faults=parse_fault_specs(["no-permission@0"])))
    gpu0, gpu1 = snapshot.gpus
    assert not gpu0.lost
    assert gpu0.static.name is None and gpu0.static.unavailable["name"] is Reason.NO_PERMISSION
    assert gpu0.sample.why("memory_used_bytes") is Reason.NO_PERMISSION
    assert gpu1.sample.memory_used_bytes is not None


def test_fault_process_faults(sim):
    denied = collect(sim(gpus=4, seed=2, faults=parse_fault_specs(["access-denied"])))
    others = [p for p in denied.processes if p.uid != 1000]
    assert others, "the simulation has other users' processes"
    for proc in others:
        assert proc.user is None and proc.command is None
        assert proc.unavailable["command"] is Reason.NO_PERMISSION
    assert all(p.command for p in denied.processes if p.user == "alice")

    nomem = collect(sim(gpus=2, faults=parse_fault_specs(["no-process-memory"])))
    assert nomem.processes and all(p.gpu_memory_bytes is None for p in nomem.processes)
    assert nomem.gpus[0].sample.memory_used_bytes is not None, "the GPU total is still known"

    full = collect(sim(gpus=8, seed=5))
    vanished = collect(sim(gpus=8, seed=5, faults=parse_fault_specs(["vanished"])))
    assert [p.pid for p in vanished.processes] == [p.pid for p in full.processes], "NVML listed them: rows kept"
    gone = [p for p in vanished.processes if p.foreign]
    assert gone, "some pids the host does not have"
    for proc in gone:
        assert proc.user is None and proc.command is None and proc.gpu_memory_bytes is not None
        assert proc.unavailable["command"] is Reason.NOT_VISIBLE

    foreign = collect(sim(gpus=2, faults=parse_fault_specs(["foreign"])))
    assert foreign.processes and all(p.foreign and p.user is None for p in foreign.processes)


def test_fault_ecc_and_hot(sim):
    snapshot = collect(sim(gpus=2, faults=parse_fault_specs(["ecc@1", "hot@0"])))
    hot, ecc = snapshot.gpus
    assert hot.sample.temperature_c >= hot.static.temperature_slowdown_c
    assert "hw_thermal_slowdown" in hot.sample.throttle_reasons
    assert ecc.sample.ecc_uncorrected_volatile > 0
    assert hot.sample.ecc_uncorrected_volatile == 0


def test_fault_spec_parser():
    faults = parse_fault_specs(["lost@1-2", "hot@0,3", "unsupported=fan", "foreign"])
    assert faults.lost == {1, 2} and faults.hot == {0, 3} and faults.foreign
    assert faults.is_unsupported(5, "fan") and not faults.is_unsupported(5, "power")
    assert parse_fault_specs(["lost"]).is_lost(7)
    assert SimFaults().is_lost(0) is False


def test_fault_spec_for_every_gpu_covers_them_all():
    """hot/ecc/no-permission without @GPUS reach every simulated GPU, also beyond the 64th."""
    faults = parse_fault_specs(["hot", "ecc", "no-permission"], gpus=100)
    assert faults.hot == faults.ecc_errors == faults.no_permission == set(range(100))


@pytest.mark.parametrize(
    ("spec", "gpus", "fragment"),
    [
        ("lost@99", 4, "no GPU 99 (the simulation has 4 GPUs: 0-3)"),
        ("hot@1-5", 4, "no GPU 5"),
        ("ecc@0", 0, "the simulation has no GPUs"),
        ("unsupported=fan@2", 2, "no GPU 2"),
        ("slow=1@7", 3, "no GPU 7"),
        ("lost@300", None, "out of range (0-255)"),
        ("lost@0-99999999999", None, "out of range"),  # not a list of 10^11 GPUs
        ("lost@3-1", 4, "empty GPU range"),
        ("lost@1,,2", 4, "bad GPU list"),
        ("lost@", 4, "name the GPUs after '@'"),
        ("foreign@1", 4, "applies to every GPU"),
        ("access-denied@0", 4, "applies to every GPU"),
        ("ecc=5", 4, "takes no '=' argument"),
        ("lost=1", 4, "takes no '=' argument"),
        ("slow", 4, "give the seconds"),
        ("slow=0", 4, "give the seconds"),
        ("slow=-1", 4, "give the seconds"),
        ("slow=nan", 4, "give the seconds"),
        ("slow=inf", 4, "give the seconds"),
        ("slow=fast", 4, "give the seconds"),
    ],
)
def test_fault_spec_errors_are_never_silent(spec, gpus, fragment):
    with pytest.raises(UsageError, match=re.escape(fragment)):
        parse_fault_specs([spec], gpus)


def test_fault_spec_slow():
    faults = parse_fault_specs(["slow=0.5@1", "slow=2@all"], gpus=4)
    assert faults.latency(1) == 2.0 and faults.latency(None) == 2.0
    faults = parse_fault_specs(["slow=0.5@1"], gpus=4)
    assert faults.latency(1) == 0.5 and faults.latency(0) == 0.0
    assert faults.latency(None) == 0.0, "a call bound to no GPU is slow only with slow on every GPU"
    assert parse_fault_specs(["lost@ALL"], gpus=2).lost_all


def test_slow_fault_makes_every_read_slow(sim):
    """slow=S: opening the backend and each read take S seconds of real time; only on the GPUs named."""
    seconds = 0.05
    started = time.perf_counter()
    backend = sim(gpus=2, faults=parse_fault_specs([f"slow={seconds}"], 2))
    assert time.perf_counter() - started >= seconds, "opening it (nvmlInit) is slow too"
    for read in (
        lambda: backend.read_static(0),
        lambda: backend.read_sample(1, {"memory"}),
        lambda: backend.read_processes(0),
        lambda: backend.inspect_processes({1}),
    ):
        started = time.perf_counter()
        read()
        assert time.perf_counter() - started >= seconds
    one = sim(gpus=2, faults=parse_fault_specs([f"slow={seconds}@1"], 2))
    started = time.perf_counter()
    one.read_sample(0, {"memory"})
    one.read_processes(0)
    assert time.perf_counter() - started < seconds, "GPU 0 answers at once"


@pytest.mark.parametrize("name", ["A100", "H100", "NVIDIA", "GB"])
def test_an_ambiguous_model_name_is_an_error_naming_the_candidates(name):
    with pytest.raises(UsageError, match="matches several models") as caught:
        find_model(name)
    matching = [m.name for m in MODELS if name.lower() in m.name.lower()]
    assert len(matching) > 1 and all(m in str(caught.value) for m in matching)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3"), ("rtx  4090", "NVIDIA GeForce RTX 4090"), ("T4", "Tesla T4")],
)
def test_a_model_is_found_by_its_name_or_a_unique_part(name, expected):
    assert find_model(name).name == expected


@pytest.mark.parametrize("name", ["", "  ", "Voodoo2", "A100 40GB"])
def test_an_unknown_model_lists_the_known_ones(name):
    with pytest.raises(UsageError, match="unknown GPU model") as caught:
        find_model(name)
    assert all(m.name in str(caught.value) for m in MODELS)


def test_signal_simulated_process(sim, clock):
    backend = sim(gpus=1, seed=1)
    collector = Collector(backend)
    rows = collector.collect().processes
    mine = next(p for p in rows if p.user == "alice")
    stale = backend.send_signal(mine.pid, mine.create_time + 5, signal.SIGTERM)
    assert not stale.ok and "another process" in stale.message
    outcome = backend.send_signal(mine.pid, mine.create_time, signal.SIGTERM)
    assert outcome.ok, outcome.message
    clock.advance(1)
    assert mine.pid not in {p.pid for p in collector.collect().processes}
    again = backend.send_signal(mine.pid, mine.create_time, signal.SIGTERM)
    assert not again.ok and "already exited" in again.message


def test_signal_other_users_process_is_refused(sim):
    backend = sim(gpus=4, seed=2)
    other = next(p for p in collect(backend).processes if p.user != "alice")
    outcome = backend.send_signal(other.pid, other.create_time, signal.SIGKILL)
    assert not outcome.ok and "not permitted" in outcome.message and other.user in outcome.message


def test_simulated_pid_reuse(sim, clock):
    backend = sim(gpus=1, seed=1)
    collector = Collector(backend)
    proc = next(p for p in collector.collect().processes if p.user == "alice")
    clock.advance(2)
    new_create = backend.simulate_pid_reuse(proc.pid)
    assert new_create is not None and new_create != proc.create_time
    outcome = backend.send_signal(proc.pid, proc.create_time, signal.SIGKILL)
    assert not outcome.ok and "another process" in outcome.message
    row = next(p for p in collector.collect().processes if p.pid == proc.pid)
    assert row.create_time == new_create


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    import psutil

    deadline = time.monotonic() + 10  # Popen returns while the kernel may still be setting up argv
    while not psutil.Process(proc.pid).cmdline() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_real_pids_are_joined_and_killable(sim, child):
    import psutil

    backend = sim(gpus=2, real_pids=[child.pid], processes_per_gpu=0, clock=time.time)
    collector = Collector(backend)
    rows = collector.collect().processes
    assert [p.pid for p in rows] == [child.pid]
    row = rows[0]
    assert row.command.endswith("time.sleep(60)") and row.user == psutil.Process().username()
    assert row.create_time == pytest.approx(psutil.Process(child.pid).create_time())
    outcome = backend.send_signal(row.pid, row.create_time, signal.SIGTERM)
    assert outcome.ok, outcome.message
    child.wait(timeout=10)
    assert collector.collect().processes == ()


def test_call_counts_per_group(sim):
    backend = sim(gpus=2)
    Collector(backend).collect(ALL_GROUPS)
    counts = backend.call_counts()
    assert counts["memory"] == 2 and counts["processes"] == 2 and counts["static"] == 2

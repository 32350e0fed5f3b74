"""Host pids mapped to local processes inside a container (nvtopy.backends.host.pidmap), on fixture /proc trees."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from nvtopy.backends.host.pidmap import GpuPids, PidMapper, ProcView, unmapped_hint
from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.formats.contract import dumps
from nvtopy.formats.writers import PROCESS_FIELDS, CsvWriter, JsonlWriter
from nvtopy.model import GpuProcess
from nvtopy.sources.collector import Collector
from nvtopy.sources.replay import load_recording

from ..builders import GIB, gpu_process
from ..conftest import needs_fake_nvml
from ..fake_pynvml import FakeGpu, FakeNvml, FakeProcess
from ..waiting import exec_shown

BTIME = 1_700_000_000
SELF = 1


def add_proc(root: Path, pid: int, ticks: int, fds: tuple[str, ...] = (), *, unreadable: bool = False) -> None:
    """A /proc/<pid> with a stat line (start time ``ticks`` after boot, 100 Hz) and fd links."""
    directory = root / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stat").write_text(f"{pid} (a (b) c) S " + " ".join(["0"] * 18) + f" {ticks} 0 0\n")
    fd = directory / "fd"
    if unreadable:
        fd.write_text("")  # listing it fails like another user's fd directory
        return
    fd.mkdir(exist_ok=True)
    for link in fd.iterdir():  # redefining a pid replaces its fds
        link.unlink()
    for number, target in enumerate(fds, start=3):
        os.symlink(target, fd / str(number))


def start(ticks: int) -> float:
    return BTIME + ticks / 100


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    (tmp_path / "stat").write_text(f"cpu 1 2 3\nbtime {BTIME}\n")
    add_proc(tmp_path, SELF, 10, ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"))  # nvtopy itself: excluded
    add_proc(tmp_path, 7, 5_000, ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/null"))
    add_proc(tmp_path, 8, 9_000, ("/dev/nvidia1", "/dev/nvidia-uvm"))
    return tmp_path


def mapper(root: Path, **kwargs) -> PidMapper:
    view_args = {k: kwargs.pop(k) for k in ("max_pids", "budget_s", "clock") if k in kwargs}
    return PidMapper(ProcView(str(root), self_pid=SELF, clock_ticks=100, **view_args), rescan_s=0, **kwargs)


def local_pids(mappings) -> dict[int, int]:
    return {host: m.local_pid for host, m in mappings.items()}


def test_only_holder_of_the_device_maps(proc):
    found = mapper(proc).update([GpuPids(0, (4242,)), GpuPids(1, (5353,))])
    assert local_pids(found) == {4242: 7, 5353: 8}
    assert found[4242].rule == "device" and found[4242].local_start == start(5_000)


def test_two_holders_do_not_map(proc):
    add_proc(proc, 9, 6_000, ("/dev/nvidia0", "/dev/nvidia-uvm"))
    assert local_pids(mapper(proc).update([GpuPids(0, (4242,)), GpuPids(1, (5353,))])) == {5353: 8}


def test_a_holder_without_nvidia_uvm_is_no_cuda_process(proc):
    # an nvidia-smi holds /dev/nvidia0 but has no CUDA context: pid 7 (nvidia0 + nvidia-uvm) is still the one
    add_proc(proc, 9, 6_000, ("/dev/nvidiactl", "/dev/nvidia0"))
    found = mapper(proc).update([GpuPids(0, (4242,)), GpuPids(1, (5353,))])
    assert local_pids(found) == {4242: 7, 5353: 8} and found[4242].rule == "device"


def test_the_only_holder_without_nvidia_uvm_maps_nothing(proc):
    add_proc(proc, 7, 5_000, ("/dev/nvidiactl", "/dev/nvidia0"))  # an nvidia-smi, and no CUDA process
    add_proc(proc, 10, 8_000, ("/dev/nvidia-uvm",))  # nvidia-uvm without the GPU's node: not its holder either
    assert mapper(proc).update([GpuPids(0, (4242,))]) == {}


def test_two_nvml_processes_on_the_gpu_do_not_map_by_device(proc):
    assert mapper(proc).update([GpuPids(0, (4242, 4343))]) == {}


def test_one_local_process_for_two_host_pids_maps_neither(proc):
    add_proc(proc, 8, 9_000, ())
    add_proc(proc, 7, 5_000, ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm"))
    assert mapper(proc).update([GpuPids(0, (4242,)), GpuPids(1, (5353,))]) == {}
    # the same host pid on both GPUs is one process using both: that maps
    assert local_pids(mapper(proc).update([GpuPids(0, (4242,)), GpuPids(1, (4242,))])) == {4242: 7}


def test_unreadable_process_proves_nothing(proc):
    add_proc(proc, 9, 6_000, unreadable=True)  # it might hold /dev/nvidia0
    assert mapper(proc).update([GpuPids(0, (4242,))]) == {}


def test_scan_cut_short_proves_nothing(proc):
    assert mapper(proc, max_pids=2).update([GpuPids(0, (4242,))]) == {}
    ticks = iter(range(0, 1000, 10))  # every clock read is 10 s later: over the budget at once
    assert mapper(proc, budget_s=1.0, clock=lambda: float(next(ticks))).update([GpuPids(0, (4242,))]) == {}


def test_accounting_start_time_maps(proc):
    found = mapper(proc).update([GpuPids(None, (4242, 4343), {4242: int(start(5_000) * 1e6) + 300_000})])
    assert local_pids(found) == {4242: 7} and found[4242].rule == "accounting"


def test_ambiguous_accounting_does_not_map(proc):
    add_proc(proc, 9, 5_050, ())  # half a second after pid 7: both within the tolerance
    at = int(start(5_000) * 1e6)
    assert mapper(proc).update([GpuPids(None, (4242,), {4242: at})]) == {}
    # two host pids claiming the one local process that matches: neither maps
    add_proc(proc, 9, 20_000, ())
    assert mapper(proc).update([GpuPids(None, (4242, 4343), {4242: at, 4343: at + 100_000})]) == {}


def test_accounting_shared_with_another_host_pid_does_not_map(proc):
    add_proc(proc, 9, 5_150, ())
    # 4242 matches only pid 7; 4343 matches pid 7 and pid 9: pid 7 is not proven to be 4242
    at = {4242: int(start(4_940) * 1e6), 4343: int(start(5_075) * 1e6)}
    assert mapper(proc).update([GpuPids(None, (4242, 4343), at)]) == {}


def test_accounting_contradicting_the_device_rule_maps_nothing(proc):
    # pid 7 is the only holder, but the host pid started with pid 8: no rule can be trusted
    assert mapper(proc).update([GpuPids(0, (4242,), {4242: int(start(9_000) * 1e6)})]) == {}
    # ... or with no local process at all
    assert mapper(proc).update([GpuPids(0, (4242,), {4242: int(start(90_000) * 1e6)})]) == {}


def test_mapping_lasts_while_the_local_process_is_the_same(proc):
    pids = mapper(proc)
    assert local_pids(pids.update([GpuPids(0, (4242,))])) == {4242: 7}
    assert pids.local(7, start(5_000)) is not None and pids.local(7, start(5_000) + 5) is None
    assert pids.local(8, start(9_000)) is None and pids.local(7, None) is None
    add_proc(proc, 9, 6_000, ("/dev/nvidia0", "/dev/nvidia-uvm"))  # a second holder later does not undo a proof
    assert local_pids(pids.update([GpuPids(0, (4242,))])) == {4242: 7}
    add_proc(proc, 7, 7_777, ("/dev/nvidia0", "/dev/nvidia-uvm"))  # pid 7 reused by another process: the mapping goes
    assert pids.update([GpuPids(0, (4242,))]) == {}
    assert pids.local(7, start(5_000)) is None


def row(pid: int, memory: int | None, *, foreign: bool) -> GpuProcess:
    return gpu_process(0, pid, bare=True, gpu_memory_bytes=memory, foreign=foreign)


def test_hint_names_unmapped_gpu_memory():
    rows = [row(4242, 2 * GIB, foreign=True), row(4343, GIB, foreign=True), row(7, 5 * GIB, foreign=False)]
    hint = unmapped_hint(rows)
    assert hint is not None and hint.startswith("2 processes of another PID namespace not mapped")
    assert "3.0 GiB of GPU memory" in hint and "4242, 4343" in hint and "never signalled" in hint
    assert unmapped_hint([row(7, GIB, foreign=False)]) is None
    assert "not reported" in (unmapped_hint([row(1, None, foreign=True), row(2, GIB, foreign=True)]) or "")


# ------------------------------------------------------------------ through the NVML backend and the collector


@pytest.fixture
def sleepers():
    """Two ``sleep 30``, once the kernel shows their argv (a row read before has the name, not the command)."""
    procs = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    for proc in procs:
        exec_shown(proc.pid)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def real_ticks(pid: int) -> int:
    return round((psutil.Process(pid).create_time() - psutil.boot_time()) * 100)


def container(tmp_path: Path, holders: dict[int, tuple[str, ...]]) -> PidMapper:
    """A fixture /proc whose pids are real local processes (so psutil joins and signals them)."""
    (tmp_path / "stat").write_text(f"btime {psutil.boot_time():.0f}\n")
    for pid, fds in holders.items():
        add_proc(tmp_path, pid, real_ticks(pid), fds)
    view = ProcView(str(tmp_path), self_pid=os.getpid(), clock_ticks=100)
    view._btime = psutil.boot_time()  # exact, as psutil computes create times
    return PidMapper(view, rescan_s=0)


def test_mapped_row_is_the_local_process_and_only_it_is_signalled(tmp_path, sleepers):
    mapped, other = sleepers
    fake = FakeNvml([FakeGpu(0), FakeGpu(1)])
    fake.gpus[0].compute_procs = [FakeProcess(4_000_001, 3 * GIB)]
    fake.gpus[1].compute_procs = [FakeProcess(4_000_002, 2 * GIB)]  # nobody here holds /dev/nvidia1
    pid_mapper = container(tmp_path, {mapped.pid: ("/dev/nvidia0", "/dev/nvidia-uvm"), other.pid: ()})
    backend = NvmlBackend(nvml=fake, foreign_pids=True, close_at_exit=False, pid_mapper=pid_mapper)
    try:
        gpu0, gpu1 = Collector(backend).collect().gpus
        (row0,) = gpu0.processes
        assert (row0.pid, row0.host_pid, row0.foreign) == (mapped.pid, 4_000_001, False)
        assert row0.command == "sleep 30" and row0.user == psutil.Process().username()
        assert row0.gpu_memory_bytes == 3 * GIB and gpu0.processes_hint is None
        (row1,) = gpu1.processes
        assert (row1.pid, row1.host_pid, row1.foreign, row1.command) == (4_000_002, None, True, None)
        assert gpu1.processes_hint is not None and "2.0 GiB of GPU memory" in gpu1.processes_hint
        assert fake.calls["nvmlDeviceGetMinorNumber"] == 2

        # an unmapped local process, with its true start time: refused
        refused = backend.send_signal(other.pid, psutil.Process(other.pid).create_time(), signal.SIGTERM)
        assert not refused.ok and "not mapped" in refused.message and other.poll() is None
        # the mapped pid, but not the process that was proven (start time): refused
        assert not backend.send_signal(mapped.pid, row0.create_time + 5, signal.SIGTERM).ok
        # the host pid of an unmapped row: refused
        assert not backend.send_signal(4_000_002, None, signal.SIGTERM).ok
        assert mapped.poll() is None
        sent = backend.send_signal(row0.pid, row0.create_time, signal.SIGTERM)
        assert sent.ok, sent.message
        assert mapped.wait(5) == -signal.SIGTERM
    finally:
        backend.close()


def test_accounting_through_the_backend(tmp_path, sleepers):
    mapped, other = sleepers
    fake = FakeNvml([FakeGpu(0), FakeGpu(1)])
    started_us = int(psutil.Process(mapped.pid).create_time() * 1e6)
    fake.gpus[0].compute_procs = [FakeProcess(4_000_001), FakeProcess(4_000_003)]  # two: no device rule
    fake.gpus[0].accounting = {4_000_001: started_us}
    fake.gpus[1].compute_procs = [FakeProcess(4_000_002)]  # accounting off here (NotSupported)
    holders = {mapped.pid: ("/dev/nvidia0", "/dev/nvidia-uvm")}
    if abs(real_ticks(other.pid) - real_ticks(mapped.pid)) > 100:
        holders[other.pid] = ()
    backend = NvmlBackend(nvml=fake, foreign_pids=True, close_at_exit=False, pid_mapper=container(tmp_path, holders))
    try:
        collector = Collector(backend)
        rows = {p.host_pid or p.pid: p for g in collector.collect().gpus for p in g.processes}
        assert rows[4_000_001].pid == mapped.pid and not rows[4_000_001].foreign
        assert rows[4_000_003].foreign and rows[4_000_002].foreign
        asked = fake.gpu_calls[("nvmlDeviceGetAccountingStats", 1)]
        collector.collect()
        assert fake.gpu_calls[("nvmlDeviceGetAccountingStats", 1)] == asked == 1  # NotSupported remembered
    finally:
        backend.close()


def test_host_pid_in_json_csv_and_a_replayed_recording(tmp_path, sleepers):
    mapped, _ = sleepers
    fake = FakeNvml([FakeGpu(0), FakeGpu(1)])
    fake.gpus[0].compute_procs = [FakeProcess(4_000_001, 3 * GIB)]
    fake.gpus[1].compute_procs = [FakeProcess(4_000_002, 2 * GIB)]
    pid_mapper = container(tmp_path, {mapped.pid: ("/dev/nvidia0", "/dev/nvidia-uvm")})
    backend = NvmlBackend(nvml=fake, foreign_pids=True, close_at_exit=False, pid_mapper=pid_mapper)
    try:
        snapshot = Collector(backend).collect()
    finally:
        backend.close()
    want = {(mapped.pid, 4_000_001, False), (4_000_002, None, True)}
    assert {(p.pid, p.host_pid, p.foreign) for p in snapshot.processes} == want

    data = json.loads(dumps(snapshot))
    assert {(p["pid"], p["host_pid"], p["foreign"]) for g in data["gpus"] for p in g["processes"]} == want

    out = io.StringIO()
    CsvWriter(out, list(PROCESS_FIELDS), processes=True, header=True).write(snapshot)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert {(row["pid"], row["host_pid"]) for row in rows} == {(str(mapped.pid), "4000001"), ("4000002", "")}

    recording = tmp_path / "mapped.jsonl"
    with recording.open("w", encoding="utf-8") as file:
        JsonlWriter(file, None, processes=True).write(snapshot)
    (replayed,) = load_recording(str(recording)).snapshots
    assert {(p.pid, p.host_pid, p.foreign) for p in replayed.processes} == want
    assert json.loads(dumps(replayed))["gpus"] == data["gpus"]


_REAL_SCRIPT = """
import json, sys
from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.backends.host.pidmap import PidMapper, ProcView
root, a, b, btime = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
view = ProcView(root, self_pid=1, clock_ticks=100)
view._btime = btime
backend = NvmlBackend(foreign_pids=True, close_at_exit=False, pid_mapper=PidMapper(view, rescan_s=0))
mapped = backend.map_host_pids({0: {a}, 1: {b}})
print(json.dumps({"mapped": mapped, "calls": backend.call_counts()}))
backend.close()
"""


@needs_fake_nvml
def test_real_bindings_on_the_fake_driver(tmp_path, sleepers, fake_lib):
    """nvmlDeviceGetMinorNumber and nvmlDeviceGetAccountingStats through the official bindings."""
    import sys

    a, b = (p.pid for p in sleepers)
    root = tmp_path / "proc"
    (root).mkdir()
    (root / "stat").write_text(f"btime {psutil.boot_time():.0f}\n")
    add_proc(root, 7, real_ticks(a), ("/dev/nvidia0", "/dev/nvidia-uvm"))  # the container's view of host pid a
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=fake_lib,
        FAKE_NVML_GPUS="2",
        FAKE_NVML_PIDS=f"{a},{b}",
        FAKE_NVML_ACCOUNTING="1",
    )
    result = subprocess.run(
        [sys.executable, "-c", _REAL_SCRIPT, str(root), str(a), str(b), repr(psutil.boot_time())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # a: the only process of GPU 0, pid 7 the only holder of /dev/nvidia0, accounting agrees.
    # b: its start time matches pid 7 as well, which a also matches: not unique, so unmapped.
    assert out["mapped"] == {str(a): 7}
    assert out["calls"]["nvmlDeviceGetMinorNumber"] == 2 and out["calls"]["nvmlDeviceGetAccountingStats"] == 2

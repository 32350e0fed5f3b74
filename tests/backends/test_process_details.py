"""What the process screen reads beyond the snapshot (``Backend.process_details``), and the parent pids
the tree view hangs processes by (``HostProcess.ppid`` / ``parents``).

The psutil path runs against real child processes started in a temporary directory (a known cwd);
refusals (permission, another PID namespace, a reused pid) are staged with monkeypatch or the
simulated backend's faults.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from nvtopy.backends.host import processes as hostprocs
from nvtopy.backends.host.processes import PsutilInspector, read_process_details
from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import CHILDREN_SHOWN, ProcessDetails, Reason
from nvtopy.sources.poller import Poller

from ..fake_pynvml import FakeNvml, FakeProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _settled(pid: int, argv_end: str) -> None:
    """Wait until ``pid`` has exec'd (its argv ends with ``argv_end``)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).cmdline()[-1:] == [argv_end]:
                return
        except psutil.Error:
            pass
        time.sleep(0.01)
    raise AssertionError("child did not start")


@pytest.fixture
def sleeper(tmp_path):
    """``sleep 60`` started in ``tmp_path`` (its cwd), with CUDA_VISIBLE_DEVICES=1,0 in its environment."""
    child = subprocess.Popen(["sleep", "60"], cwd=tmp_path, env={**os.environ, "CUDA_VISIBLE_DEVICES": "1,0"})
    _settled(child.pid, "60")
    yield child
    child.kill()
    child.wait(timeout=10)


@pytest.fixture
def family(tmp_path):
    """A shell in ``tmp_path`` with two ``sleep`` children: (shell, [child pids])."""
    script = "sleep 61 & sleep 62 & wait"
    shell = subprocess.Popen(["sh", "-c", script], cwd=tmp_path)
    deadline = time.monotonic() + 10
    kids: list[int] = []
    while time.monotonic() < deadline:
        kids = sorted(c.pid for c in psutil.Process(shell.pid).children() if c.name() == "sleep")
        if len(kids) == 2:
            break
        time.sleep(0.01)
    assert len(kids) == 2
    yield shell, kids
    for pid in kids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    shell.kill()
    shell.wait(timeout=10)


def started(pid: int) -> float:
    return psutil.Process(pid).create_time()


# --------------------------------------------------------------------- psutil (the NVML path)


def test_a_real_process_in_full(sleeper, tmp_path):
    details = read_process_details(sleeper.pid, started(sleeper.pid))
    assert isinstance(details, ProcessDetails)
    assert details.pid == sleeper.pid and details.create_time == started(sleeper.pid)
    assert details.cmdline == ("sleep", "60")
    assert details.cwd == str(tmp_path)
    assert details.exe is not None and os.path.basename(details.exe).startswith(("sleep", "coreutils"))
    assert details.cuda_visible_devices == "1,0" and details.environ_readable
    assert details.status in ("sleeping", "running") and details.threads == 1
    assert details.user is not None and details.uid == os.getuid()
    # Parents: this test process first, up to pid 1 (included).
    assert details.parents[0].pid == os.getpid()
    assert details.parents[0].name == psutil.Process().name()
    assert details.parents[-1].pid == 1
    assert details.children == () and details.children_count == 0
    assert not details.unavailable


def test_children_are_listed_by_pid_with_names(family):
    shell, kids = family
    details = read_process_details(shell.pid, started(shell.pid))
    assert details is not None
    assert [c.pid for c in details.children] == kids and details.children_count == 2
    assert {c.name for c in details.children} == {"sleep"}


def test_children_beyond_the_limit_are_counted_not_listed(family, monkeypatch):
    shell, kids = family
    monkeypatch.setattr(hostprocs, "CHILDREN_SHOWN", 1)
    details = read_process_details(shell.pid, started(shell.pid))
    assert details is not None and [c.pid for c in details.children] == kids[:1] and details.children_count == 2
    assert CHILDREN_SHOWN >= 2


def test_a_reused_pid_gives_nothing(sleeper):
    assert read_process_details(sleeper.pid, started(sleeper.pid) - 5.0) is None
    assert read_process_details(sleeper.pid, None) is None, "no start time: nothing to check it against"


def test_a_gone_process_gives_nothing(sleeper):
    when = started(sleeper.pid)
    sleeper.kill()
    sleeper.wait(timeout=10)
    assert read_process_details(sleeper.pid, when) is None


def test_no_permission_leaves_fields_none_with_the_reason(sleeper, monkeypatch):
    """Another user's process: cwd, executable and environment are unreadable (EACCES); the rest stays."""

    def denied(self, *args, **kwargs):
        raise psutil.AccessDenied(self.pid)

    for method in ("cwd", "exe", "environ"):
        monkeypatch.setattr(psutil.Process, method, denied)
    details = read_process_details(sleeper.pid, started(sleeper.pid))
    assert details is not None
    assert details.cwd is None and details.exe is None and details.cuda_visible_devices is None
    assert not details.environ_readable
    assert details.unavailable == {
        "cwd": Reason.NO_PERMISSION,
        "exe": Reason.NO_PERMISSION,
        "cuda_visible_devices": Reason.NO_PERMISSION,
    }
    assert details.cmdline == ("sleep", "60") and details.parents[0].pid == os.getpid()


def test_pid_1_is_read_without_raising():
    details = read_process_details(1, started(1))
    assert details is not None and details.parents == ()


def test_the_inspector_reports_parents(family):
    shell, kids = family
    host = PsutilInspector().inspect(kids)
    for pid in kids:
        info = host[pid]
        assert info is not None and info.ppid == shell.pid
        chain = [p.pid for p in info.parents]
        assert chain[:2] == [shell.pid, os.getpid()], "nearest first"
        assert 1 not in chain, "pid 1 is not in the tree's chain"
        assert info.parents[0].name == "sh"


def test_the_inspector_reads_ancestors_once_per_call_and_again_after_a_while(family, monkeypatch):
    shell, kids = family
    clock = [1000.0]
    inspector = PsutilInspector(clock=lambda: clock[0])
    reads: list[int] = []
    original = hostprocs._ancestor

    def counting(pid, memo):
        if pid not in memo:
            reads.append(pid)
        return original(pid, memo)

    monkeypatch.setattr(hostprocs, "_ancestor", counting)
    inspector.inspect(kids)
    assert reads.count(shell.pid) == 1, "two children, one shared parent: read once"
    reads.clear()
    clock[0] += 1
    inspector.inspect(kids)
    assert reads == [], "a steady refresh reads no ancestor"
    clock[0] += hostprocs._PARENTS_TTL_S + 1
    inspector.inspect(kids)
    assert shell.pid in reads, "read again after a while (an ancestor may have been re-parented)"


# --------------------------------------------------------------------- backends


def test_nvml_backend_reads_a_local_pid(sleeper, tmp_path, clock):
    fake = FakeNvml(1)
    fake.gpus[0].compute_procs = [FakeProcess(sleeper.pid)]
    backend = NvmlBackend(nvml=fake, foreign_pids=False, clock=clock)
    try:
        details = backend.process_details(sleeper.pid, started(sleeper.pid))
        assert details is not None and details.cwd == str(tmp_path)
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 0, "a host read: no driver call"
    finally:
        backend.close()


def test_nvml_backend_never_reads_a_pid_of_another_namespace(sleeper, clock, monkeypatch):
    """In a container without --pid=host NVML's pids are the host's: a local pid with that number is another
    process, so nothing is read for it (unless a proven mapping names it, as for signals)."""
    fake = FakeNvml(1)
    backend = NvmlBackend(nvml=fake, foreign_pids=True, clock=clock)
    calls: list[int] = []
    monkeypatch.setattr("nvtopy.backends.nvml.backend.read_process_details", lambda pid, ct: calls.append(pid))
    try:
        assert backend.process_details(sleeper.pid, started(sleeper.pid)) is None
        assert calls == []
    finally:
        backend.close()


def _sim_row(backend, wanted=lambda p: True):
    snapshot = Poller(backend).poll_once(slow=True)
    return next(p for p in snapshot.processes if wanted(p))


def test_simulated_details_are_deterministic_and_plausible(sim):
    backend = sim(gpus=2, seed=4)
    row = _sim_row(backend)
    details = backend.process_details(row.pid, row.create_time)
    assert details is not None and details == backend.process_details(row.pid, row.create_time)
    assert " ".join(details.cmdline or ()) == row.command
    assert details.cwd and details.exe and details.user == row.user
    assert details.parents[-1].pid == 1 and [p.pid for p in details.parents[:-1]] == [p.pid for p in row.parents]
    assert row.ppid == (row.parents[0].pid if row.parents else 1)
    assert details.cuda_visible_devices == row.cuda_visible_devices


def test_simulated_details_refuse_a_reused_pid_and_another_namespace(sim):
    backend = sim(gpus=2, seed=4)
    row = _sim_row(backend)
    assert backend.process_details(row.pid, row.create_time + 7) is None
    assert backend.process_details(123, 1.0) is None, "not a process of the simulation"
    foreign = sim(gpus=2, seed=4, faults=parse_fault_specs(["foreign"]))
    assert foreign.process_details(row.pid, row.create_time) is None


def test_simulated_other_users_cwd_is_unreadable_with_the_access_denied_fault(sim):
    backend = sim(gpus=4, seed=4, faults=parse_fault_specs(["access-denied"]))
    theirs = _sim_row(backend, lambda p: p.user is None)  # another user's: no user or command either
    details = backend.process_details(theirs.pid, theirs.create_time)
    assert details is not None and details.cwd is None and details.exe is None
    assert details.unavailable["cwd"] is Reason.NO_PERMISSION and not details.environ_readable


def test_simulated_real_pids_are_read_with_psutil(sim, sleeper, tmp_path):
    backend = sim(gpus=1, real_pids=[sleeper.pid])
    row = _sim_row(backend, lambda p: p.pid == sleeper.pid)
    assert row.ppid == os.getpid() and row.parents[0].pid == os.getpid()
    details = backend.process_details(row.pid, row.create_time)
    assert details is not None and details.cwd == str(tmp_path)


def test_simulated_stuck_ranks_share_their_launcher(sim):
    backend = sim(gpus=4, seed=4, faults=parse_fault_specs(["stuck@1", "stuck@2"]))
    snapshot = Poller(backend).poll_once(slow=True)
    ranks = [p for p in snapshot.processes if p.parents and p.parents[0].name == "torchrun"]
    assert sorted(p.gpu_index for p in ranks) == [1, 2]
    assert len({p.ppid for p in ranks}) == 1


# --------------------------------------------------------------------- the poller


def test_the_poller_reads_details_on_its_thread_without_a_poll(sim):
    backend = sim(gpus=1, seed=4)
    threads: list[str] = []
    original = backend.process_details

    def spy(pid, create_time):
        threads.append(threading.current_thread().name)
        return original(pid, create_time)

    backend.process_details = spy
    poller = Poller(backend, interval=30.0)
    poller.start()
    try:
        deadline = time.monotonic() + 10
        while poller.latest is None and time.monotonic() < deadline:
            time.sleep(0.01)
        row = poller.latest.processes[0]
        polls = poller.polls
        details = poller.process_details(row.pid, row.create_time).result(timeout=10)
        assert details is not None and details.pid == row.pid
        assert threads == ["nvtopy-poller"]
        time.sleep(0.2)
        assert poller.polls == polls, "a read that changes nothing is followed by no poll"
        poller.refresh()  # the thread still polls when asked
        deadline = time.monotonic() + 10
        while poller.polls == polls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.polls == polls + 1
    finally:
        poller.stop()


def test_sources_without_a_host_answer_none():
    from nvtopy.sources.base import SnapshotSource

    source = SnapshotSource(1.0)
    assert not source.can_inspect and source.process_details(1, 1.0).result(timeout=0) is None

"""A driver call stuck on one GPU stops nothing else (issue 12: "a hung driver freezes nothing").

The collector reads each GPU on its own worker thread (``nvtopy.sources.workers``)
when given a deadline: a GPU whose call is outstanding keeps its last values and,
past ``stall_after``, is "not responding" (FAIL) while the others keep updating;
``--once`` and the exporter give up on it after ``--timeout``, ``log`` marks it in the
first interval it misses; a hung ``nvmlInit`` is one line and exit 1.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.model import Reason, Severity
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.sources.workers import GpuWorkers

from ..builders import run_command
from ..conftest import ManualClock
from ..waiting import until

pytestmark = pytest.mark.timing  # a GPU that hangs, and how soon each command goes on without it


class Stuck(SimulatedBackend):
    """Simulated GPUs where every read of the GPUs in ``stuck`` blocks until ``release`` is set."""

    def __init__(self, *args, stuck: set[int], static_too: bool = False, **kwargs) -> None:
        self.stuck = set(stuck)
        self.release = threading.Event()
        self.static_too = static_too
        self.reads: dict[int, int] = {}
        self.process_reads: dict[int, int] = {}
        super().__init__(*args, **kwargs)

    def _block(self, index: int) -> None:
        if index in self.stuck:
            self.release.wait(30)

    def read_static(self, index):
        if self.static_too:
            self._block(index)
        return super().read_static(index)

    def read_sample(self, index, groups):
        self.reads[index] = self.reads.get(index, 0) + 1
        self._block(index)
        return super().read_sample(index, groups)

    def read_processes(self, index, *, utilization=True):
        self.process_reads[index] = self.process_reads.get(index, 0) + 1
        self._block(index)
        return super().read_processes(index, utilization=utilization)


def answered(collector: Collector, index: int) -> None:
    """Wait (bounded) until GPU ``index``'s released read has answered: its worker holds no job.

    Why: a collect started while the released thread has not yet run finds the GPU still busy, starts no read of
    it and shows it stalled; a fixed sleep (0.2 s) hoped the thread had run by then.
    """
    workers = collector._workers
    assert workers is not None
    until(lambda: workers.busy_since(index) is None, 10.0, f"GPU {index}'s late answer")


@pytest.fixture
def stuck_backend():
    made: list[Stuck] = []

    def make(stuck: set[int] | None = None, **kwargs) -> Stuck:
        stuck = {1} if stuck is None else stuck
        kwargs.setdefault("gpus", 3)
        kwargs.setdefault("seed", 3)
        backend = Stuck(stuck=stuck, **kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.release.set()  # let the worker threads end


# --------------------------------------------------------------------------- the workers


def test_one_job_per_gpu_and_a_deadline_that_holds():
    workers = GpuWorkers()
    gate = threading.Event()
    try:
        assert workers.start(0, lambda: "fast")
        assert workers.start(1, lambda: gate.wait(10) and "slow")
        assert not workers.start(1, lambda: "again"), "a GPU with a call in flight gets no second one"
        started = time.monotonic()
        workers.wait([0, 1], time.monotonic() + 0.3)
        waited = time.monotonic() - started
        assert 0.25 <= waited < 1.0
        assert workers.take(0) == ("fast", None)
        assert workers.take(0) is None, "an answer is taken once"
        assert workers.busy_since(1) is not None and workers.take(1) is None
        gate.set()
        workers.wait([1], time.monotonic() + 5)
        assert workers.take(1) == ("slow", None)
        assert workers.busy_since(1) is None
    finally:
        gate.set()
        workers.close()


def test_a_job_that_raises_hands_its_exception_over():
    workers = GpuWorkers()
    try:
        workers.start(0, lambda: 1 / 0)
        workers.wait([0], time.monotonic() + 5)
        value, error = workers.take(0)
        assert value is None and isinstance(error, ZeroDivisionError)
    finally:
        workers.close()


# --------------------------------------------------------------------------- the collector


def test_a_stuck_gpu_is_marked_and_the_others_are_read(stuck_backend):
    backend = stuck_backend({1})
    collector = Collector(backend)
    started = time.monotonic()
    snapshot = collector.collect(deadline=0.3, stall_after=0.0)
    assert time.monotonic() - started < 1.5
    gpus = {gpu.index: gpu for gpu in snapshot.gpus}
    assert [g.index for g in snapshot.gpus] == [0, 1, 2], "the stuck GPU keeps its place"
    assert gpus[0].health.responding and gpus[2].health.responding
    assert gpus[0].sample.utilization_gpu_percent is not None
    stuck = gpus[1]
    assert not stuck.health.responding
    assert stuck.health.verdict is Severity.FAIL
    assert stuck.health.findings[0].code == "not-responding"
    assert stuck.sample.why("utilization_gpu_percent") is Reason.NOT_RESPONDING, "nothing read yet: not a 0"
    collector.close()


def test_a_stuck_gpu_gets_no_second_call_and_comes_back_with_its_late_answer(stuck_backend):
    backend = stuck_backend({1})
    collector = Collector(backend)
    first = collector.collect(deadline=0.2, stall_after=0.0)
    second = collector.collect(deadline=0.2, stall_after=0.0)
    assert backend.reads[1] == 1, "one call in flight per GPU, never a pile of stuck threads"
    assert backend.reads[0] == 2
    assert not second.gpu(1).health.responding
    assert second.gpu(1).health.stalled_seconds > first.gpu(1).health.stalled_seconds
    backend.release.set()
    answered(collector, 1)
    third = collector.collect(deadline=2.0, stall_after=0.0)
    assert third.gpu(1).health.responding
    assert third.gpu(1).sample.utilization_gpu_percent is not None
    assert backend.reads[1] == 2
    collector.close()


def test_a_stuck_gpu_costs_the_poll_nothing_after_its_first_wait(stuck_backend):
    """Only reads started now are waited for: once GPU 1 is stuck, a collection with a long deadline returns
    as soon as the others answer (waiting for the stuck read again would cost every poll the whole deadline)."""
    backend = stuck_backend({1})
    collector = Collector(backend)
    try:
        collector.collect(deadline=0.3, stall_after=0.0)  # the one wait the stuck GPU costs
        started = time.monotonic()
        for _ in range(3):
            snapshot = collector.collect(deadline=10.0, stall_after=0.0)
            assert not snapshot.gpu(1).health.responding
        elapsed = time.monotonic() - started
        assert elapsed < 5.0, f"three polls took {elapsed:.1f} s: each waited for the stuck GPU again"
        assert backend.reads[1] == 1, "the stuck GPU got a second call"
        assert backend.reads[0] == 4 and backend.reads[2] == 4
    finally:
        backend.release.set()
        collector.close()


def test_a_stuck_gpu_keeps_its_last_values_until_stall_after(stuck_backend):
    backend = stuck_backend(set())
    collector = Collector(backend)
    good = collector.collect(deadline=2.0, stall_after=1.0)
    backend.stuck = {1}
    slow = collector.collect(deadline=0.2, stall_after=1.0)
    assert slow.gpu(1) is good.gpu(1), "below stall_after: the last values, unchanged"
    time.sleep(0.9)
    late = collector.collect(deadline=0.2, stall_after=1.0)
    assert not late.gpu(1).health.responding
    assert late.gpu(1).sample is good.gpu(1).sample, "past it: the last values, marked"
    assert late.gpu(1).processes == good.gpu(1).processes
    collector.close()


def test_static_fields_of_a_stuck_gpu_do_not_hold_up_the_selection(stuck_backend):
    backend = stuck_backend({2}, static_too=True)
    collector = Collector(backend)
    started = time.monotonic()
    collector.read_statics(0.3)
    statics = collector.statics()
    assert time.monotonic() - started < 1.5
    assert statics[0].uuid and statics[1].uuid
    assert statics[2].uuid is None and statics[2].unavailable["uuid"] is Reason.NOT_RESPONDING
    snapshot = collector.collect(deadline=0.2, stall_after=0.0)
    assert not snapshot.gpu(2).health.responding
    backend.release.set()
    answered(collector, 2)
    later = collector.collect(deadline=2.0)
    assert later.gpu(2).static.uuid, "the real static fields arrive with the late answer"
    assert later.gpu(2).health.responding
    collector.close()


def test_looking_up_processes_first_waits_once_for_a_stuck_gpu(stuck_backend):
    """``--once``'s head start (Collector.look_up_processes) keeps the deadline: a GPU stuck there costs its wait
    there, and collect() neither waits for it again nor calls it a second time."""
    backend = stuck_backend({1})
    collector = Collector(backend)
    collector.read_statics(1.0)
    started = time.monotonic()
    collector.look_up_processes(0.3)
    looked_up = time.monotonic() - started
    snapshot = collector.collect(deadline=0.3, stall_after=0.0)
    assert looked_up < 1.0 and time.monotonic() - started < 1.0, "0.3 s once, not twice"
    assert backend.process_reads[1] == 1 and 1 not in backend.reads, "no second call into the stuck GPU"
    assert not snapshot.gpu(1).health.responding
    assert snapshot.gpu(0).health.responding and snapshot.gpu(0).processes
    collector.close()


def test_looking_up_processes_first_changes_no_row(sim, clock, monkeypatch):
    """The head start only moves the first host look-up earlier: the same rows, each process looked up once."""
    seen: list[set[int]] = []

    def rows(look_up: bool) -> list[tuple]:
        backend = sim(gpus=3, seed=4, processes_per_gpu=3)
        inspect = backend.inspect_processes

        def spy(pids):
            seen.append(set(pids))
            return inspect(pids)

        monkeypatch.setattr(backend, "inspect_processes", spy)
        collector = Collector(backend, timeline=False)
        collector.read_statics(2.0)
        if look_up:
            collector.look_up_processes(2.0)
        snapshot = collector.collect(deadline=2.0)
        collector.close()
        return [(p.pid, p.user, p.command, p.gpu_memory_bytes) for g in snapshot.gpus for p in g.processes]

    plain = rows(False)
    assert len(seen) == 1
    seen.clear()
    assert rows(True) == plain and len(plain) >= 3
    assert len(seen) == 2 and seen[0] == seen[1] == {pid for pid, *_ in plain}, "looked up before collect()"


def test_without_a_deadline_the_gpus_are_read_in_turn_on_the_callers_thread(sim):
    backend = sim(gpus=2)
    collector = Collector(backend)
    collector.collect()
    assert collector._workers is None, "the sequential path starts no thread"


# --------------------------------------------------------------------------- the poller


def test_the_poller_keeps_the_other_gpus_updating_and_stops_at_once(stuck_backend):
    backend = stuck_backend({1})
    poller = Poller(backend, interval=0.25)
    snapshots = []
    poller.subscribe(snapshots.append)
    poller.start()
    try:
        deadline = time.monotonic() + 10
        while len(snapshots) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(snapshots) >= 6, "polls went on"
        last = snapshots[-1]
        assert not last.gpu(1).health.responding, "stuck for more than two intervals: not responding"
        assert len(last.gpu(0).history.timestamps) >= 5, "GPU 0's history kept growing"
        values = {s.gpu(0).sample.timestamp for s in snapshots}
        assert len(values) >= 5
    finally:
        started = time.monotonic()
        poller.stop()
        assert time.monotonic() - started < 0.5, "stop does not wait for the stuck call"


# --------------------------------------------------------------------------- the commands


def _run(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return run_command(cmd, timeout=timeout)


def test_once_gives_up_on_a_stuck_gpu_after_the_timeout(nvtopy_cmd):
    started = time.monotonic()
    result = _run([*nvtopy_cmd, "--demo", "--once", "--json", "--demo-fault", "slow=20@1", "--timeout", "1"])
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 6, f"--once took {elapsed:.1f} s"
    data = json.loads(result.stdout)
    gpus = {gpu["index"]: gpu for gpu in data["gpus"]}
    assert gpus[1]["health"]["responding"] is False
    assert gpus[1]["health"]["verdict"] == "FAIL"
    assert gpus[0]["health"]["responding"] is True
    assert gpus[0]["utilization_gpu_percent"] is not None


def test_once_text_names_the_stuck_gpu(nvtopy_cmd):
    result = _run([*nvtopy_cmd, "--demo", "--once", "--no-color", "--demo-fault", "slow=20@2", "--timeout", "0.5"])
    assert result.returncode == 0, result.stderr
    assert "not responding" in result.stdout


def test_a_hung_driver_open_is_one_line_after_the_timeout(nvtopy_cmd):
    started = time.monotonic()
    result = _run([*nvtopy_cmd, "--demo", "--once", "--demo-fault", "slow=20", "--timeout", "1"])
    assert time.monotonic() - started < 6
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not answer within 1 s" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_log_goes_on_past_a_stuck_gpu(nvtopy_cmd):
    started = time.monotonic()
    result = _run(
        [
            *nvtopy_cmd,
            "log",
            "--demo",
            "--format",
            "jsonl",
            "--count",
            "3",
            "--interval",
            "0.5",
            "--timeout",
            "0.5",
            "--demo-fault",
            "slow=30@0",
        ]
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3
    last = {gpu["index"]: gpu for gpu in lines[-1]["gpus"]}
    assert last[0]["health"]["responding"] is False
    assert last[1]["health"]["responding"] is True


def _stamp(row: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(row["timestamp"]).timestamp()


@pytest.mark.parametrize("command", ["log", "record"])
def test_log_marks_a_hung_gpu_from_the_first_interval_it_misses(nvtopy_cmd, tmp_path, command):
    """Issue 23 item 6: rows of a hung GPU repeated its last values as fresh (``responding`` true) until
    ``--timeout`` (5 s) ran out. A row is a measurement: from the first interval whose read the GPU
    misses, its row says so (not responding, and for how long), well inside the timeout."""
    hang_after = 1.0  # real seconds after the backend opened: GPU 1's reads block (30 s each) from then
    output = tmp_path / "rows.jsonl"
    where = [str(output)] if command == "record" else ["--format", "jsonl", "--output", str(output)]
    result = _run(
        [
            *nvtopy_cmd,
            command,
            *where,
            "--demo",
            "--gpus",
            "0,1",
            "--count",
            "7",
            "--interval",
            "0.5",
            "--demo-fault",
            f"hang=30:{hang_after}@1",
        ]
    )
    assert result.returncode == 0, result.stderr
    snapshots = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(snapshots) == 7
    first = _stamp(snapshots[0])
    before, after = [], []
    for snapshot in snapshots:
        gpus = {gpu["index"]: gpu for gpu in snapshot["gpus"]}
        assert gpus[0]["health"]["responding"] is True
        # The backend opened before the first poll: a poll that starts hang_after later reads a hung GPU.
        (after if _stamp(snapshot) >= first + hang_after + 0.1 else before).append(gpus[1]["health"])
    assert any(health["responding"] for health in before)  # it answered before the hang
    assert len(after) >= 3, [_stamp(s) - first for s in snapshots]
    for health in after:  # every row from the first missed interval: well inside --timeout's 5 s
        assert health["responding"] is False, health
        assert health["stalled_seconds"] is not None and health["verdict"] == "FAIL"


def test_the_timeout_is_checked(nvtopy_cmd):
    result = _run([*nvtopy_cmd, "--demo", "--once", "--timeout", "0"])
    assert result.returncode == 2
    assert "timeout must be between" in result.stderr


def test_a_manual_clock_still_works_with_workers():
    clock = ManualClock()
    backend = SimulatedBackend(gpus=2, clock=clock, seed=1)
    collector = Collector(backend)
    one = collector.collect(deadline=5.0)
    clock.advance(1.0)
    two = collector.collect(deadline=5.0)
    assert two.timestamp - one.timestamp == pytest.approx(1.0)
    collector.close()

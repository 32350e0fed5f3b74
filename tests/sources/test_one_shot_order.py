"""A one-shot reading's order: GPM (and MIG, GPM too) last on each GPU, the caller's own work during the reads.

Why it matters: on Hopper a one-shot reading waits for its GPM pair (105 ms after each GPU's first sample).
Whatever is read before GPM on a GPU's thread, and whatever the caller does meanwhile on its own, fills
that wait instead of following it (``nvtopy --once``, benchmarks/bench_once.py).
"""

from __future__ import annotations

import threading
import time

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import ALL_GROUPS
from nvtopy.sources.collector import ONE_SHOT_LAST, Collector

from ..import_probe import modules_loaded


def spied(backend) -> list[tuple[int, str, frozenset[str]]]:
    """Every read_sample / read_processes of ``backend``, in order: (GPU, what, groups)."""
    calls: list[tuple[int, str, frozenset[str]]] = []
    read_sample, read_processes = backend.read_sample, backend.read_processes

    def sample(index, groups):
        calls.append((index, "sample", frozenset(groups)))
        return read_sample(index, groups)

    def processes(index, utilization=True):
        calls.append((index, "processes", frozenset()))
        return read_processes(index, utilization=utilization)

    backend.read_sample, backend.read_processes = sample, processes
    return calls


def one_shot_calls(backend):
    """``backend``'s reads (spied) during one one-shot collection, and the snapshot it gave."""
    backend.one_shot = True
    collector = Collector(backend, timeline=False)
    collector.read_statics(2.0)
    calls = spied(backend)
    snapshot = collector.collect(deadline=2.0)
    collector.close()
    return calls, snapshot


def test_a_one_shot_reading_reads_gpm_and_mig_after_everything_else(sim):
    calls, snapshot = one_shot_calls(sim(gpus=2, seed=3, model="H100 80GB HBM3"))
    for index in (0, 1):
        mine = [(what, groups) for gpu, what, groups in calls if gpu == index]
        assert mine == [
            ("sample", frozenset(ALL_GROUPS) - ONE_SHOT_LAST),
            ("processes", frozenset()),
            ("sample", ONE_SHOT_LAST),
        ]
        sample = snapshot.gpu(index).sample
        assert sample.sm_active_percent is not None and sample.utilization_gpu_percent is not None


def test_a_monitor_reads_every_group_at_once_as_before(sim):
    backend = sim(gpus=1, seed=3, model="H100 80GB HBM3")
    collector = Collector(backend, timeline=False)
    collector.read_statics(2.0)
    calls = spied(backend)
    collector.collect(deadline=2.0)
    collector.close()
    assert [(what, groups) for _, what, groups in calls] == [
        ("sample", frozenset(ALL_GROUPS)),
        ("processes", frozenset()),
    ]


def test_a_lost_gpu_is_not_asked_for_gpm_after_its_loss(sim):
    calls, snapshot = one_shot_calls(
        sim(gpus=1, seed=3, model="H100 80GB HBM3", faults=parse_fault_specs(["lost@0"], gpus=1))
    )
    assert [groups for _, what, groups in calls if what == "sample"] == [frozenset(ALL_GROUPS) - ONE_SHOT_LAST]
    assert snapshot.gpu(0).sample.lost


def test_meanwhile_runs_once_on_the_callers_thread_while_the_gpus_are_read(sim):
    """The GPUs' reads wait for what ``meanwhile`` does: had it run after the wait, the reads would time out."""
    backend = sim(gpus=2, seed=3)
    collector = Collector(backend, timeline=False)
    collector.read_statics(2.0)
    done = threading.Event()
    read_sample = backend.read_sample

    def slow(index, groups):
        assert done.wait(5.0), "meanwhile did not run while the GPU was being read"
        return read_sample(index, groups)

    backend.read_sample = slow
    threads: list[threading.Thread] = []

    def meanwhile():
        threads.append(threading.current_thread())
        done.set()

    started = time.monotonic()
    snapshot = collector.collect(deadline=5.0, meanwhile=meanwhile)
    collector.close()
    assert time.monotonic() - started < 4.0
    assert threads == [threading.current_thread()]
    assert all(gpu.health.responding for gpu in snapshot.gpus)


def test_meanwhile_without_a_deadline_runs_before_the_reads(sim):
    backend = sim(gpus=1, seed=3)
    order: list[str] = []
    read_sample = backend.read_sample

    def sample(index, groups):
        order.append("read")
        return read_sample(index, groups)

    backend.read_sample = sample
    Collector(backend, timeline=False).collect(meanwhile=lambda: order.append("meanwhile"))
    assert order == ["meanwhile", "read"]


def test_a_collector_without_charts_does_not_import_the_timeline():
    code = (
        "from nvtopy.backends.simulated.backend import SimulatedBackend\n"
        "from nvtopy.sources.collector import Collector\n"
        "Collector(SimulatedBackend(gpus=1), timeline=False).collect()\n"
    )
    assert modules_loaded(code, ("nvtopy.sources.timeline",)) == []

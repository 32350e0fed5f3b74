"""The exporter's reuse between snapshots never serves what changed: kept families, label dicts and label texts.

The exporter keeps one :class:`SnapshotCollector` and one :class:`TextRenderer` from snapshot to snapshot:
a family made of equal inputs is reused whole, a GPU's or a process's label dict is the same object while
equal, and the renderer keeps each label dict's text by the dict's identity. Here each step changes one
thing a kept object is made of, and the kept pair's text must equal prometheus-client's ``generate_latest``
of a fresh collector over the same snapshot, byte for byte.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.expose import TextRenderer, last_stored_block
from nvtopy.model import GpuState, ProcessType, Snapshot

from ..builders import LatestSource, every_field_snapshot, gpu_process, gpu_state, host_info, nvlinks, snapshot_of

pytestmark = pytest.mark.timeout(30)


def _fresh(snapshot: Snapshot) -> bytes:
    """prometheus-client's text of ``snapshot`` from a collector that has seen nothing before (no age)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(LatestSource(snapshot)))
    return generate_latest(registry).split(b"# HELP nvtopy_snapshot_age_seconds")[0]


def _gpu(snapshot: Snapshot, index: int, change: Callable[[GpuState], GpuState]) -> Snapshot:
    gpus = tuple(change(gpu) if gpu.index == index else gpu for gpu in snapshot.gpus)
    return dataclasses.replace(snapshot, gpus=gpus)


def _health(**changes: Any) -> Callable[[GpuState], GpuState]:
    return lambda gpu: dataclasses.replace(gpu, health=dataclasses.replace(gpu.health, **changes))


def _sample(**changes: Any) -> Callable[[GpuState], GpuState]:
    return lambda gpu: dataclasses.replace(gpu, sample=dataclasses.replace(gpu.sample, **changes))


def _mig_memory(gpu: GpuState) -> GpuState:
    usage = gpu.sample.mig_usage
    assert usage, "GPU 1 of every_field_snapshot has MIG instances"
    first = dataclasses.replace(usage[0], memory_used_bytes=(usage[0].memory_used_bytes or 0) + 4096)
    return dataclasses.replace(gpu, sample=dataclasses.replace(gpu.sample, mig_usage=(first, *usage[1:])))


# Each: one change to what a kept family or label dict is made of.
CHANGES: dict[str, Callable[[Snapshot], Snapshot]] = {
    "xid count grows": lambda s: _gpu(s, 0, _health(xid_counts=((13, 3),))),
    "a new xid": lambda s: _gpu(s, 0, _health(xid_counts=((13, 2), (31, 1)))),
    "GPU falls off the bus": lambda s: _gpu(s, 0, _sample(lost=True)),
    "an NVLink goes down": lambda s: _gpu(s, 0, _sample(nvlinks=nvlinks(down=(2,)))),
    "MIG instance memory": lambda s: _gpu(s, 1, _mig_memory),
    "hostname": lambda s: dataclasses.replace(s, host=host_info(hostname="node-8")),
    "driver version": lambda s: dataclasses.replace(s, host=host_info(hostname="node-7", driver_version="560.1")),
    "backend": lambda s: dataclasses.replace(s, host=dataclasses.replace(s.host, backend="simulated")),
    "process command": lambda s: _gpu(
        s, 0, lambda g: dataclasses.replace(g, processes=(dataclasses.replace(g.processes[0], command='x" y="1'),))
    ),
    "process leaves the pod": lambda s: _gpu(
        s, 0, lambda g: dataclasses.replace(g, processes=(dataclasses.replace(g.processes[0], owner=None),))
    ),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_shows_in_the_next_render(name):
    before = every_field_snapshot()
    after = CHANGES[name](before)
    assert _fresh(after) != _fresh(before), "the change is one the text shows"
    collector, renderer = SnapshotCollector(LatestSource(None)), TextRenderer()
    for snapshot in (before, before, after, after, before):  # kept, then changed, kept again, changed back
        assert renderer.render(collector.families(snapshot)) == _fresh(snapshot), name


def test_two_rows_of_one_pid_on_one_gpu_keep_their_own_labels():
    """A pid that NVML lists as compute and as graphics on one GPU is two rows, each with its own type label."""
    rows = (gpu_process(0, 77), gpu_process(0, 77, type=ProcessType.GRAPHICS, gpu_memory_bytes=1024))
    snapshot = snapshot_of(gpu_state(0, *rows))
    collector, renderer = SnapshotCollector(LatestSource(None)), TextRenderer()
    for _ in range(3):
        text = renderer.render(collector.families(snapshot))
        assert text == _fresh(snapshot)
    assert b'pid="77",pod="",slurm_job="",type="C"' in text and b'pid="77",pod="",slurm_job="",type="G"' in text


@pytest.mark.parametrize("size", [0, 1, 300, 65535, 65536, 200_000])
def test_a_stored_last_block_ends_any_byte_aligned_stream(size):
    """The scrape's own bytes, stored after the snapshot's sync-flushed deflate stream: one valid stream."""
    head = b"text of the snapshot\n" * 500
    tail = bytes(range(256)) * (size // 256) + bytes(size % 256)
    packer = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    stream = packer.compress(head) + packer.flush(zlib.Z_SYNC_FLUSH) + last_stored_block(tail)
    reader = zlib.decompressobj(-zlib.MAX_WBITS)
    assert reader.decompress(stream) == head + tail
    assert reader.eof and reader.unused_data == b"", "the stored block is the last one"

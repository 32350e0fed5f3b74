"""The CPU a host's line costs the monitor (``nvtopy --ssh``): JSON decode, then the line into a snapshot.

One simulated node of 8 H100s with 8 process slots a GPU (about 40 processes, 18 NVLinks a
GPU), recorded as ``nvtopy record`` writes it, two ways: as the far side streams it
(``log --format jsonl``: the poller's cadence, so slow groups -- NVLink, clocks, ECC, ... --
repeat between their reads) and with every group read every line (nothing repeats but the
static parts and the owners). Per line, CPU time (``time.process_time``) over ``--lines``
lines, the median of ``--rounds`` rounds taken in turn: ``decode_json``; the one-shot
:func:`~nvtopy.formats.contract_decoder.snapshot_from_dict`; one
:class:`~nvtopy.formats.contract_decoder.SnapshotDecoder` fed the lines in order. Then what
64 such hosts cost a refresh.

Measured 2026-11-29 on the 2-core VM under other work, so the times move by tens of per cent
from run to run; valgrind's instruction counts (which do not) per line, far side's cadence:
snapshot_from_dict before this change 16.2 M, now 13.8 M, SnapshotDecoder 8.9 M (1.8x);
every group every line: 16.3 M, 13.7 M, 11.7 M (1.4x). Timed here: SnapshotDecoder 1.6x
(cadence) and 1.2x (every group) less CPU than snapshot_from_dict, 64 hosts about 200-230 ms
a refresh plus about 90-110 ms of decode_json. Building the model objects a line holds
(8 GpuSample, about 40 GpuProcess, the NVLinks read that line; frozen dataclasses, each field
set through object.__setattr__, then the range check) is 4.2 to 5.8 M instructions: the floor
of any decoder that returns these objects, and why 3x is out of reach from formats/ alone.
Run: ``.venv/bin/python benchmarks/bench_decode.py [--lines 30 --rounds 9]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvtopy.backends.simulated.backend import SimulatedBackend  # noqa: E402
from nvtopy.formats.contract import encode, snapshot_to_dict  # noqa: E402
from nvtopy.formats.contract_decoder import SnapshotDecoder, snapshot_from_dict  # noqa: E402
from nvtopy.jsondecode import decode_json  # noqa: E402
from nvtopy.model import ALL_GROUPS  # noqa: E402
from nvtopy.sources.collector import Collector  # noqa: E402
from nvtopy.sources.poller import CADENCE  # noqa: E402

HOSTS = 64
GPUS = 8
SLOTS = 8


class _Clock:
    def __init__(self) -> None:
        self.now = 1_780_000_000.0

    def __call__(self) -> float:
        return self.now


def node_lines(count: int, *, cadence: bool) -> list[str]:
    """``count`` consecutive lines of one node; ``cadence``: each group read only when the poller would read it."""
    clock = _Clock()
    backend = SimulatedBackend(gpus=GPUS, seed=3, clock=clock, processes_per_gpu=SLOTS, viewer="alice")
    collector = Collector(backend)
    lines = []
    try:
        for tick in range(count + 1):
            clock.now += 1.0
            groups = {g for g in ALL_GROUPS if not cadence or tick % max(1, int(CADENCE[g])) == 0}
            snapshot = collector.collect(groups, process_utilization=not cadence or tick % 2 == 0)
            lines.append(encode(snapshot_to_dict(snapshot)))
    finally:
        backend.close()
    return lines[1:]  # the first read fills every group: not a line of the steady stream


def _per_line(decode: Callable[[Any], object], items: list[Any]) -> float:
    started = time.process_time()
    for item in items:
        decode(item)
    return (time.process_time() - started) / len(items)


def measure(lines: list[str], rounds: int) -> dict[str, float]:
    """Median CPU seconds per line of each way, the rounds taken in turn (so that load on the machine hits all)."""
    raw = [line.encode() for line in lines]
    results: dict[str, list[float]] = {"decode_json": [], "snapshot_from_dict": [], "SnapshotDecoder": []}
    for _ in range(rounds):
        parsed = [decode_json(line) for line in raw]
        results["decode_json"].append(_per_line(decode_json, raw))
        results["snapshot_from_dict"].append(_per_line(snapshot_from_dict, parsed))
        parsed = [decode_json(line) for line in raw]  # fresh objects: the decoder keeps the previous line's
        results["SnapshotDecoder"].append(_per_line(SnapshotDecoder().decode, parsed))
    return {name: statistics.median(times) for name, times in results.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=30, help="consecutive lines of the node (default 30)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds, the median is printed (default 9)")
    args = parser.parse_args()
    for cadence in (True, False):
        lines = node_lines(args.lines, cadence=cadence)
        processes = lines[-1].count('"pid":') - lines[-1].count('"pids":')
        kind = "the far side's cadence" if cadence else "every group every line"
        print(f"{kind}: {GPUS} GPUs, ~{processes} processes, {len(lines[-1]) // 1024} KiB a line")
        medians = measure(lines, args.rounds)
        json_ms = medians["decode_json"] * 1e3
        for name in ("snapshot_from_dict", "SnapshotDecoder"):
            ms = medians[name] * 1e3
            print(
                f"  {name:<19} {ms:6.3f} ms a line (+ decode_json {json_ms:.3f} ms);"
                f" {HOSTS} hosts: {HOSTS * ms:6.1f} ms + {HOSTS * json_ms:5.1f} ms a refresh"
            )
        ratio = medians["snapshot_from_dict"] / medians["SnapshotDecoder"]
        print(f"  SnapshotDecoder: {ratio:.2f}x less CPU than snapshot_from_dict a line")
    return 0


if __name__ == "__main__":
    sys.exit(main())

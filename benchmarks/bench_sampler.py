"""What a background ``nvtopy.Sampler`` costs a CPU-bound training loop (simulated backend).

The loop is pure Python arithmetic (the worst case: it needs the GIL the sampler
thread also takes). Two measures:

- A/B: trials alternate "no sampler" and "1 s sampler on 8 simulated GPUs";
  each pair of adjacent trials gives a ratio (adjacent trials share the
  machine's slow drifts), and the median ratio is the slowdown;
- the sampler thread's own CPU time (its per-thread CPU clock) per second of
  loop: under the GIL that is the most it can take from the loop.

Part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_bound(iterations: int) -> float:
    started = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += (i * i) % 7
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=31)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one trial of the loop")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    trials = 7 if args.quick else args.trials
    seconds = 1.0 if args.quick else args.seconds

    import nvtopy

    nvtopy.configure("simulated", gpus=8, processes_per_gpu=8, steady=True)
    iterations = int(5_000_000 * seconds / max(cpu_bound(5_000_000), 1e-6))
    without, with_sampler = [], []
    samples = 0
    thread_cpu = 0.0
    for _ in range(trials):
        without.append(cpu_bound(iterations))
        with nvtopy.Sampler(interval=1.0, only_visible=False) as sampler:
            clock = time.pthread_getcpuclockid(sampler.thread.ident)
            cpu_before = time.clock_gettime(clock)
            with_sampler.append(cpu_bound(iterations))
            thread_cpu += time.clock_gettime(clock) - cpu_before
        samples += len(sampler.history)
    best = min(without)
    ratios = [b / a for a, b in zip(without, with_sampler, strict=True)]
    slowdown = 100 * (statistics.median(ratios) - 1)
    share = 100 * thread_cpu / sum(with_sampler)
    spread = 100 * (max(without) - best) / best
    print(f"sampler cost on a CPU-bound loop ({trials} alternating trials of ~{best:.1f} s, 8 simulated GPUs, 1 s)")
    print(f"  without sampler  median {statistics.median(without):.4f} s")
    print(f"  with sampler     median {statistics.median(with_sampler):.4f} s")
    quartiles = statistics.quantiles(ratios, n=4)
    print(
        f"  slowdown (median of paired ratios)  {slowdown:+.2f} %   "
        f"(quartiles {100 * (quartiles[0] - 1):+.1f} % .. {100 * (quartiles[2] - 1):+.1f} %; "
        f"trials without a sampler spread {spread:.0f} %)"
    )
    each = 1000 * thread_cpu / max(samples, 1)
    print(f"  sampler thread CPU / loop   {share:.3f} %   ({samples} samples, {each:.2f} ms each)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sampler.json").write_text(
        json.dumps(
            {
                "without_s": without,
                "with_s": with_sampler,
                "slowdown_median_paired_percent": slowdown,
                "sampler_thread_cpu_percent": share,
                "samples": samples,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

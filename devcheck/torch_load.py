"""The PyTorch job ``make device-check`` watches: memory held, matrix products, then phases on request.

Why a job of our own: nvtopy's figures for a real training process (its pid, user,
command, memory next to what torch reserved, SM and tensor activity) can only be
checked against a process whose truth we know. This one allocates a known ballast,
runs bf16 matrix products (tensor cores) into preallocated outputs (so torch's
reservation stays put once warm), measures one busy span with ``nvtopy.track``, then
alternates between products ("work") and sleeping ("idle") as the control file says.

Protocol (plain files, so the checker needs no IPC library):
- control file: one word, ``work``, ``idle`` or ``stop``; read every 0.1 s;
- status file: JSON, replaced atomically whenever something changes: ``pid``,
  ``phase``, torch's ``allocated_bytes``/``reserved_bytes``, the ``track`` report
  (or its error), ``error`` when the job could not start.

Every wait has a deadline: the job exits on its own after ``--deadline`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

GIB = 1 << 30
PHASES = ("work", "idle", "stop")


def write_status(path: Path, status: dict[str, Any]) -> None:
    """Replace the status file in one step (a reader never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status, default=str))
    os.replace(tmp, path)


def read_phase(path: Path, current: str) -> str:
    """The phase the control file asks for; the current one when it is absent or says something else."""
    try:
        word = path.read_text()[:16].strip()
    except OSError:
        return current
    return word if word in PHASES else current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--ballast-gib", type=float, default=4.0, help="memory held besides the matrices")
    parser.add_argument("--size", type=int, default=8192, help="the matrices' side")
    parser.add_argument("--track-seconds", type=float, default=3.0, help="the busy span nvtopy.track measures")
    parser.add_argument("--deadline", type=float, default=240.0, help="exit after this many seconds regardless")
    args = parser.parse_args(argv)
    end = time.monotonic() + args.deadline
    status: dict[str, Any] = {"pid": os.getpid(), "phase": "starting"}
    try:
        import torch
    except ImportError as exc:
        write_status(args.status, {**status, "error": f"cannot import torch: {exc}"})
        return 2
    if not torch.cuda.is_available():
        write_status(args.status, {**status, "error": f"torch {torch.__version__} sees no CUDA device"})
        return 2

    device = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(device)
    status.update(torch_version=torch.__version__, device_name=props.name, uuid=str(getattr(props, "uuid", "")))
    ballast = torch.empty(int(args.ballast_gib * GIB), dtype=torch.uint8, device=device)
    ballast.fill_(1)  # touched, so the driver has really committed it
    a = torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def products(seconds: float) -> int:
        """Matrix products for this long (synchronised every few, so the time is the GPU's)."""
        count, stop = 0, time.monotonic() + seconds
        while time.monotonic() < stop:
            for _ in range(8):
                torch.matmul(a, b, out=out)
            torch.cuda.synchronize(device)
            count += 8
        return count

    products(0.5)  # warm-up: cuBLAS picks its kernels and workspace now, not during the checks

    def memory() -> dict[str, int]:
        return {
            "allocated_bytes": int(torch.cuda.memory_allocated(device)),
            "reserved_bytes": int(torch.cuda.memory_reserved(device)),
        }

    status.update(memory())
    try:
        import nvtopy

        with nvtopy.track("device-check", interval=0.1, callback=lambda report: None) as tracker:
            products(args.track_seconds)
        status["track"] = tracker.report.as_dict() if tracker.report is not None else None
        status["track_torch_end"] = memory()
    except Exception as exc:  # noqa: BLE001 - reported to the checker, which marks the track check FAIL
        status["track_error"] = f"{type(exc).__name__}: {exc}"

    phase = "work"
    status.update(phase=phase, phase_since=time.time(), **memory())
    write_status(args.status, status)
    while time.monotonic() < end:
        wanted = read_phase(args.control, phase)
        if wanted != phase:
            phase = wanted
            status.update(phase=phase, phase_since=time.time(), **memory())
            write_status(args.status, status)
        if phase == "stop":
            break
        if phase == "work":
            products(0.1)
        else:
            time.sleep(0.1)
    del ballast
    return 0


if __name__ == "__main__":
    sys.exit(main())

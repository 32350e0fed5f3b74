"""``nvtopy replay FILE``: a recording shown in the monitor, with pause, step and speed.

A recording is the JSON lines ``nvtopy record`` (or ``nvtopy log --format jsonl
--processes``) writes. Each line is turned back into the same immutable
:class:`~nvtopy.model.Snapshot` the live monitor draws (history rebuilt from the
lines before it), so what is replayed is exactly what was recorded.

A file cut short (a logger killed mid-line) or damaged is read up to its first
bad line; the monitor shows what is valid and says where and why it stopped.
"""

from __future__ import annotations

import argparse
import collections
import json
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import cli
from .backends.base import SignalOutcome
from .errors import NvtopyError, UsageError
from .model import (
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HostInfo,
    ProcessType,
    Reason,
    Snapshot,
    freeze,
    history_of,
    history_row,
)
from .source import SnapshotSource

__all__ = ["Recording", "ReplayPlayer", "build_parser", "load_recording", "run", "snapshot_from_dict"]

HISTORY = 300
_SAMPLE_KEYS = set(GpuSample.__dataclass_fields__) - {"timestamp", "lost", "unavailable", "pstate", "throttle_reasons"}
_STATIC_KEYS = set(GpuStatic.__dataclass_fields__) - {"index", "unavailable", "mig_devices"}
_PROCESS_KEYS = {"gpu_memory_bytes", "sm_percent", "memory_percent", "encoder_percent", "decoder_percent"}


def _reasons(data: dict[str, Any], allowed: set[str]) -> dict[str, Reason]:
    return {k: Reason(v) for k, v in (data.get("unavailable") or {}).items() if k in allowed}


def _process(data: dict[str, Any], gpu: GpuStatic) -> GpuProcess:
    return GpuProcess(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        pid=int(data["pid"]),
        type=ProcessType(data["type"]),
        **{k: data.get(k) for k in _PROCESS_KEYS},
        user=data.get("user"),
        name=data.get("name"),
        command=data.get("command"),
        cpu_percent=data.get("cpu_percent"),
        host_memory_bytes=data.get("host_memory_bytes"),
        create_time=data.get("create_time"),
        running_seconds=data.get("running_seconds"),
        status=data.get("status", "running"),
        foreign=bool(data.get("foreign", False)),
        unavailable=freeze(_reasons(data, set(GpuProcess.__dataclass_fields__))),
    )


def snapshot_from_dict(data: dict[str, Any], history: dict[int, collections.deque[tuple[Any, ...]]]) -> Snapshot:
    """Rebuild a snapshot from one line of a recording; ``history`` carries the sparklines across lines.

    Raises KeyError/ValueError/TypeError on a line that is not a snapshot.
    """
    timestamp = datetime.fromisoformat(data["timestamp"]).timestamp()
    host = HostInfo(
        hostname=str(data["hostname"]),
        driver_version=data.get("driver_version"),
        cuda_driver_version=data.get("cuda_driver_version"),
        nvml_version=data.get("nvml_version"),
        backend=f"replay of {data.get('backend', 'nvml')}",
    )
    gpus = []
    for item in data["gpus"]:
        index = int(item["index"])
        reasons = _reasons(item, set(GpuStatic.__dataclass_fields__) | set(GpuSample.__dataclass_fields__))
        static = GpuStatic(
            index=index,
            mig_devices=tuple(item.get("mig_devices") or ()),
            unavailable=freeze({k: v for k, v in reasons.items() if k in _STATIC_KEYS}),
            **{k: item.get(k) for k in _STATIC_KEYS},
        )
        pstate = item.get("pstate")
        throttle = item.get("throttle_reasons")
        sample = GpuSample(
            timestamp=timestamp,
            lost=bool(item.get("lost", False)),
            pstate=None if pstate is None else int(str(pstate).lstrip("P")),
            throttle_reasons=None if throttle is None else tuple(throttle),
            unavailable=freeze({k: v for k, v in reasons.items() if k in GpuSample.__dataclass_fields__}),
            **{k: item.get(k) for k in _SAMPLE_KEYS},
        )
        unavailable = item.get("processes_unavailable")
        processes = tuple(_process(p, static) for p in item.get("processes") or ())
        state = GpuState(static, sample, processes, None if unavailable is None else Reason(unavailable))
        rows = history.setdefault(index, collections.deque(maxlen=HISTORY))
        rows.append(history_row(sample, state.memory_used_percent))
        history_value = history_of(rows)
        gpus.append(GpuState(static, sample, processes, state.processes_unavailable, history_value))
    return Snapshot(
        timestamp=timestamp,
        host=host,
        gpus=tuple(gpus),
        sequence=int(data.get("sequence") or 0),
        interval=data.get("interval_s"),
    )


@dataclass(frozen=True, slots=True)
class Recording:
    snapshots: tuple[Snapshot, ...]
    stopped: str | None  # where and why reading stopped early, or None when the whole file was read
    path: str


def load_recording(path: str) -> Recording:
    """Every valid snapshot up to the first bad line (with a sentence saying where it stopped)."""
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise NvtopyError(f"cannot read {path}: {exc.strerror or exc}") from None
    snapshots: list[Snapshot] = []
    history: dict[int, collections.deque[tuple[Any, ...]]] = {}
    stopped = None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                cut = not line.endswith("\n")
                stopped = f"line {number}: " + (
                    "the file ends mid-record (cut short)" if cut else f"not JSON ({exc.msg})"
                )
                break
            try:
                snapshots.append(snapshot_from_dict(data, history))
            except (KeyError, ValueError, TypeError, AttributeError) as exc:
                stopped = f"line {number}: not an nvtopy snapshot ({type(exc).__name__}: {exc})"
                break
    if not snapshots:
        reason = f" ({stopped})" if stopped else ""
        raise NvtopyError(f"{path}: no snapshot to replay{reason}")
    return Recording(tuple(snapshots), stopped, path)


class _NoCollector:
    indices: list[int] = []


class ReplayPlayer(SnapshotSource):
    """A snapshot source for the monitor that plays a recording at its recorded pace.

    Besides what every source offers (subscribe, pause/resume, refresh) it steps
    back and forth and changes speed; ``submit`` refuses: there is nothing to signal.
    """

    SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)
    thread_name = "nvtopy-replay"

    def __init__(self, recording: Recording, speed: float = 1.0) -> None:
        super().__init__(interval=speed)
        self.recording = recording
        self.snapshots = recording.snapshots
        self.position = 0
        self.collector = _NoCollector()

    @property
    def speed(self) -> float:
        return self._interval

    @property
    def interval(self) -> float:
        return self._interval

    def resume(self) -> None:
        if self.position >= len(self.snapshots) - 1:
            self.position = -1  # at the end: play again from the start
        super().resume()

    def refresh(self) -> None:
        self.step(1)

    def set_interval(self, seconds: float) -> None:  # the app's interval keys change the speed
        self.faster() if seconds < self.speed else self.slower()

    def submit(self, function: Callable[[], Any]) -> Future[SignalOutcome]:
        future: Future[SignalOutcome] = Future()
        future.set_result(SignalOutcome(False, "this is a replay: there is no process to signal"))
        return future

    def step(self, count: int) -> None:
        """Pause and show the snapshot ``count`` records away (negative: back)."""
        self._paused = True
        self.position = max(0, min(len(self.snapshots) - 1, self.position + count))
        self._publish(self.snapshots[self.position])

    def faster(self) -> None:
        bigger = [s for s in self.SPEEDS if s > self.speed]
        self._interval = bigger[0] if bigger else self.speed
        self._wake.set()

    def slower(self) -> None:
        smaller = [s for s in self.SPEEDS if s < self.speed]
        self._interval = smaller[-1] if smaller else self.speed
        self._wake.set()

    def status(self) -> str:
        state = "⏸" if self._paused else "▶"
        return f"REPLAY {state} x{self.speed:g} {self.position + 1}/{len(self.snapshots)}"

    def _run(self) -> None:
        self._publish(self.snapshots[self.position])
        last = len(self.snapshots) - 1
        while not self._stopping:
            if self._paused or self.position >= last:
                self._paused = self._paused or self.position >= last
                self._wake.wait()
                self._wake.clear()
                continue
            gap = self.snapshots[self.position + 1].timestamp - self.snapshots[self.position].timestamp
            if self._wake.wait(min(5.0, max(0.02, gap / self.speed))):
                self._wake.clear()
                continue  # paused, stepped or re-timed: decide again
            if not self._paused and not self._stopping:
                self.position += 1
                self._publish(self.snapshots[self.position])


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = cli.command_parser(command, "Replay a recording (nvtopy record) in the monitor.")
    parser.add_argument("file", metavar="FILE", help="a recording: JSON lines written by 'nvtopy record'")
    parser.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="playback speed (default 1; keys + and -)"
    )
    parser.add_argument("--view", choices=("auto", "full", "compact"), default="auto", help="GPU panels (key v)")
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    if not 0 < args.speed <= 1000:
        raise UsageError("--speed must be more than 0 and at most 1000")
    recording = load_recording(args.file)
    from .tui.app import NvtopyApp

    player = ReplayPlayer(recording, speed=args.speed)
    app = NvtopyApp(None, source=player, readonly=True, layout=args.view)
    app.run()
    return 0

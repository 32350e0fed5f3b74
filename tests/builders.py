"""The one set of test builders: hand-made model objects, fake sources, CLI runners.

Tests build GPUs, processes and snapshots by hand so that each test states only
what it is about; the rest is a default that does not matter to it. Those
defaults live here, once: a test passes what differs as keyword arguments (and a
test file that needs other defaults throughout says so in a one-line wrapper).

The other shared test modules keep their roles: ``conftest.py`` the fixtures
(clock, simulated and NVML backends, the fake-nvml build), ``tui_helpers.py``
what drives and reads the Textual app, ``fake_pynvml.py`` the in-process NVML,
``prometheus_fixtures.py`` the Prometheus servers, ``scenes.py`` the snapshot scenes.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import Future
from pathlib import Path

from nvtopy.backends.base import SignalOutcome
from nvtopy.model import (
    GpuEvent,
    GpuHealth,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HostInfo,
    MigInstance,
    MigUsage,
    NvLink,
    OwnerKind,
    ProcessOwner,
    ProcessType,
    Reason,
    Severity,
    Snapshot,
)
from nvtopy.sources.base import SnapshotSource

# The command line's runners, forked and spawned, have one home beside the fork server (tests/cli_runner.py);
# tests take them from here with the other builders.
from .cli_runner import NVTOPY, run_command, run_nvtopy, spawn_nvtopy  # noqa: F401 (re-exported)

GIB = 1 << 30
MIB = 1 << 20
NOW = 1_795_000_000.0  # the frozen time of conftest.FROZEN_TIME: hand-made snapshots are taken then

# --------------------------------------------------------------------------- the model, by hand
#
# Each builder makes a typical object, the values a test does not care about filled in; ``bare=True``
# makes the class's own (the required fields at their emptiest: no name, no user, memory unknown), for a
# test that must see nothing but what it passes.


def host_info(**changes: object) -> HostInfo:
    """The machine of a hand-made snapshot: "node", driver 550.54.15, CUDA 12.4."""
    values: dict[str, object] = {"hostname": "node", "driver_version": "550.54.15", "cuda_driver_version": "12.4"}
    return HostInfo(**{**values, **changes})  # type: ignore[arg-type]


def gpu_static(index: int = 0, *, bare: bool = False, **changes: object) -> GpuStatic:
    """An H100 80GB HBM3 at ``index``: its UUID ``GPU-<index>``, its bus id, its limits and 4 NVLinks.

    ``bare``: only ``index`` and ``changes`` (every other field None, as nothing was read).
    """
    values: dict[str, object] = {} if bare else {
        "uuid": f"GPU-{index}",
        "name": "NVIDIA H100 80GB HBM3",
        "bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "memory_total_bytes": 80 * GIB,
        "temperature_slowdown_c": 87,
        "clock_sm_max_mhz": 1980,
        "pcie_link_gen_max": 5,
        "pcie_link_width_max": 16,
        "nvlink_count": 4,
    }  # fmt: skip
    return GpuStatic(index, **{**values, **changes})  # type: ignore[arg-type]


def nvlinks(count: int = 4, *, down: tuple[int, ...] = ()) -> tuple[NvLink, ...]:
    """``count`` NVLink 4 links, up but those in ``down``, each to its own switch port, no errors, some traffic."""
    return tuple(
        NvLink(i, active=i not in down, version=4, rx_bytes_per_s=5 * MIB, tx_bytes_per_s=4 * MIB, errors=0,
               remote=f"00000000:{0x40 + i:02X}:00.0")
        for i in range(count)
    )  # fmt: skip


def mig_instances(*uuids: str) -> tuple[MigInstance, ...]:
    """MIG instances with these UUIDs (GPU instances 1..n, compute instance 0, each a 3g.40gb), for a GpuStatic."""
    return tuple(
        MigInstance(index=i, uuid=u, gpu_instance_id=i + 1, compute_instance_id=0, profile="3g.40gb")
        for i, u in enumerate(uuids)
    )


def gpu_sample(timestamp: float = NOW, *, bare: bool = False, **changes: object) -> GpuSample:
    """A busy, healthy H100 reading at ``timestamp``: 40 GiB used, 83 %, 61 C, 350 of 700 W, Gen5 x16, 4 links up.

    No row remapped, ECC on (1 corrected error since boot), page retirement not supported (an H100 remaps
    rows instead), no GPM figures. ``bare``: only ``timestamp`` and ``changes`` (nothing read).
    """
    values: dict[str, object] = {} if bare else {
        "memory_used_bytes": 40 * GIB,
        "utilization_gpu_percent": 83,
        "utilization_memory_percent": 41,
        "temperature_c": 61,
        "power_draw_w": 350.0,
        "power_limit_w": 700.0,
        "pstate": 0,
        "clock_sm_mhz": 1980,
        "clock_mem_mhz": 2619,
        "ecc_mode": True,
        "ecc_corrected_volatile": 1,
        "ecc_uncorrected_volatile": 0,
        "ecc_corrected_aggregate": 5,
        "ecc_uncorrected_aggregate": 0,
        "throttle_reasons": (),
        "pcie_rx_bytes_per_s": 120 * MIB,
        "pcie_tx_bytes_per_s": 40 * MIB,
        "remapped_rows_corrected": 0,
        "remapped_rows_uncorrected": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "retired_pages_sbe": None,
        "retired_pages_dbe": None,
        "retired_pages_pending": None,
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "pcie_replay_counter": 0,
        "nvlinks": nvlinks(),
        "nvlink_rx_bytes_per_s": 20 * MIB,
        "nvlink_tx_bytes_per_s": 16 * MIB,
        "unavailable": dict.fromkeys(
            ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"), Reason.NOT_SUPPORTED
        ),
    }  # fmt: skip
    return GpuSample(timestamp, **{**values, **changes})  # type: ignore[arg-type]


def gpu_process(gpu: int = 0, pid: int = 100, *, bare: bool = False, **changes: object) -> GpuProcess:
    """A compute process of alice's on GPU ``gpu``: 2 GiB, ``python job<pid>.py``, started at time ``pid``.

    Command and start time follow the pid, so each row's key is its own.

    ``bare``: NVML's row alone (no UUID, memory unknown, type compute), nothing read from the host.
    """
    values: dict[str, object] = {"gpu_index": gpu, "pid": pid, "gpu_uuid": None, "type": ProcessType.COMPUTE}
    values["gpu_memory_bytes"] = None
    if not bare:
        values.update(
            gpu_uuid=f"GPU-{gpu}",
            gpu_memory_bytes=2 * GIB,
            user="alice",
            command=f"python job{pid}.py",
            create_time=float(pid),
        )
    return GpuProcess(**{**values, **changes})  # type: ignore[arg-type]


def gpu_state(
    index: int = 0,
    *processes: GpuProcess,
    static: GpuStatic | None = None,
    sample: GpuSample | None = None,
    **changes: object,
) -> GpuState:
    """GPU ``index`` (:func:`gpu_static` unless given) with an empty sample at ``NOW`` unless given.

    ``changes``: the state's other fields (``history``, ``health``, ``note``, ...).
    """
    return GpuState(
        static if static is not None else gpu_static(index),
        sample if sample is not None else GpuSample(NOW),
        processes=processes,
        **changes,  # type: ignore[arg-type]
    )


def host_line(index: int, host: str, note: str, *, lost: bool = True, timestamp: float = NOW) -> GpuState:
    """A fleet view's line for a host it cannot read (``lost``) or not yet (connecting, stale): its words only."""
    return GpuState(GpuStatic(index=index, host=host), GpuSample(timestamp, lost=lost), note=note)


def snapshot_of(*gpus: GpuState, timestamp: float = NOW, host: HostInfo | None = None, **changes: object) -> Snapshot:
    """These GPUs, on :func:`host_info` unless given, at ``timestamp``; ``changes``: ``sequence``, ``interval``..."""
    return Snapshot(timestamp, host if host is not None else host_info(), tuple(gpus), **changes)  # type: ignore[arg-type]


def every_field_snapshot() -> Snapshot:
    """A snapshot with every exported field set: what a test of the exporter's names and units renders.

    GPU 0: every sample field (GPM included, every unit dcgm-exporter 4.9 changed: clocks, energy,
    utilisation, framebuffer), a Kubernetes pod's process, an Xid seen twice, memory held idle;
    GPU 1: MIG on, two GPU instances with their own framebuffer and GPM figures and a process on one;
    GPU 2: fallen off the bus (only its health series stay). Fixed values: the same text every time.
    """
    gpm = {
        "graphics_active_percent": 72.5,
        "sm_active_percent": 64.25,
        "sm_occupancy_percent": 31.0,
        "tensor_active_percent": 45.5,
        "dram_active_percent": 38.75,
        "fp64_active_percent": 1.5,
        "fp32_active_percent": 22.0,
        "fp16_active_percent": 12.5,
        "gpm_pcie_rx_bytes_per_s": 3.5e9,
        "gpm_pcie_tx_bytes_per_s": 1.25e9,
        "gpm_nvlink_rx_bytes_per_s": 2.0e10,
        "gpm_nvlink_tx_bytes_per_s": 1.5e10,
    }
    full = gpu_sample(
        memory_free_bytes=39 * GIB + 512 * MIB,
        memory_reserved_bytes=512 * MIB,
        encoder_percent=7,
        decoder_percent=3,
        fan_percent=55,
        energy_mj=123_456_789,
        throttle_reasons=("sw_power_cap",),
        retired_pages_sbe=2,
        retired_pages_dbe=1,
        retired_pages_pending=True,
        remapped_rows_corrected=4,
        remapped_rows_uncorrected=1,
        pcie_replay_counter=9,
        unavailable={},
        **gpm,
    )
    pod = ProcessOwner(OwnerKind.KUBERNETES, pod="trainer-0", namespace="ml", container="main")
    health = GpuHealth(
        verdict=Severity.WARN,
        events=(GpuEvent(NOW - 60, 0, xid=13), GpuEvent(NOW - 30, 0, xid=13)),
        xid_counts=((13, 2),),
        idle_held_bytes=2 * GIB,
        suspected_hang_seconds=0.0,
    )
    gpu0 = gpu_state(0, gpu_process(0, 4242, owner=pod, sm_percent=70, cpu_percent=99.5), sample=full, health=health)
    instances = tuple(
        MigInstance(index=i, uuid=f"MIG-1-{i}", gpu_instance_id=i + 1, compute_instance_id=0, profile=profile,
                    memory_total_bytes=total, sm_count=sms)
        for i, (profile, total, sms) in enumerate((("3g.40gb", 40 * GIB, 60), ("2g.20gb", 20 * GIB, 32)))
    )  # fmt: skip
    usage = tuple(
        MigUsage(i, memory_used_bytes=used, memory_free_bytes=total - used, graphics_active_percent=50.0 + i,
                 sm_active_percent=40.0 + i, sm_occupancy_percent=20.0 + i, tensor_active_percent=30.0 + i,
                 dram_active_percent=10.0 + i)
        for i, (used, total) in enumerate(((10 * GIB, 40 * GIB), (3 * GIB + 7 * MIB, 20 * GIB)))
    )  # fmt: skip
    mig_sample = gpu_sample(memory_free_bytes=40 * GIB, utilization_gpu_percent=None, mig_usage=usage, **gpm)
    gpu1 = gpu_state(
        1,
        gpu_process(1, 5151, gpu_instance_id=2, compute_instance_id=0),
        static=gpu_static(1, mig_mode=True, mig_mode_pending=True, mig_instances=instances),
        sample=mig_sample,
    )
    lost_health = GpuHealth(verdict=Severity.FAIL, events=(GpuEvent(NOW - 5, 2, xid=79),), xid_counts=((79, 1),))
    gpu2 = gpu_state(2, sample=GpuSample(NOW, lost=True), health=lost_health)
    return snapshot_of(gpu0, gpu1, gpu2, host=host_info(hostname="node-7"))


# --------------------------------------------------------------------------- fake sources


class LatestSource:
    """What the exporter's collector reads: a source whose ``latest`` snapshot is this one (or None)."""

    def __init__(self, snapshot: Snapshot | None) -> None:
        self.latest = snapshot


class FixedSource(SnapshotSource):
    """A source for the TUI that publishes what a test gives it (``_publish``): no thread, no timing.

    ``signal_refusal``: why it cannot signal (the default of every source that has no host to ask, like a
    replay), or None: it can, and records each signal in ``sent`` and answers it sent. ``status``: the
    header's status line (a remote fleet's "REMOTE 2/3 hosts"), None for the refresh interval.
    """

    def __init__(self, *, signal_refusal: str | None = SnapshotSource.signal_refusal, status: str | None = None):
        super().__init__(1.0)
        self.signal_refusal = signal_refusal
        self.status = status
        self.sent: list[tuple[int, float | None, int]] = []

    def status_line(self) -> str | None:
        return self.status

    def signal(self, pid: int, create_time: float | None, signum: int) -> Future[SignalOutcome]:
        if self.signal_refusal is not None:
            return super().signal(pid, create_time, signum)
        self.sent.append((pid, create_time, signum))
        future: Future[SignalOutcome] = Future()
        future.set_result(SignalOutcome(True, f"sent {signal.Signals(signum).name} to pid {pid}"))
        return future


# --------------------------------------------------------------------------- the command line
#
# NVTOPY, run_command, run_nvtopy and spawn_nvtopy: tests/cli_runner.py's, imported at the top. Here: the fake
# driver's side of a run.


def fake_nvml_calls(path: Path) -> dict[str, int]:
    """The fake driver's call counts (``FAKE_NVML_STATS``'s ``name count`` lines); empty until one is written."""
    counts: dict[str, int] = {}
    if not path.exists():
        return counts
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, count = line.split()
            counts[name] = int(count)
    return counts


def fake_nvml_env(fake_lib: str, **knobs: str) -> dict[str, str]:
    """This environment, loading ../shared/fake-nvml from ``fake_lib``, with only the given FAKE_NVML_ knobs.

    The caller's own knobs and CUDA_VISIBLE_DEVICES are dropped, so a developer's shell cannot change a test.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(knobs)
    env["LD_LIBRARY_PATH"] = fake_lib
    return env

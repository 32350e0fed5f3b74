"""Deterministic scenes of the app, for SVG snapshot tests and ``make screenshots``.

Why beside the tests, outside the package: the tests and the screenshot script
(``screenshots/make_screenshots.py``) must draw exactly the same thing, and
nothing a user installs needs frozen scenes. Each scene is a simulated backend on a frozen clock (fixed seed,
user and host name) fed a fixed number of snapshots on the test's own thread
(no poller thread, so no timing enters the picture), then a few keys.

A scene may ``edit`` the last snapshot before the app gets it: the health
scenes put hand-made health on simulated GPUs (Xid events, a failed row
remapping, a downgraded PCIe link, a GPU whose driver call is stuck), so their
pictures do not depend on how the simulation or the collector happen to arrive
at such states.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from textual.pilot import Pilot

from nvtopy.backends.simulated.backend import SimulatedBackend
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.model import Finding, GpuEvent, GpuHealth, GpuState, NvLink, Severity, Snapshot
from nvtopy.sources.poller import Poller
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.messages import SnapshotReady

__all__ = ["FROZEN_TIME", "SCENES", "Scene", "build"]

FROZEN_TIME = 1_795_000_000.0  # 2026-11-18 06:13:20 UTC


class _Clock:
    def __init__(self) -> None:
        self.now = FROZEN_TIME

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Scene:
    name: str
    description: str
    gpus: int = 4
    model: str = "H100 80GB HBM3"
    faults: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    layout: str = "auto"
    seed: int = 4
    samples: int = 90
    extra: dict[str, object] = field(default_factory=dict)
    edit: Callable[[Snapshot], Snapshot] | None = None  # applied to the last snapshot before the app gets it
    history: bool = False  # every sample reaches the process screen's history (the app gets only the last)


_GIB = 2**30
_FAIL, _WARN = Severity.FAIL, Severity.WARN


def _links(count: int, down: tuple[int, ...] = (), errors: int = 0) -> tuple[NvLink, ...]:
    return tuple(
        NvLink(
            link=i,
            active=i not in down,
            version=4,
            rx_bytes_per_s=0 if i in down else 9 * 2**20 + i * 2**16,
            tx_bytes_per_s=0 if i in down else 8 * 2**20 + i * 2**16,
            errors=errors if i in down else 0,
            remote=f"00000000:{0x40 + i:02X}:00.0",
        )
        for i in range(count)
    )


def _sick(gpu: GpuState, health: GpuHealth, **sample: object) -> GpuState:
    """``gpu`` with hand-made ``health`` and sample readings, its interconnect filled in."""
    links = sample.pop("nvlinks", _links(18))
    readings = {
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "pcie_replay_counter": 0,
        "remapped_rows_corrected": 0,
        "remapped_rows_uncorrected": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "nvlinks": links,
        "nvlink_rx_bytes_per_s": sum(link.rx_bytes_per_s or 0 for link in links),  # type: ignore[union-attr]
        "nvlink_tx_bytes_per_s": sum(link.tx_bytes_per_s or 0 for link in links),  # type: ignore[union-attr]
        **sample,
    }
    static = dataclasses.replace(gpu.static, pcie_link_gen_max=5, pcie_link_width_max=16, nvlink_count=len(links))
    return dataclasses.replace(gpu, static=static, sample=dataclasses.replace(gpu.sample, **readings), health=health)


def sick_gpus(snapshot: Snapshot) -> Snapshot:
    """Four GPUs in four states: healthy; throttled on a narrow link with an idle-held process;
    not responding for 12 s; failed (Xid 79 then 64, row remapping failed, two NVLinks down)."""
    now = snapshot.timestamp
    gpus = list(snapshot.gpus)
    gpus[0] = _sick(gpus[0], GpuHealth())
    idle = gpus[1].processes[-1]
    flagged = dataclasses.replace(idle, flags=("idle-held",), idle_seconds=1500.0, sm_percent=0)
    gpus[1] = dataclasses.replace(gpus[1], processes=(*gpus[1].processes[:-1], flagged))
    gpus[1] = _sick(
        gpus[1],
        GpuHealth(
            verdict=_WARN,
            findings=(
                Finding(_WARN, "pcie-downgrade", "PCIe link Gen3 x8, the GPU can do Gen5 x16", "reseat the board"),
                Finding(_WARN, "throttle", "HW slowdown: SM at 45 % of max", "check cooling and the power supply"),
                Finding(
                    _WARN,
                    "idle-held",
                    f"1 process holds {(idle.gpu_memory_bytes or 0) / _GIB:.1f} GiB and computes nothing",
                    "ask the owner to release the GPU",
                ),
            ),
            throttle="HW slowdown: SM at 45 % of max",
            idle_held_bytes=idle.gpu_memory_bytes,
        ),
        pcie_link_gen=3,
        pcie_link_width=8,
        pcie_replay_counter=12,
        throttle_reasons=("hw_slowdown",),
        remapped_rows_corrected=2,
    )
    gpus[2] = _sick(
        gpus[2],
        GpuHealth(
            verdict=_FAIL,
            findings=(
                Finding(
                    _FAIL,
                    "not-responding",
                    "not responding (12 s): a driver call on this GPU is stuck",
                    "look for Xid errors in dmesg; a GPU reset or a reboot may be needed",
                ),
            ),
            responding=False,
            stalled_seconds=12.0,
        ),
    )
    events = (
        GpuEvent(now - 1900, 3, xid=31, gpu_instance_id=1, compute_instance_id=0),
        GpuEvent(now - 600, 3, xid=79),
        GpuEvent(now - 540, 3, xid=64),
    )
    gpus[3] = _sick(
        gpus[3],
        GpuHealth(
            verdict=_FAIL,
            findings=(
                Finding(_FAIL, "xid", "Xid 64: GPU memory remapping failure", "reset the GPU; contact support"),
                Finding(_FAIL, "xid", "Xid 79: GPU has fallen off the bus", "reboot the node"),
                Finding(_FAIL, "remap-failure", "row remapping failed", "replace the board (RMA)"),
                Finding(_WARN, "nvlink-down", "NVLink 4, 5 inactive (16/18 up)", "check the fabric"),
            ),
            events=events,
            xid_counts=((31, 1), (64, 1), (79, 1)),
        ),
        remapped_rows_uncorrected=3,
        remapped_rows_failure=True,
        nvlinks=_links(18, down=(4, 5), errors=7),
    )
    return dataclasses.replace(snapshot, gpus=tuple(gpus))


SCENES: dict[str, Scene] = {
    scene.name: scene
    for scene in (
        Scene("main", "Four H100s: full panels and the process table"),
        Scene("compact", "Sixteen GPUs: one compact line each", gpus=16, seed=2),
        Scene("kill", "Confirming SIGTERM for the selected process", keys=("down", "down", "T")),
        Scene("help", "The help screen: every key", keys=("question_mark",)),
        Scene(
            "filter",
            "Filtering: only my processes matching 'python', sorted by GPU memory",
            keys=("slash", *"python", "enter", "u", "s", "s", "s", "s", "s"),
        ),
        Scene(
            "faults",
            "A lost GPU, a hot one throttling, ECC errors, a passive board's fan",
            faults=("lost@2", "hot@1", "ecc@3"),
        ),
        Scene("workstation", "An RTX 4090 workstation: fans, graphics processes, no ECC", gpus=2, model="RTX 4090"),
        Scene(
            "platforms",
            "Platforms: a GB10 with unified memory (no framebuffer), a vGPU guest, a Windows WDDM driver",
            gpus=2,
            model="GB10",
            faults=("vgpu@1", "wddm"),
        ),
        Scene(
            "sick",
            "GPU health: a throttled GPU on a narrow link, one not responding (dimmed), one failed",
            edit=sick_gpus,
        ),
        Scene(
            "health",
            "The health screen: findings with fixes, Xid events, memory and links",
            edit=sick_gpus,
            keys=("H",),
        ),
        Scene(
            "realwork",
            "The real-work meter: GPU 2 at 100 % utilisation with 3 % of its SMs active (a stuck collective)",
            faults=("stuck@2",),
        ),
        Scene(
            "mig",
            "MIG: a GPU without it, GPUs with 3 and 7 instances, one switching MIG on at its next reset",
            faults=("mig=3@1", "mig=7@2", "mig=pending@3"),
        ),
        Scene(
            "charts",
            "History charts: the last ten minutes of four H100s, one chart per metric (z zooms, c changes)",
            samples=660,
            keys=("z",),
        ),
        Scene(
            "charts-gpu",
            "History charts, one per GPU: utilisation, memory, power (of its limit) and SM activity on 0-100 %",
            gpus=3,
            samples=120,
            faults=("stuck@2",),
            keys=("c",),
        ),
        Scene(
            "tree",
            "The tree view (w): processes under their parents, a torchrun launcher's ranks on two GPUs",
            faults=("stuck@1", "stuck@2"),
            keys=("w",),
        ),
        Scene(
            "process",
            "The process screen (enter): history, command line, cwd, parents, CUDA_VISIBLE_DEVICES",
            keys=("down", "down", "enter"),
            history=True,
        ),
    )
}


def build(scene: Scene) -> tuple[NvtopyApp, Callable[[Pilot[None]], Awaitable[None]]]:
    """The app of ``scene`` and the coroutine that brings it to the pictured state."""
    clock = _Clock()
    backend = SimulatedBackend(
        gpus=scene.gpus,
        model=scene.model,
        seed=scene.seed,
        clock=clock,
        faults=parse_fault_specs(scene.faults),
        viewer="alice",
        hostname="gpu-node-07",
    )
    # isolate=False: every GPU is read in turn on the test's thread, so a read that a loaded machine makes slower
    # than the poll's deadline can never leave a GPU with the previous sample's values in the picture.
    app = NvtopyApp.for_backend(backend, interval=1.0, poll=False, layout=scene.layout, isolate=False)
    poller = app.source
    assert isinstance(poller, Poller)

    async def prepare(pilot: Pilot[None]) -> None:
        for _ in range(scene.samples):
            clock.now += 1.0
            snapshot = poller.poll_once(slow=True)
            if scene.history:  # the app would coalesce them (a newer snapshot replaces an unprocessed one)
                app.process_history.add(snapshot)
        if scene.edit is not None and poller.latest is not None:
            app.post_message(SnapshotReady(scene.edit(poller.latest)))
        await pilot.pause()
        for key in scene.keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()

    return app, prepare

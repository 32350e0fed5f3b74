"""Deterministic scenes of the app, for SVG snapshot tests and ``make screenshots``.

Why in the package: the tests and the screenshot script must draw exactly the
same thing. Each scene is a simulated backend on a frozen clock (fixed seed,
user and host name) fed a fixed number of snapshots on the test's own thread
(no poller thread, so no timing enters the picture), then a few keys.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from textual.pilot import Pilot

from ..backends.sim_faults import parse_fault_specs
from ..backends.simulated import SimulatedBackend
from ..sources.poller import Poller
from .app import NvtopyApp

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
    app = NvtopyApp.for_backend(backend, interval=1.0, poll=False, layout=scene.layout)
    poller = app.source
    assert isinstance(poller, Poller)

    async def prepare(pilot: Pilot[None]) -> None:
        for _ in range(scene.samples):
            clock.now += 1.0
            poller.poll_once(slow=True)
        await pilot.pause()
        for key in scene.keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()

    return app, prepare

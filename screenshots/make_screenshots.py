"""Regenerate screenshots/*.svg from the simulated backend (``make screenshots``).

The scenes are those of the SVG snapshot tests (nvtopy.tui.scenes): a frozen
clock and a fixed seed, so a picture changes only when the UI does.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

os.environ["TZ"] = "UTC"
time.tzset()

from nvtopy.tui.scenes import SCENES, build  # noqa: E402

# mig: tall enough for full panels; charts: the history charts as a 200x50 terminal has room for them
SIZES = {"compact": (120, 40), "help": (120, 44), "mig": (120, 54), "charts": (200, 50), "charts-gpu": (200, 50)}


async def shoot(name: str, out: Path) -> Path:
    scene = SCENES[name]
    app, prepare = build(scene)
    width, height = SIZES.get(name, (120, 40))
    async with app.run_test(size=(width, height)) as pilot:
        await prepare(pilot)
        path = out / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"nvtopy - {scene.description}"))
    return path


def main() -> int:
    out = Path(__file__).resolve().parent
    for name in sys.argv[1:] or SCENES:
        path = asyncio.run(shoot(name, out))
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerate screenshots/*.svg from the simulated backend (``make screenshots``).

The scenes are those of the SVG snapshot tests (tests/scenes.py): a frozen
clock and a fixed seed, so a picture changes only when the UI does.

``make_screenshots.py`` alone writes every picture; ``make_screenshots.py main main-80x24``
only those.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

os.environ["TZ"] = "UTC"
time.tzset()
# The scenes live with the tests that pin them (tests/scenes.py), outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scenes import SCENES, build  # noqa: E402

# The SVG's text font, first choice first. Rich's template names "Fira Code, monospace" only, and a viewer
# without Fira Code then draws the braille charts and box lines in whatever monospace it has, often without
# those glyphs (tofu, or a proportional fallback that breaks the columns). DejaVu Sans Mono and Menlo have
# both the box-drawing and the braille blocks, and are on most Linux and macOS machines.
FONT_STACK = '"Fira Code", "DejaVu Sans Mono", Menlo, "Cascadia Mono", Consolas, monospace'
_RICH_FONT = "font-family: Fira Code, monospace;"

# A picture: (scene, width, height). Most at 120x40; mig tall enough for full panels; the charts as a 200x50
# terminal has room for them; main-80x24 the main screen as a small terminal shows it.
_SIZES = {"help": (120, 44), "mig": (120, 54), "charts": (200, 50), "charts-gpu": (200, 50)}
SHOTS: dict[str, tuple[str, int, int]] = {name: (name, *_SIZES.get(name, (120, 40))) for name in SCENES} | {
    "main-80x24": ("main", 80, 24),
}


def with_font_stack(svg: str) -> str:
    """``svg`` (Textual's export) with its terminal text in FONT_STACK.

    Why a rewrite of the text: Textual's ``export_screenshot`` takes no font and builds its own
    console, so the template cannot be passed in. The rule is replaced exactly once or not at all:
    a Rich that writes it differently fails here instead of shipping pictures in the wrong font.
    """
    if svg.count(_RICH_FONT) != 1:
        raise RuntimeError(f"the SVG export no longer names its font as {_RICH_FONT!r}: update with_font_stack")
    return svg.replace(_RICH_FONT, f"font-family: {FONT_STACK};")


async def shoot(name: str, out: Path) -> Path:
    scene_name, width, height = SHOTS[name]
    scene = SCENES[scene_name]
    app, prepare = build(scene)
    async with app.run_test(size=(width, height)) as pilot:
        await prepare(pilot)
        title = f"nvtopy - {scene.description}" + (f" ({width}x{height})" if name != scene_name else "")
        path = out / f"{name}.svg"
        path.write_text(with_font_stack(app.export_screenshot(title=title)))
    return path


def main() -> int:
    out = Path(__file__).resolve().parent
    names = sys.argv[1:] or list(SHOTS)
    unknown = [name for name in names if name not in SHOTS]
    if unknown:
        print(f"make_screenshots: unknown picture {', '.join(unknown)} (known: {', '.join(SHOTS)})", file=sys.stderr)
        return 2
    for name in names:
        path = asyncio.run(shoot(name, out))
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

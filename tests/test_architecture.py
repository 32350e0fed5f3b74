"""The layering the brief asks for, checked so it cannot erode.

- Nothing outside ``nvtopy/tui/`` imports Textual (the data layer, the CLI's
  non-interactive paths and the Python API stay light and UI-free).
- Nothing in ``nvtopy/tui/`` imports pynvml, psutil or the modules that call
  them: widgets only render snapshots; the backend does the I/O, off the UI thread.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nvtopy"
FORBIDDEN_IN_TUI = {"pynvml", "psutil", "nvtopy.backends.host", "nvtopy.backends.signals", "nvtopy.backends.nvml"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
    return names


def test_tui_never_touches_nvml_or_psutil():
    offenders = {}
    for path in (PACKAGE / "tui").rglob("*.py"):
        bad = {m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_TUI)}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_core_modules_do_not_import_textual():
    modules = [
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
        if "tui" not in p.relative_to(PACKAGE).parts and p.name != "__main__.py"
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'textual')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
    assert len(modules) > 10

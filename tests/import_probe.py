"""What a fresh interpreter has imported after running some code: the guard of every "X never imports Y" test.

Each such test runs its code in a child (this process has imported everything already) and asks which
of some modules it loaded; a module counts with its submodules (``rich`` covers ``rich.text``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable


def modules_loaded(code: str, modules: Iterable[str], timeout: float = 60) -> list[str]:
    """The ones of ``modules`` (or a submodule of one) that ``code`` left imported in a new interpreter."""
    names = sorted(set(modules))
    probe = (
        f"{code}\n"
        "import sys as _sys\n"
        f"_wanted = {names!r}\n"
        "print(','.join(w for w in _wanted if any(m == w or m.startswith(w + '.') for m in _sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return [name for name in result.stdout.strip().split(",") if name]


def once_code(mode: list[str]) -> str:
    """``nvtopy --demo --once`` (with ``mode``, e.g. ``["--json"]``) run in-process, its output swallowed."""
    return (
        "import io, contextlib\n"
        "from nvtopy.commands.dispatch import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['--demo', '--once', *{mode!r}])\n"
    )

"""The layering of ``nvtopy/``, checked so it cannot erode.

The package is read as an import graph (``ast``, never imported): every
``import`` and ``from ... import``, absolute or relative, at module level, inside
functions and under ``if TYPE_CHECKING`` -- a lazy import is still a dependency.
On that graph:

- third-party packages stay in their place (:data:`THIRD_PARTY`): Textual only in
  ``tui/``; rich only in ``render/`` and ``tui/``; pynvml only in ``backends/nvml/``
  and psutil only in ``backends/host/`` (the one backend that reads this machine's
  processes); torch (and tensorboardX) only in ``integrations/`` -- ``api/``
  reads the job's torch from ``sys.modules`` and never imports it; prometheus_client
  only in ``formats/`` and ``commands/``; anything else not at all. A module outside
  its package's place names its reason in :data:`THIRD_PARTY_REASONS`;
- each layer imports only the layers below it (:data:`MAY_IMPORT`): ``backends/``
  none of sources/formats/render/tui/commands/api; ``sources/``, ``formats/`` and
  ``render/`` neither ``tui/`` nor ``commands/``; nothing imports ``commands/`` but
  ``commands/`` and ``nvtopy/__main__.py``; ``tui/`` reaches ``backends/`` only
  for ``backends.base`` types;
- ``backends/`` holds the shared modules of :data:`BACKENDS_MODULES` and the
  folders of :data:`BACKENDS_FOLDERS`, nothing else; a backend folder imports no
  other backend folder -- they meet in ``backends/base.py`` -- except along the
  named edges of :data:`BACKEND_EDGES` (NVML and the simulator both report real
  host processes, which only ``backends/host/`` reads);
- :data:`EXCEPTIONS` (imports across the layer rules, each with its reason) is
  empty, and a test keeps it so: a new crossing is a design change, not an entry;
- no import cycles anywhere in the package.

Each checker is also run on a small synthetic package with one violation, so a
guard that stopped seeing anything would fail too.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import package_source
from .package_source import PACKAGE, reads_the_package

# The package's import graph is built once per test process (package_edges, about 3 s of CPU): every test of this
# module on one pytest-xdist worker (`--dist loadgroup`) builds it once per run, not once on each worker; that
# worker is the one the other searches of the source run on (tests/package_source.py), so it is parsed once.
pytestmark = reads_the_package
FORBIDDEN_IN_TUI = {"pynvml", "psutil", "nvtopy.backends.host", "nvtopy.backends.nvml"}

# --- the rules -------------------------------------------------------------------------------------

# The vocabulary every layer shares: the top-level modules. Any other top-level module is in no layer.
CORE = {
    "model",
    "records",
    "standin",
    "history",
    "ranges",
    "selection",
    "errors",
    "textsafe",
    "_version",
    "config",
    "boundedfile",
    "jsondecode",
    "columns",
    "interval",
}

# layer -> the layers it may import (its own included). "package" is nvtopy/__init__.py (the
# Python API's lazy front), "entry" is nvtopy/__main__.py.
MAY_IMPORT: dict[str, set[str]] = {
    "core": {"core"},
    "backends": {"core", "backends"},
    "health": {"core", "health"},  # pure rules over the model: what is wrong with a GPU
    "alerts": {"core", "health", "alerts"},  # pure: the alert rules, one catalog for a machine and a fleet
    "formats": {"core", "health", "alerts", "formats"},
    "accounting": {"core", "health", "formats", "accounting"},  # rules over observations: GPU-hours, energy
    "sources": {"core", "backends", "health", "formats", "accounting", "sources"},
    "render": {"core", "health", "formats", "render"},
    "notify": {"core", "alerts", "notify"},  # the channels an alert goes out through (desktop, command, apprise)
    # backends: base only, see below
    "tui": {"core", "backends", "health", "alerts", "sources", "formats", "render", "notify", "tui"},
    "api": {"core", "backends", "health", "sources", "formats", "render", "api"},
    "integrations": {"core", "api", "integrations"},
    "commands": {
        "core",
        "backends",
        "health",
        "alerts",
        "sources",
        "formats",
        "accounting",
        "render",
        "notify",
        "tui",
        "api",
        "integrations",
        "commands",
    },
    "package": {"core", "api"},
    "entry": {"commands"},
}

FOLDERS = set(MAY_IMPORT) - {"core", "package", "entry"}

# tui/ draws snapshots; of backends/ it may name only the types in backends.base.
TUI_BACKENDS = {"backends.base"}

# Named exceptions: (importing module, imported module) -> why. One that no longer occurs fails
# test_exceptions_are_still_needed, so the list cannot go stale.
EXCEPTIONS: dict[tuple[str, str], str] = {}

# third-party top-level package -> the places that may import it: a layer ("tui") or a folder inside one
# ("backends.nvml"), dotted, relative to the root. Not listed: may not be imported.
THIRD_PARTY: dict[str, set[str]] = {
    "textual": {"tui"},
    "rich": {"render", "tui"},
    "pynvml": {"backends.nvml"},
    "psutil": {"backends.host"},
    "prometheus_client": {"formats", "commands"},
    "apprise": {"notify"},
    "msgspec": {"core"},  # in nvtopy/jsondecode.py: the one home of JSON from outside (hosts, recordings, Prometheus)
    # nvtopy web's server: the monitor (a Textual app, one process per browser) served by textual-serve's
    # app protocol over aiohttp, its page rendered from textual-serve's template with jinja2
    "aiohttp": {"commands.web"},
    "jinja2": {"commands.web"},
    "textual_serve": {"commands.web"},
    "torch": {"integrations"},
    "tensorboardX": {"integrations"},
}

# (importing module, third-party package) -> why it may, outside the package's places. One that no longer
# occurs fails test_third_party_reasons_are_still_needed.
THIRD_PARTY_REASONS: dict[tuple[str, str], str] = {}

# What may stand directly under backends/: the shared modules every backend and every caller uses...
BACKENDS_MODULES = {"base", "open", "locked", "diagnose"}
# ...and one folder per backend.
BACKENDS_FOLDERS = {"nvml", "simulated", "host"}

# (backend folder, backend folder it may import) -> why. Any other import from one backend folder into another
# is a violation: backends share types through backends/base.py.
BACKEND_EDGES: dict[tuple[str, str], str] = {
    ("nvml", "host"): (
        "NVML names GPU processes by pid only: host/ reads their user, command and owner, and signals them"
    ),
    ("simulated", "host"): "the simulator's real pids (--real-pids) and its kill are real host processes, as NVML's",
}

# --- the import graph ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module, dotted, without the root package: "render.text"
    target: str  # inside the package: the imported module, likewise; outside: the top-level name
    internal: bool
    path: str  # where, for messages: "nvtopy/render/text.py:21"
    lazy: bool  # inside a function


def module_names(package: Path) -> dict[str, Path]:
    """Dotted name relative to the package ("" for its __init__) -> file."""
    names = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(dotted: str, known: dict[str, Path]) -> str:
    """The deepest module of the package that ``dotted`` (relative to the root) names."""
    parts = dotted.split(".") if dotted else []
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts)


def _parsed(path: Path) -> ast.Module:
    """A module of the real package from the run's one parse of it; any other (a test's own package) read here."""
    if path.is_relative_to(PACKAGE):
        return package_source.tree(path)
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def import_edges(package: Path) -> list[Edge]:
    """Every import of every module of ``package``, relative and absolute, wherever it stands."""
    root = package.name
    known = module_names(package)
    edges: list[Edge] = []
    seen: set[Edge] = set()
    for name, path in sorted(known.items()):
        tree = _parsed(path)
        where = path.relative_to(package.parent).as_posix()
        # The package a relative import starts from: the module's own for an __init__.
        here = [root, *name.split(".")] if name else [root]
        if path.name != "__init__.py":
            here = here[:-1]
        imports = _imports_in_walk_order(tree)
        lazy_lines = {node.lineno for node, in_function in imports if in_function}
        for node, _ in imports:
            if isinstance(node, ast.Import):
                written = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = [*here[: len(here) - node.level + 1], *(node.module.split(".") if node.module else [])]
                else:
                    base = (node.module or "").split(".")  # "from X import" always names X when absolute
                # "from pkg import name": the module pkg.name if there is one, else pkg itself.
                written = [".".join([*base, alias.name]) for alias in node.names]
            for dotted in written:
                top, _, rest = dotted.partition(".")
                internal = top == root
                target = _resolve(rest, known) if internal else top
                edge = Edge(name, target, internal, f"{where}:{node.lineno}", node.lineno in lazy_lines)
                if edge not in seen:  # a set: `edge not in edges` compared each new edge with every one before it
                    seen.add(edge)
                    edges.append(edge)
    return edges


def _imports_in_walk_order(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import in ``ast.walk``'s order, and whether it stands inside a function (at any depth).

    One walk of the tree: walking each function's subtree again (nested ones once per enclosing function)
    made the package's graph cost seconds of CPU in every test process that reads it.
    """
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    todo: deque[tuple[ast.AST, bool]] = deque([(tree, False)])
    while todo:
        node, in_function = todo.popleft()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, in_function))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))
    return found


def layer_of(module: str) -> str:
    """The layer of a module named relative to the root ("" is the root's __init__)."""
    if not module:
        return "package"
    top = module.split(".", maxsplit=1)[0]
    if top == "__main__":
        return "entry"
    if top in CORE:
        return "core"
    return top if top in FOLDERS else "unplaced"


def unplaced_modules(package: Path) -> list[str]:
    """Modules in no layer: a top-level module outside CORE, or a folder that is no layer."""
    return sorted(f"nvtopy.{m}" for m in module_names(package) if layer_of(m) == "unplaced")


# --- the checkers: each returns one line per violation ---------------------------------------------


def in_place(module: str, place: str) -> bool:
    """Whether ``module`` lies in ``place``: a layer ("tui") or a folder inside one ("backends.nvml")."""
    if "." not in place:
        return layer_of(module) == place
    return module == place or module.startswith(place + ".")


def third_party_violations(edges: list[Edge], reasons: dict[tuple[str, str], str] = THIRD_PARTY_REASONS) -> list[str]:
    out = []
    for e in edges:
        if e.internal or e.target in sys.stdlib_module_names or (e.source, e.target) in reasons:
            continue
        allowed = THIRD_PARTY.get(e.target)
        if allowed is None:
            out.append(f"{e.path}: imports {e.target}, which is no dependency of any layer (THIRD_PARTY)")
        elif not any(in_place(e.source, place) for place in allowed):
            places = ", ".join(sorted(place.replace(".", "/") + "/" for place in allowed))
            out.append(f"{e.path}: imports {e.target}; only {places} may")
    return out


def backend_folder(module: str) -> str | None:
    """The backend folder ("nvml") a module lies in, ``None`` for one outside them (backends.base, tui.app)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "backends" else None


def backend_edge_violations(edges: list[Edge], allowed: dict[tuple[str, str], str] = BACKEND_EDGES) -> list[str]:
    """Imports from one backend folder into another that no named edge allows."""
    out = []
    for e in edges:
        if not e.internal:
            continue
        src, dst = backend_folder(e.source), backend_folder(e.target)
        if src is None or dst is None or src == dst or (src, dst) in allowed:
            continue
        out.append(
            f"{e.path}: backends/{src}/ imports nvtopy.{e.target}; backend folders meet in backends/base.py "
            "(or a named edge in BACKEND_EDGES)"
        )
    return out


def backends_layout_violations(package: Path) -> list[str]:
    """What stands directly under backends/ besides BACKENDS_MODULES and the BACKENDS_FOLDERS."""
    backends = package / "backends"
    out = []
    for path in sorted(backends.iterdir()):
        if path.name == "__init__.py" or path.name.startswith((".", "__pycache__")):
            continue
        if path.is_dir():
            if path.name not in BACKENDS_FOLDERS:
                out.append(f"backends/{path.name}/: a folder that is no backend (BACKENDS_FOLDERS)")
        elif path.suffix == ".py" and path.stem not in BACKENDS_MODULES:
            out.append(f"backends/{path.name}: a module directly under backends/ (BACKENDS_MODULES, or a folder)")
    out += [f"backends/{name}/: missing" for name in sorted(BACKENDS_FOLDERS) if not (backends / name).is_dir()]
    return out


def layer_violations(edges: list[Edge], exceptions: dict[tuple[str, str], str] = EXCEPTIONS) -> list[str]:
    out = []
    for e in edges:
        if not e.internal or (e.source, e.target) in exceptions:
            continue
        src, dst = layer_of(e.source), layer_of(e.target)
        target = f"nvtopy.{e.target}" if e.target else "nvtopy"
        if src == "unplaced":
            out.append(f"{e.path}: module in no layer (put it in a folder, or add it to CORE)")
        elif dst not in MAY_IMPORT[src]:
            out.append(f"{e.path}: {src}/ imports {target}; {src}/ may import {', '.join(sorted(MAY_IMPORT[src]))}")
        elif src == "tui" and dst == "backends" and e.target not in TUI_BACKENDS:
            out.append(f"{e.path}: tui/ imports {target}; of backends/ it may import only {sorted(TUI_BACKENDS)}")
    return out


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.internal and e.target != e.source:
            graph.setdefault(e.source, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def describe_cycles(edges: list[Edge]) -> list[str]:
    """Each cycle with the imports that close it, for the assertion message."""
    lines = []
    for component in import_cycles(edges):
        members = set(component)
        lines.append(" <-> ".join(f"nvtopy.{m}" for m in component))
        lines += [
            f"    {e.path}: nvtopy.{e.source} -> nvtopy.{e.target}" + (" (in a function)" if e.lazy else "")
            for e in edges
            if e.internal and e.source in members and e.target in members and e.source != e.target
        ]
    return lines


# --- on the real package ---------------------------------------------------------------------------


@functools.cache
def package_edges() -> list[Edge]:
    """The real package's graph, read once per test process: every rule below reads the same one."""
    return import_edges(PACKAGE)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of what one file imports (kept for test_tui_never_touches_nvml_or_psutil)."""
    tree = _parsed(path)
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


def test_third_party_packages_stay_in_their_layer():
    assert third_party_violations(package_edges()) == []


def test_layers_import_only_what_they_may():
    assert layer_violations(package_edges()) == []


def test_exceptions_are_still_needed():
    edges = {(e.source, e.target) for e in package_edges()}
    assert [pair for pair in EXCEPTIONS if pair not in edges] == []


def test_no_layer_exceptions():
    """Every import follows the layer rules: a crossing is a design change, not an entry in EXCEPTIONS."""
    assert EXCEPTIONS == {}


def test_third_party_reasons_are_still_needed():
    edges = {(e.source, e.target) for e in package_edges()}
    assert [pair for pair in THIRD_PARTY_REASONS if pair not in edges] == []


def test_no_third_party_reasons():
    """Every third-party import is in its layer's place: psutil is read in backends/host/ only (the simulator's
    real pids ask host/processes.py), pynvml in backends/nvml/ only. A new one is a design change, not an entry."""
    assert THIRD_PARTY_REASONS == {}


def test_backend_folders_meet_only_in_base():
    assert backend_edge_violations(package_edges()) == []


def test_backend_edges_are_still_needed():
    edges = {(backend_folder(e.source), backend_folder(e.target)) for e in package_edges() if e.internal}
    assert [pair for pair in BACKEND_EDGES if pair not in edges] == []


def test_backends_holds_only_its_shared_modules_and_the_backend_folders():
    assert backends_layout_violations(PACKAGE) == []


def test_only_the_entry_points_reach_commands():
    """commands/ is reached from nvtopy/__main__.py and the console script, nothing else."""
    importers = {e.source for e in package_edges() if e.internal and layer_of(e.target) == "commands"}
    assert {m for m in importers if layer_of(m) != "commands"} == {"__main__"}
    scripts = re.search(
        r"^\[project\.scripts\]\n((?:[^\[\n].*\n?)*)", (PACKAGE.parent / "pyproject.toml").read_text(), re.M
    )
    assert scripts is not None
    targets = re.findall(r'=\s*"([\w.]+):\w+"', scripts.group(1))
    assert targets and all(t.startswith("nvtopy.commands.") for t in targets), targets


def test_no_import_cycles():
    cycles = describe_cycles(package_edges())
    assert cycles == [], "import cycles (lazy imports count):\n" + "\n".join(cycles)


def test_the_graph_sees_the_whole_package():
    """A reader that silently found nothing would pass every rule above."""
    edges = package_edges()
    internal = {(e.source, e.target) for e in edges if e.internal}
    assert ("__main__", "commands.dispatch") in internal
    assert ("render.text", "formats.timestamps") in internal  # relative, two levels up
    assert any(e.source == "backends.nvml.backend" and e.target == "pynvml" for e in edges)
    assert any(e.source.startswith("backends.host.") and e.target == "psutil" for e in edges)
    assert ("backends.nvml.backend", "backends.host.pidmap") in internal  # a named backend edge, seen
    assert any(e.lazy for e in edges)  # function-level imports are read
    assert len(module_names(PACKAGE)) > 30


# --- the checkers catch what they should: a synthetic package per rule -----------------------------


def make_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``nvtopy`` under ``root`` with an __init__ in every folder and the given sources."""
    package = root / "nvtopy"
    for name, source in {"__init__.py": "", "model.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(package).parents:
            (package / folder / "__init__.py").touch()
        path.write_text(source)
    return package


CLEAN = {
    "__main__.py": "from .commands.dispatch import console\n",
    "backends/base.py": "from ..model import *\n",
    "backends/open.py": "def f():\n    from .nvml.backend import NvmlBackend\n    from .simulated import backend\n",
    "backends/nvml/backend.py": "import pynvml\nfrom ..base import Backend\nfrom ..host.processes import p\n",
    "backends/simulated/backend.py": "from ..base import B\nfrom ..host import processes\nfrom .catalog import m\n",
    "backends/simulated/catalog.py": "",
    "backends/host/processes.py": "import psutil\nfrom ..base import SignalOutcome\n",
    "sources/poller.py": "from ..backends.base import Backend\nfrom . import collector\n",
    "sources/collector.py": "import nvtopy.model\n",
    "formats/contract.py": "import json\nfrom .. import model\n",
    "render/styled.py": "from rich.text import Text\n",
    "render/text.py": "from ..formats.contract import x\n",
    "tui/app.py": "import textual\nfrom ..backends.base import Backend\nfrom ..sources.poller import Poller\n",
    "commands/dispatch.py": "def main():\n    from .monitor import run\n",
    "commands/monitor.py": "def run():\n    from ..tui.app import App\n",
    "api/usage.py": "def f():\n    from ..backends.nvml.backend import NvmlBackend\n",
    "api/torchmem.py": "import sys\n",
    "integrations/tensorboard.py": "from ..api.usage import f\n\ndef w():\n    from torch.utils.tensorboard import S\n",
}


def test_a_clean_synthetic_package_passes(tmp_path):
    package = make_package(tmp_path, CLEAN)
    edges = import_edges(package)
    assert third_party_violations(edges, {}) == []
    assert layer_violations(edges, {}) == []
    assert backend_edge_violations(edges) == []
    assert backends_layout_violations(package) == []
    assert import_cycles(edges) == []
    assert ("sources.poller", "sources.collector") in {(e.source, e.target) for e in edges}  # "from . import x"


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("render/gpu.py", "from textual.widget import Widget\n", "imports textual; only tui/ may"),
        ("commands/log.py", "def f():\n    import textual\n", "imports textual; only tui/ may"),  # lazy
        ("formats/csv.py", "import rich\n", "imports rich; only render/, tui/ may"),
        ("tui/app.py", "import pynvml\n", "imports pynvml; only backends/nvml/ may"),
        ("api/state.py", "def f():\n    import psutil\n", "imports psutil; only backends/host/ may"),
        ("backends/diagnose.py", "import pynvml\n", "imports pynvml; only backends/nvml/ may"),
        ("backends/simulated/catalog.py", "import pynvml\n", "imports pynvml; only backends/nvml/ may"),
        ("backends/nvml/events.py", "def f():\n    import psutil\n", "imports psutil; only backends/host/ may"),
        ("backends/base.py", "import psutil\n", "imports psutil; only backends/host/ may"),
        ("api/torchmem.py", "import torch\n", "imports torch; only integrations/ may"),
        ("sources/poller.py", "import numpy\n", "imports numpy, which is no dependency of any layer"),
    ],
)
def test_third_party_rule_catches(tmp_path, name, source, expected):
    edges = import_edges(make_package(tmp_path, {**CLEAN, name: source}))
    found = third_party_violations(edges, {})
    assert len(found) == 1 and found[0].startswith(f"nvtopy/{name}:") and expected in found[0], found


def test_a_third_party_reason_lets_one_module_through(tmp_path):
    edges = import_edges(make_package(tmp_path, {**CLEAN, "backends/simulated/catalog.py": "import psutil\n"}))
    assert len(third_party_violations(edges, {})) == 1
    assert third_party_violations(edges, {("backends.simulated.catalog", "psutil"): "why"}) == []


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("backends/host/processes.py", "from ..nvml.backend import b\n", "backends/host/ imports nvtopy.backends.nvml"),
        ("backends/nvml/backend.py", "def f():\n    from ..simulated import backend\n", "backends/nvml/ imports"),
        ("backends/simulated/catalog.py", "import nvtopy.backends.nvml.backend\n", "backends/simulated/ imports"),
        ("backends/host/processes.py", "from ..simulated.catalog import m\n", "imports nvtopy.backends.simulated"),
    ],
)
def test_backend_edge_rule_catches(tmp_path, name, source, expected):
    edges = import_edges(make_package(tmp_path, {**CLEAN, name: source}))
    found = backend_edge_violations(edges)
    assert len(found) == 1 and found[0].startswith(f"nvtopy/{name}:") and expected in found[0], found


def test_a_named_backend_edge_is_the_only_way_through(tmp_path):
    edges = import_edges(make_package(tmp_path, CLEAN))
    assert len(backend_edge_violations(edges, {})) == 2  # nvml -> host and simulated -> host, unnamed
    left = backend_edge_violations(edges, {("nvml", "host"): "why"})
    assert len(left) == 1 and left[0].startswith("nvtopy/backends/simulated/backend.py:2:"), left


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"backends/helpers.py": "import os\n"}, ["backends/helpers.py: a module directly under backends/"]),
        ({"backends/remote/client.py": ""}, ["backends/remote/: a folder that is no backend"]),
    ],
)
def test_backends_layout_check_catches(tmp_path, files, expected):
    found = backends_layout_violations(make_package(tmp_path, {**CLEAN, **files}))
    assert len(found) == 1 and found[0].startswith(expected[0]), found


def test_backends_layout_check_sees_a_missing_folder(tmp_path):
    files = {name: source for name, source in CLEAN.items() if not name.startswith("backends/host/")}
    files["backends/nvml/backend.py"] = "import pynvml\n"
    files["backends/simulated/backend.py"] = "from .catalog import m\n"
    assert backends_layout_violations(make_package(tmp_path, files)) == ["backends/host/: missing"]


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("backends/nvml/backend.py", "from ...sources.poller import P\n", "backends/ imports nvtopy.sources.poller"),
        ("backends/nvml/backend.py", "def f():\n    from ...api import usage\n", "backends/ imports nvtopy.api.usage"),
        ("sources/poller.py", "from ..tui.app import App\n", "sources/ imports nvtopy.tui.app"),
        ("formats/contract.py", "import nvtopy.commands.dispatch\n", "formats/ imports nvtopy.commands.dispatch"),
        ("render/text.py", "def f():\n    from ..tui import app\n", "render/ imports nvtopy.tui.app"),
        ("render/text.py", "from ..sources.poller import Poller\n", "render/ imports nvtopy.sources.poller"),
        ("api/usage.py", "from ..commands.options import x\n", "api/ imports nvtopy.commands;"),
        ("tui/app.py", "from ..commands import monitor\n", "tui/ imports nvtopy.commands.monitor"),
        ("__init__.py", "def f():\n    from .commands.dispatch import main\n", "package/ imports nvtopy.commands"),
        (
            "tui/app.py",
            "from ..backends.nvml import NvmlBackend\n",
            "tui/ imports nvtopy.backends.nvml; of backends/",
        ),
        (
            "tui/app.py",
            "def f():\n    from ..backends import host\n",
            "tui/ imports nvtopy.backends.host; of backends/",
        ),
        ("model.py", "from .render.units import fmt_bytes\n", "core/ imports nvtopy.render"),
    ],
)
def test_layer_rule_catches(tmp_path, name, source, expected):
    edges = import_edges(make_package(tmp_path, {**CLEAN, name: source}))
    found = layer_violations(edges, {})
    assert len(found) == 1 and found[0].startswith(f"nvtopy/{name}:") and expected in found[0], found


def test_every_module_is_in_a_layer():
    assert unplaced_modules(PACKAGE) == []


def test_unplaced_check_catches(tmp_path):
    package = make_package(tmp_path, {**CLEAN, "helpers.py": "import os\n", "misc/tools.py": ""})
    assert unplaced_modules(package) == ["nvtopy.helpers", "nvtopy.misc", "nvtopy.misc.tools"]


def test_a_named_exception_lets_one_import_through(tmp_path):
    edges = import_edges(make_package(tmp_path, {**CLEAN, "tui/scenes.py": "from ..backends.nvml import N\n"}))
    assert len(layer_violations(edges, {})) == 1
    assert layer_violations(edges, {("tui.scenes", "backends.nvml"): "why"}) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # two modules, one side lazy: the state <-> usage shape
            {"api/state.py": "def f():\n    from . import usage\n", "api/usage.py": "from .state import shared\n"},
            [["api.state", "api.usage"]],
        ),
        (  # three modules across layers, absolute and relative
            {
                "formats/a.py": "import nvtopy.render.b\n",
                "render/b.py": "from ..sources import c\n",
                "sources/c.py": "def g():\n    from nvtopy.formats.a import x\n",
            },
            [["formats.a", "render.b", "sources.c"]],
        ),
        (  # two separate cycles, each reported
            {
                "api/state.py": "from .usage import u\n",
                "api/usage.py": "from .state import s\n",
                "tui/app.py": "from .screens import s\n",
                "tui/screens.py": "def f():\n    from .app import App\n",
            },
            [["api.state", "api.usage"], ["tui.app", "tui.screens"]],
        ),
        (  # through a package's __init__
            {"backends/__init__.py": "from .base import Backend\n", "backends/base.py": "from . import Backend\n"},
            [["backends", "backends.base"]],
        ),
    ],
)
def test_cycle_check_catches(tmp_path, files, expected):
    edges = import_edges(make_package(tmp_path, {**CLEAN, **files}))
    assert import_cycles(edges) == expected
    assert describe_cycles(edges)[0].startswith("nvtopy." + expected[0][0])

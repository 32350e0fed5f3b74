"""One home for hand-made model objects: :mod:`tests.builders`, and a guard that keeps it so.

Why a guard: each test file used to carry its own ``proc()``/``sample()``/``snapshot()``
with its own defaults (about thirty of them), so a model field added or renamed meant
thirty edits, and two files' "typical GPU" quietly differed. A helper in a test file may
still give the builders its file's defaults (a one-line wrapper), but it builds nothing
itself: no helper outside ``builders.py`` calls a model class, and none is named as a
builder is. Tests themselves may still write a model object out in full where every value
is the point (a hostile string, a range check of the class itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

from nvtopy.model import GpuProcess, GpuSample, GpuStatic, ProcessType

from . import builders
from .builders import gpu_process, gpu_sample, gpu_state, gpu_static, host_info, snapshot_of

TESTS = Path(__file__).parent

# The model classes a hand-made test object is made of.
MODEL_CLASSES = {"GpuStatic", "GpuSample", "GpuState", "GpuProcess", "HostInfo", "Snapshot"}

# The builders' own names: a test file that defines one keeps a second, differing, "typical" object.
BUILDER_NAMES = {
    "host_info",
    "gpu_static",
    "nvlinks",
    "mig_instances",
    "gpu_sample",
    "gpu_process",
    "gpu_state",
    "snapshot_of",
}


def local_builders(path: Path) -> list[str]:
    """``file:helper`` for each top-level helper (not a test) of ``path`` that builds a model object itself."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("test_"):
            continue
        called = {
            call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
        }
        if node.name in BUILDER_NAMES or called & MODEL_CLASSES:
            found.append(f"{path.name}:{node.name}")
    return found


def all_local_builders() -> dict[str, list[str]]:
    """Each test file (by its path under tests/: two folders may hold a same-named file) with its local builders."""
    found = {str(path.relative_to(TESTS)): local_builders(path) for path in sorted(TESTS.rglob("*.py"))
             if path != TESTS / "builders.py"}  # fmt: skip
    return {name: helpers for name, helpers in found.items() if helpers}


# Oracles, not builders: the product's former way of building a source's model objects, kept word for word in the
# test that holds the new way to it (a typical object of their own they make none: they build what a scrape says).
ORACLES = {"sources/remote/test_hostscrape_building.py": ["test_hostscrape_building.py:former_process",
                                                          "test_hostscrape_building.py:former_gpus"]}  # fmt: skip


def test_no_test_file_builds_the_model_in_a_helper_of_its_own() -> None:
    """No exceptions but the oracles: a helper that needs what no builder makes is a new builder (or keyword) in
    builders.py."""
    assert all_local_builders() == ORACLES, "build them with tests/builders.py (a file's defaults: a one-line wrapper)"


def test_the_guard_sees_a_local_builder(tmp_path: Path) -> None:
    sample = tmp_path / "test_x.py"
    sample.write_text(
        "def proc(pid):\n    return GpuProcess(0, None, pid, 'C', None)\n\n"
        "def gpu_static(i):\n    return 1\n\n"
        "def steady(ledger):\n    return model.GpuSample(0.0)\n\n"
        "def wrapper(pid):\n    return gpu_process(0, pid)\n\n"
        "def test_inline():\n    assert GpuStatic(0)\n"
    )
    assert local_builders(sample) == ["test_x.py:proc", "test_x.py:gpu_static", "test_x.py:steady"]


def test_the_guarded_names_are_the_builders() -> None:
    assert all(callable(getattr(builders, name, None)) for name in BUILDER_NAMES)


# --------------------------------------------------------------------------- the builders themselves


def test_bare_objects_hold_only_what_was_passed() -> None:
    assert gpu_static(3, bare=True) == GpuStatic(3)
    assert gpu_sample(1.0, bare=True, lost=True) == GpuSample(1.0, lost=True)
    assert gpu_process(1, 7, bare=True) == GpuProcess(1, None, 7, ProcessType.COMPUTE, None)


def test_typical_objects_are_distinct_per_index_and_pid() -> None:
    a, b = gpu_static(0), gpu_static(1)
    assert (a.uuid, b.uuid) == ("GPU-0", "GPU-1") and a.bus_id != b.bus_id
    assert gpu_process(0, 1).key != gpu_process(0, 2).key, "each pid's row has its own key"
    assert gpu_sample().nvlinks == builders.nvlinks() and len(builders.nvlinks(2, down=(1,))) == 2


def test_changes_reach_every_field() -> None:
    process = gpu_process(2, 5, gpu_index=3, user=None)
    assert (process.gpu_index, process.pid, process.user) == (3, 5, None)
    state = gpu_state(1, process, note="down")
    snapshot = snapshot_of(state, timestamp=2.0, host=host_info(hostname="h"), sequence=4)
    assert (snapshot.timestamp, snapshot.host.hostname, snapshot.sequence) == (2.0, "h", 4)
    assert snapshot.gpus[0].note == "down" and snapshot.gpus[0].processes == (process,)

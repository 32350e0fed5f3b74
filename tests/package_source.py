"""nvtopy's own source, read and parsed once per test process, for the tests that search it.

Several test modules search the package's source for a concept's one home (the import rules, a
constant or a helper defined once, one colour map): each read and parsed every module itself,
about 2-3 s of CPU a time on the 2-core machine, six times a run. They share this cache, and
:data:`reads_the_package` (one pytest-xdist group, ``--dist loadgroup``) puts them on one
worker, so the package is parsed once a run. A parsed tree is shared: a test only reads it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nvtopy"

# The tests that read the package's source: one worker, one parse (--dist loadgroup).
reads_the_package = pytest.mark.xdist_group("package_source")


@functools.cache
def modules() -> dict[Path, str]:
    """Every module of the package (its path, sorted) and its text."""
    return {path: path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def tree(path: Path) -> ast.Module:
    """The parsed module at ``path``, one of :func:`modules`."""
    return ast.parse(modules()[path], str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at ``path``, in ``ast.walk`` order."""
    return tuple(ast.walk(tree(path)))

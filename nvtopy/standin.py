"""Import a module while one of its own imports waits: a stand-in that imports the real module at first use.

Why: ``nvtopy --once`` is a short process whose start is most of its cost, and two of the
modules it needs import, at their top, a large module they use only on a path ``--once``
never takes: ``pynvml`` imports :mod:`ctypes.util` (and with it subprocess, tempfile,
random, shutil, bz2 and lzma: about 7 % of the one-shot's instructions) for a
``find_library`` it never calls on Linux, and :mod:`dataclasses` imports :mod:`inspect` (ast,
dis, tokenize: about 5 %) for the ``__doc__`` of a class that has none, which
:mod:`nvtopy.records` gives each class.

What stays the real thing: the stand-in is in ``sys.modules`` only while the one import runs,
then removed, so any later ``import`` of the module gets the real one; the importing module
keeps the stand-in, whose every attribute is the real module's, imported at its first use.
``functions`` names what the importing module takes by ``from M import name``: each is a
function that imports the real module when called. Where the module is loaded already, or
the importing one is, nothing is stood in.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

__all__ = ["import_standing_in"]


class _StandIn(ModuleType):
    """A module not imported yet: an attribute looked up imports it (:func:`_real`) and is the real one's.

    A dunder name is not looked up: the import system asks a module it hands out for
    ``__path__`` (is it a package?), and that question must not import it.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(_real(self.__name__), name)


def _real(name: str) -> ModuleType:
    """The module ``name`` itself, imported now if it is not (its stand-in, if still in ``sys.modules``, removed)."""
    if isinstance(sys.modules.get(name), _StandIn):
        del sys.modules[name]
    __import__(name)
    return sys.modules[name]


def _forwarder(module: str, name: str) -> Any:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return getattr(_real(module), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__module__ = module
    return forward


def import_standing_in(name: str, waiting: str, functions: tuple[str, ...] = ()) -> ModuleType:
    """Import ``name`` (as ``import name`` does; it raises what that raises) with ``waiting`` a stand-in.

    ``waiting`` is imported at the first use of one of its attributes, by the module ``name``
    or anyone; ``functions``: the names ``name`` takes from it with ``from waiting import ...``.
    """
    if name in sys.modules or waiting in sys.modules:
        __import__(name)
        return sys.modules[name]
    stand_in = _StandIn(waiting)
    for function in functions:
        setattr(stand_in, function, _forwarder(waiting, function))
    sys.modules[waiting] = stand_in
    try:
        __import__(name)
    finally:
        if sys.modules.get(waiting) is stand_in:
            del sys.modules[waiting]
    return sys.modules[name]

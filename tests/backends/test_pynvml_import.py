"""The bindings are imported without ``ctypes.util`` (``import_pynvml``), whose ``find_library`` still works.

Why: pynvml imports ``find_library`` at its top and never calls it on Linux; ``ctypes.util`` brings
subprocess, tempfile, shutil, bz2 and lzma, about 7 % of ``nvtopy --once`` (``nvtopy.standin``).
"""

from __future__ import annotations

import pytest

from ..import_probe import modules_loaded

pytest.importorskip("pynvml")
pytestmark = pytest.mark.timeout(120)

IMPORT = "from nvtopy.backends.nvml.backend import import_pynvml\npynvml = import_pynvml()\n"


def test_the_bindings_are_imported_without_ctypes_util():
    assert modules_loaded(IMPORT + "assert hasattr(pynvml, 'nvmlInit')\n", ("ctypes.util", "subprocess")) == []


def test_their_find_library_is_ctypes_util_s_at_first_call():
    code = (
        IMPORT
        + "import ctypes.util\n"
        + "assert type(ctypes.util).__name__ == 'module' and hasattr(ctypes.util, 'find_library')\n"
        + "assert pynvml.find_library('c') == ctypes.util.find_library('c')\n"
    )
    assert modules_loaded(code, ("ctypes.util",)) == ["ctypes.util"]

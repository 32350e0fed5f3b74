"""nvtopy.records' own scan of a class (``_fields_made``) gives what dataclasses' scan gives, for every record class.

Two processes import the whole package, one with records' scan and one with dataclasses' own
(``_SCANNED_HERE`` off), and describe every record class: its fields (each attribute of each
Field), its dataclass parameters, ``__match_args__``, slots, class-level defaults, docstring, MRO
and attribute names. The two descriptions must be equal.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(240)


_DESCRIBE = r"""
import dataclasses, importlib, json, pkgutil, re, sys

def shown(value):
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))  # addresses differ between the two processes

from nvtopy import records
records._SCANNED_HERE = sys.argv[1] == "here"
import nvtopy
for info in pkgutil.walk_packages(nvtopy.__path__, "nvtopy."):
    if not info.name.endswith("__main__"):  # the program itself
        importlib.import_module(info.name)
seen = {}
for name, module in sorted(sys.modules.items()):
    if not name.startswith("nvtopy"):
        continue
    for value in list(vars(module).values()):
        if not isinstance(value, type) or not value.__module__.startswith("nvtopy"):
            continue
        if "__dataclass_fields__" not in value.__dict__:
            continue
        fields = [
            (f.name, str(f.type), shown(f.default), shown(f.default_factory), f.init, f.repr, f.hash, f.compare,
             shown(dict(f.metadata)), shown(f.kw_only), shown(f._field_type))
            for f in value.__dataclass_fields__.values()
        ]
        seen[f"{value.__module__}.{value.__qualname__}"] = {
            "fields": fields,
            "params": shown(value.__dataclass_params__),
            "match_args": value.__dict__.get("__match_args__"),
            "slots": value.__dict__.get("__slots__"),
            "defaults": {f.name: shown(value.__dict__.get(f.name, "<none>")) for f in dataclasses.fields(value)},
            "doc": value.__doc__,
            "mro": [c.__qualname__ for c in value.__mro__],
            "attributes": sorted(value.__dict__),
        }
print(json.dumps(seen, sort_keys=True, default=repr))
"""


def test_every_class_of_nvtopy_is_made_here_as_dataclasses_makes_it():
    """``_fields_made`` (records' own scan) against dataclasses' scan, over every record class of the package."""
    runs = {}
    for mode in ("here", "dataclasses"):
        done = subprocess.run(
            [sys.executable, "-c", _DESCRIBE, mode], capture_output=True, text=True, timeout=200, check=False
        )
        assert done.returncode == 0, done.stderr
        runs[mode] = json.loads(done.stdout)
    assert len(runs["here"]) > 100, "the package's record classes"
    assert runs["here"] == runs["dataclasses"]

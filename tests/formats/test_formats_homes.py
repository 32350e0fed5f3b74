"""One home for each concept of ``nvtopy/formats/``, checked so a second one cannot come back.

- a GPU field named by a dotted string (``"static.memory_total_bytes"``) is resolved by
  :mod:`nvtopy.formats.fields` alone;
- Prometheus is a package of one module per job, with nothing re-exported from its
  ``__init__`` and each public name defined in one module;
- the JSON contract is decoded in :mod:`nvtopy.formats.contract_decoder` alone, beside its
  encoder; replay only uses it.

Read as source (``ast``, regular expressions), never imported; each guard also checks that it
still sees the one home, so a guard that stopped seeing anything fails too.
"""

from __future__ import annotations

import ast
import re

from ..package_source import PACKAGE, modules, reads_the_package, tree

PROMETHEUS = PACKAGE / "formats" / "prometheus"

# How a dotted field name was taken apart by hand before formats/fields.py: its prefix tested or cut.
_SPLITTING = re.compile(
    r"""startswith\(\(?["'](?:static|health)\."""
    r"""|removeprefix\(["'](?:static|health)\."""
    r"""|\.attribute\.(?:r?partition|r?split)\("""
    r"""|\.attribute\[7:\]"""
)

# Files where such a prefix means something else -> what.
_OTHER_MEANINGS = {"config.py": "the keys of the config file's [health] table"}


def _sources() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE)): text for path, text in modules().items()}


def _definitions(text: str) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    return _defined(ast.parse(text))


def _defined(module: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_a_dotted_field_is_resolved_in_formats_fields_only():
    found = {name: _SPLITTING.findall(text) for name, text in _sources().items()}
    others = {
        name: hits for name, hits in found.items() if hits and name not in ("formats/fields.py", *_OTHER_MEANINGS)
    }
    assert not others, f"a dotted GPU field split by hand: use nvtopy.formats.fields ({others})"
    assert found["formats/fields.py"], "the guard no longer sees the resolver itself"


def test_prometheus_is_a_package_of_one_module_per_job_without_re_exports():
    assert not (PACKAGE / "formats" / "prometheus.py").exists()
    modules = {path.stem for path in PROMETHEUS.glob("*.py")}
    assert modules == {"__init__", "series", "collect", "expose", "parse", "rules"}
    init = ast.parse((PROMETHEUS / "__init__.py").read_text(encoding="utf-8"))
    assert ast.get_docstring(init), "the package says what each module does"
    assert all(isinstance(node, ast.Expr) for node in init.body), "__init__ holds its docstring only: no re-exports"
    homes: dict[str, list[str]] = {}
    for name in sorted(modules - {"__init__"}):
        for defined in _definitions((PROMETHEUS / f"{name}.py").read_text(encoding="utf-8")):
            if not defined.startswith("_"):
                homes.setdefault(defined, []).append(name)
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert not twice, f"defined in more than one module of formats/prometheus: {twice}"
    assert homes["parse_exposition"] == ["parse"] and homes["Exposition"] == ["expose"]


@reads_the_package
def test_the_json_contract_is_decoded_beside_its_encoder_only():
    decoders = ("snapshot_from_dict", "recorded_text", "owner_from_dict", "host_usage_from_dict", "gpu_from_dict")
    sources = _sources()
    defined = {str(path.relative_to(PACKAGE)): _defined(tree(path)) for path in modules()}  # parsed once a run
    for decoder in decoders:
        where = [name for name, names in defined.items() if decoder in names]
        assert where == ["formats/contract_decoder.py"], f"{decoder} defined in {where}"
    assert "snapshot_to_dict" in defined["formats/contract.py"], "the encoder it sits beside"
    replay = sources["sources/replay.py"]
    assert "formats.contract_decoder import" in replay, "replay reads lines with the decoder"
    assert not re.search(r"def _(?:gpu|process|health|mig_devices?|nvlinks|pstate)\(", replay), "a decoder in replay"

"""``import_standing_in``: a module imported while one of its imports waits, that import made real at first use.

Each test imports small modules written to ``tmp_path`` (unique names, removed from ``sys.modules`` after):
``user`` imports ``heavy`` at its top and uses it only in a function, as pynvml does ``ctypes.util`` and
dataclasses ``inspect``.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from nvtopy.standin import import_standing_in

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def modules(tmp_path, monkeypatch, request):
    """(user, heavy): the names of two fresh modules; ``heavy`` counts its imports in ``heavy_loads``."""
    tag = request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    user, heavy = f"standin_user_{tag}", f"standin_heavy_{tag}"
    (tmp_path / f"{heavy}.py").write_text(
        textwrap.dedent(
            """
            import builtins
            builtins.heavy_loads = getattr(builtins, "heavy_loads", 0) + 1
            VALUE = 42

            def double(x):
                return 2 * x
            """
        )
    )
    (tmp_path / f"{user}.py").write_text(
        textwrap.dedent(
            f"""
            import {heavy}
            from {heavy} import double

            def value():
                return {heavy}.VALUE

            def twice(x):
                return double(x)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    builtins.heavy_loads = 0  # type: ignore[attr-defined]
    yield user, heavy
    for name in (user, heavy):
        sys.modules.pop(name, None)
    del builtins.heavy_loads  # type: ignore[attr-defined]


def _loads() -> int:
    import builtins

    return builtins.heavy_loads  # type: ignore[attr-defined,no-any-return]


def test_the_waiting_module_is_not_imported_with_the_one_that_imports_it(modules):
    user, heavy = modules
    module = import_standing_in(user, heavy, ("double",))
    assert module is sys.modules[user]
    assert heavy not in sys.modules and _loads() == 0, "the stand-in must not import it"


def test_an_attribute_used_imports_the_real_module_once(modules):
    user, heavy = modules
    module = import_standing_in(user, heavy, ("double",))
    assert module.value() == 42  # heavy.VALUE through the stand-in
    assert _loads() == 1 and type(sys.modules[heavy]).__name__ == "module"
    assert module.twice(5) == 10  # the name taken with "from heavy import": the real function, called
    assert _loads() == 1, "imported once"


def test_a_function_taken_by_name_imports_the_real_module_when_called(modules):
    user, heavy = modules
    module = import_standing_in(user, heavy, ("double",))
    assert module.twice(4) == 8
    assert _loads() == 1


def test_a_later_import_gets_the_real_module_not_the_stand_in(modules):
    user, heavy = modules
    import_standing_in(user, heavy, ("double",))
    real = __import__(heavy)
    assert type(real).__name__ == "module" and real.VALUE == 42 and _loads() == 1


def test_a_waiting_module_loaded_already_is_used_as_it_is(modules):
    user, heavy = modules
    real = __import__(heavy)
    module = import_standing_in(user, heavy, ("double",))
    assert module.value() == 42 and _loads() == 1
    assert getattr(module, heavy) is real


def test_a_dunder_lookup_does_not_import_it(modules):
    """The import system asks what it hands out for ``__path__``: that must not be the real import."""
    user, heavy = modules
    module = import_standing_in(user, heavy, ("double",))
    stand_in = getattr(module, heavy)
    assert not hasattr(stand_in, "__path__")
    assert _loads() == 0


def test_a_failing_import_raises_and_leaves_no_stand_in(modules, tmp_path):
    user, heavy = modules
    (tmp_path / f"{user}.py").write_text(f"import {heavy}\nraise ImportError('broken')\n")
    with pytest.raises(ImportError, match="broken"):
        import_standing_in(user, heavy)
    assert heavy not in sys.modules and user not in sys.modules


def test_a_missing_module_raises_as_import_does():
    with pytest.raises(ImportError):
        import_standing_in("nvtopy_no_such_module_here", "json")
    assert "nvtopy_no_such_module_here" not in sys.modules

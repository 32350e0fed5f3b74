"""The import probe sees what it is asked about: a probe that always said "nothing" would pass every guard."""

import pytest

from .import_probe import modules_loaded


def test_a_loaded_module_and_a_submodule_are_seen_and_an_absent_one_is_not():
    assert modules_loaded("import json.decoder", ("json", "xml", "json.decoder")) == ["json", "json.decoder"]


def test_code_that_fails_is_a_failure_not_an_empty_answer():
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        modules_loaded("1 / 0", ("json",))

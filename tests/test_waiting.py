"""The one polling loop of the tests (:func:`tests.waiting.until`): it fails at its deadline, naming what for."""

from __future__ import annotations

import time

import pytest

from .waiting import until


def test_a_condition_never_true_fails_at_its_deadline_naming_it() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"not within 0.2 s: the thing \(last: None\)"):
        until(lambda: None, 0.2, "the thing")
    assert 0.2 <= time.monotonic() - started < 2


def test_the_value_is_returned_and_a_late_one_counts() -> None:
    calls: list[int] = []

    def late() -> str | None:
        calls.append(1)
        return "yes" if len(calls) >= 3 else None

    assert until(late, 5, "late") == "yes"
    assert until(lambda: [1], 0.0) == [1]


def test_a_callable_what_is_called_only_on_failure() -> None:
    said: list[int] = []

    def what() -> str:
        said.append(1)
        return "now 3"

    with pytest.raises(AssertionError, match="now 3"):
        until(lambda: 0, 0.05, what)
    assert said == [1]

"""Fixtures the TUI tests share."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times of day in UTC (the pictures show them): the time zone pinned, and given back after the test."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()

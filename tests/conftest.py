"""Shared fixtures: deterministic simulated backends and a controllable clock."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ../shared/fake-nvml beside the checkout (a user's clone has none: tests using it skip).
FAKE_NVML_SRC = Path(os.environ.get("NVTOPY_FAKE_NVML_DIR", ROOT.parent / "shared" / "fake-nvml"))
FROZEN_TIME = 1_795_000_000.0  # a fixed Unix time: simulated values depend only on it


class ManualClock:
    """A clock tests advance by hand."""

    def __init__(self, start: float = FROZEN_TIME) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock):
    """A factory of deterministic simulated backends on the manual clock."""
    from nvtopy.backends.simulated import SimulatedBackend

    made = []

    def make(**kwargs):
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("viewer", "alice")
        backend = SimulatedBackend(**kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def nvtopy_cmd() -> list[str]:
    """The command that runs the CLI of this checkout."""
    return [sys.executable, "-m", "nvtopy"]

"""Fixtures the backends' tests share."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def sleeper() -> Iterator[int]:
    """The pid of a real process that sleeps (a minute at most), killed and reaped after the test."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()

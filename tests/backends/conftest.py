"""Fixtures the backends' tests share."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from ..waiting import exec_shown


@pytest.fixture
def sleeper() -> Iterator[int]:
    """The pid of a real process that sleeps (a minute at most), killed and reaped after the test.

    Yielded once the kernel shows its argv: the inspector's first sight of a pid caught mid-exec (no command line
    yet) is psutil's, which opens none of the files the tests count (test_status_read_once failed so under load).
    """
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exec_shown(process.pid)
    yield process.pid
    process.kill()
    process.wait()

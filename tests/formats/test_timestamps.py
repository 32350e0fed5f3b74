"""nvtopy.formats.timestamps: the text datetime writes, for every time and zone, without importing datetime.

One process (``TZ`` and ``time.tzset`` are the process's, not the test's) goes through the zones, comparing
``iso_timestamp`` with datetime's own expression over the edges (rounding to the microsecond at
.9999995, negative fractions, the years 1 and 9999, NaN, the infinities) and 8,000 random times;
an error must be the same kind as datetime's. That a text ``--once`` imports no datetime:
tests/commands/test_once_overlap.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

ZONES = [
    "UTC",
    "Europe/Paris",
    "America/St_Johns",
    "Asia/Kolkata",
    "Africa/Monrovia",
    "Pacific/Kiritimati",
    "America/Los_Angeles",
    "Australia/Lord_Howe",
]

_COMPARE = r"""
import datetime as dt, math, os, random, sys, time
from nvtopy.formats.timestamps import iso_timestamp

def ref(t):
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).astimezone().isoformat(timespec="milliseconds")

def outcome(function, value):
    try:
        return ("ok", function(value))
    except Exception as exc:  # noqa: BLE001
        return ("error", type(exc).__name__)

rng = random.Random(7)
values = [0.0, -0.5, -1.0000005, 1.9999995, 1.0000005, 1.0005, 1.9995, 1700000000.9999996, 1700000000.0004995,
          -1e-7, 1e-7, 253402300799.9, 253402300800.0, 253370678400.0, 253370678399.9999, -62135596800.0,
          -62135596801.0, -62104060800.0, -62104060799.5, float("nan"), float("inf"), -float("inf"), 1e20, -1e20,
          2.0**63, 1711846800.0, 1729990800.5]
values += [math.nextafter(x, 0) for x in (1.0005, 1.9995, 1700000000.0005, 0.0005)]
values += [rng.uniform(-3e9, 4e10) for _ in range(4000)] + [rng.uniform(1.7e9, 1.8e9) for _ in range(4000)]
wrong = []
for zone in sys.argv[1:]:
    os.environ["TZ"] = zone
    time.tzset()
    pairs = [(zone, v, outcome(ref, v), outcome(iso_timestamp, v)) for v in values]
    wrong += [pair for pair in pairs if pair[2] != pair[3]]
print(len(values), wrong[:3])
sys.exit(1 if wrong else 0)
"""


def test_the_same_text_as_datetime():
    zones = [zone for zone in ZONES if os.path.exists(f"/usr/share/zoneinfo/{zone}")]
    if len(zones) < 2:
        pytest.skip("no time zone data on this machine (/usr/share/zoneinfo)")
    done = subprocess.run([sys.executable, "-c", _COMPARE, *zones], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr

"""A snapshot's time as every format writes it: ISO 8601, local time with its UTC offset, to the millisecond.

Why a module of its own, on :mod:`time` alone: a text ``nvtopy --once`` prints this one string in
its header, and :mod:`datetime` (with the JSON contract around it) was about 1.6 % of the whole
one-shot's instructions. The text is exactly ``datetime``'s
(``datetime.fromtimestamp(t, timezone.utc).astimezone().isoformat(timespec="milliseconds")``):
the same rounding to the microsecond, the same cut to the millisecond, the same offset (seconds
shown where a zone's offset has them). A time that is not finite or not within the years 2-9998
(where datetime's own limits, in UTC and in local time, would decide) is handed to datetime itself,
so that it raises what it raises. ``tests/formats/test_timestamps.py`` holds the two together.
"""

from __future__ import annotations

import math
import time

__all__ = ["iso_timestamp"]

# 0002-01-01T00:00:00Z and 9998-12-31T00:00:00Z: between them, any zone's local time is a date datetime shows.
_FIRST = -62104060800
_LAST = 253370678400


def iso_timestamp(timestamp: float) -> str:
    """ISO 8601 in local time with its UTC offset, millisecond precision.

    Raises what :meth:`datetime.datetime.fromtimestamp` raises for a time it cannot show
    (ValueError, OverflowError, OSError: NaN, an infinity, a year past 9999).
    """
    if not _FIRST < timestamp < _LAST:  # also NaN
        return _by_datetime(timestamp)
    fraction, whole = math.modf(timestamp)
    micro = round(fraction * 1e6)  # datetime's rounding: half to even, on the fraction
    seconds = int(whole)
    if micro >= 1_000_000:
        seconds, micro = seconds + 1, micro - 1_000_000
    elif micro < 0:
        seconds, micro = seconds - 1, micro + 1_000_000
    local = time.localtime(seconds)
    offset = local.tm_gmtoff
    sign = "-" if offset < 0 else "+"
    hours, rest = divmod(abs(offset), 3600)
    minutes, secs = divmod(rest, 60)
    zone = f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")
    return (
        f"{local.tm_year:04d}-{local.tm_mon:02d}-{local.tm_mday:02d}T"
        f"{local.tm_hour:02d}:{local.tm_min:02d}:{local.tm_sec:02d}.{micro // 1000:03d}{zone}"
    )


def _by_datetime(timestamp: float) -> str:
    import datetime as dt  # only for a time at the edges of what datetime shows, or none at all

    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).astimezone().isoformat(timespec="milliseconds")

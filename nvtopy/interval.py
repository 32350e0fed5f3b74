"""The refresh interval: its limits, its default, and the rules that follow from it, in one place.

Every command that repeats (the monitor, ``nvtopy log``, the exporter), the config
file's ``interval`` key and the monitor's ``+``/``-`` keys take the same seconds:
one range, one default, one check, so a value one of them takes is never refused by another.

Two rules derive from the interval and are shared the same way:

- other hosts (``--remote``, ``--prometheus``) are asked at most once a second
  (:func:`remote_interval`): each of their refreshes is HTTP requests to other
  machines (every exporter, or two queries to the Prometheus server);
- a reading :data:`STALE_INTERVALS` intervals old is stale: a host's header in the
  monitor, a host of the Prometheus fleet (its own scrape interval there).

Core (standard library only): ``config.py`` reads it, and ``nvtopy --once`` must start fast.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_INTERVAL",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "REMOTE_MIN_INTERVAL",
    "STALE_INTERVALS",
    "parse_interval",
    "remote_interval",
    "valid_interval",
]

MIN_INTERVAL = 0.1
"""The shortest refresh interval in seconds, for every source and command (``--interval``, the config file)."""
MAX_INTERVAL = 86400.0
"""The longest: a day."""
DEFAULT_INTERVAL = 1.0
"""Seconds between two snapshots when neither a flag nor the config file says otherwise."""
REMOTE_MIN_INTERVAL = 1.0
"""The shortest interval at which other hosts are asked (:func:`remote_interval`)."""
STALE_INTERVALS = 3
"""A reading older than this many intervals (refresh, or a host's scrape interval) is stale."""


def valid_interval(seconds: float) -> bool:
    """True for an interval nvtopy takes: from :data:`MIN_INTERVAL` to :data:`MAX_INTERVAL` (NaN is not)."""
    return MIN_INTERVAL <= seconds <= MAX_INTERVAL


def parse_interval(text: str) -> float:
    """``--interval``'s text as seconds; ValueError with the sentence the user reads (argparse shows it)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"invalid interval {text!r}: give seconds, e.g. 0.5 or 2") from None
    if not valid_interval(value):
        raise ValueError(f"interval must be between {MIN_INTERVAL} and {MAX_INTERVAL:.0f} seconds")
    return value


def remote_interval(seconds: float) -> float:
    """The interval at which other hosts are asked: ``seconds``, but at least :data:`REMOTE_MIN_INTERVAL`."""
    return max(seconds, REMOTE_MIN_INTERVAL)

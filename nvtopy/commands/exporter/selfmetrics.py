"""``--self-metrics``: the exporter's own series, ``nvtopy_exporter_*``, for who watches the watcher.

Off by default: they are series nobody asked for on every node of a fleet. On, they
say how long collections and scrapes take, how many there were, how many GPUs do
not answer and how old the last completed collection is (the figure ``/health``
judges, :mod:`.readiness`). Made per scrape (seven samples): nothing to cache.
Units are in the names; counters are counters (``_total``).
"""

from __future__ import annotations

import threading
from typing import Any

from .readiness import Readiness

__all__ = ["SELF_METRIC_NAMES", "SelfMetrics"]

SELF_METRIC_NAMES = (
    "nvtopy_exporter_collections_total",
    "nvtopy_exporter_collection_duration_seconds",
    "nvtopy_exporter_last_collection_age_seconds",
    "nvtopy_exporter_gpus_not_responding",
    "nvtopy_exporter_scrapes_total",
    "nvtopy_exporter_scrape_duration_seconds",
)
"""The series ``--self-metrics`` adds, as a scrape names them (``nvtopy_exporter_ready`` is always there)."""


class SelfMetrics:
    """Counts the scrapes (the server's threads tell :meth:`scraped`) and makes the self-metric families."""

    def __init__(self, readiness: Readiness) -> None:
        self._readiness = readiness
        self._lock = threading.Lock()
        self._scrapes = 0
        self._last_scrape_seconds: float | None = None

    def scraped(self, seconds: float) -> None:
        """A scrape of ``/metrics`` was answered in ``seconds`` (its body written, or given up on)."""
        with self._lock:
            self._scrapes += 1
            self._last_scrape_seconds = max(0.0, seconds)

    def families(self) -> list[Any]:
        """The families, as of now; the scrape being answered counts (the count includes it, not its duration)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        readiness = self._readiness
        with self._lock:
            scrapes, scrape_seconds = self._scrapes + 1, self._last_scrape_seconds
        # (name, help, value, counter?): a value of None (nothing measured yet) is left out, never 0.
        said: tuple[tuple[str, str, float | None, bool], ...] = (
            (
                "nvtopy_exporter_collections",
                "Collections the poller published since the exporter started.",
                float(readiness.collections),
                True,
            ),
            (
                "nvtopy_exporter_collection_duration_seconds",
                "Seconds the last collection took (a stuck GPU is waited for at most 0.8 interval).",
                readiness.collection_seconds,
                False,
            ),
            (
                "nvtopy_exporter_last_collection_age_seconds",
                "Seconds since the last collection in which a GPU answered (what /health judges).",
                readiness.completed_age(),
                False,
            ),
            (
                "nvtopy_exporter_gpus_not_responding",
                "GPUs whose driver calls do not answer (marked not responding, or silent past the readiness limit).",
                float(readiness.not_responding()),
                False,
            ),
            (
                "nvtopy_exporter_scrapes",
                "Scrapes of the metrics answered, this one included.",
                float(scrapes),
                True,
            ),
            (
                "nvtopy_exporter_scrape_duration_seconds",
                "Seconds the previous scrape took, from its request to its last byte sent.",
                scrape_seconds,
                False,
            ),
        )
        families: list[Any] = []
        for name, text, value, counter in said:
            if value is not None:
                family = (CounterMetricFamily if counter else GaugeMetricFamily)(name, text)
                family.add_metric([], value)
                families.append(family)
        return families

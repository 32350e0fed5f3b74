"""``HostGpus.health``: a GPU said the same as at the last refresh gets the very GpuHealth made then (issue 27: 4,096
GPUs a refresh in a fleet); anything said differently, or the GPU shown under another index, is made again."""

from __future__ import annotations

import pytest

from nvtopy.model import Severity
from nvtopy.sources.remote.hostscrape import HostGpus

pytestmark = pytest.mark.timeout(30)

NOW = 1_795_000_000.0


def said(**values: object) -> dict[str, object]:
    return {"verdict": Severity.OK, "responding": True, "last_xid": 0, "xid_counts": {}, **values}


def test_the_same_said_again_is_the_very_health():
    gpus = HostGpus()
    first = gpus.health("a", said(), 0, NOW)
    assert gpus.health("a", said(), 0, NOW + 1) is first


def test_what_changes_is_made_again():
    gpus = HostGpus()
    gpus.health("a", said(), 0, NOW)
    assert gpus.health("a", said(verdict=Severity.WARN), 0, NOW + 1).verdict is Severity.WARN
    assert gpus.health("a", said(responding=False), 0, NOW + 2).responding is False
    assert gpus.health("a", said(stalled_seconds=12.0), 0, NOW + 3).stalled_seconds == 12.0


def test_an_xid_keeps_its_first_date_and_takes_the_gpus_index_now():
    gpus = HostGpus()
    first = gpus.health("a", said(last_xid=79, xid_counts={79: 1}), 3, NOW)
    assert [(e.timestamp, e.gpu_index, e.xid) for e in first.events] == [(NOW, 3, 79)]
    again = gpus.health("a", said(last_xid=79, xid_counts={79: 1}), 3, NOW + 5)
    assert again.events == first.events
    # Another host came first: the same GPU is now shown as 4, the Xid's date as first seen.
    moved = gpus.health("a", said(last_xid=79, xid_counts={79: 1}), 4, NOW + 6)
    assert [(e.timestamp, e.gpu_index) for e in moved.events] == [(NOW, 4)]
    later = gpus.health("a", said(last_xid=48, xid_counts={79: 1, 48: 1}), 4, NOW + 7)
    assert [(e.timestamp, e.xid) for e in later.events] == [(NOW + 7, 48)]


def test_a_gpu_that_said_nothing_then_the_same_xid_dates_it_anew():
    gpus = HostGpus()
    gpus.health("a", said(last_xid=79, xid_counts={79: 1}), 0, NOW)
    gpus.health("a", None, 0, NOW + 1)
    back = gpus.health("a", said(last_xid=79, xid_counts={79: 1}), 0, NOW + 2)
    assert [e.timestamp for e in back.events] == [NOW + 2]


def test_a_forgotten_gpu_keeps_nothing():
    gpus = HostGpus()
    first = gpus.health("a", said(), 0, NOW)
    gpus.forget(lambda key: key != "a")
    assert gpus.health("a", said(), 0, NOW + 1) is not first

"""What a fleet refresh keeps from the last one rather than builds again (issue 27: 4,096 GPUs a refresh).

Why: each kept object must be exactly what building it afresh gives -- the same words again are the same
object, other words (or the same ones after a gap) a new one -- or the fleet shows stale health.
"""

from __future__ import annotations

from typing import Any

from nvtopy.model import OK_HEALTH, Severity
from nvtopy.sources.remote.hostscrape import HostGpus

KEY = ("10.0.0.1:9400", "node0", 0)


def _said(last_xid: int | None = 48, counts: dict[int, int] | None = None, **more: Any) -> dict[str, Any]:
    """What a host's exporter says of one GPU's health, as the fleet reads it."""
    return {"last_xid": last_xid, "xid_counts": {48: 1} if counts is None else counts, **more}


def test_the_same_health_said_again_is_the_very_same_gpu_health():
    """Said again at the same position: the same object, its Xid dated when first seen."""
    gpus = HostGpus()
    first = gpus.health(KEY, _said(), 3, 100.0)
    again = gpus.health(KEY, _said(), 3, 200.0)
    assert again is first
    assert [(e.timestamp, e.gpu_index, e.xid) for e in again.events] == [(100.0, 3, 48)]


def test_health_said_otherwise_is_built_again_as_afresh():
    """A new position, verdict, count or Xid: what a fresh build says (the Xid's date kept while it is the same)."""
    gpus = HostGpus()
    gpus.health(KEY, _said(), 3, 100.0)
    moved = gpus.health(KEY, _said(), 4, 200.0)
    assert [(e.timestamp, e.gpu_index) for e in moved.events] == [(100.0, 4)]
    warned = gpus.health(KEY, _said(verdict=Severity.WARN), 4, 300.0)
    assert warned.verdict is Severity.WARN
    counted = gpus.health(KEY, _said(counts={48: 2}, verdict=Severity.WARN), 4, 400.0)
    assert counted.xid_counts == ((48, 2),) and counted.events[0].timestamp == 100.0
    other = gpus.health(KEY, _said(last_xid=79, counts={48: 2}, verdict=Severity.WARN), 4, 500.0)
    assert [(e.timestamp, e.xid) for e in other.events] == [(500.0, 79)]


def test_health_kept_is_a_copy_of_what_was_said():
    """The caller's dicts changed in place after (its Xid counts too): read as they say now, not as kept."""
    gpus = HostGpus()
    said = _said()
    gpus.health(KEY, said, 3, 100.0)
    said["xid_counts"][48] = 5
    assert gpus.health(KEY, said, 3, 200.0).xid_counts == ((48, 5),)
    said["responding"] = False
    assert gpus.health(KEY, said, 3, 300.0).responding is False


def test_health_after_a_refresh_without_any_is_dated_anew():
    """Nothing said (the Xid gone), then the same Xid again: a new event, dated now, as a fresh build dates it."""
    gpus = HostGpus()
    gpus.health(KEY, _said(), 3, 100.0)
    assert gpus.health(KEY, {}, 3, 200.0) is OK_HEALTH
    back = gpus.health(KEY, _said(), 3, 300.0)
    assert [e.timestamp for e in back.events] == [300.0]


def test_a_forgotten_gpu_has_its_health_built_afresh():
    gpus = HostGpus()
    gpus.health(KEY, _said(), 3, 100.0)
    gpus.forget(lambda key: False)
    assert [e.timestamp for e in gpus.health(KEY, _said(), 3, 300.0).events] == [300.0]

"""A GPU's memory total in the fleet's static timed group; a GPU instance's, one of its own series, at every refresh.

Why: ``DCGM_FI_DEV_FB_TOTAL`` (and 4.9's ``DCGM_FI_DEV_FB_CAPACITY_BYTES``) is a row a GPU at every refresh, 2 % of
a 4,096-GPU read (issue 27), and a GPU's is a static value (the local monitor reads it once). But the same series
under a ``GPU_I_ID`` is a GPU instance's own memory total (``INSTANCE_FIELDS``), which a fleet must show as new as
the instance's memory used. What must hold: the instance's total is the newest at every refresh, the GPU's is
asked at the static values' cadence (``STATIC_CADENCE``, its first re-read at the host's phase) and kept in between
(never older than that cadence), a GPU that comes shows its total from the next refresh, and the answer read is
what the query asks for (one ``GPU_I_ID!=""`` part).
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import pytest

from nvtopy.formats.dcgm_naming import NAMING_4_9
from nvtopy.sources.remote.fleet import INSTANCE_LIVE_NAMES, LIVE_NAMES, STATIC_CADENCE, TIMED_GROUPS, PrometheusFleet

from .test_fleet import NOW, fake, fleet_of  # noqa: F401

_HOST = 'Hostname="dgx-9",UUID="GPU-cccc",modelName="NVIDIA H100 80GB HBM3"'
_MIB = 1024 * 1024


def _exposition(step: int, gpus: tuple[str, ...] = ("0",), naming_4_9: bool = False) -> str:
    """GPU 0 with one GPU instance (GPU_I_ID 1); each total a function of the step it was scraped at."""
    total, used = "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_USED"
    scale = 1
    if naming_4_9:
        total, used, scale = NAMING_4_9.name(total), NAMING_4_9.name(used), _MIB
    lines = []
    for gpu in gpus:
        labels = f'gpu="{gpu}",{_HOST}'
        instance = f'{labels},GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"'
        lines += [
            f"{used}{{{labels}}} {1000 * scale}",
            f"{total}{{{labels}}} {(80000 + step) * scale}",
            f"{used}{{{instance}}} {(100 + step) * scale}",
            f"{total}{{{instance}}} {(40000 + step) * scale}",
        ]
    return "\n".join(lines) + "\n"


def _static_group() -> int:
    return next(group for group, (_, names) in enumerate(TIMED_GROUPS) if "DCGM_FI_DEV_FB_TOTAL" in names)


def test_a_gpu_instances_memory_total_is_read_at_every_refresh_but_the_gpus_at_the_static_cadence():
    cadence, static = TIMED_GROUPS[_static_group()]
    assert cadence == STATIC_CADENCE and NAMING_4_9.name("DCGM_FI_DEV_FB_TOTAL") in static
    assert set(INSTANCE_LIVE_NAMES) == {"DCGM_FI_DEV_FB_TOTAL", NAMING_4_9.name("DCGM_FI_DEV_FB_TOTAL")}
    assert not set(INSTANCE_LIVE_NAMES) & set(LIVE_NAMES)


@pytest.mark.parametrize("naming_4_9", [False, True], ids=["legacy", "dcgm-4.9"])
def test_memory_totals_as_new_as_documented(fake, naming_4_9):
    """Scraped every second, refreshed after each scrape: the GPU instance's total (and memory used) is the
    scrape's at every refresh; the GPU's is the scrape's at the refreshes that ask the static group (the first,
    then at its cadence from the host's phase) and the last read's in between; a fresh read shows the same
    instance total."""
    fleet = fleet_of(fake, interval=1.0)
    phase = fleet._phase(("10.0.0.9:9400", "dgx-9"), _static_group())
    read_at = 0  # the step the GPU's total was last asked at
    due_from = -phase  # the step its cadence counts from
    asked = 0
    for step in range(int(2 * STATIC_CADENCE) + 2):
        fake.now = NOW + step + 0.5
        fake.add_exposition(_exposition(step, naming_4_9=naming_4_9), "10.0.0.9:9400", timestamp=NOW + step)
        query_count = len(fake.queries)
        gpu = fleet.poll_once().gpus[0]
        query = fake.queries[-1]
        assert len(fake.queries) == query_count + 2
        mig = gpu.static.mig_instances[0]
        assert mig.memory_total_bytes == (40000 + step) * _MIB, step
        assert gpu.sample.mig_usage[0].memory_used_bytes == (100 + step) * _MIB, step
        assert 'GPU_I_ID!=""' in query
        if step == 0:  # the first read: its cadence counts from the host's phase
            asked += 1
        elif step - due_from >= STATIC_CADENCE - 0.5:  # due, with half a refresh of slack
            read_at = due_from = step
            asked += 1
        assert gpu.static.memory_total_bytes == (80000 + read_at) * _MIB, step
        assert step - read_at < STATIC_CADENCE, "never older than its cadence"
        if step % 10 == 0:
            fresh = fleet_of(fake).read_once().gpus[0]
            assert fresh.static.mig_instances == gpu.static.mig_instances, step
    assert asked == 3, "the GPU's own total asked at 3 of 62 refreshes: the first, then twice at its cadence"


def test_a_gpu_that_comes_has_its_memory_total_from_the_next_refresh(fake, monkeypatch):
    """A GPU that appears on a host read before has no kept static values: at the next read every kept group is
    asked (not only those due), so its memory total shows from the refresh after it came, not a cadence later.
    (The host's phase 0 here: the static group not due again before step 30.)"""
    monkeypatch.setattr(PrometheusFleet, "_phase", lambda self, key, group: 0.0)
    fleet = fleet_of(fake, interval=1.0)
    for step in range(6):
        fake.now = NOW + step + 0.5
        gpus = ("0", "1") if step >= 4 else ("0",)  # at step 4 the static group is not due (read at step 0)
        fake.add_exposition(_exposition(step, gpus), "10.0.0.9:9400", timestamp=NOW + step)
        snapshot = fleet.poll_once()
        if step == 4:
            assert snapshot.gpus[1].static.memory_total_bytes is None, "not asked at the refresh it came"
    came = snapshot.gpus[1]
    assert came.static.host_index == 1
    assert came.static.memory_total_bytes == (80000 + 5) * _MIB, "asked at step 5 (the read after it came)"
    assert snapshot.gpus[0].static.memory_total_bytes == (80000 + 5) * _MIB

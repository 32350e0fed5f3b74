"""The fleet's timed groups: a host read again is asked for a series the local monitor reads at a cadence of its own
(``poller.CADENCE``: temperature, clocks and throttle reasons every 2 s, the P-state, NVLink and energy 5 s, codecs
and ECC 10 s, the power limit 15 s, PCIe throughput 20 s, the fan and PCIe link 30 s, row remapping and retired
pages 60 s; a static value at ``STATIC_CADENCE``) only when that cadence has passed on the host's clock, and keeps
the last values in between; each host's first re-read of a group at a phase of its own.

Why: at 1 s a refresh these are nearly half of the read answer's value rows (issue 27: decoding and reading the
rows are most of a fleet refresh). What must hold: each such value is exactly as old as the cadence and the host's
phase say (never older, never read more often after its first re-read), the values every refresh asks for are the
newest, a fleet whose hosts were first read at once reads about a cadence's share of them a refresh (not all at
one refresh), and a fleet that keeps them shows what a fleet reading everything afresh shows -- values out of
range, NaN, negative zero and hosts behind one instance included.
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import pytest

from nvtopy.formats.dcgm import INSTANCE_FIELDS
from nvtopy.formats.dcgm_naming import READ_ALIASES
from nvtopy.formats.fields import field_part
from nvtopy.model import GROUP_OF_FIELD
from nvtopy.sources.poller import CADENCE
from nvtopy.sources.remote import fleet as fleet_module
from nvtopy.sources.remote.fleet import LIVE_NAMES, STATIC_CADENCE, TIMED_GROUPS, PrometheusFleet

from ...prometheus_fixtures import exposition_series
from .test_fleet import DCGM, NOW, fake, fleet_of  # noqa: F401
from .test_fleet_runs import _hostile_fleet, _shown

# One GPU, dcgm-exporter's names, every value a function of the second it was scraped at (step): which fields a
# refresh asked for shows in the values it shows.
_LABELS = 'gpu="0",UUID="GPU-cccc",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-9"'
_MOVING = {  # series -> (model attribute, its value at a step, the cadence it is read at: 0 every refresh)
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu_percent", lambda t: t % 100, 0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_draw_w", lambda t: 100.0 + t, 0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", lambda t: 1000 + t, 0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", lambda t: 40 + t, 2),
    "DCGM_FI_DEV_SM_CLOCK": ("clock_sm_mhz", lambda t: 1000 + t, 2),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", lambda t: t % 4, 2),
    "DCGM_FI_DEV_PSTATE": ("pstate", lambda t: t % 8, 5),
    "DCGM_FI_DEV_ENC_UTIL": ("encoder_percent", lambda t: t % 100, 10),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", lambda t: 300.0 + t, 15),
    "DCGM_FI_DEV_FAN_SPEED": ("fan_percent", lambda t: 10 + t % 90, 30),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected_volatile", lambda t: t, 10),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_corrected", lambda t: t, 60),
}
_KEY = ("10.0.0.9:9400", "dgx-9")  # _LABELS' host, as the fleet keys it


def _zero_phase(monkeypatch) -> None:
    """Every host's phase 0 (its groups next asked a whole cadence after its first read), for a test of another
    rule than the phase."""
    monkeypatch.setattr(PrometheusFleet, "_phase", lambda self, key, group: 0.0)


def _reads(name: str, value: float):
    """What a series' value reads as in the model (its unit, its type: MiB to bytes, a bitmask to reasons)."""
    return fleet_module._GPU_READS[name][1](float(value))


def _scrape(fake, step: int, when: float, labels: str = _LABELS) -> None:
    text = "".join(f"{name}{{{labels}}} {value(step)}\n" for name, (_, value, _) in _MOVING.items())
    fake.add_exposition(text, "10.0.0.9:9400", timestamp=when)


def test_the_timed_groups_are_the_local_monitors_cadences():
    """Each series in exactly one of: every refresh, a timed group; a timed one at its field's cadence in the local
    poller (a static value's at STATIC_CADENCE: the local monitor reads it once); of a GPU instance's own series
    only the memory total, a static value of a GPU (an instance's is read at every refresh)."""
    timed = [name for _, names in TIMED_GROUPS for name in names]
    every = [name for name in LIVE_NAMES if name in fleet_module._GPU_READS]
    assert sorted(timed + every) == sorted(fleet_module._GPU_READS), "each series read in one way"
    assert [cadence for cadence, _ in TIMED_GROUPS] == [2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0]
    for cadence, names in TIMED_GROUPS:
        for name in names:
            attribute = fleet_module._GPU_READS[name][0]
            if field_part(attribute)[0] == "static":
                assert cadence == STATIC_CADENCE, name
            else:
                assert CADENCE[GROUP_OF_FIELD[attribute]] == cadence, name
                assert READ_ALIASES.get(name, (name,))[0] not in INSTANCE_FIELDS, name
    for name in every:
        assert CADENCE.get(GROUP_OF_FIELD.get(fleet_module._GPU_READS[name][0], ""), 0.0) == 0.0, name
    assert "DCGM_FI_DEV_POWER_USAGE" in LIVE_NAMES and "DCGM_FI_DEV_GPU_TEMP" not in LIVE_NAMES
    assert "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS" in timed and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in timed


@pytest.mark.parametrize("interval", [1.0, 2.0])
def test_each_timed_value_is_as_old_as_its_cadence_and_no_older(fake, interval):
    """Scraped every ``interval`` seconds (a few ms of jitter either way), refreshed after each scrape: a value read
    every refresh is the newest; a timed one is the value of the last scrape at which its cadence had passed (with
    half a step of slack, as the local poller: a 2 s group at every second refresh of a 1 s scrape, at every
    refresh of a 2 s one), the cadence counted from the host's phase after the first read."""
    fleet = fleet_of(fake, interval=1.0)
    group_of = {cadence: group for group, (cadence, _) in enumerate(TIMED_GROUPS)}
    phases = {cadence: fleet._phase(_KEY, group) for cadence, group in group_of.items()}
    assert any(phases.values()), "this host has a phase for some group: the test sees phases at work"
    read_at: dict[int, float] = {}  # cadence -> the time its cadence counts from
    read_step: dict[int, int] = {}  # cadence -> the step whose value it was last read at
    learned = None  # the host's scrape interval as the fleet learns it: the shortest step of its newest sample yet
    before = None
    for n in range(70):
        step = int(n * interval)
        when = NOW + step + (0.004, 0.0, -0.004)[n % 3]  # a step 4 ms short of the cadence now and then
        fake.now = when + 0.5
        _scrape(fake, step, when)
        gpu = fleet.poll_once().gpus[0]
        slack = max(1.0, learned or 0.0) / 2
        for name, (attribute, value, cadence) in _MOVING.items():
            last = read_at.get(cadence)
            if not cadence or last is None or when - last >= cadence - slack:
                read_at[cadence] = when - (phases[cadence] if cadence and last is None else 0.0)
                read_step[cadence] = step
            expected = _reads(name, value(read_step[cadence]))
            assert getattr(gpu.sample, attribute) == expected, (n, name)
            assert attribute not in gpu.sample.unavailable, (n, name)
            assert step - read_step[cadence] < max(cadence, interval), (n, name, "older than its cadence")
        if before is not None:
            learned = when - before if learned is None else min(learned, when - before)
        before = when
    assert len(fake.queries) == 2 * 70, "two queries a refresh"


def test_hosts_at_different_phases_each_get_their_timed_values(fake, monkeypatch):
    """Two hosts scraped at different phases: a timed group due for one of them only is a term of the read query of
    its own (that host's instance), or-ed with the every-refresh term of both. Prometheus's ``or`` drops the rows
    of its right side whose labels but ``__name__`` are the left side's (a GPU's value rows: ``instance`` and
    ``gpu``, the same for every series of a GPU), so the terms are or-ed ``on`` their names too; else the host's
    timed values were never read (None, until asked again at every one of its cadences)."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    hosts = {"10.0.0.1:9400": _LABELS.replace("dgx-9", "dgx-1"), "10.0.0.2:9400": _LABELS.replace("dgx-9", "dgx-2")}
    steps = {"10.0.0.1:9400": (0, 2, 4), "10.0.0.2:9400": (0, 1, 2)}  # the first due for its 2 s group, the other not
    for n in range(3):
        for instance, labels in hosts.items():
            step = steps[instance][n]
            text = "".join(f"{name}{{{labels}}} {value(step)}\n" for name, (_, value, _) in _MOVING.items())
            fake.add_exposition(text, instance, timestamp=NOW + step)
        fake.now = NOW + max(steps[i][n] for i in hosts) + 0.5
        gpus = fleet.poll_once().gpus
        assert [g.static.host for g in gpus] == ["dgx-1", "dgx-2"]
        for gpu, instance in zip(gpus, hosts, strict=True):
            for name, (attribute, value, cadence) in _MOVING.items():
                step = steps[instance][n]
                if cadence > 2 and n:
                    continue  # read at the first refresh only, kept since
                if cadence == 2 and instance == "10.0.0.2:9400" and n == 1:
                    step = 0  # not due: as read at the first refresh
                assert getattr(gpu.sample, attribute) == _reads(name, value(step)), (n, instance, name)
    assert any('instance=~"10\\\\.0' in query for query in fake.queries), "a term for one host's timed group"


def test_a_host_whose_clock_goes_back_is_read_in_full(fake):
    """A host whose newest sample is older than the one its timed groups were read at (its exporter's clock set
    back, another server behind the address): every timed group is read again at once, not after the gap."""
    fleet = fleet_of(fake, interval=1.0)
    for step in range(3):
        fake.now = NOW + step + 0.5
        _scrape(fake, step, NOW + step)
        fleet.poll_once()
    fake.set_series([])
    fake.now = NOW - 99.5
    _scrape(fake, 7, NOW - 100.0)
    gpu = fleet.poll_once().gpus[0]
    for name, (attribute, value, _) in _MOVING.items():
        assert getattr(gpu.sample, attribute) == _reads(name, value(7)), name


@pytest.mark.parametrize("shared", [False, True], ids=["one-name-an-instance", "hosts-behind-one-instance"])
def test_a_fleet_keeping_timed_values_shows_what_a_fresh_read_shows(fake, shared):
    """Refresh after refresh with new scrapes of the same values (timed groups asked in their turn, kept in between),
    hostile values in timed fields among them (NaN, negative, past the range, an infinity, negative zero): the same
    lines, the same types, as a fleet that reads every series now."""
    _hostile_fleet(fake, shared=shared)
    hostile = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="dgx-3"} NaN\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",Hostname="dgx-3"} -5\n'
        'DCGM_FI_DEV_PSTATE{gpu="0",Hostname="dgx-3"} 1e400\n'
        'DCGM_FI_DEV_ENC_UTIL{gpu="0",Hostname="dgx-3"} 101\n'
        'DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="0",Hostname="dgx-3"} -0\n'
        'DCGM_FI_DEV_FAN_SPEED{gpu="1",Hostname="dgx-3"} 1e30\n'
        'DCGM_FI_DEV_MEM_CLOCK{gpu="1",Hostname="dgx-3"} 1593\n'
    )
    fake.set_series([*fake.series, *exposition_series(hostile, "10.0.0.3:9400", NOW - 0.5)])
    fleet = fleet_of(fake, interval=1.0)
    for step in range(12):
        fake.now = NOW + step
        if step:
            for s in fake.series:
                s.timestamp += 1.0  # scraped again, the same values
            fake.set_series(list(fake.series))
        snapshot = fleet.poll_once()
        assert fleet.hosts_read == len(fleet._known), step
        fresh = fleet_of(fake).read_once()
        shown, expected = [_shown(g) for g in snapshot.gpus], [_shown(g) for g in fresh.gpus]
        assert shown == expected, step
        assert repr(shown) == repr(expected), f"{step}: a value of another type (1 for 1.0, -0.0 for 0.0)"
    dgx = [g for g in snapshot.gpus if g.static.host == "dgx-3"]
    assert dgx[0].sample.temperature_c is None and dgx[0].sample.unavailable["temperature_c"].name == "OUT_OF_RANGE"
    assert dgx[0].sample.power_limit_w == 0.0 and dgx[1].sample.clock_mem_mhz == 1593
    assert dgx[1].sample.fan_percent is None and dgx[0].sample.encoder_percent is None


def test_a_timed_series_gone_is_na_from_its_groups_next_read(fake, monkeypatch):
    """A timed series its exporter stops sending (a field the driver no longer reads): its last value stands while
    its group is not asked, and it is N/A from the group's next read on -- the values read then replace the kept
    ones, never lie under them -- while the group's other series read their new values."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    gone = "DCGM_FI_DEV_GPU_TEMP"  # of the 2 s group, with the SM clock
    for step in range(5):
        fake.set_series([])
        fake.now = NOW + step + 0.5
        series = {name: value for name, (_, value, _) in _MOVING.items() if step == 0 or name != gone}
        text = "".join(f"{name}{{{_LABELS}}} {value(step)}\n" for name, value in series.items())
        fake.add_exposition(text, "10.0.0.9:9400", timestamp=NOW + step)
        sample = fleet.poll_once().gpus[0].sample
        due = step % 2 == 0  # the 2 s group: asked at steps 0, 2 and 4 (phase 0)
        assert sample.temperature_c == (_reads(gone, _MOVING[gone][1](0)) if step < 2 else None), step
        assert sample.clock_sm_mhz == _reads("DCGM_FI_DEV_SM_CLOCK", 1000 + (step if due else step - 1)), step


def test_a_gpu_that_comes_has_its_timed_values_from_the_next_refresh(fake, monkeypatch):
    """A GPU that appears on a host read before (hot-plugged, back on the bus) has no kept timed values: it shows
    them from the refresh after (every timed group asked again), not after the longest cadence (60 s)."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    for step in range(6):
        fake.now = NOW + step + 0.5
        _scrape(fake, step, NOW + step)
        if step >= 3:
            _scrape(fake, step, NOW + step, labels=_LABELS.replace('gpu="0"', 'gpu="1"'))
        snapshot = fleet.poll_once()
        if step == 3:
            assert snapshot.gpus[1].sample.fan_percent is None, "not asked at the refresh it came"
    gpu = snapshot.gpus[1]
    assert gpu.static.host_index == 1
    for name, (attribute, value, cadence) in _MOVING.items():  # every timed group read at step 4, none since
        assert getattr(gpu.sample, attribute) == _reads(name, value(4 if cadence else 5)), name


def test_hosts_first_read_at_once_are_asked_a_group_a_cadences_share_at_a_time(fake):
    """30 hosts, first read at one refresh (every group asked of all of them), then scraped and refreshed every
    second: the 10 s group (ECC) is next asked of each host at a phase of its own, so a refresh asks it of about a
    tenth of the hosts, each host once in each 10 s, and no value is ever older than the cadence. With one phase for
    all (every host's group due at the same refresh) a refresh in ten read everything again: a 4,096-GPU fleet's
    60 s group alone a third more rows at that refresh."""
    fleet = fleet_of(fake, interval=1.0)
    hosts = {f"10.0.1.{n}:9400": f"node{n}" for n in range(30)}
    asked_at: dict[int, int] = {}
    for step in range(21):
        when = NOW + step
        for instance, name in hosts.items():
            labels = f'gpu="0",UUID="GPU-{name}",Hostname="{name}"'
            text = f"DCGM_FI_DEV_FB_USED{{{labels}}} 1000\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{labels}}} {step}\n"
            fake.add_exposition(text, instance, timestamp=when)
        fake.now = when + 0.5
        gpus = fleet.poll_once().gpus
        assert len(gpus) == len(hosts)
        shown = [gpu.sample.ecc_corrected_volatile for gpu in gpus]
        assert all(step - value < 10 for value in shown), (step, "a value older than its cadence")
        asked_at[step] = shown.count(step)
    assert asked_at[0] == len(hosts), "every group of every host at its first read"
    assert sum(asked_at[step] for step in range(1, 11)) == len(hosts), "each host asked once in its first 10 s"
    assert sum(asked_at[step] for step in range(11, 21)) == len(hosts), "and once in each 10 s since"
    assert max(asked_at[step] for step in range(1, 21)) <= 9, f"not spread over the cadence: {asked_at}"

"""``nvtopy report``: accounting figures with known answers, recordings end to end, hostile names, bad input."""

from __future__ import annotations

import csv
import functools
import io
import json
import time

import pytest

from nvtopy.accounting.ledger import (
    Holding,
    Ledger,
    Observation,
    key_columns,
    observations,
    observations_from_record,
    owner_key,
    report_csv,
    report_json,
    sort_rows,
)
from nvtopy.commands.dispatch import main
from nvtopy.commands.report import parse_duration
from nvtopy.errors import UsageError
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.contract_decoder import snapshot_from_dict
from nvtopy.model import (
    GpuState,
    OwnerKind,
    ProcessOwner,
    Snapshot,
)
from nvtopy.sources.collector import Collector
from nvtopy.textsafe import unescape_text

from ..builders import GIB, NOW, gpu_process, gpu_sample, gpu_state, gpu_static, host_info, snapshot_of

T0 = NOW


# ----------------------------------------------------------------- hand-built snapshots


def proc(user: str | None, memory: int | None = GIB, owner: ProcessOwner | None = None, pid: int = 100, gpu: int = 0):
    return gpu_process(gpu, pid, bare=True, gpu_memory_bytes=memory, user=user, owner=owner)


def gpu_at(index: int = 0, *, t: float, util=None, sm=None, energy=None, power=None, procs=(), uuid=None) -> GpuState:
    """GPU ``index`` at time ``t`` with these readings (the ledger's figures) and nothing else."""
    static = gpu_static(index, bare=True, uuid=uuid or f"GPU-{index}")
    readings = {"utilization_gpu_percent": util, "sm_active_percent": sm, "energy_mj": energy, "power_draw_w": power}
    return gpu_state(index, *procs, static=static, sample=gpu_sample(t, bare=True, **readings))


def snap(t: float, *gpus: GpuState, host: str = "node1") -> Snapshot:
    return snapshot_of(*gpus, timestamp=t, host=host_info(hostname=host, driver_version=None, cuda_driver_version=None))


def steady(ledger: Ledger, seconds: float, every: float = 10.0, start: float = T0, **gpu) -> float:
    """Observations of one GPU every ``every`` seconds over ``seconds``, the same readings each time.

    ``energy_w``: the energy counter grows as a constant draw of that many watts would make it.
    Returns the time of the last observation.
    """
    watts = gpu.pop("energy_w", None)
    steps = round(seconds / every)
    for i in range(steps + 1):
        t = start + i * every
        energy = None if watts is None else int(watts * (t - T0) * 1000) + 10**9
        ledger.add_snapshot(snap(t, gpu_at(t=t, energy=energy, **gpu)))
    return start + steps * every


def by_key(report) -> dict:
    return {row.key: row for row in report.rows}


def test_one_user_one_gpu_one_hour_at_half_utilisation():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=50, procs=[proc("alice", 3 * GIB)], energy_w=300)
    report = ledger.report()
    (row,) = report.rows
    assert row.key == ("alice",)
    assert row.held_gpu_hours == pytest.approx(1.0)
    assert row.busy_gpu_hours == pytest.approx(0.5)
    assert row.idle_held_gpu_hours == 0
    assert row.energy_kwh == pytest.approx(0.3)  # 300 W for an hour
    assert row.peak_memory_bytes == 3 * GIB
    assert row.gpus == 1
    assert report.total.held_gpu_hours == pytest.approx(1.0)
    assert report.gaps == 0


def test_sm_activity_is_the_busy_measure_where_measured():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=100, sm=25.0, procs=[proc("alice")])
    assert ledger.report().rows[0].busy_gpu_hours == pytest.approx(0.25)


def test_unknown_activity_is_neither_busy_nor_idle():
    ledger = Ledger(["user"])
    steady(ledger, 3600, procs=[proc("alice")])
    row = ledger.report().rows[0]
    assert (row.held_gpu_hours, row.busy_gpu_hours, row.idle_held_gpu_hours) == (pytest.approx(1.0), 0, 0)


def test_a_shared_gpu_is_held_by_each_and_its_energy_split_by_memory():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=100, procs=[proc("alice", 30 * GIB), proc("bob", 10 * GIB, pid=2)], energy_w=400)
    report = ledger.report()
    rows = by_key(report)
    assert rows[("alice",)].held_gpu_hours == pytest.approx(1.0)
    assert rows[("bob",)].held_gpu_hours == pytest.approx(1.0)
    assert rows[("alice",)].energy_kwh == pytest.approx(0.3)  # 3/4 of 0.4 kWh
    assert rows[("bob",)].energy_kwh == pytest.approx(0.1)
    # The total counts the GPU once: one GPU-hour held, all of its energy.
    assert report.total.held_gpu_hours == pytest.approx(1.0)
    assert report.total.energy_kwh == pytest.approx(0.4)
    assert report.total.peak_memory_bytes == 40 * GIB


def test_energy_is_split_per_process_where_no_memory_is_known():
    ledger = Ledger(["user"])
    procs = [proc("alice", None), proc("alice", None, pid=2), proc("bob", None, pid=3)]
    steady(ledger, 3600, util=100, procs=procs, energy_w=300)
    rows = by_key(ledger.report())
    assert rows[("alice",)].energy_kwh == pytest.approx(0.2)
    assert rows[("bob",)].energy_kwh == pytest.approx(0.1)
    assert rows[("alice",)].peak_memory_bytes is None


def test_several_processes_of_one_user_on_one_gpu_hold_it_once_and_add_their_memory():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=50, procs=[proc("alice", GIB), proc("alice", 2 * GIB, pid=2)])
    (row,) = ledger.report().rows
    assert row.held_gpu_hours == pytest.approx(1.0)
    assert row.peak_memory_bytes == 3 * GIB


def test_a_gap_longer_than_three_median_intervals_is_not_counted():
    ledger = Ledger(["user"])
    last = steady(ledger, 1800, util=100, procs=[proc("alice")], energy_w=100)
    steady(ledger, 1800, start=last + 7200, util=100, procs=[proc("alice")], energy_w=100)
    report = ledger.report()
    row = report.rows[0]
    assert row.held_gpu_hours == pytest.approx(1.0)  # the two half hours, not the two hours between
    assert row.energy_kwh == pytest.approx(0.1)
    assert report.gaps == 1
    assert report.gap_gpu_hours == pytest.approx(2.0)


def test_an_interval_of_up_to_three_median_intervals_counts():
    ledger = Ledger(["user"])
    last = steady(ledger, 1800, util=100, procs=[proc("alice")])
    steady(ledger, 1800, start=last + 30, util=100, procs=[proc("alice")])  # 30 s = 3 x 10 s: no gap
    report = ledger.report()
    assert report.gaps == 0
    assert report.rows[0].held_gpu_hours == pytest.approx(1.0 + 30 / 3600)


def test_a_counter_reset_counts_power_times_time_for_that_interval():
    ledger = Ledger(["user"])
    alice = [proc("alice")]
    energies = [10_000_000, 10_000_000 + 60_000 * 10, 5_000, 5_000 + 60_000 * 10]  # reset between 2nd and 3rd
    for i, energy in enumerate(energies):
        t = T0 + 10 * i
        ledger.add_snapshot(snap(t, gpu_at(t=t, util=100, energy=energy, power=60.0, procs=alice)))
    # 3 intervals of 10 s at 60 W: 600 J from each counter delta, 600 J from power x time at the reset.
    report = ledger.report()
    assert report.rows[0].energy_kwh == pytest.approx(1800 / 3.6e6)
    assert report.skipped == (("energy_reset", 1),)  # and the report says so


DCGM_BLANK = 9223372036854775792  # DCGM_INT64_BLANK: dcgm-exporter's value for a field DCGM could not read


def counter_run(readings: dict[int, float | None], *, power: float | None = 300.0, count: int = 361) -> Ledger:
    """An hour of one GPU held by alice, observed every 10 s, its energy counter growing as 300 W would make it,
    except at the observations ``readings`` names (index -> the counter's value there)."""
    ledger = Ledger(["user"])
    for i in range(count):
        t = T0 + 10 * i
        energy = readings.get(i, 10**9 + 300 * 10 * i * 1000)
        ledger.add_snapshot(snap(t, gpu_at(t=t, util=100, energy=energy, power=power, procs=[proc("alice")])))
    return ledger


@pytest.mark.parametrize(
    "blank",
    [DCGM_BLANK, DCGM_BLANK + 1, DCGM_BLANK + 3, 2**63 - 1, 2**64 - 1, float(DCGM_BLANK), -5],
    ids=["blank", "not-found", "no-permission", "int64-max", "nvml-n/a", "blank-as-float", "negative"],
)
def test_an_energy_reading_that_is_no_value_is_skipped_and_counted(blank):
    """One DCGM blank among an hour of readings was 2.56 billion kWh; it is no reading: power x time stands in."""
    for at in (0, 100, 360):  # the first, one in the middle, the last
        report = counter_run({at: blank}).report()
        assert report.rows[0].energy_kwh == pytest.approx(0.3), at  # 300 W for an hour, whatever stood in
        assert report.skipped == (("energy_blank", 1),), at


def test_an_energy_increment_no_gpu_could_draw_is_skipped_and_counted():
    """A counter that leaps (a glitch, then back; or for good) by more than any GPU draws over the interval."""
    glitch = counter_run({100: 10**9 + 300 * 10 * 100 * 1000 + 10**12}).report()  # +1e9 J in 10 s: 100 MW
    assert glitch.rows[0].energy_kwh == pytest.approx(0.3)
    assert glitch.skipped == (("energy_implausible", 1),)  # not also a "reset" when it comes back
    leap = counter_run({i: 10**15 + 300 * 10 * i * 1000 for i in range(200, 361)}).report()
    assert leap.rows[0].energy_kwh == pytest.approx(0.3)
    assert leap.skipped == (("energy_implausible", 1),)
    # Just within the bound (20 kW for 10 s: 200 kJ, with the 3 kJ of 300 W) is a reading: summed as it is.
    within = counter_run({i: 10**9 + 300 * 10 * i * 1000 + 196_000_000 for i in range(100, 361)}).report()
    assert within.rows[0].energy_kwh == pytest.approx(0.3 + 196_000 / 3.6e6)
    assert within.skipped == ()


def test_without_a_counter_an_impossible_power_reading_is_skipped_and_counted():
    ledger = Ledger(["user"])
    for i, power in enumerate([300.0, 140737488355328.0, 300.0, 25_000.0, 300.0, -1.0, 300.0]):  # DCGM_FP64_BLANK
        t = T0 + 10 * i
        ledger.add_snapshot(snap(t, gpu_at(t=t, util=100, power=power, procs=[proc("alice")])))
    report = ledger.report()
    assert report.rows[0].energy_kwh == pytest.approx(300 * 60 / 3.6e6)  # the mean of the ends known: 300 W
    assert report.skipped == (("power", 3),)


def test_activity_outside_0_to_100_is_unknown_not_clamped():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=150, procs=[proc("alice")])
    report = ledger.report()
    assert report.rows[0].held_gpu_hours == pytest.approx(1.0)
    assert report.rows[0].busy_gpu_hours == 0  # unknown, not clamped to 100 %
    assert report.skipped == (("activity", 361),)


def test_without_an_energy_counter_power_times_time_is_used_and_none_means_unknown():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=100, power=250.0, procs=[proc("alice")])
    assert ledger.report().rows[0].energy_kwh == pytest.approx(0.25)
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=100, procs=[proc("alice")])
    assert ledger.report().rows[0].energy_kwh is None


def test_negative_figures_are_no_readings():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=-50, power=-300.0, procs=[proc("alice", -GIB), proc("bob", GIB, pid=2)])
    rows = by_key(ledger.report())
    assert rows[("alice",)].energy_kwh is None and rows[("alice",)].peak_memory_bytes is None
    assert rows[("alice",)].busy_gpu_hours == rows[("alice",)].idle_held_gpu_hours == 0
    assert rows[("bob",)].peak_memory_bytes == GIB


@pytest.mark.parametrize(("activity", "idle"), [(0, 1.0), (1, 1.0), (2, 0.0), (50, 0.0)])
def test_idle_held_uses_the_health_rules_threshold(activity, idle):
    """At most 1 % (HealthThresholds.idle_sm_percent) is idle; 2 % is not."""
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=activity, procs=[proc("alice")])
    assert ledger.report().rows[0].idle_held_gpu_hours == pytest.approx(idle)


def test_idle_held_half_of_the_time():
    ledger = Ledger(["user"])
    last = steady(ledger, 1800, util=0, procs=[proc("alice")])
    steady(ledger, 1800, start=last + 10, util=80, procs=[proc("alice")])
    row = ledger.report().rows[0]
    assert row.idle_held_gpu_hours == pytest.approx(0.5, abs=0.01)
    assert row.busy_gpu_hours == pytest.approx(0.4, abs=0.01)


def test_a_gpu_without_processes_is_held_by_no_one():
    ledger = Ledger(["user"])
    steady(ledger, 3600, util=100, energy_w=300)
    report = ledger.report()
    assert report.rows == ()
    assert report.total.held_gpu_hours == 0
    assert report.observations == 361


def test_owners_pods_slurm_jobs_and_containers():
    slurm = [ProcessOwner(OwnerKind.SLURM, id="1234", job="1234", step=step) for step in ("0", "batch")]
    pod = ProcessOwner(OwnerKind.KUBERNETES, namespace="ml", pod="train-abc", container="main")
    docker = ProcessOwner(OwnerKind.DOCKER, container="web-1", container_id="ab" * 32)
    ledger = Ledger(["owner"])
    procs = [
        proc("a", owner=slurm[0]),
        proc("a", owner=slurm[1], pid=2),
        proc("b", owner=pod, pid=3),
        proc("c", owner=docker, pid=4),
        proc("d", owner=ProcessOwner(OwnerKind.HOST), pid=5),
        proc("e", owner=None, pid=6),
    ]
    steady(ledger, 3600, util=100, procs=procs)
    rows = by_key(ledger.report())
    assert set(rows) == {("slurm 1234",), ("ml/train-abc",), ("web-1",), ("-",)}
    assert rows[("slurm 1234",)].held_gpu_hours == pytest.approx(1.0)  # the job's steps together, once


@pytest.mark.parametrize(
    ("owner", "key"),
    [
        (None, "-"),
        (ProcessOwner(OwnerKind.DOCKER, container_id="0123456789abcdef" * 4), "0123456789ab"),
        (ProcessOwner(OwnerKind.KUBERNETES, pod="p"), "p"),
        (ProcessOwner(OwnerKind.SLURM), "slurm"),
        (ProcessOwner(OwnerKind.SYSTEMD_SERVICE, name="ollama.service"), "-"),
    ],
)
def test_owner_key(owner, key):
    assert owner_key(owner) == key


def test_by_gpu_brings_its_host_and_keeps_hosts_apart():
    ledger = Ledger(["gpu"])
    for i in range(361):
        t = T0 + 10 * i
        for host in ("node1", "node2"):
            ledger.add_snapshot(snap(t, gpu_at(0, t=t, util=100, procs=[proc("alice")], uuid=f"GPU-{host}"), host=host))
    report = ledger.report()
    assert report.columns == ("host", "gpu")
    assert set(by_key(report)) == {("node1", 0), ("node2", 0)}
    assert report.total.held_gpu_hours == pytest.approx(2.0)  # two GPUs for an hour
    assert report.total.gpus == 2


def test_by_user_and_host():
    assert key_columns(["user", "host"]) == ("user", "host")
    assert key_columns(["gpu", "user", "host"]) == ("host", "gpu", "user")
    with pytest.raises(UsageError, match=r"--by: unknown key 'pod' \(known: user, owner, gpu, host\)"):
        key_columns(["pod"])


def test_older_observations_of_a_gpu_are_skipped_and_counted():
    ledger = Ledger(["user"])
    last = steady(ledger, 3600, util=100, procs=[proc("alice")])
    steady(ledger, 600, start=T0 + 100, util=100, procs=[proc("alice")])  # the same GPU again, overlapping
    report = ledger.report()
    assert report.rows[0].held_gpu_hours == pytest.approx(1.0)
    assert report.out_of_order == 61
    assert report.end == last


def _three_users() -> Ledger:
    ledger = Ledger(["user"])
    for i in range(361):
        t = T0 + 10 * i
        ledger.add_snapshot(
            snap(
                t,
                gpu_at(0, t=t, util=100, power=100.0, procs=[proc("bob", 5 * GIB)]),
                gpu_at(1, t=t, util=10, power=300.0, procs=[proc("alice", GIB), proc("carol", GIB, pid=2)]),
                gpu_at(2, t=t, util=50, power=200.0, procs=[proc("alice", GIB, pid=3)]),
            )
        )
    return ledger


def test_sorting():
    report = _three_users().report()
    assert [r.key[0] for r in sort_rows(report, "held")] == ["alice", "bob", "carol"]  # 2, 1, 1: ties A to Z
    assert [r.key[0] for r in sort_rows(report, "energy")] == ["alice", "carol", "bob"]  # 0.35, 0.15, 0.1
    assert [r.key[0] for r in sort_rows(report, "energy", reverse=True)] == ["bob", "carol", "alice"]
    assert [r.key[0] for r in sort_rows(report, "user")] == ["alice", "bob", "carol"]
    assert [r.key[0] for r in sort_rows(report, "user", reverse=True)] == ["carol", "bob", "alice"]
    assert [r.key[0] for r in sort_rows(report, "peak_memory_bytes")] == ["bob", "alice", "carol"]
    with pytest.raises(UsageError, match=r"--sort: unknown column 'owner' \(known: user, held, busy, idle, energy"):
        sort_rows(report, "owner")


def test_unknown_energy_sorts_last():
    ledger = Ledger(["user"])
    for i in range(10):
        t = T0 + 10 * i
        ledger.add_snapshot(
            snap(
                t,
                gpu_at(0, t=t, util=1, procs=[proc("nopower")]),
                gpu_at(1, t=t, util=1, power=10.0, procs=[proc("some")]),
            )
        )
    report = ledger.report()
    assert [r.key[0] for r in sort_rows(report, "energy")] == ["some", "nopower"]
    assert [r.key[0] for r in sort_rows(report, "energy", reverse=True)] == ["some", "nopower"]


# ----------------------------------------------------------------- hostile names in CSV and JSON

HOSTILE_USERS = [
    '=HYPERLINK("http://evil","x")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(A1)",
    "\x1b]0;pwned\x07 \udcff tab\there",
    'line\nbreak,"quoted"',
    "\u202eevil",
]


def _hostile_report():
    ledger = Ledger(["user", "owner"])
    owner = ProcessOwner(OwnerKind.DOCKER, container="=cmd()\x1b[2J")
    procs = [proc(user, pid=i + 1, owner=owner) for i, user in enumerate(HOSTILE_USERS)]
    steady(ledger, 60, util=50, procs=procs, power=100.0)
    return ledger.report()


def test_hostile_names_in_csv_are_text_not_formulas_and_rows_stay_whole():
    report = _hostile_report()
    text = report_csv(report, report.rows)
    assert "\x1b" not in text and "\udcff" not in text and "\u202e" not in text
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == 1 + len(HOSTILE_USERS) + 1  # header, a row per user, the total: no row broken in two
    for row in rows[1:-1]:
        for cell in row[:2]:
            assert not cell.startswith(("=", "+", "-", "@")), cell
    users = {row[0] for row in rows[1:-1]}
    assert '\'=HYPERLINK("http://evil","x")' in users
    assert "'-2+3" in users
    # Escaped as every nvtopy file is: unescape_text (after the formula guard) gives the name back.
    assert {unescape_text(u.removeprefix("'")) for u in users} == set(HOSTILE_USERS)
    assert {row[1] for row in rows[1:-1]} == {"'=cmd()\\x1b[2J"}
    assert rows[-1][:2] == ["", ""]  # the total: empty key cells


def test_no_owner_is_a_plain_dash_in_csv():
    ledger = Ledger(["owner"])
    steady(ledger, 60, util=50, procs=[proc("a")])
    report = ledger.report()
    assert report_csv(report, report.rows).splitlines()[1].startswith("-,")


def test_hostile_names_in_json_are_escaped_and_come_back_exactly():
    report = _hostile_report()
    text = report_json(report, report.rows, {"files": ["\x1b[31mrun.jsonl"]})
    assert "\x1b" not in text and "\\u001b" not in text  # escaped by escape_text, not left to json
    data = json.loads(text)
    assert {unescape_text(r["user"]) for r in data["rows"]} == set(HOSTILE_USERS)
    assert {r["owner"] for r in data["rows"]} == {"=cmd()\\x1b[2J"}
    assert data["source"]["files"] == ["\\x1b[31mrun.jsonl"]
    assert "user" not in data["total"]


# ----------------------------------------------------------------- recordings, end to end through the CLI


@functools.cache
def _recorded_lines() -> tuple[str, ...]:
    """The lines of :func:`recording`, simulated once per test process (0.7 s of CPU each time, for some 35 tests):
    the simulation is deterministic (its seed and a manual clock), so every test got the same lines anyway."""
    from nvtopy.backends.simulated.backend import SimulatedBackend

    from ..conftest import ManualClock

    clock = ManualClock()
    backend = SimulatedBackend(clock=clock, viewer="alice", gpus=3, seed=5)  # as the sim fixture makes it
    try:
        collector = Collector(backend)
        lines = []
        for _ in range(121):
            clock.advance(5)
            lines.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
    finally:
        backend.close()
    return tuple(lines)


@pytest.fixture
def recording(tmp_path):
    """Ten minutes of a simulated node with 3 GPUs, a snapshot every 5 s, as ``nvtopy record`` writes them."""
    path = tmp_path / "run.jsonl"
    lines = list(_recorded_lines())
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def report_of(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def expected_held(lines: list[str]) -> dict[str, float]:
    """Held GPU-hours per user, straight from the recording's JSON: for each GPU, each interval between
    two lines counts for the users of the later line's processes. (No gaps in these recordings.)"""
    held: dict[str, float] = {}
    previous = None
    for line in lines:
        data = json.loads(line)
        now = time.mktime(time.strptime(data["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")) + float(
            "0." + data["timestamp"][20:23]
        )
        if previous is not None:
            for gpu in data["gpus"]:
                for user in {p["user"] or "?" for p in gpu["processes"]}:
                    held[user] = held.get(user, 0.0) + (now - previous) / 3600
        previous = now
    return held


def test_recording_as_json_matches_the_recording(recording, capsys):
    path, lines = recording
    code, out, err = report_of(capsys, str(path), "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    held = {r["user"]: r["held_gpu_hours"] for r in data["rows"]}
    assert held == pytest.approx(expected_held(lines), abs=1e-5)
    assert len(held) >= 2  # the simulation has several users
    assert data["observations"] == 3 * 121
    assert data["gpus_observed"] == 3
    assert data["total"]["held_gpu_hours"] <= 3 * 600 / 3600 + 1e-6
    first = json.loads(lines[0])["gpus"]
    last = json.loads(lines[-1])["gpus"]
    energy = sum(b["energy_mj"] - a["energy_mj"] for a, b in zip(first, last, strict=True)) / 3.6e9
    assert data["total"]["energy_kwh"] <= energy + 1e-6  # only the held intervals of it
    assert data["total"]["energy_kwh"] > 0
    assert sum(r["energy_kwh"] for r in data["rows"]) == pytest.approx(data["total"]["energy_kwh"], abs=1e-5)


def test_recording_as_csv_agrees_with_json(recording, capsys):
    path, _ = recording
    _, out_json, _ = report_of(capsys, str(path), "--format", "json", "--by", "user,gpu")
    code, out_csv, _ = report_of(capsys, str(path), "--format", "csv", "--by", "user", "--by", "gpu")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out_csv)))
    data = json.loads(out_json)
    assert list(rows[0]) == [
        "user",
        "host",
        "gpu",
        "gpus",
        "held_gpu_hours",
        "busy_gpu_hours",
        "idle_held_gpu_hours",
        "energy_kwh",
        "peak_memory_bytes",
    ]
    assert len(rows) == len(data["rows"]) + 1
    for row, expected in zip(rows, data["rows"], strict=False):
        assert (row["user"], row["host"], int(row["gpu"])) == (expected["user"], expected["host"], expected["gpu"])
        assert float(row["held_gpu_hours"]) == pytest.approx(expected["held_gpu_hours"])
    assert rows[-1]["user"] == rows[-1]["host"] == rows[-1]["gpu"] == ""
    assert float(rows[-1]["held_gpu_hours"]) == pytest.approx(data["total"]["held_gpu_hours"])


def test_recording_as_a_table(recording, capsys):
    path, _ = recording
    code, out, err = report_of(capsys, str(path), "--by", "owner")
    assert (code, err) == (0, "")
    lines_out = out.splitlines()
    assert lines_out[0].startswith("nvtopy report by owner: ")
    assert "3 GPUs, 363 observations from 1 recording" in lines_out[0]
    assert lines_out[1].split() == [
        "OWNER",
        "GPUS",
        "HELD",
        "GPU-h",
        "BUSY",
        "GPU-h",
        "IDLE-HELD",
        "GPU-h",
        "ENERGY",
        "kWh",
        "PEAK",
        "MEM",
        "GiB",
    ]
    assert lines_out[-1].startswith("TOTAL")
    assert "\x1b" not in out  # not a terminal: no colour


def test_sort_and_reverse_in_the_cli(recording, capsys):
    path, _ = recording
    _, out, _ = report_of(capsys, str(path), "--format", "json", "--sort", "user", "--reverse")
    users = [r["user"] for r in json.loads(out)["rows"]]
    assert users == sorted(users, reverse=True)
    _, out, _ = report_of(capsys, str(path), "--format", "json", "--sort", "busy")
    busy = [r["busy_gpu_hours"] for r in json.loads(out)["rows"]]
    assert busy == sorted(busy, reverse=True)


def test_a_corrupt_line_is_skipped_with_a_warning(recording, tmp_path, capsys):
    path, lines = recording
    _, clean, _ = report_of(capsys, str(path), "--format", "json")
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join([*lines[:50], "{not json", '{"x": 1}', "[1,2]", *lines[50:]]) + "\n")
    code, out, err = report_of(capsys, str(damaged), "--format", "json")
    assert code == 0
    assert err == (f"nvtopy: warning: {damaged}: 3 lines skipped, not snapshots (first at line 51: not JSON)\n")
    rows = json.loads(out)["rows"]
    assert rows == json.loads(clean)["rows"]


def test_a_recording_cut_short_is_read_up_to_the_cut(recording, tmp_path, capsys):
    _, lines = recording
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines) + "\n" + lines[5][:100])
    code, _, err = report_of(capsys, str(cut), "--format", "json")
    assert code == 0
    assert "1 line skipped, not snapshots (first at line 122: cut short)" in err


def test_files_in_any_order_and_split_recordings_add_up(recording, tmp_path, capsys):
    path, lines = recording
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("\n".join(lines[:60]) + "\n")
    second.write_text("\n".join(lines[59:]) + "\n")  # one line in both: an overlap
    _, whole, _ = report_of(capsys, str(path), "--format", "json")
    code, split, _ = report_of(capsys, str(second), str(first), "--format", "json")
    assert code == 0
    assert json.loads(split)["rows"] == json.loads(whole)["rows"]
    assert json.loads(split)["out_of_order"] == 3  # the overlapping line, for each of the 3 GPUs


def test_since_filters_recordings(tmp_path, sim, clock, capsys):
    clock.now = time.time() - 2 * 3600 - 300  # two hours, up to five minutes ago
    backend = sim(gpus=1, seed=5, processes_per_gpu=1, steady=True)
    collector = Collector(backend)
    path = tmp_path / "recent.jsonl"
    with open(path, "w") as out:
        for _ in range(121):
            clock.advance(60)
            out.write(json.dumps(snapshot_to_dict(collector.collect())) + "\n")
    _, out, _ = report_of(capsys, str(path), "--format", "json")
    assert json.loads(out)["total"]["held_gpu_hours"] == pytest.approx(2.0, abs=0.02)
    code, out, _ = report_of(capsys, str(path), "--format", "json", "--since", "1h")
    assert code == 0
    assert json.loads(out)["total"]["held_gpu_hours"] == pytest.approx(55 / 60, abs=1 / 60 + 0.01)
    code, out, _ = report_of(capsys, str(path), "--format", "json", "--since", "1h30m")  # not read as 1h
    assert code == 0
    assert json.loads(out)["total"]["held_gpu_hours"] == pytest.approx(85 / 60, abs=1 / 60 + 0.01)
    code, out, err = report_of(capsys, str(path), "--since", "1m")  # the last snapshot is older
    assert (code, out) == (1, "")
    assert err == f"nvtopy: error: nothing to report: no snapshot of the last 1m in {path}\n"


def test_a_blank_energy_reading_in_a_recording_is_skipped_and_said(tmp_path, capsys):
    """The hostile case as found: one reading at DCGM's blank in a recording was 2.56 billion kWh."""
    path = tmp_path / "blank.jsonl"
    with open(path, "w") as out:
        for i in range(61):  # ten minutes at 300 W, a reading every 10 s
            t = T0 + 10 * i
            energy = DCGM_BLANK if i == 30 else 10**9 + 3_000_000 * i
            state = gpu_at(t=t, util=100, energy=energy, power=300.0, procs=[proc("alice")])
            out.write(json.dumps(snapshot_to_dict(snap(t, state))) + "\n")
    code, out, err = report_of(capsys, str(path), "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["total"]["energy_kwh"] == pytest.approx(0.05)  # 300 W for 10 minutes
    assert data["skipped_readings"] == {"energy_blank": 1}
    code, out, _ = report_of(capsys, str(path))
    assert code == 0
    assert out.splitlines()[-1] == (
        "energy counter: 1 reading skipped, no value (DCGM's blank, 9223372036854775792 and above; NVML's N/A; "
        "negative)"
    )
    assert "0.050" in out.splitlines()[-2]  # the total's energy


def test_no_process_in_the_period_is_a_report_of_nothing(tmp_path, capsys):
    path = tmp_path / "idle.jsonl"
    with open(path, "w") as out:
        for i in range(3):
            out.write(json.dumps(snapshot_to_dict(snap(T0 + i, gpu_at(t=T0 + i, util=0)))) + "\n")
    code, out, err = report_of(capsys, str(path))
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == "No GPU was held by a process in this period."
    code, out, _ = report_of(capsys, str(path), "--format", "csv")
    assert out.splitlines()[0].startswith("user,gpus,")
    assert len(out.splitlines()) == 2  # the header and the total


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800),
        ("24h", 86400),
        ("7d", 7 * 86400),
        ("1w", 7 * 86400),
        ("45s", 45),
        ("1.5h", 5400),
        ("1h30m", 5400),
        ("1m30s", 90),
        ("2d12h", 216000),
        ("1w2d3h4m5s", 9 * 86400 + 3 * 3600 + 4 * 60 + 5),
        (" 90m ", 5400),
    ],
)
def test_a_duration_is_read_whole(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["1h30", "1hx", "1h 30m", "30m1h", "1h1h", "1h30mm", "1H", "24", "", "1e3s", "h"])
def test_a_duration_with_anything_more_or_out_of_order_is_a_usage_error_listing_the_forms(text):
    with pytest.raises(UsageError) as error:
        parse_duration(text, "--step")
    message = str(error.value)
    assert message.startswith(f"--step: {text!r} is not a duration: give a number and a unit (s, m, h, d, w)")
    assert "1h30m, 1m30s" in message and "\n" not in message


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["MISSING.jsonl"], 1, "cannot read MISSING.jsonl: no such file"),
        (["EMPTY"], 1, "nothing to report: no snapshot in EMPTY"),
        (["GARBAGE"], 1, "nothing to report: no snapshot in GARBAGE (6 lines skipped, not snapshots)"),
        (["DIR"], 1, "cannot read DIR: is a directory"),
        (["REC", "--since", "yesterday"], 2, "--since: 'yesterday' is not a duration: give a number and a unit (s"),
        (["REC", "--since", "0h"], 2, "--since: give more than 0 and at most 366d"),
        (["REC", "--since=-5m"], 2, "--since: '-5m' is not a duration"),
        (["REC", "--since", "1h30"], 2, "--since: '1h30' is not a duration: give a number and a unit (s, m, h,"),
        (["REC", "--sort", "cost"], 2, "--sort: unknown column 'cost' (known: user, held, busy, idle, energy, memory"),
        (["REC", "--by", "team"], 2, "--by: unknown key 'team' (known: user, owner, gpu, host)"),
        ([], 2, "give recordings (FILE ...) or --prometheus URL"),
        (["REC", "--prometheus", "http://x:9090"], 2, "give recordings (FILE ...) or --prometheus URL, not both"),
        (["REC", "--where", 'a="b"'], 2, "--where, --step and --ca-file apply to --prometheus only"),
        (["REC", "--ca-file", "ca.pem"], 2, "--where, --step and --ca-file apply to --prometheus only"),
        (["--prometheus", "https://x:9090", "--ca-file", "DIR"], 2, "--ca-file 'DIR': is a directory"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(recording, tmp_path, capsys, monkeypatch, argv, code, message):
    path, _ = recording
    (tmp_path / "EMPTY").write_text("")
    (tmp_path / "GARBAGE").write_bytes(b"\x00\xff garbage\n{]\n" * 3)
    (tmp_path / "DIR").mkdir()
    monkeypatch.chdir(tmp_path)
    argv = [str(path) if a == "REC" else a for a in argv]
    got, out, err = report_of(capsys, *argv)
    assert (got, out) == (code, "")
    assert err.startswith(f"nvtopy: error: {message}"), err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_hostile_names_from_a_recording_reach_no_terminal(tmp_path, capsys):
    path = tmp_path / "hostile.jsonl"
    procs = [proc(user, pid=i + 1) for i, user in enumerate(HOSTILE_USERS)]
    with open(path, "w", encoding="utf-8") as out:
        for i in range(3):
            line = snapshot_to_dict(snap(T0 + i, gpu_at(t=T0 + i, util=50, procs=procs), host="\x1b]0;h\x07"))
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    code, out, _ = report_of(capsys, str(path), "--by", "user,host")
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\e]0;pwned\\x07" in out
    code, out, _ = report_of(capsys, str(path), "--format", "csv")
    assert len(list(csv.reader(io.StringIO(out)))) == len(HOSTILE_USERS) + 2


def test_help_states_how_each_figure_is_computed(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for words in ("held", "busy", "idle-held", "energy", "peak mem", "3 x the GPU's", "Exit status"):
        assert words in out


def test_holding_and_observation_are_what_sources_feed():
    """The Prometheus path feeds observations directly: the same sums."""
    ledger = Ledger(["user"])
    for i in range(7):
        holding = Holding("alice", "-", GIB)
        ledger.add(Observation("h", 0, "GPU-x", T0 + 600 * i, 50.0, None, 100.0, (holding,)))
    row = ledger.report().rows[0]
    assert (row.held_gpu_hours, row.busy_gpu_hours) == (pytest.approx(1.0), pytest.approx(0.5))
    assert row.energy_kwh == pytest.approx(0.1)


def test_reading_a_line_directly_gives_what_the_replay_reader_gives(recording, tmp_path):
    """The report reads only what it needs of each line: the same observations as a whole snapshot gives."""
    _, lines = recording
    owners = [
        ProcessOwner(OwnerKind.SLURM, id="9", job="9", step="0"),
        ProcessOwner(OwnerKind.KUBERNETES, namespace="n\x1b", pod="p"),
        ProcessOwner(OwnerKind.PODMAN, container_id="ab" * 32),
        None,
    ]
    procs = [proc(user, memory=i * GIB or None, owner=owners[i % 4], pid=i + 1) for i, user in enumerate(HOSTILE_USERS)]
    hostile = snap(T0, gpu_at(3, t=T0, util=5, sm=float("nan"), energy=2**70, procs=procs), host="h\u202e")
    texts = [*lines[:5], json.dumps(snapshot_to_dict(hostile), ensure_ascii=False)]
    for text in texts:
        data = json.loads(text)
        assert observations_from_record(data) == list(observations(snapshot_from_dict(data)))
    assert observations_from_record(json.loads(texts[-1]))[0].energy_mj is None  # beyond 2**64: no reading


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.pop("timestamp"),
        lambda d: d.update(hostname=5),
        lambda d: d["gpus"][0].update(index="0"),
        lambda d: d["gpus"][0].update(energy_mj="12"),
        lambda d: d["gpus"][0]["processes"][0].update(user=["x"]),
        lambda d: d["gpus"][0]["processes"][0].update(owner="docker"),
        lambda d: d.update(gpus={}),
    ],
)
def test_a_line_of_the_wrong_shape_is_damage_to_both_readers(recording, change):
    _, lines = recording
    data = json.loads(lines[0])
    change(data)
    with pytest.raises((KeyError, TypeError, ValueError)):
        observations_from_record(data)
    with pytest.raises((KeyError, TypeError, ValueError)):
        list(observations(snapshot_from_dict(data)))

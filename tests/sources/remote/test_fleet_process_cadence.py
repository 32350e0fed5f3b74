"""A process's utilisation in the fleet at its local cadence (2 s), kept in between for the very process.

Why: a process's SM and memory utilisation are two of the six rows a process has in the read answer (issue 27: at
4,096 GPUs 16,000 rows a refresh), and the local monitor reads them every 2 s (NVML averages them over the time
since the last read; nvtopy's exporter serves the value its poller read at the scrapes in between). What must
hold: each is as old as that cadence says and never older, the other process values are the newest at every
refresh, a process that came since the last read of its utilisation shows it N/A (as locally) until the next,
a pid reused by another process (a new start time) never shows the old process's figures, and the read query
asks the utilisation only of the hosts whose 2 s group is due.
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

from nvtopy.sources.remote.fleet import PrometheusFleet

from .test_fleet import NOW, fake, fleet_of  # noqa: F401

_GPU = 'gpu="0",UUID="GPU-cccc",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-9"'


def _exposition(step: int, processes: dict[int, float]) -> str:
    """One GPU; each process (pid -> start time) with its memory, SM and memory utilisation a function of the step."""
    lines = [f"DCGM_FI_DEV_FB_USED{{{_GPU}}} 1000\n"]
    for pid, started in processes.items():
        labels = f'{_GPU},pid="{pid}",type="C",user="dana",command="train.py"'
        lines += [
            f"nvtopy_process_start_time_seconds{{{labels}}} {started}\n",
            f"nvtopy_process_gpu_memory_bytes{{{labels}}} {(pid + step) * 1000}\n",
            f"nvtopy_process_sm_utilization_percent{{{labels}}} {step % 100}\n",
            f"nvtopy_process_memory_utilization_percent{{{labels}}} {(step + 50) % 100}\n",
        ]
    return "".join(lines)


def _processes(snapshot) -> dict[int, tuple]:
    return {p.pid: (p.gpu_memory_bytes, p.sm_percent, p.memory_percent, p.create_time) for p in snapshot.processes}


def _zero_phase(monkeypatch) -> None:
    monkeypatch.setattr(PrometheusFleet, "_phase", lambda self, key, group: 0.0)


def test_a_processs_utilisation_is_as_old_as_its_cadence_and_its_memory_the_newest(fake, monkeypatch):
    """Scraped and refreshed every second: the utilisation is the scrape's at the first refresh and at every second
    one after (the host's 2 s group, its phase 0 here), the last read's in between; the memory always the scrape's."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    asked = []
    for step in range(8):
        fake.now = NOW + step + 0.5
        fake.add_exposition(_exposition(step, {4242: NOW - 60}), "10.0.0.9:9400", timestamp=NOW + step)
        shown = _processes(fleet.poll_once())[4242]
        read = step - step % 2  # at steps 0, 2, 4, 6
        assert shown == ((4242 + step) * 1000, read, read + 50, NOW - 60), step
        asked.append("nvtopy_process_sm_utilization_percent" in fake.queries[-1])
    assert asked == [True, False] * 4, "the utilisation asked only when its group is due"


def test_a_process_that_comes_between_two_reads_shows_its_utilisation_at_the_next(fake, monkeypatch):
    """A process first seen at a refresh that does not ask the utilisation: its memory at once, its utilisation N/A
    (as the local monitor's, read every 2 s) until the next read asks it; the process there before keeps its own."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    for step, processes in enumerate(({1: NOW - 60}, {1: NOW - 60, 2: NOW + 0.5}, {1: NOW - 60, 2: NOW + 0.5})):
        fake.now = NOW + step + 0.5
        fake.add_exposition(_exposition(step, processes), "10.0.0.9:9400", timestamp=NOW + step)
        shown = _processes(fleet.poll_once())
        if step == 1:
            assert shown[1] == ((1 + 1) * 1000, 0, 50, NOW - 60), "the one there before: its last read"
            assert shown[2] == ((2 + 1) * 1000, None, None, NOW + 0.5), "the new one: N/A, not another's, not 0"
    assert shown[2] == ((2 + 2) * 1000, 2, 52, NOW + 0.5), "read at the next refresh that asks it"


def test_a_reused_pid_never_shows_the_old_processs_utilisation(fake, monkeypatch):
    """The same pid with another start time at a refresh that does not ask the utilisation is another process: its
    utilisation N/A until read, never the one of the process that had the pid before."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    for step, started in ((0, NOW - 60), (1, NOW + 0.7)):
        fake.now = NOW + step + 0.5
        fake.add_exposition(_exposition(step + 10, {7: started}), "10.0.0.9:9400", timestamp=NOW + step)
        shown = _processes(fleet.poll_once())[7]
    assert shown == ((7 + 11) * 1000, None, None, NOW + 0.7)


def test_hosts_at_different_phases_each_get_their_processes_utilisation(fake, monkeypatch):
    """Two hosts, one due for its 2 s group and one not: the utilisation is a term of the read query of its own (that
    host's instance), or-ed with the other process values of both on their names too; each host shows its own."""
    _zero_phase(monkeypatch)
    fleet = fleet_of(fake, interval=1.0)
    hosts = {"10.0.0.1:9400": (0, 2), "10.0.0.2:9400": (0, 1)}  # the first due at the second refresh, the other not
    for n in range(2):
        for instance, steps in hosts.items():
            text = _exposition(steps[n], {100: NOW - 60}).replace("dgx-9", instance[:8])
            fake.add_exposition(text, instance, timestamp=NOW + steps[n])
        fake.now = NOW + 2.5
        snapshot = fleet.poll_once()
    shown = {p.host: (p.gpu_memory_bytes, p.sm_percent) for p in snapshot.processes}
    assert shown == {"10.0.0.1": (102 * 1000, 2), "10.0.0.2": (101 * 1000, 0)}
    assert 'instance=~"10\\\\.0\\\\.0\\\\.1:9400"' in fake.queries[-1], "a term for one host's utilisation"

"""A new process's ``/proc/<pid>/status`` is read once: the first sight's read gives the owner resolver its ``NSpid``.

Why: the host look-up read each new process's status twice, for its uid (``procstat.read_first_sight``) and for
its pid in its own namespace (``OwnerResolver``): 64 processes' status by path cost about 0.7 ms of a one-shot's
CPU. What must hold: the owner is the one the resolver finds reading the file itself (the same first 64 KiB, the
same decoding), a resolver of another ``/proc`` root (a test's tree, a captured machine) still reads its own, and
the inspector opens the file once a new process. And ``stat`` and ``statm``, read at the first sight and again
by the refreshes (a one-shot's second look), are opened once, at the first sight, and kept (``StatFiles``) --
only for this ``/proc``, and closed again for a pid psutil answers for.
"""

from __future__ import annotations

import os

import pytest

from nvtopy.backends.host import owners
from nvtopy.backends.host.owners import PROC_READ_LIMIT, OwnerResolver
from nvtopy.backends.host.processes import PsutilInspector


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every path ``os.open`` is asked for while the test runs, in order."""
    paths: list[str] = []
    real_open = os.open

    def counting(path, *args, **kwargs):
        paths.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    return paths


@pytest.mark.timeout(60)
def test_the_inspector_opens_a_new_processs_status_once(sleeper, opened):
    info = PsutilInspector(resolver=OwnerResolver()).inspect([sleeper])[sleeper]
    assert info is not None and info.command
    assert opened.count(f"/proc/{sleeper}/status") == 1, opened


@pytest.mark.timeout(60)
def test_the_owner_from_the_given_status_is_the_one_read(sleeper):
    with open(f"/proc/{sleeper}/status", "rb") as file:
        status = file.read()
    given = OwnerResolver()
    read = OwnerResolver()
    assert given.resolve(sleeper, None, status=status) == read.resolve(sleeper, None)
    assert read.reads - given.reads == 1, "the status was not read again"


STATUSES = {
    "one level": b"Name:\tpython\nNSpid:\t4242\n",
    "a container's": b"Name:\tpython\nNSpid:\t4242\t17\n",
    "NSpid past the bound": b"X" * (PROC_READ_LIMIT - 3) + b"\nNSpid:\t4242\t17\n",
    "NSpid cut at the bound": b"X" * (PROC_READ_LIMIT - 12) + b"\nNSpid:\t4242\t17\n",
    "not UTF-8": b"Name:\t\xff\xfe\x80\nNSpid:\t4242\t9\n",
    "no NSpid": b"Name:\tpython\n",
    "empty": b"",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(STATUSES))
def test_a_given_status_reads_as_the_file_would(name, tmp_path):
    status = STATUSES[name]
    base = tmp_path / "proc" / "4242"
    base.mkdir(parents=True)
    (base / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    (base / "environ").write_bytes(b"CUDA_VISIBLE_DEVICES=1\0")
    (base / "status").write_bytes(status)
    resolver = OwnerResolver(proc_root=str(tmp_path / "proc"))
    assert resolver._resolve_unguarded(4242, status) == resolver._resolve_unguarded(4242)


@pytest.mark.timeout(60)
def test_a_resolver_of_another_proc_root_reads_its_own_status(tmp_path):
    base = tmp_path / "proc" / "4242"
    base.mkdir(parents=True)
    (base / "status").write_bytes(b"NSpid:\t4242\t17\n")
    resolver = OwnerResolver(proc_root=str(tmp_path / "proc"))
    found = resolver.resolve(4242, None, status=b"NSpid:\t4242\t99\n")  # this machine's /proc: not the tree's
    assert found.ns_pid == 17
    assert owners.OwnerResolver().resolve(os.getpid(), None, status=b"NSpid:\t1\t99\n").ns_pid == 99


# ------------------------------------------------ stat and statm: opened once, at the first sight, and kept


@pytest.mark.timeout(60)
def test_the_first_sight_opens_the_files_the_refreshes_read(sleeper, opened):
    """``stat`` and ``statm`` are opened at a new process's first sight and kept: the next refresh only reads them."""
    inspector = PsutilInspector(resolver=OwnerResolver())
    first = inspector.inspect([sleeper])[sleeper]
    second = inspector.inspect([sleeper])[sleeper]
    assert first is not None and second is not None and second.create_time == first.create_time
    assert [opened.count(f"/proc/{sleeper}/{name}") for name in ("stat", "statm")] == [1, 1], opened
    inspector.close()


@pytest.mark.timeout(60)
def test_a_pid_psutil_answers_for_keeps_no_files(sleeper, monkeypatch):
    """A first sight that leaves the pid to psutil (here: its command line unreadable) closes what it opened."""
    from nvtopy.backends.host import procstat

    real = procstat._read_all

    def no_cmdline(path: str) -> bytes:
        if path.endswith("/cmdline"):
            raise PermissionError(path)
        return real(path)

    monkeypatch.setattr(procstat, "_read_all", no_cmdline)
    inspector = PsutilInspector(resolver=OwnerResolver())
    assert inspector.inspect([sleeper])[sleeper] is not None  # psutil's row
    assert len(inspector._stats) == 0
    inspector.close()


@pytest.mark.timeout(60)
def test_kept_files_of_another_proc_are_not_used_for_a_first_sight(tmp_path):
    from nvtopy.backends.host.procstat import StatFiles, read_first_sight

    fake = tmp_path / "7"
    fake.mkdir()
    (fake / "stat").write_bytes(b"7 (worker) S 2 0 0 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 55 0 0\n")
    (fake / "statm").write_bytes(b"0 0 0 0 0 0 0\n")
    (fake / "status").write_bytes(b"Name:\tworker\nUid:\t0\t0\t0\t0\n")
    (fake / "cmdline").write_bytes(b"worker\x00")
    (tmp_path / "stat").write_bytes(b"cpu  1 2 3 4 5 6 7 8 9 10\nbtime 1700000000\n")
    kept = StatFiles()  # this machine's /proc
    sight = read_first_sight(7, proc=str(tmp_path), stats=kept)
    assert sight is not None and sight.name == "worker" and sight.stat.start_ticks == 55
    assert len(kept) == 0
    mine = StatFiles(proc=str(tmp_path))
    assert read_first_sight(7, proc=str(tmp_path), stats=mine) == sight and len(mine) == 1
    mine.close()

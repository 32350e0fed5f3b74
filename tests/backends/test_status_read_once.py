"""A new process's ``/proc/<pid>/status`` is read once: the first sight's read gives the owner resolver its ``NSpid``.

Why: the host look-up read each new process's status twice, for its uid (``procstat.read_first_sight``) and for
its pid in its own namespace (``OwnerResolver``): 64 processes' status by path cost about 0.7 ms of a one-shot's
CPU. What must hold: the owner is the one the resolver finds reading the file itself (the same first 64 KiB, the
same decoding), a resolver of another ``/proc`` root (a test's tree, a captured machine) still reads its own, and
the inspector opens the file once a new process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nvtopy.backends.host import owners
from nvtopy.backends.host.owners import PROC_READ_LIMIT, OwnerResolver
from nvtopy.backends.host.processes import PsutilInspector


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


@pytest.mark.timeout(60)
def test_the_inspector_opens_a_new_processs_status_once(sleeper, monkeypatch):
    opened: list[str] = []
    real_open = os.open

    def counting(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
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

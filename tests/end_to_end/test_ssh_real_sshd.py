"""``nvtopy --ssh`` through a real OpenSSH server (tests/sshd.py): the user's flow, and every way a host fails.

The hosts are aliases of one loopback sshd (``-F`` the lab's ssh_config): two run this checkout's
``nvtopy serve-stdio`` on simulated GPUs named after them, one has only nvidia-smi (the stand-in of
tests/data/nvidia-smi), and the others hang, send junk, have nothing installed, refuse the key or
refuse the connection. Skips, saying why, where sshd cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvtopy.sources.remote.ssh.hosts import SshHosts
from nvtopy.sources.remote.ssh.session import Mode, State, Status
from nvtopy.sources.remote.ssh.targets import expand
from tests import sshd
from tests.sources.remote.ssh.test_ssh_hosts import lines_of, until

from ..builders import run_nvtopy

FAKE_NVIDIA_SMI = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi" / "fake-nvidia-smi"
LIVE = ("gpu-a", "gpu-b")
pytestmark = [pytest.mark.real_server, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sshd.SshLab]:
    with sshd.running_ssh_lab(tmp_path_factory.mktemp("ssh-lab")) as lab:
        root = lab.root
        for alias in LIVE:
            shim = sshd.nvtopy_shim(root / f"bin-{alias}", "--demo", "--demo-gpus", "2", "--demo-hostname", alias)
            lab.add_host(alias, sshd.run_remote_command([shim.parent]))
        smi = root / "bin-smi"
        smi.mkdir()
        (smi / "nvidia-smi").symlink_to(FAKE_NVIDIA_SMI)
        lab.add_host("smi", sshd.run_remote_command([smi]))
        lab.add_host("hang", sshd.HANG)
        lab.add_host("junk", sshd.JUNK)
        lab.add_host("nothing", sshd.NOTHING_INSTALLED)
        lab.add_wrong_key_host("wrongkey")
        lab.add_refused_host("refused")
        yield lab


def _nvtopy(lab: sshd.SshLab, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVTOPY_")}
    env["NVTOPY_CONFIG"] = str(lab.root / "no-config.toml")
    return run_nvtopy("--ssh-config", str(lab.config), *args, env=env, timeout=90, cwd=lab.root)


def test_a_user_sees_every_gpu_and_process_of_three_boxes_grouped_by_host(lab: sshd.SshLab):
    began = time.monotonic()
    done = _nvtopy(lab, "--ssh", "gpu-a,gpu-b,smi", "--once", "--json")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    by_host: dict[str, list[dict[str, object]]] = {}
    for gpu in data["gpus"]:
        by_host.setdefault(str(gpu["host"]), []).append(gpu)
    assert [g["name"] for g in by_host["gpu-a"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [g["name"] for g in by_host["gpu-b"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [g["name"] for g in by_host["smi"][:2]] == ["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 3090"]
    assert str(by_host["smi"][2]["note"]).startswith("read with nvidia-smi")
    processes = [p for gpu in data["gpus"] for p in gpu.get("processes") or []]
    assert {p["host"] for p in processes} == {"gpu-a", "gpu-b", "smi"}
    print(f"--once --json of 3 hosts through sshd: {took:.2f} s (login alone {lab.login_seconds:.2f} s)")


def test_each_failing_host_says_why_while_the_others_keep_updating(lab: sshd.SshLab):
    names = "gpu-a,hang,junk,nothing,wrongkey,refused,gpu-b"
    source = SshHosts(
        expand(names.split(","), {}), 1.0, config_file=str(lab.config), connect_timeout=4.0, silent_after=15.0
    )
    source.streams.start()
    try:
        sessions = {s.target.label: s for s in source.streams.sessions}
        # Each failed host's status as it was when it was first seen lost: a lost host is asked again after a
        # backoff (1 s for the hung one), and is then connecting, with no reason, when the test reads it later.
        lost: dict[str, Status] = {}

        def seen_lost(host: str) -> bool:
            status = sessions[host].status  # one frozen Status: its state and reason of the same moment
            if status.state is State.LOST:
                lost.setdefault(host, status)
            return host in lost

        until(lambda: all(sessions[h].latest for h in LIVE), 30.0, "both live hosts streaming")
        for host in ("junk", "nothing", "wrongkey", "refused"):
            until(lambda h=host: seen_lost(h), 30.0, f"{host} lost")  # type: ignore[misc]
        until(lambda: seen_lost("hang"), 15.0, "the hung host dropped at its deadline")
        first = {h: sessions[h].latest.sequence for h in LIVE}  # type: ignore[union-attr]
        until(lambda: all(sessions[h].latest.sequence > first[h] for h in LIVE), 5.0, "still updating")  # type: ignore[union-attr]
        snapshot = source.poll_once()
    finally:
        source.stop()
    assert all(sessions[h].latest.mode is Mode.NVTOPY for h in LIVE)  # type: ignore[union-attr]
    reasons = {h: lost[h].reason or "" for h in ("hang", "junk", "nothing", "wrongkey", "refused")}
    assert reasons["hang"] == "no answer within 4 s"
    assert reasons["junk"] == "not nvtopy's stream nor nvidia-smi's output (a line of over 64 KiB)"
    assert reasons["nothing"].startswith("neither nvtopy nor nvidia-smi found")
    assert "Permission denied (publickey)" in reasons["wrongkey"] and "ssh-copy-id" in reasons["wrongkey"]
    assert "Connection refused" in reasons["refused"]
    shown = lines_of(snapshot)
    assert shown["gpu-a"] == ["NVIDIA H100 80GB HBM3"] * 2 and shown["gpu-b"] == ["NVIDIA H100 80GB HBM3"] * 2
    for note in (line for h, lines in shown.items() if h not in LIVE for line in lines):
        assert note is not None and "\x1b" not in note and "\x00" not in note and len(note) < 400


@pytest.mark.timing  # a bound on the clock (quit within 0.5 s): run apart from the loaded pass
def test_quitting_ends_every_session_and_the_far_processes(lab: sshd.SshLab):
    source = SshHosts(expand(["gpu-a", "gpu-b", "hang"], {}), 1.0, config_file=str(lab.config))
    source.start()
    try:
        until(lambda: "SSH 2/3" in source.status_line(), 30.0, "two hosts live")
        until(lambda: lab.remote_pids("gpu-a") and lab.remote_pids("hang"), 10.0, "the far processes running")
        children = source.streams.children()
    finally:
        began = time.monotonic()
        source.stop()
        took = time.monotonic() - began
    assert took < 0.5, f"stop took {took:.2f} s"
    assert not [pid for pid in children if os.path.exists(f"/proc/{pid}") and _running(pid)]
    # The far nvtopy ends when its input does; the hung command is sshd's to end when the session closes.
    until(lambda: not lab.remote_pids("gpu-a") and not lab.remote_pids("gpu-b"), 10.0, "the far nvtopys ended")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False

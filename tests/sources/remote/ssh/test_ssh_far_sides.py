"""``--ssh``'s far sides, each the real one: this checkout's ``nvtopy serve-stdio``, nvidia-smi's loop (its stand-in
of tests/data/nvidia-smi), neither; and the CLI (``--once``, ``--json``, bad input), through the stand-in ssh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nvtopy.sources.remote.ssh.hosts import SshHosts
from nvtopy.sources.remote.ssh.session import Mode, State
from nvtopy.sources.remote.ssh.targets import expand

from . import fake_ssh
from .test_ssh_hosts import lines_of


def test_nvtopy_there_streams_every_column_and_nvidia_smi_where_it_is_not(tmp_path: Path):
    program = fake_ssh.install(tmp_path)
    source = SshHosts(expand(["real-a", "smi-b", "none-c"], {}), 1.0, program=str(program), connect_timeout=20.0)
    snapshot = source.read_once(deadline=30.0)
    real, smi, none = source.streams.sessions
    shown = lines_of(snapshot)
    # This checkout's nvtopy, on the far side: its hello named the host; two simulated H100s with health.
    assert real.latest is not None and real.latest.mode is Mode.NVTOPY
    assert shown["real-a"] == ["NVIDIA H100 80GB HBM3"] * 2
    a = [gpu for gpu in snapshot.gpus if gpu.static.host == "real-a"]
    assert all(gpu.health.findings is not None for gpu in a) and a[0].sample.sm_active_percent is not None
    # nvidia-smi's loop: the stand-in's two A100s, their processes, and a line saying the mode and what it lacks.
    assert smi.latest is not None and smi.latest.mode is Mode.NVIDIA_SMI
    b = [gpu for gpu in snapshot.gpus if gpu.static.host == "smi-b"]
    assert [gpu.static.name for gpu in b[:2]] == ["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 3090"]
    assert b[0].processes and all(p.host == "smi-b" for p in b[0].processes)
    assert b[2].note is not None and b[2].note.startswith("read with nvidia-smi (full query; nvtopy is not installed")
    assert b[0].sample.sm_active_percent is None  # no GPM through nvidia-smi: N/A, never 0
    # Neither: the far script's own line, as the host's reason.
    assert none.status.state is State.LOST
    assert (none.status.reason or "").startswith("neither nvtopy nor nvidia-smi found")
    assert (shown["none-c"][0] or "").startswith("lost: neither nvtopy nor nvidia-smi found")


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    program = fake_ssh.install(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text(f'[ssh]\nprogram = "{program}"\n[ssh.groups]\nlab = ["real-a", "smi-b"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVTOPY_")} | {"NVTOPY_CONFIG": str(config)}
    return subprocess.run(
        [sys.executable, "-m", "nvtopy", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_once_and_json_show_every_host_and_a_dead_one_is_a_line(tmp_path: Path):
    done = _cli(tmp_path, "--ssh", "@lab,denied", "--once", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    hosts = [(gpu.get("host"), gpu.get("note")) for gpu in data["gpus"]]
    assert [h for h, _ in hosts].count("real-a") == 2 and [h for h, _ in hosts].count("smi-b") == 3
    denied = [note or "" for h, note in hosts if h == "denied"]
    assert len(denied) == 1 and denied[0].startswith("lost: me@denied: Permission denied")
    assert "reconnecting" not in denied[0]  # a one-shot asks no host again: its line does not say it will
    text = _cli(tmp_path / "text", "--ssh", "real-a", "--once", "--no-color")
    assert text.returncode == 0 and "real-a/0" in text.stdout and "real-a/1" in text.stdout


def test_no_host_readable_is_one_line_and_exit_1(tmp_path: Path):
    done = _cli(tmp_path, "--ssh", "denied,none-x", "--once")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "none of 2 hosts could be read" in done.stderr, done.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path):
    for args, said in [
        (("--ssh=-oProxyCommand=x", "--once"), "is not a host (it would be an ssh option)"),
        (("--ssh", "gpu1,-oProxyCommand=x", "--once"), "is not a host (it would be an ssh option)"),
        (("--ssh", "", "--once"), "no host given"),
        (("--ssh", "@nope", "--once"), "no host group 'nope' (groups: @lab)"),
        (("--ssh", "a", "--remote", "b:9400"), "three ways to see other hosts"),
        (("--ssh", "a", "--demo", "--once"), "cannot be combined with --gpus, --only-visible or --demo"),
        (("--ssh-option", "ProxyJump=x", "--once"), "need --ssh HOSTS or --hostfile FILE"),
        (("--ssh", "a", "--ssh-option", "ProxyJump", "--once"), "'ProxyJump' is not KEY=VALUE"),
        (("--ssh", "a", "--ssh-option=-oProxyCommand=x", "--once"), "'-oProxyCommand=x' is not KEY=VALUE"),
        (("--hostfile", str(tmp_path / "missing"), "--once"), "no such file"),
    ]:
        done = _cli(tmp_path, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr

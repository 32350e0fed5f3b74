"""``--ssh`` host lists, host files and the config's groups: what reaches ssh's command line, and what never does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvtopy.errors import UsageError
from nvtopy.sources.remote.ssh.targets import (
    MAX_SSH_HOSTS,
    SshTarget,
    expand,
    parse_target,
    read_hostfile,
    split_hosts,
)


@pytest.mark.parametrize(
    ("spec", "destination", "port", "label"),
    [
        ("gpu1", "gpu1", None, "gpu1"),
        ("alice@gpu1", "alice@gpu1", None, "gpu1"),
        ("gpu1:2222", "gpu1", 2222, "gpu1:2222"),
        ("alice@gpu1.lab.example.org:22", "alice@gpu1.lab.example.org", 22, "gpu1.lab.example.org:22"),
        ("10.0.0.7", "10.0.0.7", None, "10.0.0.7"),
        ("[fe80::1]:2200", "fe80::1", 2200, "fe80::1:2200"),
        ("bob@[::1]", "bob@::1", None, "::1"),
        ("fe80::1", "fe80::1", None, "fe80::1"),
        ("  dgx_a  ", "dgx_a", None, "dgx_a"),
    ],
)
def test_a_host_is_given_to_ssh_as_the_user_wrote_it(spec: str, destination: str, port: int | None, label: str):
    target = parse_target(spec)
    assert (target.destination, target.port, target.label) == (destination, port, label)
    arguments = target.ssh_arguments()
    assert arguments[-2:] == ["--", destination]  # "--": whatever it is, ssh never reads it as an option
    assert arguments[:-2] == ([] if port is None else ["-p", str(port)])


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("-oProxyCommand=touch /tmp/pwned", "would be an ssh option"),
        ("-p", "would be an ssh option"),
        ("gpu1;reboot", "is not [user@]host[:port]"),
        ("gpu1 gpu2", "is not [user@]host[:port]"),
        ("$(reboot)", "is not [user@]host[:port]"),
        ("gpu1:99999", "the port must be 1-65535"),
        ("gpu1:0", "the port must be 1-65535"),
        ("a@b@c", "is not [user@]host[:port]"),
        ("gpu\x1b[31m", "is not [user@]host[:port]"),
        ("", "an empty host"),
        ("x" * 300, "a host of 300 characters"),
    ],
)
def test_a_host_that_is_not_one_is_a_usage_error_that_quotes_it_safely(spec: str, said: str):
    with pytest.raises(UsageError) as error:
        parse_target(spec)
    message = str(error.value)
    assert message.startswith("--ssh: ") and said in message
    assert "\x1b" not in message and len(message) < 200


def test_groups_expand_in_order_each_host_once_and_nested():
    groups = {"lab": ("gpu1", "@dgx", "gpu1"), "dgx": ("dgx1", "alice@dgx2:2222")}
    targets = expand(["@lab", "gpu9", "dgx1"], groups)
    assert targets == [
        SshTarget("gpu1"),
        SshTarget("dgx1"),
        SshTarget("alice@dgx2", 2222),
        SshTarget("gpu9"),
    ]


def test_a_group_that_names_itself_or_is_unknown_is_an_error():
    with pytest.raises(UsageError, match=r"host group 'a' names itself \(through a -> b\)"):
        expand(["@a"], {"a": ("@b",), "b": ("@a",)})
    with pytest.raises(UsageError, match=r"no host group 'lab' \(groups: @dgx\)"):
        expand(["@lab"], {"dgx": ("x",)})
    with pytest.raises(UsageError, match=r"no host group 'lab' \(groups: none: \[ssh.groups\]"):
        expand(["@lab"], {})
    with pytest.raises(UsageError, match="no host given"):
        expand(split_hosts(" , ,"), {})


def test_the_host_list_is_bounded():
    hosts = [f"gpu{n}" for n in range(MAX_SSH_HOSTS)]
    assert len(expand(hosts, {})) == MAX_SSH_HOSTS
    with pytest.raises(UsageError, match=f"more than {MAX_SSH_HOSTS} hosts"):
        expand([*hosts, "one-more"], {})


def test_a_hostfile_has_one_host_a_line_with_comments(tmp_path: Path):
    path = tmp_path / "hosts"
    path.write_text("# the lab\ngpu1\n\n  alice@gpu2:2222   # the new one\ngpu3 gpu4\n#gpu5\n")
    assert read_hostfile(str(path)) == ["gpu1", "alice@gpu2:2222", "gpu3", "gpu4"]
    assert [t.label for t in expand(read_hostfile(str(path)), {}, "--hostfile")] == [
        "gpu1",
        "gpu2:2222",
        "gpu3",
        "gpu4",
    ]


def test_a_hostfile_that_is_not_one_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # a short name: a long one is shortened in the line (pytest's tmp paths grow)
    with pytest.raises(UsageError, match=r"--hostfile 'missing': no such file"):
        read_hostfile("missing")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read_hostfile(str(fifo))  # never waits for a writer
    with pytest.raises(UsageError, match="not a regular file"):
        read_hostfile("/dev/zero")
    huge = tmp_path / "huge"
    huge.write_bytes(b"gpu1\n" * (1 << 19))
    with pytest.raises(UsageError, match="larger than 1 MiB"):
        read_hostfile(str(huge))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00gpu")
    with pytest.raises(UsageError, match=r"not text \(UTF-8\)"):
        read_hostfile(str(binary))
    bad = tmp_path / "bad"
    bad.write_text("gpu1\n-oProxyCommand=x\n")
    with pytest.raises(UsageError, match="--hostfile: '-oProxyCommand=x' is not a host"):
        expand(read_hostfile(str(bad)), {}, "--hostfile")

"""Which hosts ``nvtopy --ssh`` watches: ``[user@]host[:port]`` lists, host files and the config's groups.

A host is given as the user's own ``ssh`` would take it -- an alias of
``~/.ssh/config``, a name, an address, with an optional user and port -- and is
handed to ``ssh`` as its destination, so ``ProxyJump``, ``User``, keys and
``known_hosts`` apply exactly as they do at the user's prompt. Where they come from:

- ``--ssh gpu1,alice@gpu2,gpu3:2222,[fe80::1]:22``: a comma-separated list;
- ``--hostfile FILE``: one host a line, ``#`` starts a comment, blank lines
  ignored (the format of pdsh's and Ansible's plain host lists);
- ``@NAME`` in either: the host group ``NAME`` of the config file
  (``[ssh.groups] lab = ["gpu1", "gpu2"]``), so ``nvtopy --ssh @lab`` is the lab.

Why so strict about the text: a host reaches ``ssh``'s command line, and one
that begins with ``-`` would be an *option* (``-oProxyCommand=...`` runs a
command). Every host is checked against the characters a host name, a user and
an address can have, and ``ssh`` also gets ``--`` before it. The same host given
twice is watched once; a list is bounded (:data:`MAX_SSH_HOSTS`), and so is a host file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ....boundedfile import FileRefusedError, read_bounded
from ....errors import UsageError
from ....textsafe import quoted

__all__ = ["MAX_SSH_HOSTS", "SshTarget", "expand", "parse_target", "read_hostfile", "split_hosts"]

MAX_SSH_HOSTS = 1024  # as many as --remote and --prometheus show; each is an ssh process and a pipe
MAX_HOSTFILE_BYTES = 1 << 20  # 1,024 hosts of a few dozen characters each, with comments
MAX_HOST_TEXT = 255  # a DNS name's length; a user@ and a :port fit beside it in practice

# A user (POSIX portable user names, plus what LDAP/AD setups use: dots, @-free), a host (a name, an IPv4
# address, an alias with _), an IPv6 address in brackets, an optional port.
_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_NAME = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_IPV6 = r"\[[0-9A-Fa-f:.%A-Za-z]+\]"
_TARGET = re.compile(rf"(?:(?P<user>{_USER})@)?(?P<host>{_NAME}|{_IPV6})(?::(?P<port>[0-9]{{1,5}}))?")
_GROUP = re.compile(r"@(?P<name>[A-Za-z0-9_][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class SshTarget:
    """One host as ``ssh`` is given it: ``destination`` (``[user@]host``, never beginning with ``-``) and ``port``.

    ``label`` is how the monitor names the host until it says its own hostname (``host`` or
    ``host:port``: the user is not part of a host's name).
    """

    destination: str
    port: int | None = None

    @property
    def hostname(self) -> str:
        return self.destination.rpartition("@")[2]

    @property
    def label(self) -> str:
        return self.hostname if self.port is None else f"{self.hostname}:{self.port}"

    def ssh_arguments(self) -> list[str]:
        """What follows ``ssh``'s own options: the port, ``--``, the destination."""
        port = [] if self.port is None else ["-p", str(self.port)]
        return [*port, "--", self.destination]


def parse_target(text: str, where: str = "--ssh") -> SshTarget:
    """``[user@]host[:port]`` (IPv6 in brackets) as a target; a :class:`UsageError` naming ``where`` otherwise."""
    spec = text.strip()
    if not spec:
        raise UsageError(f"{where}: an empty host")
    if len(spec) > MAX_HOST_TEXT:
        raise UsageError(f"{where}: a host of {len(spec)} characters (at most {MAX_HOST_TEXT})")
    if spec.startswith("-"):
        raise UsageError(f"{where}: {quoted(spec)} is not a host (it would be an ssh option)")
    if spec.count(":") > 1 and re.fullmatch(r"[0-9A-Fa-f:.]+", spec):  # a bare IPv6 address: no port in it
        return SshTarget(spec)
    found = _TARGET.fullmatch(spec)
    if found is None:
        raise UsageError(f"{where}: {quoted(spec)} is not [user@]host[:port]")
    port = found.group("port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise UsageError(f"{where}: {quoted(spec)}: the port must be 1-65535")
    host = found.group("host")
    if host.startswith("["):
        host = host[1:-1]  # ssh takes an IPv6 address bare, its port with -p
    user = found.group("user")
    return SshTarget(f"{user}@{host}" if user else host, None if port is None else int(port))


def split_hosts(text: str) -> list[str]:
    """``--ssh``'s comma-separated list, blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def read_hostfile(path: str) -> list[str]:
    """The hosts of a host file: one a line, ``#`` comments and blank lines ignored; bounded, regular files only."""
    try:
        raw = read_bounded(path, MAX_HOSTFILE_BYTES)
    except FileRefusedError as exc:
        raise UsageError(f"--hostfile {quoted(path)}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--hostfile {quoted(path)}: {(exc.strerror or type(exc).__name__).lower()}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--hostfile {quoted(path)}: not text (UTF-8)") from None
    hosts = []
    for line in text.splitlines():
        words = line.partition("#")[0].split()
        hosts.extend(words)  # "gpu1 gpu2" on one line is two hosts, as pdsh reads it
    return hosts


def expand(specs: Iterable[str], groups: Mapping[str, Sequence[str]], where: str = "--ssh") -> list[SshTarget]:
    """Every host of ``specs`` (``@group`` names expanded from ``groups``), checked, each once, in order.

    A group may name other groups; a group that (indirectly) names itself is an error, as is an
    unknown group (saying which groups there are) and more than :data:`MAX_SSH_HOSTS` hosts.
    """
    targets: list[SshTarget] = []
    seen: set[SshTarget] = set()

    def add(spec: str, trail: tuple[str, ...]) -> None:
        group = _GROUP.fullmatch(spec.strip())
        if group is not None:
            name = group.group("name")
            if name in trail:
                raise UsageError(f"{where}: host group {quoted(name)} names itself (through {' -> '.join(trail)})")
            if name not in groups:
                known = ", ".join("@" + g for g in sorted(groups)) or "none: [ssh.groups] in the config file"
                raise UsageError(f"{where}: no host group {quoted(name)} (groups: {known})")
            for member in groups[name]:
                add(member, (*trail, name))
            return
        target = parse_target(spec, where)
        if target not in seen:
            if len(targets) >= MAX_SSH_HOSTS:
                raise UsageError(f"{where}: more than {MAX_SSH_HOSTS} hosts (for a fleet, use --prometheus)")
            seen.add(target)
            targets.append(target)

    for spec in specs:
        add(spec, ())
    if not targets:
        raise UsageError(f"{where}: no host given, e.g. --ssh gpu1,gpu2 or --hostfile hosts.txt")
    return targets

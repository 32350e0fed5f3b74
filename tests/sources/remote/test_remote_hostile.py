"""``nvtopy --remote`` against hostile, broken and slow peers: one bad host marks that host only.

Every peer here is a real socket on 127.0.0.1, served from daemon threads that
stop by themselves (a lifetime, then the listener and every connection close),
beside a good host: nvtopy's own exporter on the simulated backend.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from nvtopy.commands.exporter.server import serve
from nvtopy.formats.dcgm import BY_NAME
from nvtopy.formats.dcgm_naming import READ_ALIASES
from nvtopy.formats.prometheus.parse import (
    MAX_GPU_INDEX,
    MAX_GPUS_PER_HOST,
    MAX_LABEL,
    MAX_PROCESSES_PER_HOST,
    parse_exposition,
)
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.sources.remote import exporters as remote
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.tui.app import NvtopyApp

from ...builders import run_nvtopy
from ...tui_helpers import started, wait_until
from ...waiting import until

TIMEOUT = 1.0  # the scrape deadline these tests give RemoteHosts
CLI_DEADLINE = 1.0  # what `nvtopy --remote ... --once` uses at the default interval
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


class Peer:
    """A TCP server on 127.0.0.1: ``behave(conn, peer)`` for each connection, for ``lifetime`` seconds at most."""

    def __init__(self, behave: Callable[[socket.socket, Peer], None], lifetime: float = 30.0) -> None:
        self.behave = behave
        self.stopped = threading.Event()
        self.end = time.monotonic() + lifetime
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.connections: list[socket.socket] = []
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self.stopped.is_set() and time.monotonic() < self.end

    def _accept(self) -> None:
        try:
            while self.alive:
                try:
                    conn, _ = self.listener.accept()
                except TimeoutError:
                    continue
                self.connections.append(conn)
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        except OSError:
            pass
        finally:
            self.listener.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(1.0)
            self.behave(conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    def read_request(self, conn: socket.socket) -> bytes:
        data = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        self.requests.append(data)
        return data

    def hold(self, seconds: float | None = None) -> None:
        """Keep the connection open, saying nothing, until the peer stops (or ``seconds`` pass)."""
        self.stopped.wait(max(0.0, self.end - time.monotonic()) if seconds is None else seconds)

    def close(self) -> None:
        self.stopped.set()
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


@contextlib.contextmanager
def peer(behave: Callable[[socket.socket, Peer], None], lifetime: float = 30.0) -> Iterator[Peer]:
    server = Peer(behave, lifetime)
    try:
        yield server
    finally:
        server.close()


# ----------------------------------------------------------------- behaviours


def ssh_banner(conn: socket.socket, peer: Peer) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n")
    peer.read_request(conn)


def binary_noise(conn: socket.socket, peer: Peer) -> None:
    peer.read_request(conn)
    noise = random.Random(7).randbytes(2048)
    conn.sendall(b"\x1b]0;owned\x07\x1b[2J" + noise + b"\r\n\r\n")


def closes_at_once(conn: socket.socket, peer: Peer) -> None:
    pass


def resets(conn: socket.socket, peer: Peer) -> None:
    peer.read_request(conn)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


def never_answers(conn: socket.socket, peer: Peer) -> None:
    peer.read_request(conn)
    peer.hold()


def dribbles_body(conn: socket.socket, peer: Peer) -> None:
    """Valid headers, then the body one byte every 0.2 s, forever (until the peer stops)."""
    peer.read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
    while peer.alive:
        conn.sendall(b"#")
        peer.hold(0.2)


def cut_short(conn: socket.socket, peer: Peer) -> None:
    """A valid start of an exposition, then the connection closes long before the announced length."""
    peer.read_request(conn)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
    conn.sendall(head + b'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="half"} 5\n')


def dribbles_headers(conn: socket.socket, peer: Peer) -> None:
    peer.read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while peer.alive:
        conn.sendall(b"X")
        peer.hold(0.2)


def answers(body: str, status: str = "200 OK", check: Callable[[bytes], bool] | None = None):
    data = body.encode("utf-8", "surrogateescape")

    def behave(conn: socket.socket, peer: Peer) -> None:
        request = peer.read_request(conn)
        if check is not None and not check(request):
            status_line, payload = "401 Unauthorized", b"who are you?\n"
        else:
            status_line, payload = status, data
        head = f"HTTP/1.1 {status_line}\r\nContent-Type: text/plain\r\nContent-Length: {len(payload)}\r\n"
        conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + payload)

    return behave


# ----------------------------------------------------------------- a good host


@pytest.fixture
def good(sim) -> Iterator[str]:
    """A real nvtopy exporter on two simulated GPUs, host name node-good."""
    backend = sim(gpus=2, seed=3, hostname="node-good", model="RTX 4090")
    poller = Poller(backend, collector=Collector(backend, history=1))
    poller.poll_once()
    server, _ = serve(poller, "127.0.0.1", 0)
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def good_gpus(snapshot) -> list:
    return [g for g in snapshot.gpus if g.static.host == "node-good"]


BAD_PEERS = {
    "ssh banner": ssh_banner,
    "binary noise": binary_noise,
    "closes at once": closes_at_once,
    "connection reset": resets,
    "never answers": never_answers,
    "dribbles its body": dribbles_body,
    "dribbles its headers": dribbles_headers,
    "cut short": cut_short,
    "html": answers("<html>\x1b]0;title\x07 not metrics {{{</html>\n"),
    "invalid exposition": answers('DCGM_FI_DEV_GPU_UTIL{gpu="0" 1\n' + "x" * 5000 + "\x1b[31m\n"),
    "gpu label of 5000 digits": answers('DCGM_FI_DEV_GPU_UTIL{gpu="' + "7" * 5000 + '"} 1\n'),
}


def assert_one_line_reason(note: str | None) -> None:
    assert note, "the bad host is marked"
    assert note.isprintable() and note.isascii() and len(note) <= 160, f"one short printable line: {note!r}"


@pytest.mark.parametrize("behave", BAD_PEERS.values(), ids=BAD_PEERS.keys())
def test_one_bad_host_marks_that_host_only(good, behave):
    with peer(behave) as bad:
        source = RemoteHosts([good, bad.address], interval=TIMEOUT, timeout=TIMEOUT)
        began = time.monotonic()
        snapshot = source.poll_once()
        took = time.monotonic() - began
    assert took < TIMEOUT + 0.6, f"the scrape has one deadline for all hosts: took {took:.2f} s"
    shown = good_gpus(snapshot)
    assert [g.static.host_index for g in shown] == [0, 1]
    assert all(g.note is None and g.sample.utilization_gpu_percent is not None for g in shown)
    (marked,) = [g for g in snapshot.gpus if g.static.host != "node-good"]
    assert marked.static.host == "127.0.0.1" and marked.lost
    assert_one_line_reason(marked.note)
    assert marked.note.startswith(f"{bad.address}")
    assert source.status_line().startswith("REMOTE 1/2")


def test_the_reasons_say_what_went_wrong(good):
    cases = {
        ssh_banner: "not an HTTP answer",
        closes_at_once: "closed the connection without answering",
        resets: "closed the connection without answering",
        never_answers: f"no answer within {TIMEOUT:g} s",
        dribbles_body: f"answer not complete within {TIMEOUT:g} s",
        cut_short: "answer cut short",
        answers("# nothing here\nnode_load1 0.5\n"): "no GPU metrics in the answer",
    }
    for behave, reason in cases.items():
        with peer(behave) as bad:
            snapshot = RemoteHosts([bad.address], interval=TIMEOUT, timeout=TIMEOUT).poll_once()
        (marked,) = snapshot.gpus
        assert reason in marked.note, (behave.__name__, marked.note)


def test_a_stuck_fetch_does_not_hold_the_poll_and_is_not_started_twice(good, monkeypatch):
    """A fetch stuck where no timeout reaches (DNS resolution): the poll returns at its deadline regardless."""
    release = threading.Event()
    calls: list[str] = []
    real_fetch = remote._fetch

    def fetch(target, deadline, job):
        if target.label != "stuck.invalid:9400":
            return real_fetch(target, deadline, job)
        calls.append(target.label)
        release.wait(30)
        raise OSError("resolution finally failed")

    monkeypatch.setattr(remote, "_fetch", fetch)
    source = RemoteHosts([good, "stuck.invalid:9400"], interval=TIMEOUT, timeout=TIMEOUT)
    try:
        for _ in range(3):
            began = time.monotonic()
            snapshot = source.poll_once()
            assert time.monotonic() - began < TIMEOUT + 0.6
            assert [g.static.host_index for g in good_gpus(snapshot)] == [0, 1]
            stuck = snapshot.gpus[-1]
            assert stuck.static.host == "stuck.invalid" and "no answer within" in stuck.note
        assert calls == ["stuck.invalid:9400"], "no second fetch while the first one still runs"
        assert all(t.daemon for t in threading.enumerate() if t.name.startswith("nvtopy-remote")), (
            "fetches run on daemon threads: a stuck one never holds the interpreter's exit"
        )
    finally:
        release.set()
    deadline = time.monotonic() + 10  # the released fetch's thread ends when the machine gets to it
    while len(calls) < 2 and time.monotonic() < deadline:
        source.poll_once()
    assert len(calls) == 2, "once the stuck fetch ended, the host is asked again"


# ----------------------------------------------------------------- values from a valid exposition

_LABELS = 'UUID="GPU-{i}",pci_bus_id="00000000:{i:02X}:00.0",device="nvidia{i}",modelName="Test GPU",Hostname="weird"'


def _line(name: str, index: int, value: str) -> str:
    return f'{name}{{gpu="{index}",{_LABELS.format(i=index)}}} {value}\n'


ABSURD = ("+Inf", "-Inf", "NaN", "1e308", "-1e308", "-1", "1e30", "18446744073709551616")


def _assert_unavailable(scrape) -> set[str]:
    """Every value of the GPUs made of ABSURD values is None (-1 C aside: a temperature); the attributes said."""
    said: set[str] = set()
    for (_, values, _), value in zip(scrape.gpus, ABSURD, strict=False):
        for attribute, got in values.items():
            said.add(attribute)
            if attribute == "ecc_mode":
                continue
            if value == "-1" and attribute == "temperature_c":
                assert got == -1, "-1 C is a temperature"
                continue
            assert got is None, (value, attribute, got)
    return said


def test_values_out_of_range_are_not_available():
    """Every field read from a remote exposition: a value that is not finite or out of its range is None."""
    lines = []
    for index, value in enumerate(ABSURD):
        for name in BY_NAME:
            lines.append(_line(name, index, value))
    lines.append(_line("DCGM_FI_DEV_GPU_UTIL", len(ABSURD), "42"))
    scrape = parse_exposition("".join(lines), "http://weird:9400/metrics")
    assert len(scrape.gpus) == len(ABSURD) + 1
    _assert_unavailable(scrape)
    for (static, _, _), value in zip(scrape.gpus, ABSURD, strict=False):
        assert static.memory_total_bytes is None, value
        assert static.temperature_slowdown_c == (-1 if value == "-1" else None), value
    assert scrape.gpus[-1][1]["utilization_gpu_percent"] == 42


def test_4_9_values_out_of_range_are_not_available():
    """dcgm-exporter 4.9's names (Hz, J, ratios, bytes): a value not finite, negative or huge reads N/A, never 0.

    Each is read in its legacy unit first (x 1e-6, x 1000, x 100, / 1 MiB): an overflow there (1e308 J is
    +Inf mJ) is out of range too, and no conversion brings a hostile value into range."""
    lines = []
    for index, value in enumerate(ABSURD):
        for name in READ_ALIASES:
            lines.append(_line(name, index, value).replace("Hostname=", "hostname="))
    lines.append(_line("DCGM_FI_DEV_GPU_UTIL_RATIO", len(ABSURD), "0.42"))
    scrape = parse_exposition("".join(lines), "http://10.0.0.1:9400/metrics")
    assert scrape.hostname == "weird"
    assert len(scrape.gpus) == len(ABSURD) + 1
    said = _assert_unavailable(scrape)
    for (static, _, _), value in zip(scrape.gpus, ABSURD, strict=False):
        assert static.memory_total_bytes is None, value
        assert scrape.health.get(static.index, {}).get("last_xid") is None, value
    assert "clock_sm_mhz" in said and "energy_mj" in said and "utilization_gpu_percent" in said
    assert scrape.gpus[-1][1]["utilization_gpu_percent"] == 42


@pytest.mark.parametrize(
    ("name", "good_values", "bad_values"),
    [
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", ("0", "1", "0.554"), ("1.01", "-0.005", "NaN", "1e308")),
        ("DCGM_FI_DEV_SM_CLOCK_HERTZ", ("0", "1980000000"), ("-1", "1e12", "+Inf")),
        ("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", ("0", "123456789.012"), ("-1", "1e20", "1e308")),
        ("DCGM_FI_DEV_FB_USED_BYTES", ("0", "85899345920"), ("-1", "18446744073709551616", "-Inf")),
        ("DCGM_FI_PROF_SM_UTIL_RATIO", ("0", "0.5", "1"), ("1.5", "-0.1")),
    ],
)
def test_each_4_9_field_has_a_range_in_its_own_unit(name, good_values, bad_values):
    """A 4.9 value is checked against its legacy field's range after the unit conversion: 1.98e9 Hz is 1980 MHz."""
    for text in (*good_values, *bad_values):
        scrape = parse_exposition(_line(name, 0, text), "http://weird:9400/metrics")
        ((_, values, _),) = scrape.gpus
        (got,) = (v for k, v in values.items() if k != "ecc_mode")
        assert (got is not None) == (text in good_values), (name, text, got)


@pytest.mark.parametrize(
    ("name", "good_values", "bad_values"),
    [
        ("DCGM_FI_DEV_GPU_UTIL", ("0", "100", "55.4"), ("101", "-0.5", "NaN")),
        ("DCGM_FI_DEV_FAN_SPEED", ("0", "100", "120"), ("1000", "-3")),
        ("DCGM_FI_DEV_GPU_TEMP", ("-40", "0", "95"), ("-300", "1000")),
        ("DCGM_FI_DEV_POWER_USAGE", ("0", "700.5", "2700"), ("-5", "1e6")),
        ("DCGM_FI_DEV_FB_USED", ("0", "81920", "16777216"), ("-1", "17592186044416")),
        ("DCGM_FI_DEV_SM_CLOCK", ("0", "1980"), ("-1", "1e9")),
        ("DCGM_FI_DEV_PSTATE", ("0", "15"), ("16", "32", "-1", "2.5")),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", ("0", "123456789012"), ("-1", "1e20")),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", ("0", "4", "256"), ("-4", "1e30", "0.5")),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", ("0", "3"), ("-2", "1e25")),
    ],
)
def test_each_field_has_a_range(name, good_values, bad_values):
    field = BY_NAME[name]
    for text in good_values:
        assert field.from_metric(float(text)) is not None, (name, text)
    for text in bad_values:
        assert field.from_metric(float(text)) is None, (name, text)


def test_process_values_out_of_range_are_not_available():
    gpu = 'gpu="0",UUID="GPU-0",Hostname="weird"'
    rows = [_line("DCGM_FI_DEV_GPU_UTIL", 0, "10")]
    for pid, value in ((100, "+Inf"), (101, "NaN"), (102, "-1"), (103, "1e308"), (104, "-Inf")):
        labels = f'{gpu},pid="{pid}",type="C",user="u",command="c"'
        for metric in (
            "gpu_memory_bytes",
            "sm_utilization_percent",
            "memory_utilization_percent",
            "cpu_percent",
            "host_memory_bytes",
            "start_time_seconds",
        ):
            rows.append(f"nvtopy_process_{metric}{{{labels}}} {value}\n")
    rows.append(f'nvtopy_process_gpu_memory_bytes{{{gpu},pid="99999999999",type="C"}} 1\n')
    rows.append(f'nvtopy_process_gpu_memory_bytes{{{gpu},pid="0",type="C"}} 1\n')
    rows.append(f'nvtopy_process_gpu_memory_bytes{{{gpu},pid="105",type="C"}} 1048576\n')
    body = "".join(rows)
    with peer(answers(body)) as host:
        snapshot = RemoteHosts([host.address], interval=TIMEOUT, timeout=TIMEOUT).poll_once()
    (gpu_state,) = snapshot.gpus
    assert gpu_state.note is None
    processes = {p.pid: p for p in gpu_state.processes}
    assert sorted(processes) == [100, 101, 102, 103, 104, 105], "pids out of range are dropped"
    for pid in (100, 101, 102, 103, 104):
        p = processes[pid]
        values = (p.gpu_memory_bytes, p.sm_percent, p.memory_percent, p.cpu_percent, p.host_memory_bytes)
        assert values == (None,) * 5, (pid, values)
        assert p.create_time is None and p.running_seconds is None, pid
    assert processes[105].gpu_memory_bytes == 1048576


def test_absurd_gpu_counts_are_capped_and_marked():
    count = 3000
    lines = [_line("DCGM_FI_DEV_GPU_UTIL", index, str(index % 100)) for index in range(count)]
    lines.append(_line("DCGM_FI_DEV_GPU_UTIL", 99999999, "1"))  # an index no host has: not shown, but counted
    with peer(answers("".join(lines))) as host:
        snapshot = RemoteHosts([host.address], interval=TIMEOUT, timeout=5.0).poll_once()
    shown = [g for g in snapshot.gpus if g.static.host_index is not None]
    assert [g.static.host_index for g in shown] == list(range(MAX_GPUS_PER_HOST))
    assert all(g.note is None and g.sample.utilization_gpu_percent is not None for g in shown), "values still shown"
    (marker,) = [g for g in snapshot.gpus if g.static.host_index is None]
    assert marker.static.host == "weird"
    assert marker.note == f"host reported {count + 1} GPUs; showing the first {MAX_GPUS_PER_HOST}"
    assert MAX_GPU_INDEX <= 4096


def test_a_huge_gpu_index_alone_is_not_a_gpu():
    body = _line("DCGM_FI_DEV_GPU_UTIL", 0, "5") + _line("DCGM_FI_DEV_GPU_UTIL", MAX_GPU_INDEX + 1, "5")
    scrape = parse_exposition(body, "http://weird:9400/metrics")
    assert [s.index for s, _, _ in scrape.gpus] == [0]
    assert scrape.note == "host reported 2 GPUs; showing the first 1"


def test_too_many_processes_are_capped_and_marked():
    lines = [_line("DCGM_FI_DEV_GPU_UTIL", 0, "1")]
    count = MAX_PROCESSES_PER_HOST + 50
    lines += [f'nvtopy_process_gpu_memory_bytes{{gpu="0",pid="{pid}",type="C"}} 1\n' for pid in range(1, count + 1)]
    scrape = parse_exposition("".join(lines), "http://weird:9400/metrics")
    assert len(scrape.processes[0]) == MAX_PROCESSES_PER_HOST
    assert scrape.note == f"host reported {count} processes; showing {MAX_PROCESSES_PER_HOST}"


def test_labels_with_control_characters_and_huge_labels():
    """Kept exactly in the model (cut to MAX_LABEL); escaped where they are written (the views' job)."""
    evil = "evil\x1b]0;pwned\x07\x9b2J\u202eeman"
    body = (
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",modelName="{evil}",Hostname="{evil}",UUID="{"U" * 100_000}"}} 7\n'
        f'nvtopy_process_gpu_memory_bytes{{gpu="0",pid="9",type="X\x1b",user="{evil}",command="{evil}"}} 1\n'
    )
    scrape = parse_exposition(body, "http://x:9400/metrics")
    ((static, values, _),) = scrape.gpus
    assert scrape.hostname == evil and static.name == evil and values["utilization_gpu_percent"] == 7
    assert static.uuid == "U" * MAX_LABEL
    assert scrape.processes[0][0]["type"] == "C" and scrape.processes[0][0]["command"] == evil
    with peer(answers(body)) as host:
        text, _ = nvtopy("--remote", host.address, "--once")
        as_json, _ = nvtopy("--remote", host.address, "--once", "--json")
    for result in (text, as_json):
        assert_sane_output(result)
        assert not any(ch in result.stdout for ch in "\x1b\x07\x9b"), "control characters are escaped"
    assert "pwned" in text.stdout, "the host is shown, escaped"
    assert json.loads(as_json.stdout)["gpus"][0]["utilization_gpu_percent"] == 7


# ----------------------------------------------------------------- the command line, end to end

HOSTILE_EXPOSITION = "".join(
    [
        _line("DCGM_FI_DEV_GPU_UTIL", 0, "+Inf"),
        _line("DCGM_FI_DEV_GPU_TEMP", 0, "NaN"),
        _line("DCGM_FI_DEV_FB_USED", 0, "1e308"),
        _line("DCGM_FI_DEV_FB_TOTAL", 0, "81920"),
        _line("DCGM_FI_DEV_POWER_USAGE", 0, "-Inf"),
        _line("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0, "-1"),
        _line("DCGM_FI_DEV_SM_CLOCK", 0, "1e308"),
        _line("DCGM_FI_DEV_PSTATE", 0, "NaN"),
        _line("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0, "+Inf"),
        _line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0, "1e308"),
        'nvtopy_process_gpu_memory_bytes{gpu="0",pid="4242",type="C",user="u",command="train"} +Inf\n',
        'nvtopy_process_start_time_seconds{gpu="0",pid="4242",type="C",user="u",command="train"} NaN\n',
    ]
)


def nvtopy(*args: str, timeout: float = 30.0) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    result = run_nvtopy(*args, timeout=timeout, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    return result, time.monotonic() - began


def assert_sane_output(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert not re.search(r"\b(nan|inf|infinity)\b", result.stdout, re.IGNORECASE), result.stdout
    assert "\x1b]" not in result.stdout and "\x07" not in result.stdout, "the peer's bytes reach the terminal escaped"
    for number in NUMBER.findall(result.stdout):
        assert len(number.lstrip("-").split(".")[0]) <= 20, f"a number no GPU has: {number}"


def test_once_shows_good_hosts_beside_every_kind_of_bad_one(good):
    behaviours = (ssh_banner, binary_noise, closes_at_once, never_answers, dribbles_body, answers(HOSTILE_EXPOSITION))
    with contextlib.ExitStack() as stack:
        peers = [stack.enter_context(peer(b)) for b in behaviours]
        hosts = ",".join([good] + [p.address for p in peers])
        text, text_took = nvtopy("--remote", hosts, "--once", "--no-color")
        as_json, json_took = nvtopy("--remote", hosts, "--once", "--json")
    for result, took in ((text, text_took), (as_json, json_took)):
        assert_sane_output(result)
        assert took < CLI_DEADLINE + 2.0, f"--once took {took:.2f} s"
    lines = text.stdout.splitlines()
    assert sum("node-good/" in line and "RTX 4090" in line for line in lines) == 2
    for bad in peers[:5]:
        (line,) = [line for line in lines if bad.address in line]
        # On its own line, not in the table: the host's name (host:port: they all share 127.0.0.1), then why
        # it could not be read.
        assert line.startswith(f"{bad.address}: {bad.address}")
    # (its processes name it too, in the Host column)
    assert sum("weird/0" in line and "Test GPU" in line for line in lines) == 1, "the host with absurd values is shown"
    data = json.loads(as_json.stdout)
    gpus = data["gpus"]
    names = [g["name"] for g in gpus]
    assert names.count("NVIDIA GeForce RTX 4090") == 2
    assert sum(g["lost"] for g in gpus) == 5, "each bad host is one lost entry"
    (weird,) = [g for g in gpus if g["name"] == "Test GPU"]
    assert weird["memory_total_bytes"] == 81920 * 1024 * 1024
    for key in ("utilization_gpu_percent", "temperature_c", "memory_used_bytes", "power_draw_w", "energy_mj"):
        assert weird[key] is None, key
    assert weird["processes"][0]["gpu_memory_bytes"] is None


def test_once_against_a_slowloris_host_ends_by_its_deadline():
    with peer(dribbles_body) as slow:
        result, took = nvtopy("--remote", slow.address, "--once")
    assert result.returncode == 1 and "internal error" not in result.stderr  # nothing could be read: an error
    assert result.stderr.count("\n") == 1 and f"{slow.address}: answer not complete within" in result.stderr
    assert took < CLI_DEADLINE + 2.0, f"took {took:.2f} s"


@pytest.mark.parametrize("value", ["", " ", " , "])
def test_an_empty_remote_is_a_usage_error(value):
    result, _ = nvtopy("--remote", value, "--once")
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and "--remote" in result.stderr
    assert result.stdout == ""


SECRET = "s3cr3t-Pa55"


def test_credentials_are_sent_and_never_shown(good):
    token = base64.b64encode(f"alice:{SECRET}".encode()).decode()

    def authorised(request: bytes) -> bool:
        return f"authorization: basic {token}".lower().encode() in request.lower()

    body = _line("DCGM_FI_DEV_GPU_UTIL", 0, "33").replace("weird", "locked-host")
    with peer(answers(body, check=authorised)) as locked, peer(ssh_banner) as bad, peer(never_answers) as mute:
        down = socket.socket()
        down.bind(("127.0.0.1", 0))
        down_port = down.getsockname()[1]
        down.close()
        urls = [
            f"http://alice:{SECRET}@{locked.address}",
            f"alice:{SECRET}@{bad.address}",
            f"http://alice:{SECRET}@{mute.address}/metrics",
            f"http://alice:{SECRET}@127.0.0.1:{down_port}",
        ]
        text, _ = nvtopy("--remote", ",".join(urls), "--once", "--no-color")
        as_json, _ = nvtopy("--remote", ",".join(urls), "--once", "--json")
        wrong = peer(answers(body, check=authorised))
        with wrong as wrong_peer:
            refused, _ = nvtopy("--remote", f"http://alice:wrong@{wrong_peer.address}", "--once")
        source = RemoteHosts(urls, interval=TIMEOUT, timeout=TIMEOUT)
        snapshot = source.poll_once()
    bad_port, _ = nvtopy("--remote", f"http://alice:{SECRET}@node9:99999", "--once")
    assert bad_port.returncode == 2
    assert "locked-host/0" in text.stdout, "the credentials were sent as HTTP basic auth"
    assert refused.returncode == 1 and "answered HTTP 401" in refused.stderr  # the only host: nothing read
    assert json.loads(as_json.stdout)["gpus"][0]["utilization_gpu_percent"] == 33
    shown = [text.stdout, text.stderr, as_json.stdout, as_json.stderr, refused.stderr, bad_port.stderr]
    shown += [g.note or "" for g in snapshot.gpus] + [g.static.host or "" for g in snapshot.gpus]
    shown += [snapshot.host.hostname, source.status_line(), repr(snapshot.gpus)]
    for output in shown:
        assert SECRET not in output and "alice" not in output, output
    notes = [g.note for g in snapshot.gpus if g.note]
    assert [n.split(" ")[0] for n in notes] == [f"{bad.address}:", f"{mute.address}:", f"127.0.0.1:{down_port}"]


# ----------------------------------------------------------------- the monitor


@pytest.mark.timing  # wall-clock bounds (drawn within the timeout + 1 s, quit within 1 s): 2.15 s, loaded main pass
async def test_the_monitor_draws_good_hosts_while_a_slowloris_is_connected(good):
    with peer(dribbles_body) as slow, peer(dribbles_headers) as slower, peer(never_answers) as mute:
        source = RemoteHosts([good, slow.address, slower.address, mute.address], interval=60.0, timeout=TIMEOUT)
        app = NvtopyApp(source)
        async with app.run_test(size=(160, 50)) as pilot:
            began = time.monotonic()
            await started(pilot, app)
            assert time.monotonic() - began < TIMEOUT + 1.0
            text = html.unescape(app.export_screenshot()).replace("\xa0", " ")
            assert "node-good/0" in text and "node-good/1" in text
            assert f"{slow.address}: answer not complete within" in text
            assert source.status_line().startswith("REMOTE 1/4")
            asked = [len(p.requests) for p in (slow, slower, mute)]
            source.refresh()  # a second scrape is under way (the peers are still connected) when q comes
            await wait_until(
                pilot,
                lambda: all(len(p.requests) > n for p, n in zip((slow, slower, mute), asked, strict=True)),
                message="the second scrape's requests at the slow peers",
            )
            await pilot.press("q")
            quit_began = time.monotonic()
        took = time.monotonic() - quit_began
    assert took < 1.0, f"quitting took {took:.2f} s"
    assert not source.running


def test_the_monitor_process_quits_at_once_with_a_slowloris_connected(good):
    """The real program in a terminal: it draws, and after q the process is gone (no thread holds its exit)."""
    import fcntl
    import pty
    import struct
    import termios

    with peer(dribbles_body) as slow, peer(never_answers) as mute:
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"}
        process = subprocess.Popen(
            [sys.executable, "-m", "nvtopy", "--remote", f"{good},{slow.address},{mute.address}"],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            start_new_session=True,
        )
        os.close(follower)
        seen = b""
        try:
            end = time.monotonic() + 20
            while b"node-good/1" not in seen and time.monotonic() < end:
                ready, _, _ = select.select([leader], [], [], 0.2)
                if ready:
                    with contextlib.suppress(OSError):
                        seen += os.read(leader, 65536)
            assert b"node-good/1" in seen, "the good host is drawn while the slow ones are connected"
            asked = len(slow.requests), len(mute.requests)
            # A later scrape under way, stuck on the slow peers (each holds a new request): what q must not wait for.
            until(
                lambda: len(slow.requests) > asked[0] and len(mute.requests) > asked[1],
                15.0,
                "a later scrape's requests at the slow peers",
            )
            os.write(leader, b"q")
            quit_began = time.monotonic()
            while process.poll() is None and time.monotonic() - quit_began < 15:
                ready, _, _ = select.select([leader], [], [], 0.05)
                if ready:
                    with contextlib.suppress(OSError):
                        os.read(leader, 65536)
            took = time.monotonic() - quit_began
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            os.close(leader)
    assert process.returncode == 0
    assert took < 1.5, f"the process took {took:.2f} s to end after q"
